"""What a resume reads of the stopped run: its events once (its finished steps' calls are not decoded),
and again only when a call returned since that first read, so a call that returns at that moment is
never taken for one whose outcome is unknown, nor run a second time."""

from __future__ import annotations

import time
from typing import Any

from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime.inflight import STILL_RUNNING


def test_a_call_that_returns_between_the_resumes_first_read_and_its_look_is_not_run_again(ws, tmp_path, monkeypatch):
    log, ctx = tmp_path / "orders.log", ws.context()

    @ws.tools.tool
    def place_order(tea: str) -> str:
        """Order a tea (it takes a while, and does not look at its cancel flag)."""
        ctx.cancel.set()
        time.sleep(1.5)
        with open(log, "a") as f:
            f.write(tea + "\n")
        return f"ordered {tea}"

    model = ScriptedModel([call("place_order", tea="green"), call("done", success=True, text="ordered")])
    stopped = ws.agent("buyer", model=model.name, tools=["place_order"]).run_sync("order", context=ctx)
    assert stopped.status == "interrupted" and not log.exists()  # still running after the stop's grace

    real_get = STILL_RUNNING.get
    looked: list[str] = []

    def returned_just_now(run_id: str, call_id: str) -> Any:
        """The call returns, is recorded and forgotten after the resume read the run, before it looks."""
        late = real_get(run_id, call_id)
        if late is not None:
            assert late.recorded.wait(10)
        looked.append(call_id)
        return None

    monkeypatch.setattr(STILL_RUNNING, "get", returned_just_now)
    resumed = run_sync(ws.resume(stopped.run_id))
    assert looked and resumed.success
    assert log.read_text().split() == ["green"]  # placed once: its late result was read, not run again
    assert [a["observation"] for a in resumed.trajectory.steps[0].actions] == ["ordered green"]
