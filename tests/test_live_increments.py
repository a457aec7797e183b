"""The live view sends only what changed (issue 23): after one whole payload, each update carries
the steps events touched, the run headers and a short HTML; the bytes sent grow with the run, not
with the run times the updates; merging the updates (the extension's live.ts, run here in node)
gives back the whole trajectory; the view's last update without a replacement is whole again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from event_factory import event

from tea_notebook.notebook.live import LiveView
from tea_notebook.notebook.live_bundle import live_payload
from tea_notebook.runtime.events import Event
from tea_notebook.runtime.render import MIME_TYPE

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "extension"


class Handle:
    """Stands in for IPython's DisplayHandle: keeps each update as the JSON that would be sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def update(self, obj: Any) -> None:
        data, metadata = obj._repr_mimebundle_()
        self.sent.append(json.loads(json.dumps({"data": data, "metadata": metadata}, default=str)))


def live_view(budget: bool = False) -> tuple[LiveView, Handle]:
    """A view whose updates are kept; ``budget``: with its byte budget (otherwise every refresh sends)."""
    view = LiveView(interval=3600, display=False, kernel="0b7e5f6a-1234-4abc-9def-0123456789ab")
    view._handle = handle = Handle()
    if not budget:
        view.budget = None
    return view, handle


def run_events(steps: int, child_at: int | None = None) -> list[Event]:
    """A run of ``steps`` steps (a long task), each a model call, a tool call and its result; with
    ``child_at``, a sub-agent that runs beside it from that step on, and a conversation message."""
    out = [event("run_started", agent="planner", task="Plan it. " * 2000, model="tea/test")]
    for n in range(1, steps + 1):
        out += [
            event("model_response", step=n, prompt_tokens=100, completion_tokens=5, cost=0.001, latency=0.01),
            event("tool_call", step=n, id=f"c{n}", name="lookup", arguments={"key": f"k{n}"}),
            event("tool_result", step=n, id=f"c{n}", ok=True, observation=f"value {n}: " + "lorem " * 20, latency=0.02),
            event("step", step=n, thinking=f"step {n}", next_goal="more"),
        ]
        if child_at is not None and n == child_at:
            out.append(event("run_started", run_id="r2", parent="r1", agent="helper", task="Help.", model="tea/test"))
        if child_at is not None and n > child_at:
            out += [
                event("tool_call", run_id="r2", step=n - child_at, id=f"h{n}", name="lookup", arguments={}),
                event("tool_result", run_id="r2", step=n - child_at, id=f"h{n}", ok=True, observation="helped"),
            ]
        if child_at is not None and n == child_at + 2:
            out.append(event("message", seq=1, thread="main", sender="helper", mentions=["planner"], content="hi"))
    return out


def play(view: LiveView, events: list[Event], every: int) -> None:
    """Feed the events, refreshing after every ``every`` of them (the throttle, deterministic)."""
    for i, e in enumerate(events, 1):
        view(e)
        if i % every == 0:
            view.refresh()


def sent_bytes(handle: Handle) -> int:
    return sum(len(json.dumps(u)) for u in handle.sent)


def test_after_one_whole_payload_each_update_carries_what_changed():
    view, handle = live_view()
    play(view, run_events(40, child_at=10), every=7)
    view(event("run_finished", status="success"))
    view.refresh()
    first, *rest = handle.sent
    meta = first["metadata"][MIME_TYPE]
    assert first["data"][MIME_TYPE].get("partial") is None and "base" not in meta and meta["seq"] == 1
    assert first["data"][MIME_TYPE]["task"].startswith("Plan it.")
    for before, update in zip(handle.sent, rest):
        payload, meta = update["data"][MIME_TYPE], update["metadata"][MIME_TYPE]
        assert payload["partial"] is True and "task" not in payload  # the long task went once
        assert meta["base"] == before["metadata"][MIME_TYPE]["seq"] and meta["seq"] == meta["base"] + 1
        assert len(payload["steps"]) <= 3  # 7 events touch at most 3 steps
        assert len(meta["latency"]["steps"]) == len(payload["steps"])  # timings shaped like the payload
        assert update["data"]["text/html"].count("<b>step ") <= 3  # the short HTML: the latest steps
    last = rest[-1]["data"][MIME_TYPE]
    assert last["status"] == "success" and last["live"] is False
    # the view's last word without a replacement is the whole run, HTML and all
    view.close()
    final = handle.sent[-1]
    assert final["data"][MIME_TYPE] == json.loads(json.dumps(live_payload(view)))
    assert final["data"]["text/html"].count("<b>step ") == 40 + 30  # every step of both runs


def test_bytes_sent_grow_with_the_run_not_with_its_square():
    sizes = {}
    for steps in (250, 1000):
        view, handle = live_view()
        play(view, run_events(steps), every=12)  # an update every 3 steps: ~330 updates for 1,000
        view(event("run_finished", status="success"))
        view.refresh()
        sizes[steps] = sent_bytes(handle)
        whole = len(json.dumps(live_payload(view)))
    assert sizes[1000] / sizes[250] < 4.6, sizes  # linear (a quadratic one would be ~16×)
    assert sizes[1000] < 3 * whole + 1_000_000, (sizes, whole)  # ~ the run once, plus a short HTML each update


def test_a_slow_run_sends_what_its_steps_allow_not_an_update_a_tick():
    """A slow model's run refreshes many times a step (ticks, each event apart): past the budget the
    updates are held and go out together, so the bytes follow the steps (issue 32); nothing is lost."""
    fast, fast_handle = live_view(budget=True)
    slow, slow_handle = live_view(budget=True)
    events = run_events(200)
    play(fast, events, every=40)  # ten steps an update
    for e in events:  # an update for every event, and two ticks between events
        slow(e)
        for _ in range(3):
            slow._dirty = True
            slow.refresh()
    for view in (fast, slow):
        view(event("run_finished", status="success"))
        view.refresh(force=True)
    assert len(slow_handle.sent) > len(fast_handle.sent)
    base, per_step = slow.budget or (0, 0)
    assert slow.overhead <= base + per_step * 200 + max(len(json.dumps(u)) for u in slow_handle.sent)
    assert sent_bytes(slow_handle) < 2 * sent_bytes(fast_handle)
    shown = {s["number"] for u in slow_handle.sent for s in u["data"][MIME_TYPE].get("steps", [])}
    assert shown == set(range(1, 201))  # every step went out, in some update
    assert slow_handle.sent[-1]["data"][MIME_TYPE]["status"] == "success"


def test_an_update_with_no_new_events_carries_the_header_only():
    view, handle = live_view()
    play(view, run_events(3), every=1)
    view.mark_stopping()  # nothing in the run changed: an update with the header only
    update = handle.sent[-1]
    assert update["data"][MIME_TYPE]["steps"] == [] and "stopping…" in update["data"]["text/html"]


def _node_merge(updates: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply the updates with the extension's LiveState (compiled by tsc) and return the whole payload."""
    script = (
        "const {LiveState, wholePayload} = require(process.argv[1]);"
        "const updates = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "const live = new LiveState(); let r;"
        "for (const u of updates) { r = live.apply(u.data, u.metadata); if (!r.ok) throw new Error(r.error); }"
        "const w = wholePayload(r.traj);"
        "process.stdout.write(JSON.stringify({data: w.data, latency: w.latency, incomplete: !!r.traj.incomplete}));"
    )
    done = subprocess.run(
        ["node", "-e", script, str(EXT / "test-lib" / "live.js")],
        input=json.dumps(updates),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def compiled() -> None:
    tsc = EXT / "node_modules" / ".bin" / "tsc"
    if not tsc.exists() or shutil.which("node") is None:
        if os.environ.get("TEA_REQUIRE_BROWSER"):
            pytest.fail("the extension's node_modules are missing")
        pytest.skip("the extension's node_modules are not installed (it needs Node)")
    done = subprocess.run([str(tsc), "-p", "tsconfig.test.json"], cwd=EXT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:]


def test_merging_the_updates_in_the_extension_gives_the_whole_trajectory(compiled):
    view, handle = live_view()
    play(view, run_events(60, child_at=20), every=5)
    view(event("run_finished", run_id="r2", status="success"))
    view(event("run_finished", status="success"))
    view.refresh()
    merged = _node_merge([{"data": u["data"][MIME_TYPE], "metadata": u["metadata"][MIME_TYPE]} for u in handle.sent])
    whole = json.loads(json.dumps(live_payload(view)))
    from tea_notebook.notebook.live_bundle import _latency

    assert not merged["incomplete"]

    def parsed(run: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
        """``like`` (the merged run) with the fields of ``run`` (the whole one) only, and ``run`` with
        the step fields the extension's parser keeps."""
        keys = set(like["steps"][0]) if like["steps"] else set()
        kids = [parsed(c, m) for c, m in zip(run["children"], like["children"])]
        run = {**run, "steps": [{k: v for k, v in s.items() if k in keys} for s in run["steps"]], "children": kids}
        return run

    def fields(like: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
        kids = [fields(m, c) for m, c in zip(like["children"], run["children"])]
        return {**{k: v for k, v in like.items() if k in run}, "children": kids}

    whole = parsed(whole, merged["data"])
    merged["data"] = fields(merged["data"], whole)
    for key in ("steps", "children", "messages", "status", "task", "prompt_tokens", "cost", "live"):
        assert merged["data"][key] == whole[key], key
    assert merged["latency"] == json.loads(json.dumps(_latency(view, view.root)))
