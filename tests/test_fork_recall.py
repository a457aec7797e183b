"""A fork or a resume starts with the insights its source recalled from earlier runs' memory (recorded
on the source's ``run_started`` as ``recalled``), instead of recalling again: the memory has grown
since (with the source's own folds), and an unedited fork must ask its model what the original asked."""

from __future__ import annotations

from typing import Any

from prompt_parts import section, user_text

from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol.tools import make_tool

TASK = "Read the tea history archive page by page"
PAGE = "The archive tells of tea clippers, of auctions in Mincing Lane and of blends. " * 12


def read_page(page: int) -> str:
    """Read one page of the archive."""
    return f"page {page}: {PAGE}"


def reader(pages: int) -> tuple[ScriptedModel, list[Any]]:
    """A model that reads ``pages`` pages then stops; the messages of each of its calls."""
    seen: list[Any] = []

    def brain(messages: Any, tools: Any) -> Any:
        seen.append(messages)
        if len(seen) > pages:
            return call("done", success=True, text="read it all")
        return call("read_page", page=len(seen))

    return ScriptedModel(brain), seen


def insights(messages: Any) -> str:
    history = section(user_text(messages), "agent_history")
    return section(history, "insights") if "<insights>" in history else ""


def started(ws: Any, run_id: str) -> dict[str, Any]:
    return next(e.data for e in ws.events.events(run_id, nested=False) if e.type == "run_started")


def test_a_fork_and_a_resume_take_the_recalled_insights_of_their_source(ws):
    ws.tools.register(make_tool(read_page))
    earlier, _ = reader(6)
    ws.agent("reader", model=earlier.name, tools=["read_page"], memory_budget=300, keep_recent_steps=1).run_sync(TASK)
    assert len(ws.memory) > 0  # its folds are in memory

    original, asked = reader(6)
    agent = ws.agent("reader2", model=original.name, tools=["read_page"], memory_budget=300, keep_recent_steps=1)
    run = agent.run_sync(TASK)
    recalled = started(ws, run.run_id).get("recalled")
    assert recalled and all(r.startswith("(earlier run) ") for r in recalled)
    assert all(r in insights(asked[0]) for r in recalled)
    grown = len(ws.memory)  # the original's own folds are in memory now too

    fork_model, fork_asked = reader(6)
    fork = run_sync(ws.fork(run.run_id, 2, model=fork_model.name))
    assert len(ws.memory) >= grown
    assert started(ws, fork.run_id).get("recalled") == recalled  # taken from the source, not recalled again
    assert insights(fork_asked[0]) == insights(asked[2])  # what the original was shown at step 3

    # a fork of the fork still has them (a fork records the insights it took)
    again_model, again_asked = reader(6)
    again = run_sync(ws.fork(fork.run_id, 1, model=again_model.name))
    assert started(ws, again.run_id).get("recalled") == recalled
    assert insights(again_asked[0]) == insights(asked[1])


def test_a_resume_takes_the_recalled_insights_of_the_stopped_run(ws):
    ws.tools.register(make_tool(read_page))
    earlier, _ = reader(6)
    ws.agent("reader", model=earlier.name, tools=["read_page"], memory_budget=300, keep_recent_steps=1).run_sync(TASK)
    seen: list[Any] = []

    def failing_once(messages: Any, tools: Any) -> Any:
        seen.append(messages)
        if len(seen) == 4:
            raise RuntimeError("the model's service went away")
        if len(seen) > 6:
            return call("done", success=True, text="read it all")
        return call("read_page", page=len(seen))

    model = ScriptedModel(failing_once)
    agent = ws.agent("reader2", model=model.name, tools=["read_page"], memory_budget=300, keep_recent_steps=1)
    stopped = agent.run_sync(TASK, raise_on_error=False)
    assert stopped.status == "error", stopped.status
    recalled = started(ws, stopped.run_id).get("recalled")
    assert recalled
    resumed = run_sync(ws.resume(stopped.run_id))
    assert resumed.success
    assert started(ws, resumed.run_id).get("recalled") == recalled
    assert insights(seen[4]) == insights(seen[3])  # step 4 again, shown what the stopped run was shown
