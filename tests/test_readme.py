"""The README is a short front page: the two commands first, a tour whose Python blocks run in order in
one fresh kernel, and links that lead somewhere. (The guides' examples run in tests/test_docs_examples.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from docs_examples import printed, python_blocks, run_page

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MAGICS_PAGE = ROOT / "docs" / "guide" / "magics.md"


def notebook_section() -> str:
    """The magics guide's "In a notebook" section (it was the README's): prose with inline examples."""
    text = MAGICS_PAGE.read_text()
    start = text.index("\n## In a notebook\n")
    end = text.find("\n## ", start + 5)
    return text[start : end if end != -1 else len(text)]


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


def test_readme_opens_with_the_two_commands():
    first = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(first) == 2
    assert first[0].startswith("bash scripts/run.sh") and "--headless" in first[0]
    assert first[1].startswith("bash scripts/test.sh")
    assert README.index("```bash") < README.index("```python")  # the commands come first
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    assert "scripts/docs.sh" in README and (ROOT / "scripts" / "docs.sh").is_file()  # how to build the docs


def test_readme_is_a_short_front_page_whose_links_lead_somewhere():
    assert len(README.encode()) < 8_000, "the README is a front page: guides go to docs/"
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert not missing, missing


def test_the_tour_never_assumes_python_on_path_nor_switches_the_embedder():
    code = "\n".join(b.code for b in python_blocks(README))
    assert "embedder=" not in code
    assert not re.search(r"(^|[\s\"'\[])python3?\s+-m\b", code)
    assert all(b.skip is None for b in python_blocks(README)), "every tour block runs"


TOUR_CHECKS = [
    # what the tour says it did, checked in the same kernel after its last block
    """
import tea_notebook as tn
assert ws is tn.workspace.current_workspace() and (ws.path / "tea.db").exists()
assert ws.tools.search("how hot is 30 degrees in fahrenheit", k=1)[0].name == "convert_temperature"
assert ws.tools.invoke("convert_temperature", {"value": 30}).value == 86.0
err = ws.tools.invoke("convert_temperature", {"value": "hot"}).error
assert err["type"] == "ValidationError" and err["field"] == "value" and err["expected"] == "number", err
# the demo model cannot check its answer: 'unverified', as the tour says (not 'success')
assert result.status == "unverified" and result.answer.startswith("86.0"), result.answer
assert "tea/demo" in result.model and "not an LLM" in result.answer
assert "convert_temperature" in result.trajectory.text()
assert scripted.status == "success" and scripted.answer == "86 °F"
last = ws.runs(1)[0]
assert last["status"] == "success" and last["answer"] == "86 °F"
assert "minilm" in ws.embedder.id.lower(), ws.embedder.id  # the default embedder, never switched by the tour
print("checked")
""",
]


@pytest.mark.slow
def test_the_tour_runs_in_order_in_one_fresh_kernel(tmp_path, monkeypatch):
    monkeypatch.delenv("TEA_MODEL", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    nb = run_page(ROOT / "README.md", tmp_path, checks=TOUR_CHECKS)
    assert printed(nb).strip() == "checked"
    blocks = python_blocks(README)
    assert len(blocks) >= 6 and blocks[0].code.startswith("%load_ext tea_notebook")
    # what the blocks print is what their comments say
    outs = [printed(nb, i) for i in range(len(blocks))]
    assert outs[3].startswith("unverified · 86.0"), outs[3]
    assert outs[4].split() == ["convert_temperature", "86.0", "value"], outs[4]
    assert outs[5].strip() == "success 86 °F", outs[5]
    assert (tmp_path / ".tea" / "tea.db").exists()
