"""``%%tool --process`` (issue 28): a person's tool run in a child process of the run, so Stop ends it
— a stopped call's side effect never lands and its step records that it was stopped — while its
results and errors come back as they do in the kernel. A cell the child cannot run (it reads kernel
variables, takes a ToolContext) is refused and nothing is registered. Real child processes; the
models are scripted."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402

from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402


@pytest.fixture
def cells(ws, ip):
    """``%%tool`` cells for ``ws``: ``cells(line, cell)``."""
    magics = ip.magics_manager.registry["TeaMagics"]
    magics._workspace = ws
    yield lambda line, cell: ip.run_cell_magic("tool", line, cell)
    magics._workspace = None
    ws.envs.release()


def slow_order(log) -> str:
    return f'''
import time


def place_order(tea: str) -> str:
    """Order a tea (it takes a while)."""
    time.sleep(2.5)
    with open({str(log)!r}, "a") as f:
        f.write(tea + "\\n")
    return "ordered " + tea
'''


def results(ws, run_id: str) -> list[dict]:
    return [e.data for e in ws.events.events(run_id, nested=False) if e.type == "tool_result"]


@pytest.mark.filterwarnings("error::tea_notebook.envs.boundary.SandboxWarning")  # no fallback to warn about
def test_a_stopped_process_tool_is_killed_and_its_write_never_lands(ws, cells, tmp_path):
    log = tmp_path / "orders.log"
    cells("--process", slow_order(log))
    assert ws.tools.current("place_order").metadata.get("process") is True
    ctx = ws.context()
    script = ScriptedModel([call("place_order", tea="green"), call("done", success=True, text="ordered")])
    timer = threading.Timer(1.2, ctx.cancel.set)  # Stop, while the call sleeps in its process
    timer.start()
    started = time.monotonic()
    stopped = ws.agent("buyer", model=script.name, tools=["place_order"]).run_sync("order", context=ctx)
    timer.cancel()
    assert stopped.status == "interrupted"
    assert time.monotonic() - started < 2.5  # the stop did not wait for the call
    (result,) = results(ws, stopped.run_id)
    assert result["stop_state"] == "stopped" and result["error_type"] == "Interrupted"
    assert "it was stopped" in result["observation"]
    time.sleep(2.5)  # past the moment the call would have written
    assert not log.exists()


def test_results_and_errors_come_back_as_in_the_kernel(ws, cells):
    body = '''
def {name}(n: int) -> dict:
    """Half of n (not of a negative number)."""
    if n < 0:
        raise ValueError(f"{{n}} is negative")
    return {{"half": n / 2, "items": [n, "x"]}}
'''
    cells("", body.format(name="half_here"))
    cells("--process", body.format(name="half_away"))
    assert not ws.tools.current("half_here").metadata.get("process")
    for args in ({"n": 7}, {"n": -1}, {"n": "seven"}):
        here, away = ws.tools.invoke("half_here", args), ws.tools.invoke("half_away", args)
        assert (away.ok, away.value, away.error) == (here.ok, here.value, here.error), args
        assert away.to_observation() == here.to_observation()
    assert ws.tools.invoke("half_away", {"n": 7}).value == {"half": 3.5, "items": [7, "x"]}
    assert ws.tools.invoke("half_away", {"n": -1}).error == {"type": "ValueError", "message": "-1 is negative"}

    # in an agent's run: the same observations step by step
    def run(name: str) -> tuple[str, list[str]]:
        script = ScriptedModel([call(name, n=4), call(name, n=-2), call("done", success=True, text="ok")])
        result = ws.agent(f"halver_{name}", model=script.name, tools=[name]).run_sync("halve")
        return result.status, [r["observation"] for r in results(ws, result.run_id)]

    assert run("half_away") == run("half_here")


def test_a_cell_its_process_cannot_run_is_refused_and_nothing_is_registered(ws, cells, ip):
    ip.user_ns["RATE"] = 3
    with pytest.raises(UsageError, match=r"--process: scaled uses RATE from the notebook"):
        cells("--process", 'def scaled(n: int) -> int:\n    """n times the rate."""\n    return n * RATE\n')
    with pytest.raises(UsageError, match=r"--process: noted takes a ToolContext \(ctx\)"):
        cells(
            "--process",
            "from tea_notebook import ToolContext\n\n\n"
            'def noted(text: str, ctx: ToolContext) -> str:\n    """Note a text."""\n    return text\n',
        )
    with pytest.raises(UsageError, match="unrecognized arguments: --isolated"):
        cells("--process --isolated", 'def fine(n: int) -> int:\n    """n."""\n    return n\n')
    assert ws.tools.current("scaled") is None and ws.tools.current("noted") is None
    assert ws.tools.current("fine") is None
