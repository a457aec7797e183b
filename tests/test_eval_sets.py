"""Eval sets: configurations × epochs as one named, resumable set; the comparison table with its
intervals, the paired bootstrap checked against the exact bootstrap distribution enumerated here, a
set killed with SIGKILL that resumes without running a finished sample twice. Models are scripted.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from child_processes import kill_9, reaped, wait_for_rows
from prompt_parts import all_text as _text

import tea_notebook
from tea_notebook.errors import TeaError
from tea_notebook.eval import EvalSet, eval_set, paired_bootstrap
from tea_notebook.models.offline import ScriptedModel, call

HERE = Path(__file__).resolve().parent


def _tasks(n):
    return [{"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)]


def _patterned(patterns):
    """Right on the epochs ``patterns[task]`` says, in call order per task."""
    seen: Counter = Counter()

    def script(messages, tools):
        i = int(re.search(r"What is (\d+) \+ 1", _text(messages)).group(1))
        right = patterns[i][seen[i]]
        seen[i] += 1
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1 if right else -1}")

    return ScriptedModel(script)


# A: task means 1, 1, .5, 1, .5, 0 (mean 4/6); B: 0, .5, .5, 0, 0, 0 (mean 1/6)
A = [[1, 1], [1, 1], [1, 0], [1, 1], [0, 1], [0, 0]]
B = [[0, 0], [1, 0], [0, 1], [0, 0], [0, 0], [0, 0]]


def _exact_bootstrap(diffs):
    """Every one of the n^n resamples of the per-task differences: (p-value as paired_bootstrap defines it, means)."""
    n = len(diffs)
    observed = sum(diffs) / n
    means = [sum(diffs[i] for i in pick) / n for pick in itertools.product(range(n), repeat=n)]
    p = sum(abs(m - observed) >= abs(observed) - 1e-12 for m in means) / len(means)
    return p, sorted(means)


@pytest.fixture
def two_models(ws, warm_litellm):
    ws.model_retries = 0
    a, b = _patterned(A), _patterned(B)
    ws.agent("solver", model=a.name, tools=[])
    return ws, a, b


def test_a_set_of_two_configurations_with_epochs_gives_intervals_and_a_paired_test(two_models):
    ws, a, b = two_models
    s = eval_set(ws, "pair", agents=["solver"], models=[a.name, b.name], tasks=_tasks(6), epochs=2, progress="off")
    la, lb = f"solver@{a.id}", f"solver@{b.id}"
    assert isinstance(s, EvalSet) and list(s.members) == [la, lb] and len(a.calls) == len(b.calls) == 12
    rows = {r["config"]: r for r in s.table()}
    means_a = [sum(x) / 2 for x in A]
    sd_a = math.sqrt(sum((m - 4 / 6) ** 2 for m in means_a) / 5)
    assert rows[la]["mean"] == pytest.approx(4 / 6) and rows[la]["stderr"] == pytest.approx(sd_a / math.sqrt(6))
    t5 = 2.570582  # Student's t, 0.975 quantile, 5 df (6 tasks)
    assert rows[la]["ci95_low"] == pytest.approx(4 / 6 - t5 * sd_a / math.sqrt(6), rel=1e-5)
    assert rows[lb]["mean"] == pytest.approx(1 / 6) and rows[la]["pass@k"] == pytest.approx(5 / 6)  # any of 2
    assert rows[lb]["pass^k"] == 0.0 and rows[la]["pass^k"] == pytest.approx(3 / 6) and rows[la]["samples"] == 12
    # the paired test against the exact bootstrap distribution over all 6^6 resamples
    test = s.compare(la, lb, resamples=20_000, seed=7)
    diffs = [sum(x) / 2 - sum(y) / 2 for x, y in zip(A, B)]
    exact_p, exact_means = _exact_bootstrap(diffs)
    assert test.difference == pytest.approx(0.5) and test.n == 6
    assert test.p_value == pytest.approx(exact_p, abs=0.01)
    assert test.ci_low == pytest.approx(exact_means[int(0.025 * len(exact_means))], abs=0.03)
    assert test.ci_high == pytest.approx(exact_means[int(0.975 * len(exact_means))], abs=0.03)
    assert s.compare(la, lb, resamples=20_000, seed=7) == test  # seeded: the same numbers again
    agree = {r["task_id"]: r["agree"] for r in s.agreement(la, lb)}
    assert agree == {"t0": False, "t1": True, "t2": True, "t3": False, "t4": False, "t5": True}
    view = s.agreement_view(la, lb)
    assert (
        view.agree == 3 and "agree on 3 of 6 tasks" in view._repr_html_() and view._repr_html_().count("#ffebe9") == 3
    )
    browser = s[la].browse()
    assert len(browser.select.options) == 12 and browser.select.options[1] == ("✓ t0 e2 · 1", "t0#2")
    browser.select.value = "t2#2"  # picking a row renders that sample's run as a trajectory
    shown = browser.output.outputs[0]["data"]
    assert "application/vnd.tea.trajectory+json" in shown and "text/plain" in shown
    assert shown == ws.trajectory(s[la][("t2", 2)].run_id)._repr_mimebundle_()[0]
    assert shown != ws.trajectory(s[la][("t2", 1)].run_id)._repr_mimebundle_()[0]
    text = s.text()
    assert f"{la}" in text and "0.67 ± " in text and "95% CI" in text and "k=2, 6 tasks" in text
    table, samples = s._repr_html_().split("<details class='tea-eval tea-eval-samples'>")
    assert table.count("<tr>") == 3 and samples.count("<tr>") == 7  # a row per configuration; per task, its samples
    assert samples.count("data-run=") == 24 and f"data-run='{s[la][('t2', 2)].run_id}'" in samples
    fig = s.plot()
    caps = fig.axes[0].lines  # the error bars' caps sit at the interval's ends
    tops = sorted(round(y, 6) for line in caps for y in line.get_ydata())
    assert round(rows[la]["ci95_high"], 6) in tops and round(rows[lb]["ci95_low"], 6) in tops
    # stored: the set loads back, and running it again runs nothing
    again = eval_set(ws, "pair", agents=["solver"], models=[a.name, b.name], tasks=_tasks(6), epochs=2, progress="off")
    assert len(a.calls) == len(b.calls) == 12 and again.table() == s.table()
    loaded = EvalSet.load(ws, "pair")
    assert list(loaded.members) == [la, lb] and loaded.table() == s.table()
    assert {e["name"] for e in ws.evaluations()} == {f"pair:{la}", f"pair:{lb}"}


def test_the_paired_bootstrap_on_a_tiny_example_matches_enumeration():
    a = {"x": 1.0, "y": 1.0, "z": 0.0, "w": 1.0}
    b = {"x": 0.0, "y": 1.0, "z": 0.0, "w": 0.0, "only_b": 1.0}
    test = paired_bootstrap(a, b, resamples=40_000, seed=1)
    p, means = _exact_bootstrap([1.0, 0.0, 0.0, 1.0])  # 256 resamples: p = share with |mean - .5| >= .5
    assert test.n == 4 and test.difference == 0.5 and test.p_value == pytest.approx(p, abs=0.01)
    # only resamples of all ones (2^4 of them: each pick is one of the two ones) or all zeros (2^4) are that far
    assert p == pytest.approx(32 / 256)
    assert "paired bootstrap over 4 tasks" in str(test)
    with pytest.raises(TeaError, match="at least 2 tasks scored by both"):
        paired_bootstrap({"x": 1.0}, {"x": 0.0, "y": 1.0})


def test_identical_configurations_are_refused_before_anything_runs(two_models):
    ws, a, b = two_models
    with pytest.raises(TeaError, match="are identical"):
        eval_set(
            ws,
            "dup",
            configs=[
                {"agent": "solver", "model": a.name, "label": "one"},
                {"agent": "solver", "model": a.name, "label": "two"},
            ],
            tasks=_tasks(3),
            progress="off",
        )
    with pytest.raises(TeaError, match="are identical"):
        eval_set(ws, "dup", agents=["solver", "solver"], models=[a.name], tasks=_tasks(3), progress="off")
    with pytest.raises(TeaError, match="unknown reducer"):
        eval_set(ws, "dup", agents=["solver"], models=[a.name, b.name], tasks=_tasks(3), reducer="mode", progress="off")
    with pytest.raises(TeaError, match="without ':'"):
        eval_set(ws, "a:b", agents=["solver"], tasks=_tasks(3), progress="off")
    assert a.calls == [] and b.calls == [] and ws.evaluations() == []


def test_a_killed_set_resumes_without_running_a_finished_sample_twice(tmp_path, warm_litellm):
    ws_path, log = tmp_path / "ws", tmp_path / "calls.log"
    tasks_file = tmp_path / "tasks.jsonl"
    n = 5
    tasks_file.write_text(
        "".join(
            json.dumps(t) + "\n"
            for t in [{"id": f"t{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(n)]
        )
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = subprocess.Popen(
        [sys.executable, str(HERE / "eval_set_host.py"), str(ws_path), str(tasks_file), "killed", "0.15", str(log)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    db_file = ws_path / "tea.db"
    with reaped(child):
        # the first configuration (10 samples) done, the second under way
        wait_for_rows(child, db_file, "eval_results", 12, poll=0.02)
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        kill_9(child, 10)
    sys.path.insert(0, str(HERE))
    try:
        from eval_set_host import build
    finally:
        sys.path.remove(str(HERE))
    ws = tea_notebook.Workspace(ws_path, embedder="hashing")
    try:
        with sqlite3.connect(db_file) as db:
            kept = {(e, k) for e, k in db.execute("SELECT evaluation, task_id FROM eval_results")}
        assert 12 <= len(kept) < 2 * n * 2
        before = log.read_text().splitlines()
        agents = build(ws, 0.0, str(log))
        s = eval_set(ws, "killed", agents=agents, tasks=tasks_file, epochs=2, progress="off")
        calls = log.read_text().splitlines()[len(before) :]
        assert all(r["mean"] == 1.0 and r["samples"] == 2 * n for r in s.table())
        assert len(calls) == 2 * n * 2 - len(kept)  # only what was not recorded ran again
        assert all(r.attempts == 1 for m in s for r in m)
        # each (configuration, task) ran exactly twice (2 epochs) over both processes, plus at most the one
        # sample in flight at the kill
        ran = Counter(log.read_text().splitlines())
        assert sum(ran.values()) <= 2 * n * 2 + 1 and all(v in (2, 3) for v in ran.values())
    finally:
        ws.close()
