"""Time travel (issue 22): what the model saw at each step is stored (redacted, linear in the run),
forks take edits at any step of any agent, branches show a run's family, and a stopped run resumes
without repeating what it finished. Scripted models record the prompts they receive."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import json  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from prompt_parts import thoughts, turn  # noqa: E402
from prompt_parts import user_text as user  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.redaction import redact  # noqa: E402
from tea_notebook.runtime.contexts import ContextClipped  # noqa: E402
from tea_notebook.runtime.forking import ForkError  # noqa: E402

SECRET_NAME = "TEA_TT_SERVICE_TOKEN"
SECRET = "tt-Secret-9c1f7e55aa"


def run_count(ws) -> int:
    return len(ws.db.runs(10_000, parent_id=None))


def event_count(ws) -> int:
    return ws.db._read("SELECT count(*) FROM events")[0][0]


def four_steps(ws, worker, **agent_options):
    script = ScriptedModel(
        [
            turn(thoughts(memory="did 1"), call("work", n=1)),
            turn(thoughts(memory="did 2"), call("work", n=2)),
            turn(thoughts(memory="did 3"), call("work", n=3)),
            call("done", success=True, text="original"),
        ]
    )
    agent = ws.agent("worker", model=script.name, tools=["work"], **agent_options)
    return script, agent.run_sync("do the work")


# -- what the model saw ---------------------------------------------------------------------------
def test_the_stored_context_is_what_the_model_received_after_redaction(ws, monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET)

    @ws.tools.tool
    def leak(n: int) -> str:
        """Return a text holding a secret."""
        return f"the token is {SECRET} (call {n})"

    script = ScriptedModel(
        [call("leak", n=1), call("leak", n=2), call("leak", n=3), call("done", success=True, text="x")]
    )
    result = ws.agent("leaky", model=script.name, tools=["leak"]).run_sync(f"use the token {SECRET} carefully")
    assert result.success and len(script.calls) == 4
    for step, sent in enumerate(script.calls, 1):
        ctx = result.context(step)
        assert ctx.messages == redact(sent)  # byte for byte, after redaction
        assert SECRET not in json.dumps(ctx.messages) and SECRET in json.dumps(sent)
        assert [t["function"]["name"] for t in ctx.tools] == ["leak", "done"]
    # the raw database holds no secret either (parts are redacted before they are kept)
    raw = Path(ws.path / "tea.db").read_bytes() + b"".join(p.read_bytes() for p in ws.path.glob("tea.db-wal"))
    assert SECRET.encode() not in raw


def test_a_context_shows_its_parts_sizes_and_what_changed(ws, worker):
    _, first = four_steps(ws, worker)
    ctx = first.context(3)
    sizes = ctx.sizes()
    assert {"system prompt", "task", "history", "tools"} <= set(sizes)
    assert (
        sum(sizes.values())
        == ctx.chars
        == sum(len(json.dumps(t, ensure_ascii=False)) for t in ctx.tools) + sum(len(m["content"]) for m in ctx.messages)
    )
    added = ctx.changes()["added"]
    assert any(a.startswith("history: <step_2>") for a in added)  # the step that came since step 2
    assert any(a.startswith("step info") for a in added)
    assert not any(a.startswith("system prompt") or a.startswith("task") for a in added)
    html = ctx._repr_html_()
    assert "context of step 3" in html and "history" in html and "new" in html
    assert "Step 3 of" in ctx.text()
    with pytest.raises(tea_notebook.errors.NotFoundError, match="no model request at step 9"):
        first.context(9)


def test_storage_of_contexts_grows_linearly(ws):
    @ws.tools.tool
    def tick(n: int) -> str:
        """Count."""
        return f"tick {n} " + "x" * 200

    def run(steps: int) -> int:
        before = ws.db.path.stat().st_size + sum(p.stat().st_size for p in ws.path.glob("tea.db-wal"))
        calls = [call("tick", n=i) for i in range(steps - 1)] + [call("done", success=True, text="ok")]
        script = ScriptedModel(calls)
        agent = ws.agent(f"ticker{steps}", model=script.name, tools=["tick"], max_steps=steps)
        result = agent.run_sync("tick along")
        assert result.steps == steps
        stored = ws.db._read("SELECT sum(length(data)) FROM events WHERE run_id=?", (result.run_id,))[0][0]
        parts = result.trajectory.events
        keys = set()
        for e in parts:
            if e.type == "model_request":
                keys.update(e.data["context"].split('"')[1::2])
        blob_bytes = (
            ws.db._read(
                f"SELECT coalesce(sum(size), 0) FROM blobs WHERE digest IN ({','.join('?' * len(keys))})", tuple(keys)
            )[0][0]
            if keys
            else 0
        )
        del before
        return stored + blob_bytes

    small, large = run(100), run(1000)
    assert large / small < 12  # 10x the steps: about 10x the bytes, not 100x


# -- forks with edits -----------------------------------------------------------------------------
def test_an_edited_observation_is_what_the_fork_sees_and_the_original_does_not_leak(ws, worker):
    _, first = four_steps(ws, worker)
    after = ScriptedModel([call("done", success=True, text="forked")])
    forked = run_sync(ws.fork(first.run_id, 3, edit={"observation": "EDITED three"}, model=after.name))
    assert forked.success and forked.answer == "forked"
    seen = user(after.calls[0])
    assert '[work] {"n": 3} -> EDITED three' in seen and "result 3" not in seen
    assert "result 2" in seen and worker == [1, 2, 3]  # steps replayed, not run again
    ctx = forked.context(4)  # what the fork's model saw is stored too
    assert "EDITED three" in json.dumps(ctx.messages) and "result 3" not in json.dumps(ctx.messages)
    traj = forked.trajectory
    assert traj.edit["kind"] == "observation" and traj.edit["before"] == "result 3"
    step3 = traj.steps[2]
    assert step3.edited and step3.actions[0]["observation"] == "EDITED three"
    assert "edited" in traj._repr_mimebundle_()[0]["text/html"]


def test_an_edited_observation_drops_memory_folds_written_from_it(ws, worker):
    """A summary written after the edited step would carry the old observation: it is not restored,
    while a fork before any edit keeps the folds as they were."""
    script = ScriptedModel([call("work", n=i) for i in range(1, 7)] + [call("done", success=True, text="original")])
    first = ws.agent("folder", model=script.name, tools=["work"], memory_budget=60, keep_recent_steps=1).run_sync("w")
    folds = [e for e in ws.events.events(first.run_id) if e.type == "memory_written"]
    assert folds and any(2 in e.data.get("folded_steps", []) for e in folds), "the run should have folded step 2"
    assert any("result 2" in e.data["summary"] for e in folds)
    after = ScriptedModel([call("done", success=True, text="forked")])
    run_sync(ws.fork(first.run_id, 5, edit={"observation": "EDITED two", "action": 1}, model=after.name))
    seen = user(after.calls[0])
    assert "result 5" not in seen and "EDITED two" in seen
    plain = ScriptedModel([call("done", success=True, text="plain")])
    run_sync(ws.fork(first.run_id, 5, model=plain.name))
    kept = user(plain.calls[0])
    assert "<summaries>" in kept and kept == user(script.calls[5]).replace("Step 6 of", "Step 6 of")


def test_edited_actions_run_live_and_bad_ones_are_refused_before_anything_is_written(ws, worker):
    _, first = four_steps(ws, worker)
    runs, events = run_count(ws), event_count(ws)
    bad = [
        ({"actions": [{"name": "rm_rf", "arguments": {}}]}, "has no tool 'rm_rf'"),
        ({"actions": [{"name": "work", "arguments": {"n": "three"}}]}, "n"),
        ({"actions": []}, "non-empty list"),
        ({"observation": 42}, "must be text"),
        ({"observation": "x", "action": 5}, "there is no action 5"),
        ({"colour": "red"}, "unknown keys"),
        ({"context": [{"content": "no role"}]}, "needs a role"),
    ]
    for edit, message in bad:
        with pytest.raises(ForkError, match=message):
            run_sync(ws.fork(first.run_id, 2, edit=edit))
    with pytest.raises(ForkError, match="only 4 steps"):
        run_sync(ws.fork(first.run_id, 9))
    assert (run_count(ws), event_count(ws)) == (runs, events)  # nothing written

    after = ScriptedModel([call("done", success=True, text="after the edit")])
    forked = run_sync(
        ws.fork(first.run_id, 2, edit={"actions": [{"name": "work", "arguments": {"n": 20}}]}, model=after.name)
    )
    assert forked.success and worker == [1, 2, 3, 20]  # step 2 ran again with the edited action
    assert '[work] {"n": 20} -> result 20' in user(after.calls[0])
    assert forked.trajectory.steps[1].note == "actions edited"


def test_an_edited_context_is_what_the_model_receives(ws, worker):
    _, first = four_steps(ws, worker)
    ctx = first.context(3)
    messages = [dict(m) for m in ctx.messages]
    messages[1]["content"] = messages[1]["content"].replace("result 2", "result 2 (and a hint: stop now)")
    after = ScriptedModel([call("done", success=True, text="stopped")])
    forked = run_sync(ws.fork(first.run_id, 3, edit={"context": messages}, model=after.name))
    assert forked.success and after.calls[0] == messages
    assert forked.context(3).messages == messages
    ctx.clipped = True
    with pytest.raises(ContextClipped, match="was clipped"):
        run_sync(ws.fork(first.run_id, 3, edit=ctx))


def test_rerun_from_executes_the_stored_actions_again(ws, worker):
    _, first = four_steps(ws, worker)
    after = ScriptedModel([call("done", success=True, text="again")])
    forked = run_sync(ws.fork(first.run_id, 3, rerun_from=2, model=after.name))
    assert forked.success and worker == [1, 2, 3, 2, 3]
    notes = [s.note for s in forked.trajectory.steps]
    assert notes[:3] == ["", "re-executed live", "re-executed live"]
    started = forked.trajectory.events[0].data
    assert started["rerun_from"] == 2


def test_a_fork_from_a_sub_agent_step_continues_the_parent_with_the_new_answer(ws, worker):
    helper_model = ScriptedModel([call("work", n=1), call("done", success=True, text="helper says 1")])
    ws.agent("helper", model=helper_model.name, tools=["work"], description="Helps.")
    boss_seen: list[str] = []

    def boss(messages, tools):
        boss_seen.append(user(messages))
        if len(boss_seen) == 1:
            return call("helper_agent", task="help")
        return call("done", success=True, text="boss relays: " + boss_seen[-1].split("-> ")[-1].split("\n")[0])

    boss_model = ScriptedModel(boss)
    first = ws.agent("boss", model=boss_model.name, sub_agents=["helper"], tools=[]).run_sync("get help")
    assert first.success and "helper says 1" in first.answer
    sub = first.trajectory.children[0]
    helper_after = ScriptedModel([call("done", success=True, text="helper says EDITED")])
    forked = run_sync(ws.fork(sub.run_id, 1, edit={"observation": "result 99"}, model=helper_after.name))
    assert forked.success and "helper says EDITED" in forked.answer  # the parent went on with it
    assert "result 99" in user(helper_after.calls[0])
    assert worker == [1]  # nothing re-executed
    traj = forked.trajectory
    assert traj.forked_from == first.run_id and traj.edit["kind"] == "sub_agent"
    assert [c.agent for c in traj.children] == ["helper"] and traj.children[0].forked_from == sub.run_id
    assert len(boss_seen) == 3  # the boss was asked only after the fork, at step 2


def test_a_sub_agent_fork_two_levels_down_replays_the_other_calls_of_each_step(ws, worker):
    """boss -> manager -> helper: forking the helper's step reruns neither the boss's other call in
    that step nor anything the manager did before; each level goes on with the new answer."""
    ws.agent(
        "helper",
        model=ScriptedModel([call("work", n=1), call("done", success=True, text="h=1")]).name,
        tools=["work"],
        description="Helps.",
    )

    def relay(name):
        seen: list[str] = []

        def brain(messages, tools):
            seen.append(user(messages))
            if len(seen) == 1:
                return call("helper_agent" if name == "manager" else "manager_agent", task="go")
            return call("done", success=True, text=f"{name} relays " + seen[-1].split("-> ")[-1].split("\n")[0])

        return brain

    ws.agent(
        "manager", model=ScriptedModel(relay("manager")).name, sub_agents=["helper"], tools=[], description="Manages."
    )
    boss_calls: list[str] = []

    def boss(messages, tools):
        boss_calls.append(user(messages))
        if len(boss_calls) == 1:
            return [call("work", n=500), call("manager_agent", task="go")]
        return call("done", success=True, text="boss: " + boss_calls[-1].split("manager_agent")[-1][:200])

    first = ws.agent("boss", model=ScriptedModel(boss).name, sub_agents=["manager"], tools=["work"]).run_sync("all")
    assert first.success and worker == [500, 1]
    helper_run = first.trajectory.children[0].children[0]
    assert helper_run.agent == "helper"
    fork = ScriptedModel([call("done", success=True, text="h=EDITED")])
    forked = run_sync(ws.fork(helper_run.run_id, 1, edit={"observation": "result 42"}, model=fork.name))
    assert forked.success and "h=EDITED" in forked.answer
    assert worker == [500, 1]  # the boss's work(500) and the helper's work(1) were not run again
    assert "result 42" in user(fork.calls[0])
    manager = forked.trajectory.children[0]
    assert manager.agent == "manager" and manager.children[0].agent == "helper"
    assert manager.edit["kind"] == "sub_agent" and manager.children[0].edit["kind"] == "observation"
    boss_step1 = forked.trajectory.steps[0]
    assert [a["name"] for a in boss_step1.actions] == ["work", "manager_agent"]
    assert boss_step1.actions[0]["observation"] == "result 500"


def test_the_context_of_a_replayed_step_is_read_from_the_run_it_came_from(ws, worker):
    _, first = four_steps(ws, worker)
    forked = run_sync(ws.fork(first.run_id, 2, model=ScriptedModel([call("done", success=True, text="f")]).name))
    assert forked.context(2).messages == first.context(2).messages
    assert "Step 3 of" in forked.context(3).text()


def test_forking_a_running_run_and_resuming_a_finished_one_are_refused(ws, worker):
    _, first = four_steps(ws, worker)
    with pytest.raises(ForkError, match="only an interrupted run or one that ended in error"):
        run_sync(ws.resume(first.run_id))
    ws.db._conn.execute("UPDATE runs SET status='running' WHERE id=?", (first.run_id,))
    with pytest.raises(ForkError, match="still running"):
        run_sync(ws.fork(first.run_id, 1))


# -- branches -------------------------------------------------------------------------------------
def test_branches_show_forks_of_forks_and_compare_shows_where_they_diverge(ws, worker):
    _, first = four_steps(ws, worker)
    a = run_sync(
        ws.fork(
            first.run_id, 2, edit={"observation": "A"}, model=ScriptedModel([call("done", success=True, text="a")]).name
        )
    )
    b = run_sync(
        ws.fork(a.run_id, 2, model=ScriptedModel([call("work", n=7), call("done", success=True, text="b")]).name)
    )
    family = ws.branches(b.run_id)
    ids = [br.run_id for br in family]
    assert ids[0] == first.run_id and set(ids) == {first.run_id, a.run_id, b.run_id}
    assert family.get(b.run_id).forked_from == a.run_id and "observation of action 1 edited" in family.get(a.run_id).how
    text = family.text()
    assert text.index(first.run_id) < text.index(a.run_id) < text.index(b.run_id)
    assert "<table>" in family._repr_html_()
    cmp = ws.compare(first.run_id, a.run_id)
    assert cmp.diverges_at == 2
    assert cmp.summary()["answer"] == ("original", "a")
    assert "diverge at step 2" in cmp.text()


# -- resume ---------------------------------------------------------------------------------------
KILLED_RUN = """
import time
import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
ws = tea_notebook.Workspace({folder!r}, embedder="hashing")

@ws.tools.tool
def slow(n: int) -> str:
    \"\"\"A tool with a side effect that must not happen twice.\"\"\"
    with open({log!r}, "a") as f:
        f.write(f"{{n}}\\n")
    if n == 22:
        time.sleep(60)  # the kernel is killed here
    return f"did {{n}}"

script = ScriptedModel([call("slow", n=1), [call("slow", n=21), call("slow", n=22)], call("done", success=True, text="x")])
ws.agent("fragile", model=script.name, tools=["slow"], max_actions=3).run_sync("do it")
"""


def test_a_run_whose_kernel_is_killed_with_kill_9_resumes_without_repeating_finished_calls(tmp_path):
    from kernel_driver import make_kernel_specs, start_kernel

    folder, log = tmp_path / "ws", tmp_path / "calls.log"
    (tmp_path / "specs").mkdir()
    kernel = start_kernel(make_kernel_specs(tmp_path / "specs"), tmp_path)
    try:
        kernel.send(KILLED_RUN.format(folder=str(folder), log=str(log)))  # a cell of a real kernel, not awaited
        deadline = time.time() + 90
        while time.time() < deadline and "22" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)
        assert "22" in log.read_text(), "the run never reached its second step"
        os.kill(kernel.km.provisioner.process.pid, signal.SIGKILL)
        kernel.km.provisioner.process.wait(timeout=30)
    finally:
        kernel.kc.stop_channels()
        kernel.km.cleanup_resources()
    ws = tea_notebook.Workspace(folder, embedder="hashing")  # opening marks the dead run interrupted
    try:
        run = ws.runs(1)[0]
        assert run["status"] == "interrupted"

        @ws.tools.tool
        def slow(n: int) -> str:
            """A tool with a side effect that must not happen twice."""
            with open(log, "a") as f:
                f.write(f"{n}\n")
            return f"did {n}"

        ws.agents.current("fragile")
        finish = ScriptedModel([call("done", success=True, text="resumed")])
        # the run's recorded model is a script of the dead process: the resume keeps it, so give it that name
        ScriptedModel._registry[run["model"].split(":", 1)[1]] = finish
        # 22 may have acted before the kill and `slow` is not idempotent: refused until the person says so
        with pytest.raises(ForkError, match=r"\(slow\) of step 2 .*rerun_unknown=True"):
            run_sync(ws.resume(run["id"]))
        assert log.read_text().split() == ["1", "21", "22"]
        resumed = run_sync(ws.resume(run["id"], rerun_unknown=True))
        assert resumed.success and resumed.answer == "resumed"
        assert log.read_text().split() == ["1", "21", "22", "22"]  # 21 returned before the kill: not again
        assert len(finish.calls) == 1  # step 2's model reply was not asked for again
        traj = resumed.trajectory
        step2 = traj.steps[1]
        assert step2.note.startswith("taken up again: 1 of 2") and [a["observation"] for a in step2.actions] == [
            "did 21",
            "did 22",
        ]
        assert traj.events[0].data["resumed_from"] == run["id"]
        assert "resumed" in ws.branches(run["id"]).text()
    finally:
        ws.close()


def test_a_process_runs_model_calls_are_stored_too(ws):
    from tea_notebook.runtime.runlog import Process

    script = ScriptedModel(["first answer", "second answer"])

    async def go():
        async with Process(ws, "judge", "judge it", model=script.name) as p:
            await p.complete(
                [{"role": "system", "content": "You judge."}, {"role": "user", "content": "Is it good?"}], "judge"
            )
            p.step("judge", {}, "good")
            await p.complete([{"role": "user", "content": "And now?"}], "again")
        return p.run_id

    run_id = run_sync(go())
    traj = ws.trajectory(run_id)
    assert traj.context(1).messages == script.calls[0] and traj.context(1).stage == "judge"
    assert traj.context(2, stage="again").messages == [{"role": "user", "content": "And now?"}]


def test_a_fork_rebuilds_the_todo_list_of_the_replayed_steps(ws, worker):
    script = ScriptedModel(
        [
            call("todo", action="add", steps=[{"description": "first unit"}, {"description": "second unit"}]),
            call("work", n=1),
            call("todo", action="complete", step_id=1, result="done 1"),
            call("done", success=True, text="ok"),
        ]
    )
    first = ws.agent("planned", model=script.name, tools=["work"], todo=True).run_sync("two units")
    original = user(script.calls[3])
    after = ScriptedModel([call("done", success=True, text="forked")])
    run_sync(ws.fork(first.run_id, 3, model=after.name))
    todo = lambda text: text.split("<todo_contents>")[1].split("</todo_contents>")[0]  # noqa: E731
    assert "second unit" in todo(user(after.calls[0])) and todo(user(after.calls[0])) == todo(original)


@pytest.mark.parametrize("stop_at", ["model_reply", "first_call"])
def test_a_run_stopped_mid_step_resumes_each_call_once(ws, stop_at):
    """Stopped after the model chose step 2's two calls (before any ran), or while the first ran (it
    ended on its own): the resume asks the model nothing again and places each order exactly once."""
    book: list[tuple[str, int]] = []
    ctx = ws.context()

    @ws.tools.tool
    def place_order(tea: str, tins: int) -> str:
        """Order tins of a tea."""
        book.append((tea, tins))
        if stop_at == "first_call" and tea == "black":
            ctx.cancel.set()
        return f"ordered {tins} tins of {tea}"

    asked: list[int] = []

    def buyer(messages, tools):
        step = int(user(messages).split("Step ")[1].split(" ")[0])
        asked.append(step)
        if step == 1:
            return call("place_order", tea="green", tins=10)
        if step == 2:
            if stop_at == "model_reply":
                ctx.cancel.set()
            return [call("place_order", tea="black", tins=5), call("place_order", tea="oolong", tins=5)]
        return call("done", success=True, text="ordered " + ", ".join(f"{t} {n}" for t, n in book))

    model = ScriptedModel(buyer)
    stopped = ws.agent("buyer", model=model.name, tools=["place_order"]).run_sync("order", context=ctx)
    assert stopped.status == "interrupted"
    resumed = run_sync(ws.resume(stopped.run_id))
    assert resumed.success and book == [("green", 10), ("black", 5), ("oolong", 5)]
    assert asked == [1, 2, 3]
    step2 = resumed.trajectory.steps[1]
    assert [a["observation"] for a in step2.actions] == ["ordered 5 tins of black", "ordered 5 tins of oolong"]
    assert step2.note.startswith("taken up again")


def test_requests_with_images_and_other_shapes_are_rebuilt_exactly():
    """The recorder and reader on their own: a multimodal message, a message with extra keys, a tool
    message, edits between requests and a keyframe; an image over the limit is marked clipped."""
    from dataclasses import dataclass as _dataclass

    from tea_notebook.runtime import contexts

    kept: dict[str, str] = {}

    class Keep:
        def keep(self, texts: dict[str, str]) -> None:
            kept.update(texts)

    @_dataclass
    class Ev:
        run_id: str
        type: str
        step: int
        data: dict

    recorder = contexts.ContextRecorder(Keep())
    image = "data:image/png;base64," + "iVBORw0KGgo" * 50
    requests = []
    for step in range(1, 40):
        history = "".join(f"<step_{i}>\nMemory: m{i}\n</step_{i}>\n" for i in range(1, step))
        requests.append(
            [
                {"role": "system", "content": "You are careful. <environment_state> is described below."},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": f"<agent_state><step_info>Step {step}</step_info><task>t</task>\n"
                            f"<agent_history>\n{history}\n</agent_history>\n<tool_state>x</tool_state>",
                        },
                        {"type": "image_url", "image_url": {"url": image + str(step % 3)}},
                    ],
                },
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
                {"role": "tool", "tool_call_id": "c1", "content": f"result {step}"},
            ]
        )
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]
    events = [
        Ev("r", "model_request", n, {"context": recorder.record(m, tools, {"model": "m"})})
        for n, m in enumerate(requests, 1)
    ]
    reader = contexts.ContextReader("r", events, kept.get)
    for n in (1, 2, 32, 33, 34, 39):
        ctx = reader.context(n)
        assert ctx.messages == requests[n - 1] and ctx.tools == tools and not ctx.clipped
        assert ctx.parts[0].kind == "system prompt" and len([p for p in ctx.parts if p.kind == "system prompt"]) == 1
    assert any(p.kind == "image" for p in reader.context(5).parts)
    assert any(a.startswith("history: <step_4>") for a in reader.context(5).changes()["added"])
    big = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "x" * (contexts.IMAGE_LIMIT + 1)}},
            ],
        }
    ]
    fresh = contexts.ContextRecorder(Keep())  # a run's first request: a full one
    clipped = contexts.ContextReader(
        "r", [Ev("r", "model_request", 1, {"context": fresh.record(big, None, {})})], kept.get
    ).context(1)
    assert clipped.clipped and "not kept" in clipped.messages[0]["content"][1]["image_url"]["url"]


def test_a_sub_agent_run_started_by_a_toolself_stage_is_forked_through_its_parent_only(ws, worker):
    """A nested run whose parent is not an agent loop forked by steps (a ToolSelf run) is refused,
    naming the run to fork instead; nothing is written."""
    from tea_notebook.errors import TeaError

    ws.agent("helper", model=ScriptedModel([call("done", success=True, text="h")]).name, tools=[], description="H.")
    engine = json.dumps(
        {"next_sub_goal": "ask", "execution_strategy": "ask", "toolbox": ["helper_agent"], "inter_agent_knowledge": ""}
    )

    def brain(messages, tools):
        if "Agent Configuration Engineer" in messages[0]["content"]:
            return engine
        if "helper_agent" in user(messages) and "-> " in user(messages):
            return call(
                "finish",
                task_completion_status="complete",
                final_result="ok",
                execution_summary={"detailed_execution": ["asked"], "tools_used": ["helper_agent"]},
            )
        return call("helper_agent", task="help")

    first = ws.toolself("ts", model=ScriptedModel(brain).name, sub_agents=["helper"], tools=[]).run_sync("go")
    sub = first.trajectory.children[0]
    runs = run_count(ws)
    with pytest.raises(TeaError, match="fork that run"):
        run_sync(ws.fork(sub.run_id, 1))
    assert run_count(ws) == runs
