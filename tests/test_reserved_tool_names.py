"""A tool a person registers under a name the runtime keeps for its own actions (``done``, ``todo``,
ToolSelf's ``finish``, CORAL's ``send_message`` …) is refused like an MCP import is, in every
registration path: ``%%tool``, ``ws.tools.register`` of a ``make_tool``, ``@ws.tools.tool``, A2T and
E2T. The error names the reserved name and whose it is; nothing is registered. The runtime's own
CORAL toolkit still registers."""

from __future__ import annotations

import pytest

import tea_notebook
from tea_notebook import ActionSpec, EnvironmentRecord
from tea_notebook.errors import TeaError
from tea_notebook.protocol import transformations as tx
from tea_notebook.protocol.reserved import A2A_ACTIONS, refused_name
from tea_notebook.protocol.tools import make_tool


@pytest.fixture
def ws(tmp_path):
    with tea_notebook.Workspace(tmp_path / "ws", embedder="hashing") as opened:
        yield opened


def test_register_and_the_decorator_refuse_a_reserved_name(ws):
    def done(text: str) -> str:
        """Finish early (a person's tool)."""
        return text

    with pytest.raises(
        TeaError, match=r"tool 'done' takes the name of the agent loop's own action \('done' is reserved"
    ):
        ws.tools.register(make_tool(done))
    with pytest.raises(TeaError, match=r"tool 'Todo' takes the name of the agent loop's own action"):
        ws.tools.register(make_tool(done, name="Todo"))
    with pytest.raises(TeaError, match="tool 'finish' takes the name of ToolSelf's management tool"):

        @ws.tools.tool(name="finish")
        def finishing(text: str) -> str:
            """Finish."""
            return text

    with pytest.raises(TeaError, match="tool 'send_message' takes the name of CORAL's agent-to-agent tool"):
        ws.tools.register(make_tool(done, name="send_message", toolkit="a2a"))
    assert ws.tools.names() == []
    ws.tools.register(make_tool(done, name="done_early"))  # any other name is fine
    assert ws.tools.names() == ["done_early"]


def test_a2t_and_e2t_refuse_a_reserved_name(ws):
    ws.agent("helper", model="tea/demo")
    with pytest.raises(TeaError, match="tool 'todo' takes the name of the agent loop's own action"):
        tx.a2t(ws, "helper", name="todo")

    class Steps:
        def done(self) -> str:
            return "done"

    ws.envs.register(
        EnvironmentRecord(
            name="steps",
            description="An environment with an action named like the loop's own.",
            actions=[ActionSpec(name="done", description="Mark done.", parameters={"type": "object"})],
        ),
        runtime=Steps(),
    )
    with pytest.raises(TeaError, match="tool 'done' takes the name of the agent loop's own action"):
        tx.e2t(ws, "steps", prefix="")
    assert "todo" not in ws.tools and "done" not in ws.tools and "steps" not in ws.toolkits
    lifted = tx.e2t(ws, "steps")  # the default prefix makes steps_done: fine
    assert [t.name for t in lifted.tools] == ["steps_done"]


def test_the_runtimes_own_coral_tools_still_register(ws):
    from tea_notebook.agents.a2a import ensure_toolkit

    ensure_toolkit(ws)
    assert set(A2A_ACTIONS) <= set(ws.tools.names())
    assert refused_name("send_message", "tea_notebook.agents.a2a:send_message") is None
    assert refused_name("send_message", "__main__:send_message") == "CORAL's agent-to-agent tool"
    assert refused_name("send_message", "tea_notebook.agents.a2a:send_message", origin="mcp") is not None


def test_a_tool_cell_defining_a_reserved_name_registers_nothing(ip, tmp_path, monkeypatch):
    from conftest import magics_workspace
    from IPython.core.error import UsageError

    opened = magics_workspace(ip, tmp_path, monkeypatch)
    cell = '''def todo(text: str) -> str:
    """Plan (a person's tool)."""
    return text

def fine(text: str) -> str:
    """Fine."""
    return text
'''
    with pytest.raises((TeaError, UsageError), match="tool 'todo' takes the name of the agent loop's own action"):
        ip.run_cell_magic("tool", "", cell)
    assert opened.tools.names() == []
