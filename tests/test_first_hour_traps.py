"""Traps a new user fell into in the first hour (issue 20): each reproduced, then kept from coming back.

Models are scripted (no LLM, no network); workspaces, runs and events are real.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import warnings

import pytest

from tea_notebook._sync import run_sync
from tea_notebook.agents.analyzer import DeepAnalyzer
from tea_notebook.agents.coral import CoralTeam
from tea_notebook.agents.researcher import DeepResearcher
from tea_notebook.agents.toolself import ToolSelfAgent
from tea_notebook.agents.workflow import WorkflowAgent
from tea_notebook.errors import RunFailed, TeaError
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol import transformations as tx
from tea_notebook.runtime.agent import Agent, AgentCardUpdated
from tea_notebook.runtime.render import payload

pytestmark = pytest.mark.usefixtures("warm_litellm")  # litellm's first import is paid once, not inside a test.


@pytest.fixture
def adder(ws):
    @ws.tools.tool
    def add_numbers(a: int, b: int) -> int:
        """Add two integers and return the sum."""
        return a + b

    @ws.tools.tool
    def shout(text: str) -> str:
        """Repeat the text in capitals."""
        return text.upper()

    return ws


def broken() -> ScriptedModel:
    """A model whose every call fails (a scripted stand-in for a missing API key)."""
    return ScriptedModel([])


class Queue:
    """A scripted model answering from a list that the test can extend, recording the tools offered."""

    def __init__(self, *turns):
        self.turns, self.offered = list(turns), []
        self.model = ScriptedModel(self._answer)
        self.name = self.model.name

    def _answer(self, messages, tools):
        self.offered.append(sorted(t["function"]["name"] for t in tools))
        return self.turns.pop(0)


# -- 5: a run that ends in error never looks like success from Python ---------------------------------
@pytest.mark.parametrize("kind", [Agent, ToolSelfAgent, WorkflowAgent, DeepAnalyzer, DeepResearcher, CoralTeam])
def test_every_agent_kind_takes_raise_on_error(kind):
    """The contract lives in one place (Runnable) and reaches every kind's run, with its own signature kept."""
    params = inspect.signature(kind.run).parameters
    assert params["raise_on_error"].default is True and params["raise_on_error"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "task" in params and "context" in params


def test_run_sync_and_await_run_raise_run_failed_with_the_stored_result(adder):
    agent = adder.agent("helper", model=broken().name, tools=["add_numbers"])
    with pytest.raises(RunFailed, match="ended in error") as failed:
        agent.run_sync("add 2 and 3")
    result = failed.value.result
    assert isinstance(failed.value, TeaError) and result.status == "error" and not result.success
    assert result.run_id in str(failed.value) and "raise_on_error=False" in str(failed.value)
    assert adder.trajectory(result.run_id).status == "error"  # nothing lost: the run is stored

    async def awaited():
        return await agent.run("add 2 and 3")

    with pytest.raises(RunFailed):
        asyncio.run(awaited())
    kept = agent.run_sync("add 2 and 3", raise_on_error=False)
    assert kept.status == "error" and "has 0 turns" in kept.error


def test_the_planner_and_a_workflow_agent_raise_too(adder, tmp_path):
    adder.agent("worker", model=broken().name, tools=["add_numbers"])
    planner = adder.planner(["worker"], model=broken().name)
    with pytest.raises(RunFailed):
        planner.run_sync("plan something")
    report = tmp_path / "report.txt"
    report.write_text("The tea harvest was 12 tonnes.", encoding="utf-8")
    analyzer = adder.analyzer(model=broken().name)
    with pytest.raises(RunFailed, match="has 0 turns") as failed:
        analyzer.run_sync("what does the report say?", [str(report)])
    assert failed.value.result.agent == "deep_analyzer" and failed.value.result.status == "error"


def test_a_coral_team_that_ends_in_error_raises(adder):
    team = adder.coral(model=broken().name, budget_seconds=20)
    result = team.run_sync("coordinate", raise_on_error=False)
    assert result.status == "error", result
    with pytest.raises(RunFailed):
        team.run_sync("coordinate")


def test_other_endings_are_returned_and_show_their_status_first(adder):
    looping = ScriptedModel([call("add_numbers", a=1, b=1)] * 3)
    result = adder.agent("looper", model=looping.name, tools=["add_numbers"], max_steps=2).run_sync("loop")
    assert result.status == "max_steps"
    assert repr(result).startswith("RunResult(status='max_steps'")
    html = result._repr_mimebundle_()[0]["text/html"]
    assert "class='st' style='color:#b35900'>max_steps</span>" in html  # coloured, first in the header
    assert html.index("max_steps") < html.index("looper")


def test_a_sub_agent_error_still_reaches_the_planner_as_a_failed_delegation(adder):
    adder.agent("worker", model=broken().name, tools=["add_numbers"])
    script = ScriptedModel(
        [call("worker_agent", task="add 1 and 2"), call("done", success=False, text="the worker failed")]
    )
    result = adder.planner(["worker"], model=script.name).run_sync("delegate")
    assert result.status == "failed"  # the planner's own run did not end in error: returned, not raised
    observations = [a["observation"] for s in result.trajectory.steps for a in s.actions]
    assert any("sub-agent worker ended with status error" in o for o in observations), observations


def test_a_background_run_keeps_an_error_result_on_its_handle(adder):
    handle = adder.agent("bg", model=broken().name, tools=["add_numbers"]).start("add")
    result = handle.result(timeout=60)
    assert handle.status == "error" and result.status == "error" and handle.error


# -- 6: ws.agent(name) on an existing agent loads its card -------------------------------------------
def test_ws_agent_on_a_t2a_agent_keeps_its_tools_and_provenance(adder):
    made = tx.t2a(adder, ["add_numbers"], name="calculator", description="Adds numbers.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loading announces nothing
        agent = adder.agent("calculator")
    assert agent.tools == ["add_numbers"] and agent.description == "Adds numbers."
    card = adder.agents.get("calculator")
    assert card.version == made.version and card.tools == ["add_numbers"]
    assert card.origin == "tools" and card.metadata["transformation"]["op"] == "T2A"

    script = Queue(call("done", success=True, text="5"))
    assert agent.run_sync("add 2 and 3", model=script.name).success
    assert script.offered == [["add_numbers", "done"]]  # its own tool, not every registered one


def test_ws_agent_with_changed_options_stores_an_announced_new_version(adder):
    tx.t2a(adder, ["add_numbers"], name="calculator", description="Adds numbers.")
    with pytest.warns(AgentCardUpdated, match=r"'calculator': max_steps, model changed, stored as version 2"):
        agent = adder.agent("calculator", model="tea/demo", max_steps=7)
    card = adder.agents.get("calculator")
    assert (card.version, card.model, card.max_steps) == (2, "tea/demo", 7)
    assert card.tools == ["add_numbers"] and card.origin == "tools"  # provenance kept
    assert card.metadata["transformation"]["op"] == "T2A" and card.metadata["config"]["tools"] == ["add_numbers"]
    assert agent.tools == ["add_numbers"]
    assert [v.version for v in adder.agents.versions("calculator")] == [1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same options again: nothing changes, nothing announced
        adder.agent("calculator", model="tea/demo", max_steps=7)
    assert adder.agents.get("calculator").version == 2


def test_ws_agent_refuses_to_replace_an_agent_of_another_kind(adder):
    adder.toolself("ts", tools=["add_numbers"])
    with pytest.raises(TeaError, match="registered as a toolself, not a tool-calling agent"):
        adder.agent("ts")
    assert adder.agents.get("ts").metadata["kind"] == "toolself"


# -- 7: fork goes on with the run's model; Fork is offered only where it works ---------------------------
def test_fork_continues_with_the_runs_model_not_the_workspace_default(adder):
    first_model = Queue(
        call("add_numbers", a=1, b=2), call("add_numbers", a=3, b=4), call("done", success=True, text="7")
    )
    adder.agent("worker", tools=["add_numbers"])  # no model of its own: the workspace default applies
    adder.default_model = first_model.name
    first = adder.agent("worker").run_sync("add")
    assert first.success and first.model == first_model.name

    later_default = broken()  # the workspace moved on to another model since
    adder.default_model = later_default.name
    continuation = ScriptedModel([call("done", success=True, text="forked")])
    first_model.turns.append(call("done", success=True, text="forked on the run's model"))
    forked = run_sync(adder.fork(first.run_id, 2))
    assert forked.model == first_model.name and forked.answer == "forked on the run's model"
    assert later_default.calls == []
    started = adder.events.events(forked.run_id)[0].data
    assert started["max_steps"] == 20 and started["forked_from"] == first.run_id

    explicit = run_sync(adder.fork(first.run_id, 2, model=continuation.name))
    assert explicit.model == continuation.name and explicit.answer == "forked"


def test_fork_keeps_the_runs_step_limit(adder):
    script = Queue(*[call("add_numbers", a=1, b=1)] * 3)
    first = adder.agent("w", model=script.name, tools=["add_numbers"], max_steps=3).run_sync("add")
    assert first.status == "max_steps"
    with pytest.warns(AgentCardUpdated):
        adder.agent("w", max_steps=50)  # the card changes afterwards
    script.turns.extend([call("add_numbers", a=2, b=2)] * 5)
    forked = run_sync(adder.fork(first.run_id, 1))
    assert forked.status == "max_steps" and forked.steps == 3


def test_the_payload_marks_which_runs_fork_by_steps(adder):
    script = ScriptedModel([call("done", success=True, text="ok")])
    plain = adder.agent("plain", model=script.name, tools=[]).run_sync("t")
    assert payload(plain.trajectory)["forkable"] == "steps"
    analyzer = adder.analyzer(model=broken().name)
    failed = analyzer.run_sync("t", raise_on_error=False)  # no files: the analyzer's run fails at once
    assert failed.status == "failed" and payload(failed.trajectory)["forkable"] == ""
    with pytest.raises(TeaError, match="cannot be forked"):
        run_sync(adder.fork(failed.run_id, 1))


FIRST_HOSTED = """
import json, os, sys
os.environ.pop("OPENAI_API_KEY", None)
import tea_notebook
from tea_notebook.notebook.live import LiveView
ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")
assert "litellm" not in sys.modules
seen = []
view = LiveView(display=False)
def watch(event):
    view(event)
    if event.type == "notice":
        seen.append(view.html(tail=3))
ws.events.subscribe(watch)
result = ws.agent("hosted", model="openai/gpt-4o-mini", tools=[]).run_sync("hello", raise_on_error=False)
notices = [e.data for e in ws.events.events(result.run_id) if e.type == "notice"]
print(json.dumps({"status": result.status, "notices": notices, "html": seen}))
"""


def test_the_first_hosted_model_call_says_that_it_imports_litellm(tmp_path):
    """A hosted model's first cell pays for litellm's import once, and the run's view says so meanwhile."""
    import subprocess
    import sys as _sys

    out = subprocess.run(
        [_sys.executable, "-c", FIRST_HOSTED, str(tmp_path / "ws")], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["status"] == "error"  # no key: the call itself fails, after the import
    first, done = report["notices"]
    assert first["message"].startswith("importing litellm") and done["seconds"] > 0
    assert "importing litellm" in report["html"][0]  # the live view showed it while it lasted
