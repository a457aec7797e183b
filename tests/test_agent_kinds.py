"""Agent kinds are declared once (``@agent_kind``) and every front end reads the registration: a kind
defined in this module alone is made by the façade (``ws.make_agent``), run by ``%%agent`` in a real
IPython shell (by its shortcut, by ``--kind``, with the options it takes and a refusal of the
others), evaluated by ``tea eval --agent`` and ``%tea eval``, and rebuilt from its card after a
restart, with no other module edited. The built-in kinds keep the names, shortcuts and rules they
had before they registered themselves."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytest.importorskip("IPython")

from IPython.core.error import UsageError  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.agents import kinds  # noqa: E402
from tea_notebook.agents.kinds import agent_kind  # noqa: E402
from tea_notebook.errors import TeaError  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.agent import Agent  # noqa: E402


@agent_kind(
    "echo",
    shortcuts=("echo", "echoer"),
    default_name="echoer",
    options=("max_steps",),
    refused_as="an echo agent (it takes no tools)",
)
class EchoAgent(Agent):
    """An agent kind defined in this test module only: the agent loop with no tools, saying what it is told."""

    def __init__(self, workspace, name: str = "echoer", **options):
        options.setdefault("tools", [])
        options.setdefault("description", "Repeats what it is told.")
        options.setdefault("kind", "echo")
        super().__init__(workspace, name, **options)


def echo_model() -> ScriptedModel:
    """Answers with the word after "Say" in the task."""

    def respond(messages, tools):
        text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        said = re.search(r"Say (\w+)", text)
        return call("done", success=True, text=f"FINAL ANSWER: {said.group(1) if said else ''}")

    return ScriptedModel(respond)


@pytest.fixture
def shell_ws(ip, tmp_path, monkeypatch):
    from conftest import magics_workspace

    return magics_workspace(ip, tmp_path, monkeypatch)


# -- the registry ----------------------------------------------------------------------------------
def test_importing_the_registry_imports_no_kind():
    code = (
        "import sys, tea_notebook.agents.kinds as k\n"
        "heavy = [m for m in sys.modules if m.startswith(('tea_notebook.agents.', 'tea_notebook.evolve', "
        "'tea_notebook.runtime'))]\n"
        "assert heavy == ['tea_notebook.agents.kinds'], heavy\n"
        "assert 'researcher' in k.names() and 'deep_researcher' in k.shortcut_names()\n"
        "assert 'tea_notebook.agents.researcher' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_builtin_kinds_keep_their_names_shortcuts_and_rules():
    assert kinds.KINDS[:8] == (
        "agent",
        "researcher",
        "analyzer",
        "browser_use",
        "orchestra",
        "toolself",
        "coral",
        "evolution",
    )
    assert {k: v for k, v in kinds.SHORTCUTS.items() if v[0] != "echo"} == {
        "researcher": ("researcher", "deep_researcher"),
        "deep_researcher": ("researcher", "deep_researcher"),
        "analyzer": ("analyzer", "deep_analyzer"),
        "deep_analyzer": ("analyzer", "deep_analyzer"),
        "browser_use": ("browser_use", "browser_use"),
        "browser": ("browser_use", "browser_use"),
        "orchestra": ("orchestra", "orchestra"),
        "toolself": ("toolself", "toolself"),
        "coral": ("coral", "coral"),
    }
    forks = {k.name: k.fork for k in kinds.registered()}
    assert forks["agent"] == forks["orchestra"] == forks["browser_use"] == "steps"
    assert (forks["coral"], forks["toolself"], forks["researcher"], forks["evolution"]) == (
        "messages",
        "stages",
        None,
        None,
    )
    assert kinds.get("researcher").run_options({"max_steps": 2}) == {"max_rounds": 2}
    with pytest.raises(TeaError, match="--tools does not apply to a CORAL team"):
        kinds.get("coral").run_options({"tools": ["x"], "max_steps": 1})
    with pytest.raises(TeaError, match="unknown agent kind 'nope'; kinds: agent, researcher"):
        kinds.get("nope")
    with pytest.raises(TeaError, match="not made by name"):
        kinds.make(None, "evolution", "x")


def test_a_builtin_module_must_register_what_the_table_says():
    def fake(ws, name="x", **options):
        """A builder pretending to live in the CORAL module."""

    fake.__module__ = "tea_notebook.agents.coral"
    with pytest.raises(TeaError, match="BUILTIN"):
        agent_kind("coral", shortcuts=("coral", "team"))(fake)
    assert kinds.get("coral").shortcuts == ("coral",)


def test_names_and_shortcuts_cannot_be_taken_twice():
    def other(ws, name="x", **options):
        """Another builder."""

    with pytest.raises(TeaError, match="already registered"):
        agent_kind("echo")(other)
    with pytest.raises(TeaError, match="shortcut 'echoer' already builds"):
        agent_kind("echo2", shortcuts=("echoer",))(other)
    assert "echo2" not in kinds.names()


# -- a kind defined here, from every front end ------------------------------------------------------
def test_the_facade_makes_and_rebuilds_a_new_kind(tmp_path):
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    made = ws.make_agent("echo")
    assert isinstance(made, EchoAgent) and made.name == "echoer"
    assert ws.agents.get("echoer").metadata["kind"] == "echo"
    named = ws.make_agent("echo", "parrot", max_steps=3)
    assert named.name == "parrot" and named.max_steps == 3
    ws.close()
    again = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")  # a new process, as far as the card knows
    rebuilt = kinds.build(again, "parrot")
    assert isinstance(rebuilt, EchoAgent) and rebuilt.max_steps == 3
    assert kinds.restore_runner(again, "echoer") is not None
    again.close()


def test_agent_magic_runs_a_new_kind_by_shortcut_and_by_kind(ip, shell_ws):
    model = echo_model()
    result = ip.run_cell_magic("agent", f"echoer --model {model.name} --max-steps 2 --quiet", "Say hello")
    assert result.success and result.answer.endswith("hello")
    assert shell_ws.agents.get("echoer").metadata["kind"] == "echo"
    assert shell_ws.trajectory(result.run_id).fork_unit == kinds.get("echo").fork == "steps"  # its Fork buttons
    assert isinstance(kinds.build(shell_ws, "echoer"), EchoAgent)
    other = ip.run_cell_magic("agent", f"mine --kind echo --model {model.name} --quiet", "again")
    assert other.success and shell_ws.agents.get("mine").metadata["kind"] == "echo"
    with pytest.raises(UsageError, match="--env does not apply to an echo agent"):
        ip.run_cell_magic("agent", f"echoer --env python --model {model.name} --quiet", "no")
    with pytest.raises(UsageError, match="registered with kind 'echo', not 'researcher'"):
        ip.run_cell_magic("agent", "mine --kind researcher --quiet", "no")


def test_tea_eval_evaluates_a_new_kind_by_its_shortcut(tmp_path, capsys, warm_litellm):
    from tea_notebook.cli import main

    tasks = tmp_path / "qa.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"Say w{i}", "answer": f"w{i}"}) + "\n" for i in range(2))
    )
    model = echo_model()
    argv = ["-w", str(tmp_path / "cws"), "eval", str(tasks), "--agent", "echoer", "--model", model.name]
    assert main([*argv, "--name", "e1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["done"] == 2 and summary["correct"] == 2
    ws = tea_notebook.Workspace(tmp_path / "cws")  # its stored embedder
    assert ws.agents.get("echoer").metadata["kind"] == "echo"
    assert ws.db.evaluation("e1")["config"]["kind"] == "echo"
    ws.close()


def test_tea_eval_magic_evaluates_a_new_kind(ip, shell_ws, tmp_path, warm_litellm):
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text(json.dumps({"id": "q1", "question": "Say yes", "answer": "yes"}) + "\n")
    model = echo_model()
    results = ip.run_line_magic("tea", f"eval echoer {tasks} --model {model.name} --name m --quiet")
    assert results.correct == 1 and results.config["kind"] == "echo"


def test_tea_run_runs_a_new_kind_by_its_shortcut(tmp_path, capsys, warm_litellm):
    from tea_notebook.cli import main

    model = echo_model()
    assert (
        main(["-w", str(tmp_path / "rws"), "run", "Say hi", "--agent", "echoer", "--model", model.name, "--json"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["agent"] == "echoer" and result["answer"].endswith("hi")
    ws = tea_notebook.Workspace(tmp_path / "rws")
    assert ws.agents.get("echoer").metadata["kind"] == "echo"
    ws.close()
