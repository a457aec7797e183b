"""The transformations that involve a toolkit or an environment, driven by agents (not only invoked
directly): the tools guide's E2T / E2A example (``notes_open`` then ``notes_read``, a precondition),
T2E and A2T, each run by an agent that sees and uses the transformed tools; and a run in which no
action succeeded and some failed, which does not end ``success`` whatever the model claims."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from loopback_http import QuietHandler, serve, stop

from tea_notebook import ActionSpec, EnvironmentRecord
from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol import transformations as tx
from tea_notebook.protocol.context import ToolContext

TASK = "What does line 1 of the intro page say?"
LINE_1 = "Every run writes events."


class Notes:
    """Text pages to open and read (the tools guide's environment), counting what it was asked."""

    pages = {"intro": ["TEA stands for Tool, Environment, Agent.", LINE_1]}

    def __init__(self) -> None:
        self.calls: list[str] = []

    def open(self, page: str) -> str:
        self.calls.append(f"open {page}")
        self.page = self.pages[page]
        return f"opened {page}: {len(self.page)} lines"

    def read(self, line: int) -> str:
        self.calls.append(f"read {line}")
        return self.page[line]


@pytest.fixture
def notes(ws) -> Notes:
    """The guide's ``notes`` environment: ``read`` has the precondition ``open``."""
    runtime = Notes()
    ws.envs.register(
        EnvironmentRecord(
            name="notes",
            description="Text pages to open and read.",
            rules="Open a page before reading.",
            actions=[
                ActionSpec(
                    name="open",
                    description="Open a page.",
                    parameters={"type": "object", "properties": {"page": {"type": "string"}}},
                ),
                ActionSpec(
                    name="read",
                    description="Read a line.",
                    preconditions=["open"],
                    parameters={"type": "object", "properties": {"line": {"type": "integer"}}},
                ),
            ],
        ),
        runtime=runtime,
    )
    return runtime


class Reader:
    """A scripted model that opens the intro page, reads line 1 and answers with what it read,
    using the tools named ``prefix + open`` / ``prefix + read``; it records the tools offered at
    each turn and the newest observation its prompt showed it."""

    def __init__(self, prefix: str = "notes_") -> None:
        self.prefix = prefix
        self.offered: list[list[str]] = []
        self.shown: list[str] = []
        self.model = ScriptedModel(self.respond)

    def respond(self, messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        self.offered.append(sorted(t["function"]["name"] for t in tools))
        results = shown_results(messages)
        if results:
            self.shown.append(results[-1])
        turn = len(self.offered)
        if turn == 1:
            return call(f"{self.prefix}open", page="intro")
        if turn == 2:
            return call(f"{self.prefix}read", line=1)
        return call("done", success=True, text=self.shown[-1])


def shown_results(messages: list[dict]) -> list[str]:
    """The action results the prompt's history shows (``[tool] {args} -> result`` lines)."""
    return re.findall(r"^\[[^\]]+\] .* -> (.*)$", str(messages[-1]["content"]), re.MULTILINE)


def recording(turns: list[Any]) -> tuple[ScriptedModel, list[list[str]]]:
    """A scripted model making ``turns``, and the names of the tools offered at each of them."""
    seen: list[list[str]] = []
    queue = list(turns)

    def respond(messages: list[dict], tools: list[dict]) -> Any:
        seen.append(sorted(t["function"]["name"] for t in tools))
        return queue.pop(0)

    return ScriptedModel(respond), seen


def observations(result) -> list[str]:
    """Each step's observations, in order."""
    return [obs for step in result.trajectory.steps for _name, _args, obs in step.results]


# -- E2T: the lifted toolkit, its precondition re-evaluated every step -----------------------------------
@pytest.mark.parametrize("chosen", ["named", "routed"])
def test_e2t_toolkit_offers_notes_read_once_notes_open_succeeded(ws, notes, chosen):
    lifted = tx.e2t(ws, "notes")
    assert [t.name for t in lifted.tools] == ["notes_open", "notes_read"]
    reader = Reader()
    tools = ["notes_open", "notes_read"] if chosen == "named" else None
    result = ws.agent("reader", model=reader.model.name, tools=tools).run_sync(TASK)

    assert result.status == "success" and result.answer == LINE_1
    assert reader.offered[0] == ["done", "notes_open"]  # the precondition does not hold yet
    assert reader.offered[1] == reader.offered[2] == ["done", "notes_open", "notes_read"]
    assert observations(result)[:2] == ["opened intro: 2 lines", LINE_1]
    assert not any("unknown action" in o for o in observations(result))
    assert notes.calls == ["open intro", "read 1"]


def test_the_offer_follows_the_toolkit_when_a_tool_undoes_a_precondition(ws, notes):
    """A tool of the toolkit that closes the page, making the run forget what the environment's
    actions set up (as resetting the environment does): ``notes_read`` is offered no longer, until
    ``notes_open`` succeeds again."""
    tx.e2t(ws, "notes")

    @ws.tools.tool(toolkit="notes")
    def notes_close(tool: ToolContext) -> str:
        """Close the open page (reading needs it opened again)."""
        tool.context.forget("notes.")
        return "closed"

    turns = [call("notes_open", page="intro"), call("notes_close"), call("notes_open", page="intro")]
    model, seen = recording([*turns, call("notes_read", line=0), call("done", success=True, text="read")])
    tools = ["notes_open", "notes_read", "notes_close"]
    result = ws.agent("reader", model=model.name, tools=tools).run_sync(TASK)

    assert result.status == "success"
    without, with_read = ["done", "notes_close", "notes_open"], ["done", "notes_close", "notes_open", "notes_read"]
    assert seen == [without, with_read, without, with_read, with_read]
    assert notes.calls == ["open intro", "open intro", "read 0"]


# -- E2A: the environment as an agent that operates its lifted toolkit ------------------------------------
def test_e2a_agent_reads_the_page_it_opened(ws, notes):
    card = tx.e2a(ws, "notes")
    assert card.name == "notes_agent" and card.tools == ["notes_open", "notes_read"]
    reader = Reader()
    result = ws.agent("notes_agent").run_sync(TASK, model=reader.model.name)

    assert result.status == "success" and result.answer == LINE_1
    assert ws.agents.get("notes_agent").tools == ["notes_open", "notes_read"]  # the card's tools were used
    assert "notes_read" not in reader.offered[0] and "notes_read" in reader.offered[1]
    assert reader.shown == ["opened intro: 2 lines", LINE_1]
    assert notes.calls == ["open intro", "read 1"]


# -- T2E: the toolkit as an environment again, bound to an agent --------------------------------------------
def test_t2e_environment_bound_to_an_agent_keeps_the_ordering(ws, notes):
    tx.e2t(ws, "notes")
    env = tx.t2e(ws, "notes", name="notes2", description="The same actions as an environment.")
    assert env.action("read").preconditions == ["open"] and env.rules == "Open a page before reading."
    reader = Reader(prefix="notes2_")
    result = ws.agent("reader", model=reader.model.name, tools=[], envs=["notes2"]).run_sync(TASK)

    assert result.status == "success" and result.answer == LINE_1
    assert reader.offered[0] == ["done", "notes2_open"]
    assert reader.offered[1] == ["done", "notes2_open", "notes2_read"]
    assert reader.shown == ["opened intro: 2 lines", LINE_1]
    assert notes.calls == ["open intro", "read 1"]  # through notes2, its tools and the original runtime


# -- A2T: the E2A agent as a tool of another agent ----------------------------------------------------------
def test_a2t_of_the_e2a_agent_is_used_by_another_agent(ws, notes):
    inner = Reader()
    tx.e2a(ws, "notes", model=inner.model.name)
    tool = tx.a2t(ws, "notes_agent")
    assert tool.name == "notes_agent" and tool.origin == "agent"
    ws.agent("notes_agent")  # its runner in this process (a card made by E2A has none of its own)

    outer_offered: list[list[str]] = []

    def outer(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        outer_offered.append(sorted(t["function"]["name"] for t in tools))
        if len(outer_offered) == 1:
            return call("notes_agent", task=TASK)
        return call("done", success=True, text=shown_results(messages)[-1])

    model = ScriptedModel(outer)
    result = ws.agent("asker", model=model.name, tools=[], sub_agents=["notes_agent"]).run_sync(TASK)

    assert result.status == "success" and LINE_1 in result.answer
    assert outer_offered[0] == ["done", "notes_agent"]
    assert "notes_read" not in inner.offered[0] and "notes_read" in inner.offered[1]
    assert inner.shown == ["opened intro: 2 lines", LINE_1]
    assert notes.calls == ["open intro", "read 1"]


# -- a run whose every action failed is not a success ---------------------------------------------------------
@pytest.fixture
def broken(ws) -> list[str]:
    """The tools ``fetch_price(item)``, which always fails, and ``guess_price(item)``, which works;
    the items ``fetch_price`` was asked for."""
    asked: list[str] = []

    @ws.tools.tool
    def fetch_price(item: str) -> str:
        """Fetch an item's price."""
        asked.append(item)
        raise RuntimeError("price service down")

    @ws.tools.tool
    def guess_price(item: str) -> str:
        """Guess an item's price."""
        return f"{item}: about 4 EUR"

    return asked


class ChatServer(QuietHandler):
    """An OpenAI-compatible chat endpoint on loopback that answers each request with the next
    scripted tool call (``turns``), as a hosted model would."""

    turns: list[tuple[str, dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802 - the handler's name
        self.rfile.read(int(self.headers["Content-Length"]))
        name, arguments = type(self).turns.pop(0)
        tool_call = {"id": f"call_{len(self.turns)}", "type": "function"}
        tool_call["function"] = {"name": name, "arguments": json.dumps(arguments)}
        message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
        body = {
            "id": "chat",
            "object": "chat.completion",
            "created": 0,
            "model": "local",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        self.reply(json.dumps(body).encode(), "application/json")


def hosted_run(ws, turns: list[tuple[str, dict[str, Any]]], monkeypatch) -> Any:
    """A run of a hosted model (``openai/...`` through litellm to a loopback server) that makes ``turns``."""
    from tea_notebook.models.client import ModelClient

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    handler = type("Script", (ChatServer,), {"turns": list(turns)})
    server = serve(handler)
    try:
        client = ModelClient(api_base=f"http://127.0.0.1:{server.server_port}/v1", retries=0)
        agent = ws.agent(
            "shopper", model="openai/local", tools=["fetch_price", "guess_price"], tool_mode="native", client=client
        )
        return agent.run_sync("What does tea cost?")
    finally:
        stop(server)


def done_observation(result) -> str:
    """What the run's last step (its ``done`` or ``finish``) observed: the status note."""
    return observations(result)[-1]


def test_a_hosted_run_whose_every_action_failed_ends_failed_with_why(ws, broken, warm_litellm, monkeypatch):
    fetch = ("fetch_price", {"item": "tea"})
    result = hosted_run(ws, [fetch, fetch, ("done", {"success": True, "text": "about 4 EUR"})], monkeypatch)
    assert broken == ["tea", "tea"]
    assert result.status == "failed" and not result.success and result.answer == "about 4 EUR"
    note = "marked failed: no action succeeded; 2 tool calls failed: fetch_price (RuntimeError)"
    assert note in done_observation(result)
    assert ws.runs(1)[0]["status"] == "failed"


def test_a_hosted_run_is_taken_at_its_word_once_an_action_succeeded(ws, broken, warm_litellm, monkeypatch):
    turns = [
        ("fetch_price", {"item": "tea"}),
        ("guess_price", {"item": "tea"}),
        ("done", {"success": True, "text": "about 4 EUR"}),
    ]
    result = hosted_run(ws, turns, monkeypatch)
    assert result.status == "success" and done_observation(result) == "finished"


def test_a_call_the_model_got_wrong_is_not_a_failed_action(ws, broken, warm_litellm, monkeypatch):
    """An unknown name or bad arguments are shown to the model; it may still answer and succeed."""
    turns = [
        ("no_such_tool", {}),
        ("fetch_price", {"item": 7}),
        ("done", {"success": True, "text": "from what I know: about 4 EUR"}),
    ]
    result = hosted_run(ws, turns, monkeypatch)
    assert broken == [] and result.status == "success"


def test_a_fork_keeps_the_failures_of_the_steps_it_replays(ws, broken):
    fetch = call("fetch_price", item="tea")
    first = ws.agent("shopper", tools=["fetch_price", "guess_price"])
    original = first.run_sync(
        "What does tea cost?", model=ScriptedModel([fetch, fetch, call("done", success=True, text="4")]).name
    )
    assert original.status == "failed"  # a scripted model: its last tool failed and nothing recovered
    assert broken == ["tea", "tea"]

    claims = ScriptedModel([call("done", success=True, text="4 EUR")])
    forked = run_sync(ws.fork(original.run_id, 2, model=claims.name))
    assert broken == ["tea", "tea"]  # the replayed calls are not run again
    assert forked.status == "failed"
    assert "no action succeeded; 2 tool calls failed: fetch_price (RuntimeError)" in done_observation(forked)

    claims_again = ScriptedModel([call("done", success=True, text="4 EUR")])
    edited = run_sync(ws.fork(original.run_id, 2, edit={"observation": "tea: 4 EUR"}, model=claims_again.name))
    assert edited.status == "success"  # the edited step is one that succeeded


def test_a_run_without_actions_or_without_failures_is_taken_at_its_word(ws, broken):
    direct = ScriptedModel([call("done", success=True, text="4 EUR, as everyone knows")])
    assert ws.agent("knower", tools=["fetch_price"]).run_sync("tea?", model=direct.name).status == "success"


def test_toolself_finishing_complete_after_every_action_failed_ends_failed(ws, broken):
    """The rule holds for any control tool that ends a run: here ToolSelf's ``finish``."""
    engine = json.dumps(
        {
            "next_sub_goal": "find the price of tea",
            "execution_strategy": "fetch the price",
            "toolbox": ["fetch_price"],
            "inter_agent_knowledge": "",
        }
    )
    summary = {"detailed_execution": ["fetched"], "tools_used": ["fetch_price"]}
    agent_turns = [
        call("fetch_price", item="tea"),
        call("finish", task_completion_status="complete", final_result="4 EUR", execution_summary=summary),
    ]

    def respond(messages: list[dict], tools: list[dict]) -> Any:
        return engine if "Agent Configuration Engineer" in messages[0]["content"] else agent_turns.pop(0)

    model = ScriptedModel(respond)
    result = ws.toolself("ts", model=model.name, tools=["fetch_price", "guess_price"]).run_sync("What does tea cost?")
    assert broken == ["tea"] and result.status == "failed" and result.answer == "4 EUR"
    assert "no action succeeded; 1 tool call failed: fetch_price (RuntimeError)" in done_observation(result)
