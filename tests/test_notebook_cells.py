"""The ``notebook`` environment (issue 29) against a page written for the tests: a real in-process
front end that keeps nbformat-shaped cells, inserts proposals, executes approved code in a real
namespace (outputs captured) and lets the test play the person (run, edit, reject, change a cell).

The rules: approval modes and the grant of the first approval, an edit's conflict when the person
changed the cell, one pending proposal at a time, a deleted cell, clipping to the model (the notebook
keeps everything), the typed events of the run, the replay of a fork (``recorded`` inserts nothing)
and the errors when there is no notebook."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
import traceback
from typing import Any, Callable

import pytest

from tea_notebook.envs.notebook_cells import (
    NotebookCells,
    Proposal,
    ProposalBoard,
    clip,
    outputs_text,
    source_hash,
    use_frontend,
)
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime.cell_modes import cell_grants, mode_of

Person = Callable[[Proposal], tuple[str, str | None]]


def run_as_proposed(p: Proposal) -> tuple[str, str | None]:
    return "run", None


def reject(p: Proposal) -> tuple[str, str | None]:
    return "reject", None


class Page:
    """A notebook page in the test process: cells, a namespace approved code runs in, and a person."""

    name = "test"

    def __init__(self, cells: list[str], person: Person = run_as_proposed):
        self.board = ProposalBoard()
        self.namespace: dict[str, Any] = {}
        self.counter = 0
        self.cells_: list[dict[str, Any]] = []
        self.person = person
        self.shown: list[Proposal] = []
        self.settled: list[tuple[str, str]] = []
        self.before_decision: Callable[[Proposal], None] | None = None
        for i, source in enumerate(cells):
            self.cells_.append(self.cell(f"c{i}", source))
            self.execute(self.cells_[-1])

    def cell(self, cid: str, source: str, tea: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"id": cid, "cell_type": "code", "source": source, "execution_count": None, "outputs": [], "tea": tea}

    def execute(self, cell: dict[str, Any]) -> None:
        """Run a cell's source in the namespace, as a kernel would: stdout, the last value, the error."""
        self.counter += 1
        out = io.StringIO()
        outputs: list[dict[str, Any]] = []
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(cell["source"], f"<cell {cell['id']}>", "exec"), self.namespace)  # noqa: S102
        except Exception as exc:  # noqa: BLE001 - the cell's error is its output
            outputs.append(
                {
                    "output_type": "error",
                    "ename": type(exc).__name__,
                    "evalue": str(exc),
                    "traceback": ["\x1b[0;31m" + line for line in traceback.format_exception(exc)],
                }
            )
        if out.getvalue():
            outputs.insert(0, {"output_type": "stream", "name": "stdout", "text": out.getvalue()})
        cell["outputs"], cell["execution_count"] = outputs, self.counter

    # -- CellFrontend ----------------------------------------------------------------------------
    def cells(self) -> list[dict[str, Any]]:
        return [{**c, "index": i} for i, c in enumerate(self.cells_)]

    def origin(self, context_ids: list[str]) -> dict[str, Any] | None:
        return {"cell_id": "c0", "agent": "analyst"}

    def show(self, p: Proposal) -> None:
        self.shown.append(p)
        if p.kind == "new":
            at = next((i for i, c in enumerate(self.cells_) if c["id"] == p.after), len(self.cells_) - 1)
            cell = self.cell(f"agent-{p.id}", p.code, {"proposal": p.id, "status": "pending"})
            self.cells_.insert(at + 1, cell)
            p.cell_id = cell["id"]
        threading.Thread(target=self.decide, args=(p,), daemon=True).start()

    def decide(self, p: Proposal) -> None:
        if self.before_decision is not None:
            self.before_decision(p)
        if p.mode == "auto":
            choice, source = "run", None
        else:
            choice, source = self.person(p)
        target = next(c for c in self.cells_ if c["id"] == p.cell_id)
        outcome = p.decide(choice, source, base_source=target["source"] if p.kind == "edit" else None)
        if outcome == "late":  # auto: decided by the mode before it was shown
            outcome = p.decision["decision"] if p.decision else "reject"
        if outcome in ("run", "edit_run"):
            target["source"] = p.decision["code"] if p.decision else p.code
            self.execute(target)
            p.ran(target["id"], True, target["outputs"], target["execution_count"])
        elif outcome == "reject" and p.kind == "new":
            self.cells_.remove(target)

    def settle(self, p: Proposal, status: str) -> None:
        self.settled.append((p.id, status))


def add_notebook(ws, page: Page, **config: Any) -> None:
    ws.envs.add(NotebookCells, frontend=page, **{"decision_timeout": 20.0, **config})


def actions(result) -> list[dict[str, Any]]:
    return [a for s in result.trajectory.steps for a in s.actions]


def events(ws, result, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in ws.events.events(result.run_id) if e.type == kind]


TABLE = "rows = [{'city': ' Paris ', 'temp': '21'}, {'city': 'Lyon', 'temp': None}]\nprint(len(rows), 'rows')"
CLEAN = "clean = [dict(r, city=r['city'].strip()) for r in rows if r['temp'] is not None]\nprint(clean)"


# -- the pieces ------------------------------------------------------------------------------------
def test_modes_are_grants_and_auto_needs_kernel_write():
    assert cell_grants("ask") == ["cells.ask"]
    assert cell_grants("read", ["x"]) == ["x", "cells.read", "kernel.read"]
    assert mode_of(cell_grants("auto", ["kernel.write"])) == "auto" and mode_of([]) == "ask"
    assert mode_of(["cells.auto", "cells.ask"]) == "ask"  # the most careful wins
    with pytest.raises(ValueError, match="kernel.write grant given up front"):
        cell_grants("auto")
    with pytest.raises(ValueError, match="one of ask, read, auto"):
        cell_grants("yolo")


def test_outputs_as_text_and_clipped_for_the_model_only():
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": ["a\n", "b\n"]},
        {"output_type": "execute_result", "data": {"text/plain": "42", "text/html": "<b>42</b>"}},
        {"output_type": "display_data", "data": {"image/png": "..."}},
        {"output_type": "error", "ename": "KeyError", "evalue": "'x'", "traceback": ["\x1b[0;31mKeyError\x1b[0m: 'x'"]},
    ]
    assert outputs_text(outputs) == "a\nb\n42\n[image/png]\nKeyError: 'x'"
    assert clip("x" * 10, 4) == "xxxx\n[clipped: 6 more characters]"


def test_a_decision_counts_once_and_an_edit_on_a_changed_base_is_a_conflict():
    p = Proposal(id="p1", kind="edit", code="b = 2", base_hash=source_hash("a = 1"))
    assert p.decide("run", "b = 2", base_source="a = 1 # mine") == "conflict"
    assert p.decide("run") == "late"
    q = Proposal(id="p2", kind="new", code="x = 1")
    assert q.decide("run", "x = 2") == "edit_run" and q.decision == {
        "decision": "edit_run",
        "code": "x = 2",
        "note": "",
        "by": "person",
    }
    with pytest.raises(ValueError, match="'run' or 'reject'"):
        Proposal(id="p3", kind="new", code="").decide("maybe")


# -- through an agent run ------------------------------------------------------------------------------
def test_ask_mode_read_propose_edited_and_ran(ws, warm_litellm):
    def edit_line(p: Proposal) -> tuple[str, str | None]:
        return "run", p.code.replace("print(clean)", "print(len(clean), 'clean rows')")

    page = Page([TABLE], edit_line)
    add_notebook(ws, page)
    script = ScriptedModel(
        [
            call("notebook_list_cells"),
            call("notebook_read_cell", cell_id="c0"),
            call("notebook_propose_cell", code=CLEAN, explanation="drop rows without a temperature"),
            call("done", success=True, text="cleaned"),
        ]
    )
    agent = ws.agent("analyst", model=script.name, envs=["notebook"])
    result = agent.run_sync("clean the table", cells="ask")
    assert result.status == "success", result.error
    listed, read, proposed = actions(result)[:3]
    assert listed["observation"].startswith("c0 · #0 · code [1] · rows = [")
    assert "source:\nrows = [" in read["observation"] and "outputs:\n2 rows" in read["observation"]
    seen = json.loads(proposed["observation"])
    assert seen["decision"] == "edited and ran" and seen["cell_id"] == "agent-p1"
    assert seen["outputs"] == "1 clean rows" and seen["error"] is None
    assert "print(len(clean), 'clean rows')" in seen["code"]
    assert page.namespace["clean"] == [{"city": "Paris", "temp": "21"}]
    assert [c["id"] for c in page.cells_] == ["c0", "agent-p1"]  # below the agent's own cell
    [shown] = page.shown
    assert shown.needs_grant and shown.after == "c0" and shown.agent == "analyst" and shown.step == 3
    [p] = events(ws, result, "cell_proposed")
    assert p["proposal"] == "p1" and p["kind"] == "new" and p["mode"] == "ask" and p["code"] == CLEAN
    [d] = events(ws, result, "cell_decided")
    assert d["decision"] == "edit_run" and d["by"] == "person" and d["grant"] is True
    [r] = events(ws, result, "cell_ran")
    assert r["ok"] and r["outputs"] == "1 clean rows" and r["cell_id"] == "agent-p1"
    assert page.settled == [("p1", "ran")]


def test_a_rejected_proposal_never_runs(ws, warm_litellm, tmp_path):
    marker = tmp_path / "side-effect"
    page = Page(["x = 1"], reject)
    add_notebook(ws, page)
    code = f"open({str(marker)!r}, 'w').write('ran')"
    script = ScriptedModel([call("notebook_propose_cell", code=code), call("done", success=False, text="rejected")])
    result = ws.agent("a", model=script.name, envs=["notebook"]).run_sync("touch a file", cells="ask")
    assert not marker.exists()
    assert json.loads(actions(result)[0]["observation"])["decision"] == "rejected"
    assert [c["id"] for c in page.cells_] == ["c0"]  # the page removed the rejected cell
    [d] = events(ws, result, "cell_decided")
    assert d["decision"] == "reject" and d["grant"] is False
    assert events(ws, result, "cell_ran") == [] and page.settled == [("p1", "rejected")]


def test_an_edit_whose_cell_the_person_changed_is_a_conflict_and_overwrites_nothing(ws, warm_litellm):
    page = Page(["total = sum([1, 2])"])
    page.before_decision = lambda p: page.cells_[0].update(source="total = sum([1, 2, 3])  # mine")
    add_notebook(ws, page)
    script = ScriptedModel(
        [
            call("notebook_read_cell", cell_id="c0"),
            call("notebook_propose_edit", cell_id="c0", code="total = sum([10, 20])"),
            call("done", success=False, text="conflict"),
        ]
    )
    result = ws.agent("a", model=script.name, envs=["notebook"]).run_sync("change the total", cells="ask")
    seen = json.loads(actions(result)[1]["observation"])
    assert seen["decision"] == "conflict" and "nothing was overwritten" in seen["note"]
    assert page.cells_[0]["source"] == "total = sum([1, 2, 3])  # mine" and page.namespace["total"] == 3
    [p] = events(ws, result, "cell_proposed")
    assert (
        p["kind"] == "edit"
        and p["base_hash"] == source_hash("total = sum([1, 2])")
        and "+total = sum([10, 20])" in p["diff"]
    )
    # neither source ends in a newline: the removed and the added line stay lines of their own
    assert "-total = sum([1, 2])\n+total = sum([10, 20])" in p["diff"]
    [d] = events(ws, result, "cell_decided")
    assert d["decision"] == "reject" and d["note"].startswith("conflict")
    assert page.settled == [("p1", "conflict")]


def test_an_edit_of_a_cell_changed_since_it_was_read_is_refused_before_proposing(ws, warm_litellm):
    page = Page(["a = 1"])
    add_notebook(ws, page)

    turns = iter(range(100))

    def changed_after_reading(messages: list[dict], tools: list[dict]) -> Any:
        done = next(turns)
        if done == 0:
            return call("notebook_read_cell", cell_id="c0")
        if done == 1:
            page.cells_[0]["source"] = "a = 2"
            return call("notebook_propose_edit", cell_id="c0", code="a = 3")
        return call("done", success=False, text="stop")

    script = ScriptedModel(changed_after_reading)
    result = ws.agent("a", model=script.name, envs=["notebook"]).run_sync("edit", cells="ask")
    refused = [a for a in actions(result) if a["name"] == "notebook_propose_edit"][0]
    assert refused["ok"] is False and "changed since you read it" in refused["observation"]
    assert page.shown == [] and events(ws, result, "cell_proposed") == []


def test_a_deleted_cell_and_a_second_pending_proposal_are_refused_by_name(ws):
    page = Page(["a = 1"])
    add_notebook(ws, page)
    missing = ws.envs.invoke("notebook", "read_cell", {"cell_id": "gone"})
    assert not missing.ok and "no cell 'gone' in the notebook (deleted meanwhile?)" in missing.error["message"]
    page.board.open(Proposal(id=page.board.new_id(), kind="new", code="x = 1"))
    second = ws.envs.invoke("notebook", "run_cell", {"cell_id": "c0"})
    assert not second.ok and "proposal p1 is waiting for the person" in second.error["message"]
    assert page.shown == []


def test_a_huge_output_is_clipped_for_the_model_not_in_the_notebook(ws):
    page = Page(["print('x' * 20000)"])
    add_notebook(ws, page, max_chars=1000)
    text = ws.envs.invoke("notebook", "read_cell", {"cell_id": "c0"}).value
    assert "[clipped: 19000 more characters]" in text and len(text) < 1300
    assert len(page.cells_[0]["outputs"][0]["text"]) == 20001


def test_auto_mode_runs_as_proposed_and_needs_kernel_write(ws, warm_litellm):
    page = Page(["n = 2"], reject)  # the person would reject: auto does not ask
    add_notebook(ws, page)
    script = ScriptedModel(
        [call("notebook_propose_cell", code="m = n * 21\nprint(m)"), call("done", success=True, text="ok")]
    )
    agent = ws.agent("a", model=script.name, envs=["notebook"])
    with pytest.raises(ValueError, match="kernel.write grant given up front"):
        agent.run_sync("compute", cells="auto")
    result = agent.run_sync("compute", cells="auto", grants=["kernel.write"])
    assert result.status == "success" and page.namespace["m"] == 42
    seen = json.loads(actions(result)[0]["observation"])
    assert seen["decision"] == "ran" and seen["outputs"] == "42"
    [d] = events(ws, result, "cell_decided")
    assert d["by"] == "auto" and d["grant"] is False and page.shown[0].needs_grant is False
    # the auto grant marker without kernel.write (a hand-made grant set) is refused at the action
    bad = ScriptedModel([call("notebook_propose_cell", code="m = 0"), call("done", success=False, text="no")])
    refused = ws.agent("b", model=bad.name, envs=["notebook"]).run_sync("x", grants=["cells.auto"])
    assert "needs the kernel.write grant" in actions(refused)[0]["observation"] and page.namespace["m"] == 42


def test_the_first_approval_grants_the_run_once(ws, warm_litellm):
    page = Page(["n = 1"])
    add_notebook(ws, page)
    script = ScriptedModel(
        [
            call("notebook_propose_cell", code="n += 1"),
            call("notebook_run_cell", cell_id="c0"),
            call("done", success=True, text="ok"),
        ]
    )
    result = ws.agent("a", model=script.name, envs=["notebook"]).run_sync("count", cells="read")
    first, second = page.shown
    assert first.needs_grant and not second.needs_grant and second.kind == "run" and second.cell_id == "c0"
    assert [d["grant"] for d in events(ws, result, "cell_decided")] == [True, False]
    assert page.namespace["n"] == 1  # c0 ran again as it is: n = 1
    assert [p["mode"] for p in events(ws, result, "cell_proposed")] == ["read", "read"]


def test_a_fork_with_recorded_replay_inserts_nothing(ws, warm_litellm):
    from tea_notebook._sync import run_sync

    page = Page([TABLE])
    add_notebook(ws, page)

    def two_cells(messages: list[dict], tools: list[dict]) -> Any:
        seen = json.dumps(messages)
        if "OUTTWO" in seen:
            return call("done", success=True, text="two cells")
        return call("notebook_propose_cell", code=f"print('OUT' + {'TWO' if 'OUTONE' in seen else 'ONE'!r})")

    model = ScriptedModel(two_cells).name
    original = ws.agent("forked", model=model, envs=["notebook"]).run_sync("two cells", cells="ask")
    assert original.status == "success" and len(page.shown) == 2 and len(page.cells_) == 3
    forked = run_sync(ws.fork(original.run_id, 1, replay="recorded"))
    assert forked.status == "success", forked.error
    assert len(page.shown) == 2 and len(page.cells_) == 3  # answered from the recording: nothing proposed again
    replayed = [a for a in actions(forked) if a["name"] == "notebook_propose_cell"]
    assert len(replayed) == 2 and json.loads(replayed[1]["observation"])["outputs"] == "OUTTWO"
    fork_events = [e.type for e in ws.events.events(forked.run_id)]
    assert "cell_proposed" not in fork_events  # the fork's own stream has no cell action of its own
    live = run_sync(ws.fork(original.run_id, 1, replay="live"))
    assert live.status == "success" and len(page.shown) == 3  # live: proposed again, as a new cell


def test_without_a_notebook_the_environment_says_how_to_get_one(ws):
    from tea_notebook.envs.notebook_cells import current_frontend

    kept = current_frontend()
    use_frontend(None)
    try:
        ws.envs.ensure("notebook")  # the built-in, by name (as --env notebook does)
        failed = ws.envs.invoke("notebook", "list_cells")
    finally:
        use_frontend(kept)
    assert not failed.ok and "%load_ext tea_notebook" in failed.error["message"]


def test_cells_needs_the_notebook_environment(ws):
    agent = ws.agent("plain", model="tea/test")
    with pytest.raises(ValueError, match='envs=\\["notebook"\\]'):
        agent.run_sync("x", cells="ask")


def test_a_stopped_run_withdraws_its_waiting_proposal(ws, warm_litellm):
    page = Page(["a = 1"])
    page.person = lambda p: (time.sleep(60), ("run", None))[1]
    add_notebook(ws, page)
    script = ScriptedModel([call("notebook_propose_cell", code="b = 2"), call("done", success=True, text="ok")])
    handle = ws.agent("a", model=script.name, envs=["notebook"]).start("wait", cells="ask")
    deadline = time.monotonic() + 10
    while not page.shown and time.monotonic() < deadline:
        time.sleep(0.02)
    handle.cancel()
    result = handle.result(timeout=15)
    assert result.status == "interrupted" and ("p1", "stopped") in page.settled and "b" not in page.namespace


# -- the JupyterLab comm (the kernel side; the page plays api29's messages from this test) ---------------
class LabPage:
    """The extension's side of ``tea_notebook.cells`` as api29 fixes it: it answers on another thread
    (the kernel's main thread, where comm messages arrive), inserts proposals and runs approved cells."""

    def __init__(self, cells: list[str], answers: bool = True):
        self.model = [
            {"id": f"c{i}", "cell_type": "code", "source": s, "execution_count": i + 1} for i, s in enumerate(cells)
        ]
        self.answers = answers
        self.received: list[dict[str, Any]] = []
        self.comm: Any = None
        self.click: Callable[[dict[str, Any]], dict[str, Any]] = lambda p: {"decision": "run", "source": p["code"]}

    def receive(self, data: dict[str, Any]) -> None:
        self.received.append(data)
        if self.answers:
            threading.Thread(target=self.answer, args=(data,), daemon=True).start()

    def answer(self, data: dict[str, Any]) -> None:
        if data["type"] == "cells_request":
            cells = [{**c, "index": i, "outputs": [], "tea": None} for i, c in enumerate(self.model)]
            self.comm.deliver({"type": "cells", "id": data["id"], "cells": cells})
        elif data["type"] == "proposal":
            p = data["proposal"]
            if p["kind"] == "new":
                at = (
                    next(i for i, c in enumerate(self.model) if c["id"] == p["after"]) + 1
                    if p["after"]
                    else len(self.model)
                )
                self.model.insert(
                    at, {"id": f"new-{p['id']}", "cell_type": "code", "source": p["code"], "execution_count": None}
                )
                target = f"new-{p['id']}"
            else:
                target = p["cell_id"]
            self.comm.deliver({"type": "shown", "proposal": p["id"], "cell_id": target, "t_page": 1.0})
            cell = next(c for c in self.model if c["id"] == target)
            choice = self.click(p)
            self.comm.deliver({"type": "decision", "proposal": p["id"], "base_source": cell["source"], **choice})
            if choice["decision"] == "run" and not any(m.get("status") == "conflict" for m in self.received):
                cell["source"] = choice["source"]
                outputs = [{"output_type": "stream", "name": "stdout", "text": f"ran {target}\n"}]
                self.comm.deliver(
                    {
                        "type": "executed",
                        "proposal": p["id"],
                        "cell_id": target,
                        "execution_count": 9,
                        "ok": True,
                        "outputs": outputs,
                    }
                )


class FakeComm:
    """A comm as ipykernel's ``comm`` package hands it to the target: ``send``, ``on_msg``, ``on_close``."""

    def __init__(self, page: LabPage):
        self.page, self.on_message = page, None
        page.comm = self

    def on_msg(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self.on_message = callback

    def on_close(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self.closed = callback

    def send(self, data: dict[str, Any]) -> None:
        self.page.receive(data)

    def deliver(self, data: dict[str, Any]) -> None:
        assert self.on_message is not None
        self.on_message({"content": {"data": data}})


def lab_for(page: LabPage, **options: Any):
    from types import SimpleNamespace

    from tea_notebook.notebook.cells_comm import LabCells
    from tea_notebook.notebook.cells_fallback import FallbackCells

    lab = LabCells(FallbackCells(SimpleNamespace(user_ns={"In": [""], "Out": {}})), **options)
    lab.open(FakeComm(page), {"content": {"data": {"hello": 1, "notebook": "analysis.ipynb"}}})
    return lab


def test_the_lab_comm_speaks_the_messages_of_the_design(ws, warm_litellm):
    page = LabPage(["rows = [1, None, 3]"])
    lab = lab_for(page)
    assert lab.name == "lab" and lab.notebook == "analysis.ipynb"
    add_notebook(ws, lab)
    script = ScriptedModel(
        [
            call("notebook_read_cell", cell_id="c0"),
            call("notebook_propose_cell", code="clean = [r for r in rows if r]", explanation="drop empty rows"),
            call("done", success=True, text="ok"),
        ]
    )
    result = ws.agent("analyst", model=script.name, envs=["notebook"]).run_sync("clean", cells="ask")
    assert result.status == "success", result.error
    kinds = [m["type"] for m in page.received]
    assert kinds == ["cells_request", "proposal", "settled"]
    proposal = page.received[1]["proposal"]
    assert set(proposal) >= {
        "id",
        "run",
        "step",
        "kind",
        "cell_id",
        "after",
        "code",
        "diff",
        "explanation",
        "mode",
        "needs_grant",
    }
    assert proposal["run"] == result.run_id and proposal["step"] == 2 and proposal["kind"] == "new"
    assert proposal["after"] is None and proposal["needs_grant"] is True and proposal["mode"] == "ask"
    assert page.received[2] == {"type": "settled", "proposal": "p1", "status": "ran"}
    seen = json.loads(actions(result)[1]["observation"])
    assert seen["decision"] == "ran" and seen["cell_id"] == "new-p1" and seen["outputs"] == "ran new-p1"


def test_the_lab_comm_refuses_a_conflicting_edit_before_the_page_runs_it(ws, warm_litellm):
    page = LabPage(["total = 1"])
    lab = lab_for(page)
    add_notebook(ws, lab)
    page.click = lambda p: {"decision": "run", "source": p["code"]}
    original = page.answer

    def person_changed_it_first(data: dict[str, Any]) -> None:
        if data["type"] == "proposal":
            page.model[0]["source"] = "total = 2  # mine"
        original(data)

    page.answer = person_changed_it_first  # type: ignore[method-assign]
    script = ScriptedModel(
        [call("notebook_propose_edit", cell_id="c0", code="total = 10"), call("done", success=False, text="conflict")]
    )
    result = ws.agent("a", model=script.name, envs=["notebook"]).run_sync("edit", cells="ask")
    assert json.loads(actions(result)[0]["observation"])["decision"] == "conflict"
    statuses = [m.get("status") for m in page.received if m["type"] == "settled"]
    assert statuses[0] == "conflict" and page.model[0]["source"] == "total = 2  # mine"


def test_no_page_answering_is_named_and_the_kernel_sees_a_run_without_the_page(ws, monkeypatch):
    import tea_notebook.notebook.cells_comm as cells_comm

    silent = LabPage(["a = 1"], answers=False)
    lab = lab_for(silent, page_timeout=0.2)
    add_notebook(ws, lab)
    failed = ws.envs.invoke("notebook", "list_cells")
    assert not failed.ok
    assert (
        "the notebook did not answer in 0.2 s: is the TEA extension installed? see %tea proposals"
        in failed.error["message"]
    )
    # pending proposals come back to a reloaded page; post_run_cell sees an approved cell run by info.cell_id
    p = Proposal(id=lab.board.new_id(), kind="new", code="b = 2", cell_id="new-p1")
    lab.board.open(p)
    lab.handle(silent.comm, {"type": "pending_request"})
    assert silent.received[-1]["type"] == "pending" and [x["id"] for x in silent.received[-1]["proposals"]] == ["p1"]
    lab.handle(
        silent.comm, {"type": "decision", "proposal": "p1", "decision": "run", "source": "b = 3", "cell_id": "new-p1"}
    )
    monkeypatch.setattr(cells_comm, "EXECUTED_GRACE", 0.01)
    from types import SimpleNamespace

    lab.post_run_cell(
        SimpleNamespace(
            info=SimpleNamespace(cell_id="new-p1"),
            result=3,
            error_in_exec=None,
            error_before_exec=None,
            execution_count=4,
        )
    )
    assert p.finished.wait(2) and p.outcome == {
        "cell_id": "new-p1",
        "ok": True,
        "outputs": "3",
        "execution_count": 4,
        "error": None,
    }
    assert p.decision and p.decision["decision"] == "edit_run"


# -- the magics: bad input is refused by name, nothing starts -----------------------------------------------
def test_the_magics_refuse_bad_input_by_name(ip, tmp_path, monkeypatch):
    from conftest import magics_workspace
    from IPython.core.error import UsageError

    import tea_notebook.notebook.cells_fallback as cells_fallback

    magics_workspace(ip, tmp_path, monkeypatch)
    magics = ip.magics_manager.registry["TeaMagics"]
    jobs = len(magics.workspace.jobs)
    with pytest.raises(UsageError, match="--cells auto.*needs the kernel.write grant given up front"):
        ip.run_cell_magic("agent", "a --cells auto", "do it")
    with pytest.raises(UsageError, match="the approval mode is one of ask, read, auto"):
        ip.run_cell_magic("agent", "a --cells yolo", "do it")
    assert len(magics.workspace.jobs) == jobs  # nothing started
    with pytest.raises(UsageError, match="%%tea is only for %%tea approve P"):
        ip.run_cell_magic("tea", "proposals", "code")
    with pytest.raises(UsageError, match="usage: %tea approve P"):
        ip.run_line_magic("tea", "approve")
    with pytest.raises(UsageError, match="usage: %tea reject P"):
        ip.run_line_magic("tea", "reject")
    monkeypatch.setattr(cells_fallback, "APPEAR_TIMEOUT", 0.1)
    with pytest.raises(UsageError, match="no proposal 'p9' appeared within 0.1 s"):
        ip.run_line_magic("tea", "approve p9")
    with pytest.raises(UsageError, match="no cell of this notebook has failed"):
        ip.run_line_magic("tea", "fix")
    with pytest.raises(UsageError, match="no cell 'In\\[999\\]' in the notebook"):
        ip.run_line_magic("tea", "fix In[999]")
    assert str(ip.run_line_magic("tea", "proposals")) == "no proposal is waiting"
    assert "%tea fix [CELL_ID]" in str(ip.run_line_magic("tea", "help"))


def test_agent_cells_in_process_with_the_live_view(ip, tmp_path, monkeypatch, shown, warm_litellm):
    """``%%agent NAME --cells`` returns at once (a background run); ``%tea proposals`` lists the waiting
    proposal; ``%%tea approve`` runs the person's edit in the shell; the run ends done."""
    from conftest import magics_workspace

    magics_workspace(ip, tmp_path, monkeypatch, live=True)
    ip.run_cell("rows = [3, None, 4]", store_history=True)
    ScriptedModel(
        [
            call("notebook_list_cells"),
            call("notebook_propose_cell", code="total = sum(r for r in rows if r)\ntotal", explanation="sum"),
            call("done", success=True, text="summed"),
        ],
        name="inproc",
    )
    handle = ip.run_cell_magic("agent", "summer --cells --model tea/script:inproc", "sum the rows")
    deadline = time.monotonic() + 20
    magics = ip.magics_manager.registry["TeaMagics"]
    while not magics.cells.board.pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "p1  new  agent summer" in str(ip.run_line_magic("tea", "proposals"))
    ip.run_cell_magic("tea", "approve p1", "total = sum(r for r in rows if r) * 10\ntotal")
    result = handle.result(timeout=30)
    assert result.status == "success", result.error
    assert ip.user_ns["total"] == 70
    seen = json.loads([a for a in actions(result) if a["name"] == "notebook_propose_cell"][0]["observation"])
    assert seen["decision"] == "edited and ran" and seen["outputs"] == "Out[1]: 70"  # a terminal shell's display
    [proposed] = events(magics.workspace, result, "cell_proposed")
    assert proposed["after"] is not None and proposed["after"].startswith("In[")  # below the %%agent cell
    assert any("summer" in str(u) for u in shown)  # the live view showed the run


def test_fix_task_from_the_pages_cells_names_the_failing_cell_its_traceback_and_names():
    from types import SimpleNamespace

    from tea_notebook.notebook.cell_commands import fix_task

    error = {
        "output_type": "error",
        "ename": "KeyError",
        "evalue": "'b'",
        "traceback": ["\x1b[31mKeyError\x1b[0m: 'b'"],
    }
    cells = [
        {"id": "u1", "index": 0, "source": "x = 1", "execution_count": 3, "outputs": [error]},
        {"id": "u2", "index": 1, "source": "totals['b'] + offset", "execution_count": 5, "outputs": [error]},
        {"id": "u3", "index": 2, "source": "ok = 1", "execution_count": 6, "outputs": []},
    ]
    shell = SimpleNamespace(user_ns={"totals": {"a": 1}, "offset": 2, "api_key": "sk-zzz"}, transform_cell=lambda c: c)
    task = fix_task(cells, None, shell, readable=False)
    assert task.startswith("Cell u2 of the notebook failed with KeyError: 'b'")  # the last one that failed
    assert "totals['b'] + offset" in task and "KeyError: 'b'" in task and "\x1b" not in task
    assert "totals: dict, len 1" in task and "offset: int" in task and "{'a': 1}" not in task
    assert "values need --grant kernel.read" in task and "notebook_propose_edit" in task
    assert "totals: dict, len 1 = {'a': 1}" in fix_task(cells, "u2", shell, readable=True)
    with pytest.raises(ValueError, match="cell u3 did not fail"):
        fix_task(cells, "u3", shell, readable=False)
    with pytest.raises(ValueError, match="no cell 'u9' in the notebook"):
        fix_task(cells, "u9", shell, readable=False)
