"""Evaluation views that tell the truth: a sample's trajectory shows the scorer's verdict, scores,
target and scorer beside the agent's own status; the results table's rows and an eval set's samples
open their runs; the headline counts over one named denominator, a provider failure once; the
Inspect log keeps each model call's text; and every tutorial's imports are installed by
``bash scripts/run.sh`` (read from pyproject.toml, no network). Models are scripted
(``tea/script:...``, not LLMs).
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import json
import re
import sqlite3
import sys
import tomllib
from pathlib import Path

import litellm
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import tea_notebook
from tea_notebook.eval import eval_set, evaluate, tool_called
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime.render import MIME_TYPE

ROOT = Path(__file__).resolve().parent.parent


def _text(messages):
    return " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))


def _tasks():
    return [{"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]


MEMO = '{"memory": "%d + 1 is not looked up yet"}'


def _scorer(answer, expected):
    """Exact, except that it raises on "boom" (the scorer's error: that sample's error, scored wrong)."""
    if answer == "boom":
        raise ValueError("cannot read boom")
    return answer.strip() == expected.strip()


@pytest.fixture
def scored(ws, warm_litellm):
    """Six tasks: t0, t1, t3, t4 right; t2 wrong although the agent says it succeeded; t5's scorer
    raises (an error, scored wrong); t9-style provider failures on a second evaluation below."""
    ws.model_retries = 0

    @ws.tools.tool
    def lookup(q: str) -> str:
        """Look a sum up."""
        return f"the sum is {eval(q, {}, {})}" if re.fullmatch(r"[\d+ ]+", q) else "Error: not a sum"

    def script(messages, tools):
        text = _text(messages)
        i = int(re.search(r"What is (\d+) \+ 1", text).group(1))
        said = re.search(r"the sum is (\d+)", text)
        if not said:
            # the text beside the call holds no "thinking": the step records none, the model said this
            return {"content": MEMO % i, "tool_calls": [call("lookup", q=f"{i} + 1")]}
        answer = {2: "4", 5: "boom"}.get(i, said.group(1))
        return call("done", success=True, text=f"FINAL ANSWER: {answer}")

    ws.agent("looker", model=ScriptedModel(script).name, tools=["lookup"])
    results = evaluate(
        ws, "looker", _tasks(), name="sums", scorer=_scorer, checks=[tool_called("lookup")], progress="off"
    )
    return ws, results


def test_a_wrong_sample_shows_the_scorers_verdict_target_and_scorer_beside_the_agents_success(scored):
    ws, results = scored
    wrong = results["t2"]
    assert (wrong.run_status, wrong.correct) == ("success", False)
    data, _ = ws.trajectory(wrong.run_id)._repr_mimebundle_()
    payload = data[MIME_TYPE]
    assert payload["status"] == "success"  # the agent's own status stays as it was
    sample = payload["evaluation"]
    assert sample == {
        "name": "sums",
        "task_id": "t2",
        "epoch": 1,
        "verdict": "wrong",
        "scores": {"correct": 0.0, "tool_called:lookup": 1.0},
        "target": "3",
        "answer": "4",
        "scorer": "_scorer",
        "note": "",
        "error": "",
    }
    page = data["text/html"]
    assert "✗ wrong</span>" in page and "scored by _scorer" in page and "evaluation <b>sums</b>, task t2" in page
    assert "target:</span> <code>3</code>" in page and "scored answer:</span> <code>4</code>" in page
    assert "correct 0, tool_called:lookup 1" in page and "the agent&#x27;s own, not the score" in page
    right = ws.trajectory(results["t1"].run_id)._repr_mimebundle_()[0][MIME_TYPE]["evaluation"]
    assert (right["verdict"], right["scores"]["correct"]) == ("right", 1.0)
    boom = ws.trajectory(results["t5"].run_id)._repr_mimebundle_()[0][MIME_TYPE]["evaluation"]
    assert boom["verdict"] == "error" and boom["error"] == "the scorer _scorer raised ValueError: cannot read boom"


def test_a_run_no_evaluation_scored_has_no_verdict(scored):
    ws, _ = scored
    plain = ws.agent("plain", model=ScriptedModel([call("done", success=True, text="hi")]).name, tools=[])
    result = plain.run_sync("say hi")
    data, _ = ws.trajectory(result.run_id)._repr_mimebundle_()
    assert "evaluation" not in data[MIME_TYPE] and "scored by" not in data["text/html"]


def test_a_scored_run_shown_after_its_workspace_closed_still_shows_with_its_score(tmp_path, warm_litellm):
    """A trajectory held past ``ws.close()`` reads what it had not read yet from the file (read-only)."""
    ws = tea_notebook.Workspace(tmp_path / "closing", embedder="hashing")
    agent = ws.agent("once", model=ScriptedModel([call("done", success=True, text="FINAL ANSWER: 1")]).name, tools=[])
    results = evaluate(ws, agent, _tasks()[:1], name="once", progress="off")
    traj = ws.trajectory(results["t0"].run_id)
    ws.close()
    data, _ = traj._repr_mimebundle_()
    assert data[MIME_TYPE]["status"] == "success" and "evaluation" in data[MIME_TYPE]
    assert data[MIME_TYPE]["steps"]  # its steps, read after the close
    with pytest.raises(sqlite3.ProgrammingError):  # writing stays refused
        ws.db.set_meta("after", "close")


def test_the_headline_counts_over_the_scored_samples_and_a_provider_failure_once(ws, warm_litellm):
    ws.model_retries = 0

    def script(messages, tools):
        i = int(re.search(r"What is (\d+) \+ 1", _text(messages)).group(1))
        if i in (4, 5):
            raise litellm.ServiceUnavailableError("503 down", llm_provider="openai", model="x")
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1 if i != 3 else 0}")

    ws.agent("flaky", model=ScriptedModel(script).name, tools=[])
    results = evaluate(ws, "flaky", _tasks(), name="flaky", retries=0, fail_on_error=False, progress="off")
    # t0..t2 right, t3 wrong, t4 and t5 the provider's: 3 of the 4 scored samples right
    assert (results.correct, results.scored, results.agent_errors, results.infra_errors) == (3, 4, 0, 2)
    headline = results.headline()
    assert "accuracy 0.75 ± " in headline and "(k=1, 4 tasks)" in headline
    assert "3 of 4 scored samples correct" in headline and "0 errors (scored wrong)" in headline
    assert "2 provider failures (not scored)" in headline and "%" not in headline
    summary = results.summary()
    assert (summary["scored"], summary["agent_errors"], summary["accuracy"]) == (4, 0, 0.75)
    # the provider's failures are not "errors" of the eval set's table either
    down = ws.trajectory(results["t4"].run_id)._repr_mimebundle_()[0][MIME_TYPE]["evaluation"]
    assert down["verdict"] == "not scored" and down["scores"] == {}


def test_results_rows_and_eval_set_samples_open_their_runs(scored, ws):
    _, results = scored
    page = results._repr_html_()
    for r in results:
        assert f"<tr data-run='{r.run_id}' title='open the run of {r.key}'>" in page
    model = ScriptedModel(lambda m, t: call("done", success=True, text="FINAL ANSWER: 2"))
    s = eval_set(ws, "pair", agents=["looker"], models=[model.name], tasks=_tasks()[:2], progress="off")
    grid = s._repr_html_()
    samples = grid[grid.index("<details class='tea-eval tea-eval-samples'>") :]
    member = next(iter(s))
    for r in member:
        assert f"<span data-run='{r.run_id}' title=" in samples  # inside .tea-eval: the extension opens it
    assert "✓" in samples and "✗" in samples  # t1 right (2), t0 wrong


def test_the_inspect_log_keeps_each_model_calls_text(scored, tmp_path):
    pytest.importorskip("inspect_ai")
    from inspect_ai.log import read_eval_log

    ws, results = scored
    assert ws.trajectory(results["t2"].run_id).steps[0].thinking == ""  # nothing but the model's text has it
    log = read_eval_log(str(results.to_inspect(tmp_path / "sums.eval")))
    sample = next(s for s in log.samples if s.id == "t2")
    first = next(m for m in sample.messages if m.role == "assistant" and m.tool_calls)
    assert first.text == MEMO % 2 and first.tool_calls[0].function == "lookup"
    model_event = next(e for e in sample.events if e.event == "model")
    assert model_event.output.message.text == MEMO % 2


# -- the tutorials' imports against what scripts/run.sh installs ----------------------------------

#: library calls in a tutorial that import an optional module when they run
_LAZY_IMPORTS = {".to_pandas(": "pandas", ".to_inspect(": "inspect_ai", 'engine="ray"': "ray"}


def _run_sh_extras() -> list[str]:
    """The extras scripts/run.sh installs: the argument it sources scripts/setup.sh with."""
    text = (ROOT / "scripts" / "run.sh").read_text()
    found = re.search(r'setup\.sh"\s+([\w,-]+)', text)
    assert found, "scripts/run.sh no longer sources setup.sh with its extras"
    return found.group(1).split(",")


def _closure(project: dict, extras: list[str]) -> set[str]:
    """Every distribution installing the project with ``extras`` brings (names canonical), from
    pyproject.toml for the project and from the installed packages' metadata below it."""
    name = canonicalize_name(project["name"])
    env = default_environment()
    todo = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        todo += [Requirement(r) for r in project["optional-dependencies"][extra]]
    seen: dict[str, set[str]] = {}
    while todo:
        req = todo.pop()
        dist = canonicalize_name(req.name)
        if dist == name:  # the project's own extra (tea_notebook[inspect])
            for extra in req.extras - seen.setdefault(dist, set()):
                seen[dist].add(extra)
                todo += [Requirement(r) for r in project["optional-dependencies"][extra]]
            continue
        wanted = set(req.extras) | {""}
        if dist in seen and wanted <= seen[dist]:
            continue
        seen.setdefault(dist, set()).update(wanted)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: counted, not expanded
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({**env, "extra": e}) for e in wanted):
                todo.append(sub)
    return set(seen) - {name}


def _tutorial_imports(path: Path) -> set[str]:
    """Top-level modules a tutorial's code cells import (magic lines and prose cell magics left out)."""
    modules: set[str] = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if source.lstrip().startswith("%%"):
            if not source.lstrip().startswith("%%tool"):
                continue  # %%agent and the like: the body is a task in words
            source = source.split("\n", 1)[1] if "\n" in source else ""
        lines = []
        for line in source.splitlines():
            stripped = line.lstrip()
            if stripped.startswith(("%", "!")):
                continue
            lines.append(re.sub(r"=\s*%.*$", "= None", line))
        tree = ast.parse("\n".join(lines))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.add(node.module.split(".")[0])
        modules.update(module for call_text, module in _LAZY_IMPORTS.items() if call_text in source)
    return {m for m in modules if m not in sys.stdlib_module_names}


def test_every_tutorials_imports_are_installed_by_run_sh_and_it_stays_torch_free():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = _run_sh_extras()
    assert all(e in project["optional-dependencies"] for e in extras), extras
    installed = _closure(project, extras)
    assert "torch" not in installed, "the default install (run.sh) must stay torch-free"
    providers = metadata.packages_distributions()
    own = canonicalize_name(project["name"])
    missing = {}
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert len(notebooks) >= 8
    for notebook in notebooks:
        for module in sorted(_tutorial_imports(notebook) - {"tea_notebook"}):  # an editable install maps no module
            dists = {canonicalize_name(d) for d in providers.get(module, [])}
            assert dists, f"{notebook.name} imports {module}, which no installed package provides"
            if own in dists:
                continue
            if not dists & installed:
                missing.setdefault(notebook.name, []).append(f"{module} ({', '.join(sorted(dists))})")
    assert not missing, f"tutorials import what bash scripts/run.sh (extras {extras}) does not install: {missing}"


def test_the_lab_extra_without_inspect_would_be_caught():
    """The check above is not vacuous: tutorial 07 needs Inspect AI, which the bare install lacks;
    the lab extra carries the inspect extra's pins (the same versions, so both install alike)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = _closure(project, [])
    assert "inspect-ai" not in installed
    assert "inspect_ai" in _tutorial_imports(ROOT / "notebooks" / "07_evaluation.ipynb")
    extras = project["optional-dependencies"]
    assert set(extras["inspect"]) <= set(extras["lab"])
