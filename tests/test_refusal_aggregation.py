"""Egress refusals are bounded per step (issue 31, F11): a sandbox step making thousands of refused
requests stores a handful of events whose counts add up to exactly the requests made, and its views
stay small."""

from __future__ import annotations

import json
import threading

from tea_notebook.envs.sandbox import PythonSandbox
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.notebook.live import LiveView
from tea_notebook.runtime.refusals import FULL_PER_STEP, GROUPS_PER_STEP, RefusalTally, refusal_line
from tea_notebook.runtime.render import payload, trajectory_html

REQUESTS = 3000
HOSTS = 30  # more than GROUPS_PER_STEP: the step's further hosts are counted by rule alone

# sandboxed code: REQUESTS plain-HTTP requests through the egress proxy to private addresses, each refused
FLOOD = f"""
import base64, http.client, os
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["HTTP_PROXY"])
headers = {{}}
if proxy.username:  # the fallback's loopback proxy asks for its session's secret
    pair = f"{{proxy.username}}:{{proxy.password}}".encode()
    headers["Proxy-Authorization"] = "Basic " + base64.b64encode(pair).decode()
answers = {{}}
for i in range({REQUESTS}):
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=10)
    conn.request("GET", f"http://10.0.0.{{i % {HOSTS} + 1}}/item/{{i}}", headers=headers)
    status = conn.getresponse().status
    answers[status] = answers.get(status, 0) + 1
    conn.close()
answers
"""


def _refusals(ws, run_id):
    return [e for e in ws.events.events(run_id) if e.type == "egress_refused"]


def test_a_sandbox_step_of_thousands_of_refused_requests_is_stored_bounded_and_counted_exactly(ws):
    ws.envs.add(PythonSandbox, name="python", network=True, timeout=120)
    script = ScriptedModel(
        [
            call("python_run_python", code=FLOOD),
            call("python_run_python", code="1 + 1"),
            call("done", success=True, text="ok"),
        ]
    )
    result = ws.agent("flood", model=script.name, envs=["python"]).run_sync("make requests")
    assert result.status == "success", result.trajectory.steps
    first = result.trajectory.steps[0].actions[0]["observation"]
    assert f"{{403: {REQUESTS}}}" in first, first  # every request was answered: refused by the proxy

    events = _refusals(ws, result.run_id)
    assert sum(e.data.get("count", 1) for e in events) == REQUESTS  # the count is exact
    # bounded: the first few in full, then one event per (rule, host) group, the hosts past the cap as one
    assert len(events) <= FULL_PER_STEP + GROUPS_PER_STEP + 1, len(events)
    assert {e.step for e in events} == {1}
    full = [e for e in events if "count" not in e.data]
    assert len(full) == FULL_PER_STEP
    assert all(e.data["rule"] == "private" and e.data["url"].startswith("http://10.0.0.") for e in events)
    assert any(e.data["host"] == "*" for e in events)  # hosts past the cap, counted together
    # the counted ones come before the step's tool_result: the view of the step is complete
    kinds = [e.type for e in ws.events.events(result.run_id) if e.step == 1]
    last_refusal = max(i for i, k in enumerate(kinds) if k == "egress_refused")
    assert kinds.index("tool_result") > last_refusal

    stored = sum(len(json.dumps(e.data)) for e in events)
    assert stored < 20_000, stored
    # the views: the trajectory's errors are one line per event, and the whole rendered payload is small
    errors = result.trajectory.steps[0].errors
    assert len(errors) == len(events)
    counted = [line for line in errors if "times (rule 'private')" in line or "further hosts" in line]
    assert len(counted) == len(events) - FULL_PER_STEP
    assert any(line.startswith("Network request refused ") and "times to further hosts" in line for line in counted)
    shown = json.dumps(payload(result.trajectory))
    assert len(shown) < 60_000, len(shown)
    assert len(trajectory_html(result.trajectory)) < 200_000
    # the live view, fed the run's stored events, says the same lines and stays as small
    live = LiveView(interval=3600, display=False, kernel="0b7e5f6a-1234-4abc-9def-0123456789ab")
    for e in ws.events.events(result.run_id):
        live._apply(e)
    assert live.runs[result.run_id].steps[1].errors == errors
    data, _ = live.bundle()._repr_mimebundle_()
    assert len(json.dumps(data, default=str)) < 300_000


def test_the_tally_is_exact_under_concurrent_reports_and_flushes_per_step():
    emitted: list[tuple[dict, int]] = []
    lock = threading.Lock()

    def emit(data, step):
        with lock:
            emitted.append((data, step))

    tally = RefusalTally(emit)
    per_thread = 2000

    def report(thread: int) -> None:
        for i in range(per_thread):
            tally.add({"url": f"http://h{i % 50}/", "host": f"h{i % 50}", "port": 80, "rule": "deny:h*"}, 1)
            if i % 500 == 0:
                tally.flush()

    threads = [threading.Thread(target=report, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally.add({"url": "http://later/", "host": "later", "port": 80, "rule": "loopback"}, 2)  # a new step
    tally.flush()
    assert sum(d.get("count", 1) for d, _ in emitted) == 4 * per_thread + 1
    assert sum(1 for d, _ in emitted if "count" not in d) == FULL_PER_STEP + 1  # step 1's first few, step 2's one
    assert emitted[-1] == ({"url": "http://later/", "host": "later", "port": 80, "rule": "loopback"}, 2)
    assert not tally.pending
    # each flush emits at most one event per group (GROUPS_PER_STEP hosts and the rest)
    assert len(emitted) <= FULL_PER_STEP + 1 + (4 * 5 + 1) * (GROUPS_PER_STEP + 1)


def test_a_refusal_line_says_how_many_refusals_it_stands_for():
    one = {"url": "http://10.0.0.1/", "host": "10.0.0.1", "port": 80, "rule": "private", "reason": "r1"}
    assert refusal_line(one) == "Network request refused: r1"
    assert refusal_line({**one, "count": 7}) == "Network request refused 7 times (rule 'private'), e.g. r1"
    many = {**one, "host": "*", "count": 900}
    assert refusal_line(many) == "Network request refused 900 times to further hosts (rule 'private'), e.g. r1"
