"""The magics in an in-process IPython shell (fast): every ``%tea`` subcommand, ``%%tool`` input
checking and ``%%agent`` options, the objects they return and how those display. Models are
offline (``tea/test`` and in-process ``ScriptedModel`` scripts); workspaces use the hashing
embedder and live in tmp_path."""

from __future__ import annotations

import io
import json
import os

import pytest

pytest.importorskip("IPython")

from conftest import magics_workspace, tea  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from traitlets.config import Config  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.notebook.magics import TeaMagics  # noqa: E402
from tea_notebook.notebook.memory_view import MemoryExplorer  # noqa: E402
from tea_notebook.notebook.registry_view import RegistryBrowser  # noqa: E402
from tea_notebook.protocol.records import EnvironmentRecord, ToolRecord  # noqa: E402
from tea_notebook.runtime.agent import RunResult  # noqa: E402
from tea_notebook.runtime.render import MIME_TYPE, payload  # noqa: E402
from tea_notebook.runtime.trajectory import Trajectory  # noqa: E402

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# -- the shell ---------------------------------------------------------------------------------
@pytest.fixture
def ws(ip, magics, tmp_path, monkeypatch):
    """A fresh workspace (hashing embedder) made current through %config and %tea workspace."""
    path = tmp_path / "ws"
    switched = magics_workspace(ip, tmp_path, monkeypatch, live=True, workspace_path=str(path))
    assert switched.path == path.resolve() and magics.workspace is switched
    assert switched.embedder.id.startswith("hashing")
    yield switched
    assert not (tmp_path / ".tea").exists()


def tool(ip, cell: str, line: str = ""):
    return ip.run_cell_magic("tool", line, cell)


def agent(ip, task: str, line: str = "--quiet") -> RunResult:
    return ip.run_cell_magic("agent", line, task)


ADD = '''def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''

SHOUT = '''def shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper()
'''


def user_text(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] == "user" and isinstance(m.get("content"), str))


def prompt_text(script: ScriptedModel, call_number: int = 0) -> str:
    return "\n".join(m["content"] for m in script.calls[call_number] if isinstance(m.get("content"), str))


def recording_script(done_text: str = "ok"):
    """A script that finishes at once and remembers the tool names it was offered."""
    offered: list[list[str]] = []

    def respond(messages, tools):
        offered.append(sorted(t["function"]["name"] for t in tools))
        return call("done", success=True, text=done_text, files_to_display=[])

    return ScriptedModel(respond), offered


# -- %tea help / model ---------------------------------------------------------------------------
def test_help_lists_every_subcommand(ip, ws):
    for line in ("help", ""):
        out = tea(ip, line)
        assert "<pre>" in out._repr_html_()
        for sub in (
            "model",
            "tools",
            "agents",
            "envs",
            "memory",
            "runs",
            "show",
            "versions",
            "rollback",
            "workspace",
            "plot",
            "create-tool",
            "evolve",
            "stats",
            "help",
        ):
            assert f"%tea {sub}" in out, sub
        assert "%%tool" in out and "%%agent" in out


def test_model_shows_the_resolution_and_sets_the_default(ip, ws, monkeypatch):
    unset = tea(ip, "model")
    assert unset.startswith("tea/demo (scripted, not an LLM) (from ") and "demo" in unset.split("(from ")[1]
    monkeypatch.setenv("TEA_MODEL", "openai/gpt-4.1-mini")
    assert tea(ip, "model") == "openai/gpt-4.1-mini (from TEA_MODEL)"
    monkeypatch.delenv("TEA_MODEL")
    shown = tea(ip, "model tea/test")
    assert shown.startswith("tea/test (scripted, not an LLM) (from ") and "workspace" in shown
    assert ws.default_model == "tea/test"
    with tea_notebook.Workspace(ws.path) as again:  # remembered in the workspace's database
        assert again.default_model == "tea/test"
    assert tea(ip, "model") == shown
    tool(ip, ADD)
    assert agent(ip, "Add two numbers.").model == "tea/test"


def test_model_is_the_workspaces_not_the_sessions(ip, ws, tmp_path):
    tea(ip, "model tea/test")
    other = tmp_path / "other"
    tea_notebook.Workspace(other, embedder="hashing").close()
    tea(ip, f"workspace {other}")
    assert tea(ip, "model").startswith("tea/demo (scripted, not an LLM)")  # nothing leaks across workspaces
    tea(ip, f"workspace {ws.path}")
    assert tea(ip, "model").startswith("tea/test (scripted, not an LLM)")


def test_model_names_the_config_setting_when_it_wins(ip, ws):
    tea(ip, "model tea/demo")
    ip.run_line_magic("config", 'TeaMagics.default_model = "tea/test"')
    shown = tea(ip, "model")
    assert shown.startswith("tea/test (scripted, not an LLM) (from ") and "TeaMagics.default_model" in shown


# -- %tea listings -----------------------------------------------------------------------------
def test_listings_are_lists_that_display_as_tables(ip, ws):
    tool(ip, ADD + "\n\n" + SHOUT, "--category math")
    ws.envs.register(
        EnvironmentRecord(name="kitchen", description="A small kitchen with a kettle.", rules="Never boil it dry.")
    )
    ws.memory_store.save("r0", "boil water", "Filled the kettle and boiled the water.", ["A kettle needs water first."])
    result = agent(ip, "Add two numbers.", "--model tea/test --tools add --quiet")

    tools = tea(ip, "tools")
    assert isinstance(tools, RegistryBrowser) and sorted(r["name"] for r in tools.rows) == ["add", "shout"]
    assert {r["category"] for r in tools.rows} == {"math"}
    assert next(r for r in tools.rows if r["name"] == "add")["calls"] == 1
    html = tools._repr_html_()
    assert "<table class='tea-rb'>" in html and ">add<" in html and ">shout<" in html and ">Add two integers.<" in html

    hits = tea(ip, "tools capitals text repeat")
    assert hits.rows[0]["name"] == "shout" and ">shout<" in hits._repr_html_()
    scores = [r["score"] for r in hits.rows]
    assert scores == sorted(scores, reverse=True)

    agents = tea(ip, "agents")
    assert [r["name"] for r in agents.rows] == ["agent"] and ">agent<" in agents._repr_html_()

    envs = tea(ip, "envs")
    assert [r["name"] for r in envs.rows] == ["kitchen"] and ">kitchen<" in envs._repr_html_()

    memory = tea(ip, "memory")
    assert isinstance(memory, MemoryExplorer)
    assert sorted(r["description"] for r in memory.rows) == [
        "A kettle needs water first.",
        "Filled the kettle and boiled the water.",
    ]
    found = tea(ip, "memory kettle water")
    assert found.rows and "kettle" in found.rows[0]["description"].lower() and "score" in found.rows[0]

    runs = tea(ip, "runs")
    total = result.prompt_tokens + result.completion_tokens  # a scripted model's: an estimate, and says so
    assert runs == [
        {
            "run": result.run_id,
            "agent": "agent",
            "status": "success",
            "tokens": f"~{total:,} (estimated)",
            "task": "Add two numbers.",
        }
    ]
    assert f">{result.run_id}<" in runs._repr_html_()
    assert "runs (1)" in ip.display_formatter.format(runs)[0]["text/plain"]


def test_empty_listings_say_none(ip, ws):
    for sub in ("envs", "toolkits", "memory", "runs", "agents", "tools"):
        empty = tea(ip, sub)
        assert list(empty) == [] and f"{sub}: none" in empty._repr_html_(), sub


# -- show / versions / rollback / plot / workspace --------------------------------------------------
def test_show_versions_rollback_plot_and_workspace(ip, ws):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    tool(ip, ADD)
    result = agent(ip, "Add two numbers.", "--model tea/test --tools add --quiet")

    shown = tea(ip, f"show {result.run_id[:10]}")  # an id prefix is enough
    assert isinstance(shown, Trajectory) and shown.run_id == result.run_id
    data, meta = shown._repr_mimebundle_()
    assert data[MIME_TYPE]["status"] == "success" and meta[MIME_TYPE]["run_id"] == result.run_id
    assert [a["name"] for s in shown.steps for a in s.actions] == ["add", "done"]

    tool(ip, ADD.replace("return a + b", "return a * b + 10"))
    assert ip.user_ns["add"](1, 1) == 11
    versions = tea(ip, "versions add")
    assert [(v["version"], v["current"]) for v in versions] == [(1, False), (2, True)]
    assert "<table>" in versions._repr_html_() and "versions of add" in versions._repr_html_()
    assert len({v["hash"] for v in versions}) == 2

    back = tea(ip, "rollback add 1")
    assert isinstance(back, ToolRecord) and back.version == 1 and "a + b" in back.source
    assert ws.tools.get("add").version == 1
    assert ws.tools.invoke("add", {"a": 1, "b": 1}).value == 2  # v1's code runs again
    assert [v["current"] for v in tea(ip, "versions add")] == [True, False]

    one = tea(ip, f"plot {result.run_id}")
    assert isinstance(one, Figure) and len(one.axes) == 3
    assert result.run_id in one._suptitle.get_text()
    everything = tea(ip, "plot")
    assert isinstance(everything, Figure) and len(everything.axes) == 2
    assert "runs over time (1)" in everything.axes[0].get_title()
    for fig in (one, everything):  # they render (what the inline backend displays)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        assert buffer.getvalue().startswith(b"\x89PNG")

    assert tea(ip, "workspace") is ws


def test_workspace_switches_where_things_go(ip, ws, tmp_path):
    other = tmp_path / "other"
    switched = tea(ip, f"workspace {other}")
    assert isinstance(switched, tea_notebook.Workspace) and switched.path == other.resolve()
    assert tea_notebook.current_workspace() is switched  # so @tool registers there
    tool(ip, ADD)
    assert switched.tools.names() == ["add"]
    with tea_notebook.Workspace(ws.path) as first:
        assert first.tools.names() == []


@pytest.mark.parametrize(
    "line, message",
    [
        ("bogus", "unknown %tea subcommand 'bogus'; %tea help"),
        ("show", "needs RUN"),
        ("show nosuchrun", "no run 'nosuchrun'"),
        ("versions", "needs NAME"),
        ("versions nosuch", "nosuch"),
        ("rollback add", "usage: %tea rollback NAME VERSION"),
        ("rollback add one", "usage: %tea rollback NAME VERSION"),
        ("rollback add 9", "no version 9"),
        ("plot nosuchrun", "no run 'nosuchrun'"),
    ],
)
def test_bad_tea_commands_are_usage_errors(ip, ws, line, message):
    tool(ip, ADD)
    with pytest.raises(UsageError, match=None) as info:
        tea(ip, line)
    assert message in str(info.value)


def test_switching_first_does_not_create_the_default_workspace(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fresh = TeaMagics(shell=ip, config=Config())
    try:
        opened = fresh.tea(f"workspace {tmp_path / 'mine'}")
        assert opened.path == (tmp_path / "mine").resolve()
        assert not (tmp_path / ".tea").exists()
    finally:
        fresh.workspace.close()


# -- %%tool --------------------------------------------------------------------------------------
def test_tool_records_toolkit_category_and_name(ip, ws):
    listing = tool(ip, ADD, "--toolkit math --category arith --name plus")
    assert [r["name"] for r in listing] == ["plus"] and "<table>" in listing._repr_html_()
    rec = ws.tools.get("plus")
    assert (rec.toolkit, rec.category, rec.source) == ("math", "arith", ADD.rstrip("\n"))
    assert "add" not in ws.tools and ip.user_ns["add"](2, 3) == 5
    assert ws.tools.invoke("plus", {"a": 2, "b": 3}).value == 5


@pytest.mark.parametrize(
    "cell, line, message",
    [
        ("x = 1\nprint(x)\n", "", "needs a cell that defines at least one function"),
        ("def broken(a: int) -> int\n    return a\n", "", "not valid Python"),
        (ADD + "\n" + SHOUT, "--name both", "--name works only when the cell defines one function"),
        ('def loose(a, b: int) -> int:\n    """No hint on a."""\n    return b\n', "", "parameter 'a' of loose()"),
        ("def quiet(a: int) -> int:\n    return a\n", "", "quiet(): has no docstring"),
        (ADD + "1 / 0\n", "", "the cell raised ZeroDivisionError"),
    ],
    ids=["no-function", "syntax-error", "name-with-two", "no-type-hint", "no-docstring", "cell-raises"],
)
def test_bad_tool_cells_are_usage_errors(ip, ws, cell, line, message):
    with pytest.raises(UsageError) as info:
        tool(ip, cell, line)
    assert message in str(info.value)
    assert ws.tools.names() == []  # nothing half-registered


def test_a_missing_type_hint_names_the_function_and_parameter(ip, ws):
    with pytest.raises(UsageError, match=r"parameter 'a' of loose\(\): has no type hint"):
        tool(ip, 'def loose(a, b: int) -> int:\n    """No hint on a."""\n    return b\n')
    assert "loose" not in ws.tools
    # through a real cell too: the shell reports it instead of raising
    result = ip.run_cell('%%tool\ndef loose(a, b: int) -> int:\n    """No hint on a."""\n    return b\n')
    assert isinstance(result.error_in_exec, UsageError) and "loose" in str(result.error_in_exec)


def test_decorated_tool_source_keeps_the_decorators(ip, ws):
    ip.run_cell("def tagged(label):\n    def deco(fn):\n        fn.label = label\n        return fn\n    return deco\n")
    cell = '@tagged(\n    "x",\n)\ndef add(a: int, b: int) -> int:\n    """Add two integers."""\n    return a + b  # the sum'
    tool(ip, cell + "\n")
    assert ws.tools.get("add").source == cell
    assert ip.user_ns["add"].label == "x"


def test_tool_source_keeps_a_trailing_comment(ip, ws):
    cell = 'def add(a: int, b: int) -> int:\n    """Add two integers."""\n    return a + b  # the sum'
    tool(ip, cell + "\n")
    assert ws.tools.get("add").source == cell


def test_a_tool_that_calls_open_is_not_warned_about_and_runs_in_another_process(ip, ws, tmp_path):
    """IPython puts its own ``open`` (a wrapper of the builtin) in the namespace: that is the builtin to a
    rebuilt tool, not a notebook variable that a restart would lose."""
    import subprocess
    import sys
    import warnings

    assert ip.user_ns["open"] is not open and ip.user_ns["open"].__wrapped__ is open
    cell = 'def first_line(path: str) -> str:\n    """The first line of a text file."""\n    with open(path) as fh:\n        return fh.readline().strip()'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tool(ip, cell + "\n")
    assert ws.tools.get("first_line").source == cell  # no import line invented for open
    notes = tmp_path / "notes.txt"
    notes.write_text("tea at four\nand more\n", encoding="utf-8")
    script = (
        f"import tea_notebook\nws = tea_notebook.Workspace({str(ws.path)!r})\n"
        f"r = ws.tools.invoke('first_line', {{'path': {str(notes)!r}}})\nprint('@@', r.ok, r.value if r.ok else r.error)"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert "@@ True tea at four" in out.stdout, out.stdout + out.stderr


# -- %%agent ------------------------------------------------------------------------------------
def test_task_braces_and_dollars_are_kept_without_interpolate(ip, ws):
    ip.user_ns["x"] = "SECRET-VALUE"
    script = ScriptedModel([call("done", success=True, text="ok", files_to_display=[])])
    cell = f"%%agent --model {script.name} --quiet --out res\nUse {{x}} and $x here."
    assert ip.run_cell(cell).success
    res = ip.user_ns["res"]
    assert res.task == "Use {x} and $x here."
    assert ws.db.run_row(res.run_id)["task"] == "Use {x} and $x here."
    prompt = user_text(script.calls[0])
    assert "Use {x} and $x here." in prompt and "SECRET-VALUE" not in prompt


def test_interpolate_replaces_names_but_not_dollars(ip, ws):
    ip.user_ns.update(x="forty-two", n=3.14159)
    res = agent(ip, "Use {x} and {n:.2f} but not $x.", "--model tea/test --quiet --interpolate")
    assert res.task == "Use forty-two and 3.14 but not $x."
    assert ws.db.run_row(res.run_id)["task"] == "Use forty-two and 3.14 but not $x."


def test_interpolate_with_a_missing_variable_is_a_usage_error(ip, ws):
    ip.user_ns.pop("nosuchvar", None)
    with pytest.raises(UsageError, match="no variable named nosuchvar"):
        agent(ip, "Use {nosuchvar}.", "--model tea/test --quiet --interpolate")
    assert ws.runs() == []


@pytest.mark.parametrize("task", ["Open the { file.", "Format it as {}."])
def test_interpolate_with_bad_braces_is_a_usage_error(ip, ws, task):
    with pytest.raises(UsageError):
        agent(ip, task, "--model tea/test --quiet --interpolate")


def test_agent_help_documents_the_options(ip):
    doc = ip.find_cell_magic("agent").__doc__
    assert doc == TeaMagics.agent.__doc__
    for option in ("--model", "--out", "--tools", "--max-steps", "--env", "--quiet", "--interpolate"):
        assert option in doc, option
    assert "RunResult" in doc
    tool_doc = ip.find_cell_magic("tool").__doc__
    for option in ("--name", "--toolkit", "--category"):
        assert option in tool_doc


def test_empty_task_is_a_usage_error(ip, ws):
    with pytest.raises(UsageError, match="needs the task"):
        agent(ip, "  \n ", "--model tea/test --quiet")


def test_max_steps_passes_through(ip, ws):
    tool(ip, ADD)
    script = ScriptedModel(lambda messages, tools: call("add", a=1, b=2))
    res = agent(ip, "Keep adding.", f"--model {script.name} --max-steps 2 --quiet")
    assert (res.status, res.steps, len(script.calls)) == ("max_steps", 2, 2)
    traj = ws.trajectory(res.run_id)
    assert traj.status == "max_steps" and [s.number for s in traj.steps] == [1, 2]


def test_tools_pass_through(ip, ws):
    tool(ip, ADD + "\n\n" + SHOUT)
    script, offered = recording_script()
    res = agent(ip, "Shout something.", f"--model {script.name} --tools shout --quiet")
    assert res.success and offered == [["done", "shout"]]
    assert ws.agents.get("agent").tools == []  # the option is for this cell's run, not the agent's card


def test_env_passes_through(ip, ws):
    ws.envs.register(
        EnvironmentRecord(
            name="kitchen",
            description="A small kitchen with a kettle.",
            rules="Never boil it dry.",
            state="kettle: empty",
        )
    )
    script, _ = recording_script()
    res = agent(ip, "Make tea.", f"--model {script.name} --env kitchen --quiet")
    assert res.success
    prompt = prompt_text(script)
    assert "Never boil it dry." in prompt and "kettle: empty" in prompt
    assert ws.agents.get("agent").metadata["config"]["envs"] == []  # this run only


def test_without_options_every_tool_is_offered(ip, ws):
    tool(ip, ADD + "\n\n" + SHOUT)
    script, offered = recording_script()
    agent(ip, "Do anything.", f"--model {script.name} --quiet")
    assert offered == [["add", "done", "shout"]]


@pytest.mark.parametrize("option", ["--tools shout", "--env kitchen", "--max-steps 1"])
def test_one_cells_options_do_not_leak_into_the_next(ip, ws, option):
    tool(ip, ADD + "\n\n" + SHOUT)
    ws.envs.register(EnvironmentRecord(name="kitchen", description="A small kitchen.", rules="Never boil it dry."))
    first, _ = recording_script()
    assert agent(ip, "First.", f"--model {first.name} --quiet {option}").success
    replies = [call("add", a=1, b=2), call("done", success=True, text="3", files_to_display=[])]
    offered: list[list[str]] = []

    def respond(messages, tools):
        offered.append(sorted(t["function"]["name"] for t in tools))
        return replies[len(offered) - 1]

    second = ScriptedModel(respond)
    res = agent(ip, "Second, with no options.", f"--model {second.name} --quiet")
    assert res.status == "success" and res.steps == 2  # no step limit carried over
    assert offered[0] == ["add", "done", "shout"]  # every tool offered again
    assert "Never boil it dry." not in prompt_text(second)  # no environment carried over


def test_unknown_env_is_a_usage_error(ip, ws):
    with pytest.raises(UsageError) as info:
        agent(ip, "Do it.", "--model tea/test --quiet --env nowhere")
    assert "nowhere" in str(info.value) and "run ended with an error" in str(info.value)
    assert [r["status"] for r in ws.runs()] == ["error"]


def test_a_misspelt_tool_is_refused_before_any_run_with_did_you_mean(ip, ws):
    """``--tools`` names are checked before the run starts (no run, no stored error), each unknown
    one with the closest registered names; the Python API runs the same check."""
    from tea_notebook.errors import NotFoundError

    tool(ip, ADD + "\n\n" + SHOUT)
    with pytest.raises(UsageError) as info:
        agent(ip, "Shout it.", "--model tea/test --quiet --tools add,shuot,nosuchtool")
    message = str(info.value)
    assert message.startswith("--tools: ")
    assert "'shuot' (did you mean shout?)" in message
    assert "'nosuchtool'" in message and "'add'" not in message
    assert ws.runs() == []
    helper = ws.agent("typo", tools=["ad"])
    with pytest.raises(NotFoundError, match=r"no tool named 'ad' \(did you mean add\?\)"):
        helper.run_sync("Add.", model="tea/test")
    assert ws.runs() == []
    with pytest.raises(NotFoundError, match="did you mean shout"):
        ws.tools.get("shuot")  # every lookup by name suggests the same way


@pytest.mark.parametrize("value", ["0", "-3"])
def test_max_steps_below_one_is_refused_as_the_python_api_refuses_it(ip, ws, value):
    from tea_notebook.runtime.agent import Agent

    tool(ip, ADD)
    with pytest.raises(UsageError, match=rf"--max-steps must be a whole number of 1 or more .*not {value}"):
        agent(ip, "Add.", f"--model tea/test --quiet --max-steps {value}")
    with pytest.raises(UsageError, match="--max-steps must be a whole number of 1 or more"):
        tea(ip, f"eval agent sample --max-steps {value} --quiet")
    with pytest.raises(UsageError, match="--max-steps must be"):
        agent(ip, "Research.", f"researcher --model tea/test --quiet --max-steps {value}")
    with pytest.raises(ValueError, match="max_steps must be a whole number of 1 or more"):
        Agent(ws, "zero", max_steps=int(value))
    with pytest.raises(ValueError, match="max_steps must be a whole number of 1 or more"):
        ws.agent("one", tools=["add"]).run_sync("Add.", model="tea/test", max_steps=int(value))
    assert ws.runs() == []


def test_registered_agent_keeps_its_settings(ip, ws):
    tool(ip, ADD + "\n\n" + SHOUT)
    ws.agent("helper", tools=["add"], max_steps=3)
    script, offered = recording_script()
    res = agent(ip, "Help.", f"helper --model {script.name} --quiet")
    assert res.agent == "helper" and offered == [["add", "done"]]


def test_default_model_setting_is_used_without_model(ip, ws):
    ip.run_line_magic("config", 'TeaMagics.default_model = "tea/test"')
    tool(ip, ADD)
    assert agent(ip, "Add two numbers.").model == "tea/test"
    script, _ = recording_script()
    assert agent(ip, "Add two numbers.", f"--model {script.name} --quiet").model == script.name
    assert [r["model"] for r in ws.runs()] == [script.name, "tea/test"]


def test_a_failed_run_is_a_usage_error_and_still_binds_out(ip, ws):
    ip.user_ns.pop("failed", None)
    with pytest.raises(UsageError, match="no scripted model 'missing'"):
        agent(ip, "Hello.", "--model tea/script:missing --quiet --out failed")
    assert isinstance(ip.user_ns["failed"], RunResult) and ip.user_ns["failed"].status == "error"


# -- results and displays ------------------------------------------------------------------------
def test_run_result_plot_has_three_axes(ip, ws):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    tool(ip, ADD)
    res = agent(ip, "Add two numbers.", "--model tea/test --quiet")
    fig = res.plot()
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["tokens per step", "cost per step (USD)", "time per step (s)"]
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert len(bars) == 2 * res.steps and sum(bars) == res.prompt_tokens + res.completion_tokens


SLOW = '''def slow(seconds: float) -> str:
    """Wait, then say so."""
    import time

    time.sleep(seconds)
    return "waited"
'''


def test_step_times_include_tool_time_shown_apart_from_the_models(ip, ws):
    """A step's time is its model's and its tools' (calls run at once counted once); the plot stacks
    the two, the bundle's metadata carries both, and step axes tick at whole numbers only."""
    pytest.importorskip("matplotlib")
    tool(ip, SLOW)
    script = ScriptedModel(
        [
            [call("slow", seconds=0.3), call("slow", seconds=0.3)],
            call("slow", seconds=0.2),
            call("done", success=True, text="ok"),
        ]
    )
    res = agent(ip, "Wait twice.", f"--model {script.name} --quiet")
    assert res.status == "success", res.error
    steps = ws.trajectory(res.run_id).steps
    assert 0.6 <= steps[0].tool_time < 0.9 and 0.2 <= steps[1].tool_time < 0.4 and steps[2].tool_time < 0.1
    assert steps[0].seconds == pytest.approx(steps[0].latency + steps[0].tool_time)
    _, metadata = ws.trajectory(res.run_id)._repr_mimebundle_()
    times = metadata[MIME_TYPE]["latency"]
    assert times["tools"] == [round(s.tool_time, 3) for s in steps]
    assert times["steps"] == [round(s.latency, 3) for s in steps]
    fig = res.plot()
    model_bars, tool_bars = fig.axes[2].patches[:3], fig.axes[2].patches[3:]
    assert [b.get_height() for b in tool_bars] == pytest.approx([s.tool_time for s in steps])
    assert [b.get_y() for b in tool_bars] == pytest.approx([b.get_height() for b in model_bars])  # stacked
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == ["model", "tools"]
    one = agent(ip, "Answer.", f"--model {ScriptedModel([call('done', success=True, text='ok')]).name} --quiet")
    for figure in (fig, one.plot()):  # one step too: a single whole number in view, no fractions
        figure.canvas.draw()
        for ax in figure.axes:
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)


def test_tool_time_counts_calls_that_ran_at_once_once():
    from tea_notebook.runtime.trajectory import StepView

    step = StepView(1, latency=0.5)
    for ended, took in ((10.0, 2.0), (10.5, 1.0), (13.0, 1.0), (14.0, None)):  # 8-10 and 9.5-10.5 overlap
        step.add_tool_result(ended, took)
    assert step.tool_time == pytest.approx(3.5) and step.seconds == pytest.approx(4.0)


def test_plots_show_as_images_under_the_agg_backend(ip, ws):
    """Under ``matplotlib.use("Agg")`` IPython has no PNG printer for figures: ours render themselves."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    tool(ip, ADD)
    res = agent(ip, "Add two numbers.", "--model tea/test --quiet")
    for fig in (res.plot(), tea(ip, "plot")):
        data, _ = ip.display_formatter.format(fig)
        assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n", sorted(data)


def test_trajectory_displays_with_the_custom_mime_type(ip, ws):
    tool(ip, ADD)
    res = agent(ip, "Add two numbers.", "--model tea/test --quiet")
    formatter = ip.display_formatter
    saved = list(formatter.active_types)
    formatter.active_types = saved + [MIME_TYPE]
    try:
        traj = ws.trajectory(res.run_id)
        data, meta = formatter.format(traj)
        via_result, _ = formatter.format(res)
    finally:
        formatter.active_types = saved
    assert {MIME_TYPE, "text/html", "text/plain"} <= set(data)
    assert data[MIME_TYPE] == payload(traj) == via_result[MIME_TYPE]
    assert json.loads(json.dumps(data[MIME_TYPE])) == data[MIME_TYPE]  # JSON-ready
    assert meta[MIME_TYPE]["run_id"] == res.run_id
    assert data["text/html"].startswith("<style>") and "add(" in data["text/html"]
    text = data["text/plain"]
    assert "task: Add two numbers." in text and "add(a=1, b=1) -> 2" in text
    assert res.run_id not in text and res.run_id not in json.dumps(data[MIME_TYPE])  # ids only in metadata
