"""The live view while a step's tool still runs (issue 28): the step shows at once as an in-progress
card ("very_slow running 3 s…"), not "0 steps" until the tool returns; the updates that tick its
seconds carry no step (a few hundred bytes of payload); an interrupted run's payload says why it
stopped. The extension's side (it counts the seconds on from ``running_for``) is tested by
``jlpm test`` and in JupyterLab by test_live_reattach_ui.py."""

from __future__ import annotations

import json
import time
from typing import Any

from event_factory import event

from tea_notebook.notebook.live import LiveView, running_text, tick_interval
from tea_notebook.runtime.render import MIME_TYPE


class Handle:
    """Stands in for IPython's DisplayHandle: keeps each update as the JSON that would be sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def update(self, obj: Any) -> None:
        data, metadata = obj._repr_mimebundle_()
        self.sent.append(json.loads(json.dumps({"data": data, "metadata": metadata}, default=str)))


def _wait_for(handle: Handle, count: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while len(handle.sent) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(handle.sent) >= count, handle.sent


def test_a_step_whose_tool_runs_shows_at_once_and_ticks_without_resending_it():
    view = LiveView(interval=0.25, display=False, kernel="0b7e5f6a-1234-4abc-9def-0123456789ab")
    view._handle = handle = Handle()
    try:
        view(event("run_started", agent="slowpoke", task="Be slow.", model="tea/test"))
        assert len(handle.sent) == 1  # the first event goes out at once (whole)
        view(event("model_response", step=1, prompt_tokens=10, completion_tokens=2, cost=0.0, latency=0.01))
        view(event("tool_call", step=1, id="c1", name="very_slow", arguments={"seconds": 3}))
        # no event follows while the tool runs: the throttle's held-back update still goes out
        _wait_for(handle, 2, timeout=1.0)
        update = handle.sent[1]["data"]
        payload = update[MIME_TYPE]
        assert payload["partial"] is True and [s["number"] for s in payload["steps"]] == [1]
        action = payload["steps"][0]["actions"][0]
        assert action["name"] == "very_slow" and 0 <= action["running_for"] < 1
        assert "step 1: very_slow running 0 s…" in update["text/html"]
        assert "1 steps" in update["text/plain"]  # not "0 steps"

        # ticks: the HTML counts the seconds; the payload carries the header and no step again
        _wait_for(handle, 4, timeout=3.0)
        tick = handle.sent[3]["data"]
        assert tick[MIME_TYPE]["steps"] == [] and tick[MIME_TYPE]["status"] == "running"
        assert "very_slow running 1 s…" in tick["text/html"] or "very_slow running 2 s…" in tick["text/html"]
        assert len(json.dumps(tick[MIME_TYPE])) < 600
        assert handle.sent[3]["metadata"][MIME_TYPE]["base"] == handle.sent[2]["metadata"][MIME_TYPE]["seq"]

        view(event("tool_result", step=1, id="c1", ok=True, observation="slept", latency=2.0))
        view(event("run_finished", status="interrupted", error="interrupted: the kernel restarted", answer=""))
        last = handle.sent[-1]["data"][MIME_TYPE]
        assert "running_for" not in last["steps"][0]["actions"][0] and last["status"] == "interrupted"
        assert last["stop_reason"] == "interrupted: the kernel restarted" and last["live"] is False
        assert not view.running
        sent = len(handle.sent)
        time.sleep(1.3)
        assert len(handle.sent) == sent  # nothing runs: no more ticks
    finally:
        view.close()


def test_a_run_that_ends_stops_its_running_calls_and_replayed_calls_never_tick():
    view = LiveView(interval=0, display=False)
    view(event("run_started", agent="a", task="t", model="tea/test"))
    view(event("tool_call", step=1, id="c1", name="stored", arguments={}, replayed=True))
    assert not view.running
    view(event("tool_call", step=1, id="c2", name="slow", arguments={}))
    assert set(view.running) == {"c2"}
    view(event("run_finished", status="interrupted", error="stopped by the user", answer=""))
    assert not view.running
    assert view.runs["r1"].stop_reason == "stopped by the user"


def test_running_words_and_tick_cadence():
    assert running_text("very_slow", 3.4) == "very_slow running 3 s…"
    assert tick_interval(0.5) == 1.0 and tick_interval(9.9) == 1.0 and tick_interval(30) == 5.0


def test_a_stored_interrupted_run_says_why_it_stopped():
    from tea_notebook.runtime.render import payload
    from tea_notebook.runtime.trajectory import Trajectory

    def stored(status: str, error: str | None) -> dict[str, Any]:
        ended = event("run_finished", status=status, error=error, answer="", steps=0)
        started = event("run_started", agent="a", task="t", model="tea/test")
        return payload(Trajectory("r1", "a", "t", "tea/test", status, "", [], [], [started, ended]))  # type: ignore[arg-type]

    assert (
        stored("interrupted", "interrupted: the kernel restarted")["stop_reason"] == "interrupted: the kernel restarted"
    )
    assert "stop_reason" not in stored("success", None)
    assert "stop_reason" not in stored("interrupted", None)
