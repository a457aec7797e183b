"""The README's examples run as written (the first two Python blocks) and the two commands exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _all_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


def notebook_section() -> str:
    """The README's "In a notebook" section."""
    start = README.index("\n## In a notebook\n")
    return README[start : README.index("\n## ", start + 5)]


def inline_examples(text: str) -> list[str]:
    """The inline code spans of ``text`` that are runnable statements, not syntax templates: Python
    (IPython syntax allowed after an assignment: ``tools = %tea tools``) that parses, is not a magic
    line of its own (``%tea model [NAME]``, ``%config …`` change settings or are templates), and uses
    a name: whether the name exists is for :func:`run_inline_examples` to see."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    out = []
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # fenced blocks run elsewhere
    for span in (" ".join(x.split()) for x in re.findall(r"(?<!`)`([^`]+)`(?!`)", prose)):
        if span.lstrip().startswith(("%", "!")) or "…" in span or "..." in span:
            continue
        try:
            tree = ast.parse(transform(span))
        except (SyntaxError, ValueError):
            continue
        if len(tree.body) == 1 and any(isinstance(n, ast.Name) for n in ast.walk(tree)):
            out.append(span)
    return out


def run_inline_examples(ip, text: str) -> list[str]:
    """Run, in order, each inline example of ``text`` that assigns from a magic (``tools = %tea
    tools``) or uses an object the notebook defined (``tools.detail(...)``, ``result.plot()``);
    examples naming objects never defined (``job.error`` of another example) are skipped. An example
    that fails is an assertion error naming it. Returns the examples that ran."""
    import builtins

    ran = []
    for span in inline_examples(text):
        tree = ast.parse(ip.transform_cell(span))
        names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
        bound = {n.id for n in names if isinstance(n.ctx, ast.Store)}
        used = {n.id for n in names if isinstance(n.ctx, ast.Load)} - bound - {"get_ipython"}
        defined = set(ip.user_ns) - set(vars(builtins))
        if not (used & defined if used else bound) or not used <= defined | set(vars(builtins)):
            continue
        outcome = ip.run_cell(span)
        assert outcome.success, f"README example `{span}` failed: {outcome.error_in_exec or outcome.error_before_exec}"
        ran.append(span)
    return ran


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
    # the demo model cannot check its answer: 'unverified', as the README says (not 'success')
    assert result.status == "unverified" and result.answer.startswith("86.0")
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
        assert result.status == "unverified" and result.answer.startswith("86.0")  # the demo model
        assert (tmp_path / ".tea" / "tea.db").exists()
        # the inline examples of the section run as written too, on what its cells defined
        ran = run_inline_examples(ip, notebook_section())
        assert any(x.startswith("tools.detail(") for x in ran) and "tools = %tea tools" in ran, ran
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


@pytest.mark.slow
def test_the_batch_evaluation_example_runs_offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEA_MODEL", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    section = README[README.index("\n### Batch evaluation\n") : README.index("\n### The `tea` command")]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    ns: dict = {}
    exec(block, ns)  # noqa: S102 - our own README
    try:
        results, more = ns["results"], ns["more"]
        assert results.headline().startswith("evaluation sample-demo: 5/5 done · 0 correct (0.0%) · 0 errors")
        assert results.headline().endswith("model tea/demo (scripted, not an LLM)")
        assert (more.skipped, len(more)) == (5, 8)
        assert list(ns["table"].index)[:2] == ["sample-01", "sample-02"]
    finally:
        ns["ws"].close()
