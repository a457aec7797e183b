"""No action twice (issue 28): a call cut short by Stop is waited for and its late result recorded on
the stopped step; a resume never runs again a call that returned or may still run; a call whose kernel
died mid-call runs again only when its tool is idempotent; a run is resumed once. The tools count
their side effects in a file; the models are scripted."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
from conftest import tea  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.protocol.tools import make_tool  # noqa: E402
from tea_notebook.runtime.forking import ForkError  # noqa: E402


def orders(log) -> list[str]:
    return log.read_text().split() if log.exists() else []


def run_count(ws) -> int:
    return len(ws.db.runs(10_000, parent_id=None))


def results(ws, run_id: str) -> list[dict]:
    return [e.data for e in ws.events.events(run_id, nested=False) if e.type == "tool_result"]


def order_then_done():
    return ScriptedModel([call("place_order", tea="green"), call("done", success=True, text="ordered")])


def test_a_stopped_async_call_is_placed_once_and_the_run_is_resumed_once(ws, tmp_path):
    log, ctx = tmp_path / "orders.log", ws.context()

    @ws.tools.tool
    async def place_order(tea: str) -> str:
        """Order a tea (it takes a while)."""
        ctx.cancel.set()  # Stop is pressed while the order is on its way
        await asyncio.sleep(1.0)
        with open(log, "a") as f:
            f.write(tea + "\n")
        return f"ordered {tea}"

    stopped = ws.agent("buyer", model=order_then_done().name, tools=["place_order"]).run_sync("order", context=ctx)
    assert stopped.status == "interrupted" and orders(log) == []  # the async call was cancelled
    assert [r.get("stop_state") for r in results(ws, stopped.run_id)] == ["stopped"]
    resumed = run_sync(ws.resume(stopped.run_id))
    assert resumed.success and orders(log) == ["green"]
    time.sleep(0.3)
    assert orders(log) == ["green"]  # nothing lands later
    runs = run_count(ws)
    with pytest.raises(ForkError, match=f"already resumed by run {resumed.run_id}"):
        run_sync(ws.resume(stopped.run_id))
    assert run_count(ws) == runs and orders(log) == ["green"]


def test_a_stopped_sync_call_is_waited_for_and_its_late_result_recorded_on_the_stopped_step(ws, tmp_path, ip):
    log, ctx = tmp_path / "orders.log", ws.context()

    @ws.tools.tool
    def place_order(tea: str) -> str:
        """Order a tea (it takes a while, and does not look at its cancel flag)."""
        ctx.cancel.set()
        time.sleep(2.0)
        with open(log, "a") as f:
            f.write(tea + "\n")
        return f"ordered {tea}"

    stopped = ws.agent("buyer", model=order_then_done().name, tools=["place_order"]).run_sync("order", context=ctx)
    assert stopped.status == "interrupted" and orders(log) == []  # returned after the stop grace, still running
    assert [r.get("stop_state") for r in results(ws, stopped.run_id)] == ["running"]
    runs = run_count(ws)
    for bad in (-1, "soon", float("nan")):
        with pytest.raises(ForkError, match="wait is the seconds"):
            run_sync(ws.resume(stopped.run_id, wait=bad))
    with pytest.raises(ForkError, match=r"place_order\) of step 1 of run .* is still running in this kernel"):
        run_sync(ws.resume(stopped.run_id, wait=0.05))  # too short a wait: refused, nothing written
    assert run_count(ws) == runs
    resumed = run_sync(ws.resume(stopped.run_id))  # waits for the call and takes what it returned
    assert resumed.success and orders(log) == ["green"]
    late = results(ws, stopped.run_id)[-1]
    assert late["returned"] == "ordered green" and 0.5 < late["late"] < 5
    assert f"it returned {late['late']:.1f} s after the stop: ordered green" in late["observation"]
    assert [a["observation"] for a in resumed.trajectory.steps[0].actions] == ["ordered green"]
    # %tea resume on the same run is refused too, naming its resumption
    magics = ip.magics_manager.registry["TeaMagics"]
    magics._workspace = ws
    try:
        with pytest.raises(Exception, match=f"already resumed by run {resumed.run_id}"):
            tea(ip, f"resume {stopped.run_id} --quiet --rerun-unknown")
    finally:
        magics._workspace = None
    assert orders(log) == ["green"] and run_count(ws) == runs + 1


def test_the_idempotent_flag_is_kept_on_the_record_and_shown(ws, ip):
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    assert make_tool(lookup, idempotent=True).record.idempotent
    assert not make_tool(lookup).record.idempotent
    ws.tools.register(make_tool(lookup, idempotent=True))
    assert "idempotent: yes" in ws.tools.describe("lookup")
    magics = ip.magics_manager.registry["TeaMagics"]
    magics._workspace = ws
    try:
        ip.run_cell_magic(
            "tool", "--idempotent", 'def fetch_rate(code: str) -> str:\n    """A rate."""\n    return code\n'
        )
        ip.run_cell_magic("tool", "", 'def charge_card(cents: int) -> str:\n    """Charge."""\n    return "ok"\n')
    finally:
        magics._workspace = None
    assert ws.tools.current("fetch_rate").idempotent and not ws.tools.current("charge_card").idempotent


KILLED = """
import asyncio, time
import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
ws = tea_notebook.Workspace({folder!r}, embedder="hashing")

def note(text):
    with open({log!r}, "a") as f:
        f.write(text + "\\n")

@ws.tools.tool(idempotent=True)
def lookup(n: int) -> str:
    \"\"\"Look something up (harmless to repeat).\"\"\"
    note(f"lookup{{n}}")
    time.sleep(60)  # the kernel is killed here
    return f"found {{n}}"

@ws.tools.tool
def charge(n: int) -> str:
    \"\"\"Charge a card (must not happen twice).\"\"\"
    note(f"charge{{n}}")
    time.sleep(60)  # the kernel is killed here
    return f"charged {{n}}"

a = ScriptedModel([call("lookup", n=1), call("done", success=True, text="x")])
b = ScriptedModel([call("charge", n=1), call("done", success=True, text="x")])
await asyncio.gather(
    ws.agent("reader", model=a.name, tools=["lookup"]).run("look"),
    ws.agent("payer", model=b.name, tools=["charge"]).run("pay"),
)
"""


def test_a_call_cut_by_kill_9_runs_again_only_when_its_tool_is_idempotent(tmp_path):
    from kernel_driver import make_kernel_specs, start_kernel

    folder, log = tmp_path / "ws", tmp_path / "calls.log"
    (tmp_path / "specs").mkdir()
    kernel = start_kernel(make_kernel_specs(tmp_path / "specs"), tmp_path)
    try:
        kernel.send(KILLED.format(folder=str(folder), log=str(log)))
        deadline = time.time() + 90
        while time.time() < deadline and len(orders(log)) < 2:
            time.sleep(0.05)
        assert sorted(orders(log)) == ["charge1", "lookup1"], "the runs never reached their calls"
        os.kill(kernel.km.provisioner.process.pid, signal.SIGKILL)
        kernel.km.provisioner.process.wait(timeout=30)
    finally:
        kernel.kc.stop_channels()
        kernel.km.cleanup_resources()
    ws = tea_notebook.Workspace(folder, embedder="hashing")  # opening marks the dead runs interrupted
    try:
        runs = {r["agent"]: r for r in ws.runs(10)}
        assert {r["status"] for r in runs.values()} == {"interrupted"}

        def note(text: str) -> None:
            with open(log, "a") as f:
                f.write(text + "\n")

        @ws.tools.tool(idempotent=True)
        def lookup(n: int) -> str:
            """Look something up (harmless to repeat)."""
            note(f"lookup{n}")
            return f"found {n}"

        @ws.tools.tool
        def charge(n: int) -> str:
            """Charge a card (must not happen twice)."""
            note(f"charge{n}")
            return f"charged {n}"

        for run in runs.values():  # the runs' recorded models are scripts of the dead process
            ScriptedModel._registry[run["model"].split(":", 1)[1]] = ScriptedModel(
                [call("done", success=True, text="resumed")]
            )
        before = (sorted(orders(log)), run_count(ws))
        payer = runs["payer"]["id"]
        with pytest.raises(ForkError, match=r"call \S+ \(charge\) of step 1 of run .*rerun_unknown=True"):
            run_sync(ws.resume(payer))
        assert (sorted(orders(log)), run_count(ws)) == before  # refused: nothing written, nothing run
        reader = run_sync(ws.resume(runs["reader"]["id"]))
        assert reader.success and orders(log).count("lookup1") == 2  # idempotent: run again
        assert "run again, their outcome unknown: lookup" in reader.trajectory.steps[0].note
        paid = run_sync(ws.resume(payer, rerun_unknown=True))  # the person checked and asks for it
        assert paid.success and orders(log).count("charge1") == 2
    finally:
        ws.close()
