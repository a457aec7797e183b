"""ECP's session manager: one session per run, released at its end, grants kept per run, clear errors."""

from __future__ import annotations

import pytest

from tea_notebook.envs.base import Environment, action
from tea_notebook.errors import NotFoundError
from tea_notebook.models.offline import ScriptedModel, call


class Counter(Environment):
    """A counter with lifecycle bookkeeping, to watch sessions start and stop."""

    name = "counter"
    description = "Counts."
    rules = "Call bump."
    started: list[str] = []
    stopped: list[str] = []

    def __init__(self, folder, context=None, *, step: int = 1):
        super().__init__(folder, context)
        self.step = step
        self.value = 0

    async def start(self) -> None:
        Counter.started.append(self.folder.name)

    async def stop(self) -> None:
        Counter.stopped.append(self.folder.name)

    def state(self) -> str:
        return f"value={self.value}"

    @action
    def bump(self) -> int:
        """Add the step to the counter."""
        self.value += self.step
        return self.value

    @action
    def granted(self) -> bool:
        """Whether the caller's run was granted counter.write."""
        return self.context is not None and "counter.write" in self.context.grants


def _observations(ws, run_id):
    return [str(a.get("observation")) for step in ws.trajectory(run_id).steps for a in step.actions]


@pytest.fixture(autouse=True)
def _fresh_counts():
    Counter.started.clear()
    Counter.stopped.clear()


def test_unknown_option_is_refused_before_anything_is_registered(ws):
    with pytest.raises(TypeError, match="Counter.*colour"):
        ws.envs.add(Counter, colour="red")
    assert "counter" not in ws.envs


def test_unknown_environment_name_is_a_clear_error(ws):
    with pytest.raises(NotFoundError, match="nope"):
        ws.envs.ensure("nope")


def test_interactive_session_is_shared_until_released(ws):
    ws.envs.add(Counter, step=2)
    assert ws.envs.state("counter").endswith("not started (a session starts at the first action)")
    assert ws.envs.invoke("counter", "bump").value == 2
    assert ws.envs.invoke("counter", "bump").value == 4
    assert ws.envs.state("counter") == "value=4"
    assert Counter.started == ["interactive"]
    assert ws.envs.release() == ["counter@interactive"]
    assert Counter.stopped == ["interactive"] and ws.envs.sessions() == []
    assert ws.envs.invoke("counter", "bump").value == 2  # a fresh session


def test_each_run_gets_its_own_session_released_at_its_end(ws):
    ws.envs.add(Counter)
    script = ScriptedModel(
        [call("counter_bump"), call("counter_bump"), call("done", success=True, text="2")]
        + [call("counter_bump"), call("done", success=True, text="1")]
    )
    agent = ws.agent("c", model=script.name, envs=["counter"])
    first = agent.run_sync("count twice")
    second = agent.run_sync("count once")
    assert Counter.started == [first.run_id, second.run_id]
    assert Counter.stopped == [first.run_id, second.run_id]
    assert _observations(ws, first.run_id) == ["1", "2", "finished"]
    assert _observations(ws, second.run_id) == ["1", "finished"]
    assert ws.envs.sessions() == []


def test_a_plain_context_lends_its_stop_signal_but_not_its_grants_or_sessions(ws):
    ws.envs.add(Counter)
    ctx = ws.context()
    script = ScriptedModel(
        [call("counter_granted"), call("done", success=True, text="a")]
        + [call("counter_granted"), call("done", success=True, text="b")]
    )
    agent = ws.agent("g", model=script.name, envs=["counter"])
    granted = agent.run_sync("check", context=ctx, grants=["counter.write"])
    plain = agent.run_sync("check", context=ctx)
    assert ctx.grants == set()
    assert _observations(ws, granted.run_id)[0] == "true"
    assert _observations(ws, plain.run_id)[0] == "false"
    assert Counter.started == [granted.run_id, plain.run_id] == Counter.stopped


def test_interactive_calls_see_their_own_context(ws):
    ws.envs.add(Counter)
    assert ws.envs.invoke("counter", "granted").value is False
    granted = ws.context()
    granted.grants.add("counter.write")
    assert ws.envs.invoke("counter", "granted", context=granted).value is True
    assert ws.envs.invoke("counter", "granted").value is False


def test_reset_and_workspace_close_stop_sessions(ws):
    ws.envs.add(Counter)
    ws.envs.invoke("counter", "bump")
    assert ws.envs.reset("counter") == "counter was reset"
    assert Counter.stopped == ["interactive"] and Counter.started == ["interactive", "interactive"]
    ws.close()
    assert Counter.stopped == ["interactive", "interactive"]
