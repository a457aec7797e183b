"""The README's examples run as written (the first two Python blocks) and the two commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _all_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


def _blocks() -> list[str]:
    """Plain Python blocks (the notebook ones start with a magic)."""
    return [b for b in _all_blocks() if not b.startswith("%")]


@pytest.mark.slow
def test_first_examples_run_and_do_what_they_say(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(_blocks()[0], ns)  # noqa: S102 - our own README
    ws = ns["ws"]
    assert (tmp_path / ".tea" / "tea.db").exists()
    assert ws.tools.search("how hot is 30 degrees in fahrenheit", k=1)[0].name == "convert_temperature"
    assert ws.tools.invoke("convert_temperature", {"value": 30}).value == 86.0
    err = ws.tools.invoke("convert_temperature", {"value": "hot"}).error
    assert err["field"] == "value" and err["expected"] == "number"
    exec(_blocks()[1], ns)  # noqa: S102
    with ws.context() as run:
        ws.tools.bind("bump", run)
        assert ws.tools.invoke("bump", {"by": 2}, run).value == 2
        assert ws.tools.invoke("bump", {"by": 3}, run).value == 5
        assert [t.name for t in ws.tools.route(context=run)] == ["bump"]


def test_readme_opens_with_the_two_commands():
    first = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(first) == 2
    assert first[0].startswith("bash scripts/run.sh") and "--headless" in first[0]
    assert first[1].startswith("bash scripts/test.sh")
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow
def test_agent_examples_run_offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEA_MODEL", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    blocks = _blocks()
    agents_at = next(i for i, b in enumerate(blocks) if 'ws.agent("calc"' in b)
    ns: dict = {}
    exec(blocks[0], ns)  # noqa: S102 - our own README
    exec(blocks[agents_at], ns)  # noqa: S102
    result = ns["result"]
    assert result.status == "success" and result.answer.startswith("86.0")
    assert "tea/demo" in result.model and "not an LLM" in result.answer
    assert "convert_temperature" in result.trajectory.text()
    exec(blocks[agents_at + 1], ns)  # noqa: S102 - the ScriptedModel example
    last = ns["ws"].runs(1)[0]
    assert last["status"] == "success" and last["answer"] == "86 °F"


@pytest.mark.slow
def test_notebook_examples_run_in_a_shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEA_MODEL", raising=False)
    blocks = _all_blocks()
    start = next(i for i, b in enumerate(blocks) if b.startswith("%load_ext tea_notebook"))
    ip = InteractiveShell.instance()
    try:
        for block in blocks[start : start + 3]:
            outcome = ip.run_cell(block)
            assert outcome.success, outcome.error_in_exec or outcome.error_before_exec
        result = ip.user_ns["result"]
        assert result.status == "success" and result.answer.startswith("86.0")
        assert (tmp_path / ".tea" / "tea.db").exists()
    finally:
        from tea_notebook.workspace import current_workspace

        opened = current_workspace(required=False)
        if opened is not None:
            opened.close()  # the magics made it current; leave no current workspace behind
        InteractiveShell.clear_instance()


def test_environment_examples_run_and_do_what_they_say(ws):
    section = README[README.index("\n## Environments\n") : README.index("\n## Layout")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    ns: dict = {"ws": ws}
    exec(blocks[0], ns)  # noqa: S102 - our own README: an agent run with the offline model, then direct calls
    assert ws.envs.sessions() == []  # the example ends with release()
    assert ws.envs.invoke("python", "run_python", {"code": "x = 6 * 7\nx"}).value == "value: 42"
    exec(blocks[2], ns)  # noqa: S102 - the sandbox boundary, used directly
    box = ns["box"]
    assert box.boundary is not None and box.pid is None  # killed at the end of the example
    if box.boundary.mechanism == "bubblewrap":
        assert box.boundary.describe().startswith("bubblewrap: uid 65534 in its own user/pid/")
    exec(blocks[3], ns)  # noqa: S102 - a custom environment
    assert ws.envs.invoke("thermostat", "set_temperature", {"celsius": 21}).value == "set to 21 °C"
    assert ws.envs.state("thermostat") == "21 °C"
    assert [a.name for a in ws.envs.get("thermostat").actions] == ["set_temperature"]
    ws.envs.release()
