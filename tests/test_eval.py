"""Batch evaluation (tea_notebook.eval): GAIA's scorer, task files, the runner with its limits,
resume after a real SIGKILL, results, plots, progress, the magic and the CLI, and Ray run locally.

Every agent here is scripted (``tea/script:...``, not an LLM); the database is the real SQLite file.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_processes import kill_9, reaped, wait_for_rows
from hypothesis import given, settings
from hypothesis import strategies as st

import tea_notebook
from tea_notebook.errors import TeaError
from tea_notebook.eval import (
    JUDGE_PROMPT,
    EvalResults,
    LLMJudge,
    TaskFileError,
    evaluate,
    extract_final_answer,
    gaia_score,
    load_tasks,
)
from tea_notebook.eval.scoring import is_number
from tea_notebook.models.offline import ScriptedModel, call

HERE = Path(__file__).resolve().parent


# -- GAIA's scorer -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer, truth, expected",
    [
        ("17", "17", True),
        ("17.0", "17", True),
        ("$1,234.50", "1234.5", True),
        ("45%", "45", True),
        (" 3 ", "3", True),
        ("3 apples", "3", False),  # only $ % , are stripped from numbers
        ("17", "18", False),
        ("seventeen", "17", False),
        ("Agnes Trevail", "agnes trevail", True),
        ("Agnes-Trevail.", "Agnes Trevail", True),  # punctuation and whitespace removed for strings
        ("Agnes", "Agnes Trevail", False),
        ("Mercury, Venus", "Mercury, Venus", True),
        ("mercury;venus", "Mercury, Venus", True),  # lists split on , and ;
        ("Venus, Mercury", "Mercury, Venus", False),  # order matters
        ("Mercury, Venus, Earth", "Mercury, Venus", False),  # lengths must agree
        ("1,000, 2", "1000, 2", False),  # the answer splits into three elements
        ("1.0; 2", "1, 2", True),  # numbers in a list compare as numbers
        ("St. Ives, Penzance", "St Ives, Penzance", False),  # list strings keep their punctuation
        (None, "None", True),
        ("", "x", False),
    ],
)
def test_gaia_score_follows_the_published_rules(answer, truth, expected):
    assert gaia_score(answer, truth) is expected


@settings(max_examples=150, deadline=None)
@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False).map(lambda x: round(x, 2)))
def test_gaia_numbers_match_whatever_the_formatting(x):
    truth = repr(x)
    assert gaia_score(f"${x:,}", truth)
    assert gaia_score(f"{x}%", truth)
    assert not gaia_score(repr(x + 1), truth)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(whitelist_categories=("Ll", "Lu")), min_size=1, max_size=12))
def test_gaia_strings_ignore_case_spacing_and_punctuation(word):
    if word.lower() != word.upper().lower():  # letters whose case does not round-trip (ß, ǅ)
        return
    if is_number(word):  # "nan", "inf", "Infinity" read as numbers: the numeric rule applies
        return
    assert gaia_score(f"  {word.upper()} !", word)
    assert gaia_score(" ".join(word), word)
    assert not gaia_score(word + "zq", word)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["Mars", "Venus", "Earth", "Saturn", "Io"]), min_size=2, max_size=5, unique=True))
def test_gaia_lists_compare_element_by_element_in_order(items):
    truth = ", ".join(items)
    assert gaia_score(";".join(i.upper() for i in items), truth)
    assert not gaia_score(", ".join(reversed(items)), truth)
    assert not gaia_score(", ".join(items[:-1]), truth)


def test_the_final_answer_is_taken_from_the_template():
    assert extract_final_answer("I reasoned a lot.\nFINAL ANSWER: 42") == "42"
    assert extract_final_answer("final answer:  x\nFinal Answer: y ") == "y"
    assert extract_final_answer("  just this ") == "just this"
    assert extract_final_answer(None) == ""


# -- task files -----------------------------------------------------------------------------------
def _gaia_folder(tmp_path: Path, rows: list[dict], files: dict[str, str] | None = None) -> Path:
    folder = tmp_path / "gaia"
    folder.mkdir(exist_ok=True)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _row(i: int, **extra) -> dict:
    return {
        "task_id": f"g{i}",
        "Question": f"What is {i} + {i}?",
        "Level": 1 + i % 3,
        "Final answer": str(2 * i),
        "file_name": "",
        **extra,
    }


def test_gaia_files_load_with_attachments_and_levels(tmp_path):
    folder = _gaia_folder(tmp_path, [_row(1), _row(2, file_name="note.txt")], {"note.txt": "hello"})
    tasks = load_tasks(folder)
    assert [t.id for t in tasks] == ["g1", "g2"] and tasks[0].files == []
    assert tasks[1].files == [str(folder / "note.txt")] and tasks[1].level == "3" and tasks[1].answer == "4"
    assert load_tasks(folder / "metadata.jsonl")[1].files == tasks[1].files


def test_plain_jsonl_and_csv_load(tmp_path):
    jsonl = tmp_path / "qa.jsonl"
    jsonl.write_text('{"question": "2+2?", "answer": "4"}\n\n{"id": "b", "question": "3+3?", "answer": 6}\n')
    assert [(t.id, t.answer) for t in load_tasks(jsonl)] == [("line-1", "4"), ("b", "6")]
    table = tmp_path / "qa.csv"
    table.write_text('id,question,answer,level\nx,Capital of France?,Paris,1\ny,"1,2 or 3?","1, 2",2\n')
    tasks = load_tasks(table)
    assert [(t.id, t.question, t.answer, t.level) for t in tasks] == [
        ("x", "Capital of France?", "Paris", "1"),
        ("y", "1,2 or 3?", "1, 2", "2"),
    ]


@pytest.mark.parametrize(
    "rows, files, line, field, problem",
    [
        ([_row(1), {"task_id": "g2", "Level": 1, "Final answer": "x", "file_name": ""}], {}, 2, "Question", "missing"),
        ([_row(1), _row(2, file_name="gone.pdf")], {}, 2, "file_name", "attachment 'gone.pdf' not found"),
        (
            [_row(1), _row(2), {**_row(3), "task_id": "g1"}],
            {},
            3,
            "task_id",
            "duplicate task id 'g1' (first on line 1)",
        ),
        ([_row(1), {k: v for k, v in _row(2).items() if k != "Final answer"}], {}, 2, "Final answer", "missing"),
    ],
)
def test_bad_task_files_are_refused_before_anything_runs(ws, tmp_path, rows, files, line, field, problem):
    folder = _gaia_folder(tmp_path, rows, files)
    model = ScriptedModel(lambda m, t: call("done", success=True, text="x"))
    agent = ws.agent("never", model=model.name, tools=[])
    with pytest.raises(TaskFileError) as caught:
        evaluate(ws, agent, folder, name="bad", progress="off")
    message = str(caught.value)
    assert str(folder / "metadata.jsonl") in message and f"line {line}" in message and f"field {field!r}" in message
    assert problem in message
    assert model.calls == [] and ws.runs() == [] and ws.evaluations() == []


def test_a_broken_json_line_names_its_line(tmp_path):
    bad = tmp_path / "qa.jsonl"
    bad.write_text('{"question": "a", "answer": "b"}\n{"question": "c", \n')
    with pytest.raises(TaskFileError, match=r"qa.jsonl, line 2: not JSON"):
        load_tasks(bad)


# -- the runner ----------------------------------------------------------------------------------------
def _sum_solver(messages, tools):
    """Scripted: answers 'What is A + B?' with the sum, wrongly when A is 3; reads an attached file."""
    text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    attached = re.search(r"Attached files \(absolute paths\): ([^\s<]+)", text)
    if attached:
        return call("done", success=True, text=f"FINAL ANSWER: {Path(attached.group(1)).read_text().strip()}")
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", text).groups())
    return call("done", success=True, text=f"Thinking... FINAL ANSWER: {a + b + (1 if a == 3 else 0)}")


def _sum_tasks(n: int) -> list[dict]:
    return [
        {"id": f"t{i}", "question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1), "level": 1 + i % 2}
        for i in range(n)
    ]


@pytest.fixture
def solver(ws, warm_litellm):
    model = ScriptedModel(_sum_solver)
    return ws.agent("solver", model=model.name, tools=[]), model


def test_an_evaluation_scores_stores_and_shows_every_task(ws, solver, tmp_path):
    agent, model = solver
    folder = _gaia_folder(tmp_path, [_row(i) for i in range(1, 5)] + [_row(5, file_name="n.txt")], {"n.txt": "10\n"})
    results = evaluate(ws, agent, folder, name="first", progress="off")
    assert isinstance(results, EvalResults) and len(results) == 5 and results.total == 5
    assert [r.correct for r in results] == [True, True, False, True, True]  # the script is wrong on 3 + 3
    assert results["g3"].answer == "7" and results["g3"].raw_answer.startswith("Thinking")
    assert results.accuracy == pytest.approx(0.8) and results.errors == 0
    assert results.by_level()["1"] == {"tasks": 1, "correct": 0, "accuracy": 0.0}  # g3 is level 1
    # the attachment reached the run as a file, as %%agent --file does
    started = [e for e in ws.events.events(results["g5"].run_id) if e.type == "run_started"][0]
    assert started.data["files"] == [str(folder / "n.txt")]
    # stored: a fresh load from the database gives the same table
    again = ws.evaluation("first")
    assert [(r.task_id, r.correct, r.run_id) for r in again] == [(r.task_id, r.correct, r.run_id) for r in results]
    assert again.config["model_display"] == f"{model.name} (scripted, not an LLM)"
    assert "scripted, not an LLM" in results.headline() and "scripted, not an LLM" in results._repr_html_()
    # every row opens its trajectory
    traj = results.trajectory("g2")
    assert traj.run_id == results["g2"].run_id and traj.status == "success"
    rows = results.to_list()
    assert rows[0]["task_id"] == "g1" and rows[0]["tokens"] > 0 and rows[0]["steps"] == 1
    frame = results.to_pandas()
    assert list(frame.index) == ["g1", "g2", "g3", "g4", "g5"] and frame.loc["g3", "correct"] == False  # noqa: E712
    html = results._repr_html_()
    assert html.count("<tr>") == 1 and html.count("<tr data-run=") == 5  # the head, and a row per task opening its run
    assert "g5" in html and f"<tr data-run='{results['g5'].run_id}'" in html


def test_a_rerun_resumes_and_retries_errors_only_when_asked(ws, solver):
    agent, model = solver
    tasks = _sum_tasks(6)
    tasks[4]["question"] = "Unparseable question"  # the script raises on it: that task's run ends in error
    first = evaluate(ws, agent, tasks, name="resume", progress="off")
    assert len(first) == 6 and first.errors == 1 and "t4" in [r.task_id for r in first if r.status == "error"]
    assert "ScriptError" in first["t4"].error or "raised" in first["t4"].error
    calls = len(model.calls)
    second = evaluate(ws, agent, tasks, name="resume", progress="off")
    assert len(model.calls) == calls  # nothing ran again
    assert second.skipped == 6 and [r.correct for r in second] == [r.correct for r in first]
    tasks[4]["question"] = "What is 4 + 5?"  # fixed; the same id
    third = evaluate(ws, agent, tasks, name="resume", progress="off", retry_errors=True)
    assert len(model.calls) == calls + 1  # only the errored task ran again
    assert third.errors == 0 and third["t4"].correct and third["t4"].attempts == 2 and third["t0"].attempts == 1
    with sqlite3.connect(ws.path / "tea.db") as db:
        assert db.execute("SELECT count(*) FROM eval_results WHERE evaluation='resume'").fetchone()[0] == 6
    assert ws.evaluations()[0]["tasks"] == 6 and ws.evaluations()[0]["correct"] == 5


def test_resuming_a_name_with_another_model_or_scorer_is_refused(ws, solver):
    agent, model = solver
    tasks = _sum_tasks(3)
    evaluate(ws, agent, tasks, name="setup", progress="off")
    other = ScriptedModel(_sum_solver)
    with pytest.raises(TeaError, match=r"evaluation 'setup' already has results with another setup \(model: "):
        evaluate(ws, agent, tasks, name="setup", model=other.name, progress="off")
    with pytest.raises(TeaError, match=r"scorer: "):
        evaluate(ws, agent, tasks, name="setup", scorer="exact", progress="off")
    assert len(ws.evaluation("setup")) == 3  # nothing of the refused runs was stored
    # limits and a larger task set may change under the same name
    more = evaluate(ws, agent, _sum_tasks(4), name="setup", concurrency=2, timeout=30, progress="off")
    assert len(more) == 4 and more.skipped == 3


def test_a_killed_evaluation_loses_at_most_the_tasks_in_flight(tmp_path, warm_litellm):
    ws_path = tmp_path / "ws"
    tasks_file = tmp_path / "tasks.jsonl"
    n = 14
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in _sum_tasks(n)))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = subprocess.Popen(
        [sys.executable, str(HERE / "eval_host.py"), str(ws_path), str(tasks_file), "killed", "0.25", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with reaped(child):
        seen = wait_for_rows(child, ws_path / "tea.db", "eval_results", 4)
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert 4 <= seen < n, f"saw {seen} results before the kill"
        kill_9(child, 10)
    assert child.returncode == -signal.SIGKILL
    ws = tea_notebook.Workspace(ws_path, embedder="hashing")  # opening marks the dead process's runs interrupted
    try:
        kept = {r.task_id for r in ws.evaluation("killed")}
        assert len(kept) >= seen  # nothing that was recorded was lost
        interrupted = [r for r in ws.db.runs(100) if r["status"] == "interrupted"]
        assert len(interrupted) <= 2  # at most the tasks in flight (concurrency 2)

        @ws.tools.tool
        async def slow_lookup(question: str) -> str:
            """Look the question up (slowly)."""
            return "looked up"

        asked: list[str] = []

        def resume_solver(messages, tools):
            text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
            a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", text).groups())
            asked.append(f"{a}")
            return call("done", success=True, text=f"FINAL ANSWER: {a + b}")

        model = ScriptedModel(resume_solver, name="host")  # the same model as before the kill
        agent = ws.agent("solver", model=model.name, tools=["slow_lookup"])
        results = evaluate(ws, agent, tasks_file, name="killed", progress="off", concurrency=2)
        assert len(results) == n and results.correct == n and results.errors == 0
        assert len(asked) == n - len(kept)  # only the unfinished tasks ran again
        assert sorted(asked, key=int) == sorted((t["id"][1:] for t in _sum_tasks(n) if t["id"] not in kept), key=int)
        assert all(r.attempts == 1 for r in results)  # never counted twice
        with sqlite3.connect(ws_path / "tea.db") as db:
            assert db.execute("SELECT count(*) FROM eval_results").fetchone()[0] == n
    finally:
        ws.close()


def test_a_stop_keeps_what_finished_and_a_rerun_completes(ws, warm_litellm):
    import threading

    stop = threading.Event()
    asked: list[str] = []

    def script(messages, tools):
        text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        n = re.search(r"What is (\d+)", text).group(1)
        asked.append(n)
        if len(asked) == 3:
            stop.set()  # what the kernel's stop button does to %tea eval / ws.evaluate
        return call("done", success=True, text=f"FINAL ANSWER: {2 * int(n) + 1}")

    agent = ws.agent("stoppable", model=ScriptedModel(script).name, tools=[])
    first = evaluate(ws, agent, _sum_tasks(8), name="stopped", stop=stop, progress="off")
    assert first.stopped.startswith("stopped by the user") and 2 <= len(first) <= 3
    assert all(r.correct for r in first)
    rest = evaluate(ws, agent, _sum_tasks(8), name="stopped", progress="off")
    assert len(rest) == 8 and rest.correct == 8 and rest.stopped is None and rest.skipped == len(first)
    assert len(asked) in (8, 9)  # at most the one task in flight at the stop ran twice


# -- limits: timeout, steps, tokens, cost -----------------------------------------------------------
def test_a_hanging_task_times_out_as_an_error_and_the_evaluation_goes_on(ws, warm_litellm):
    @ws.tools.tool
    async def wait_for(seconds: float) -> str:
        """Wait a number of seconds."""
        await asyncio.sleep(seconds)
        return "waited"

    def script(messages, tools):
        text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        if "hang" in text and "waited" not in text:
            return call("wait_for", seconds=600)
        return call("done", success=True, text="FINAL ANSWER: ok")

    model = ScriptedModel(script)
    agent = ws.agent("waiter", model=model.name, tools=["wait_for"])
    tasks = [
        {"id": "a", "question": "fine", "answer": "ok"},
        {"id": "b", "question": "please hang", "answer": "ok"},
        {"id": "c", "question": "fine too", "answer": "ok"},
    ]
    started = time.monotonic()
    results = evaluate(ws, agent, tasks, name="hang", timeout=1.0, progress="off", concurrency=2)
    assert time.monotonic() - started < 10
    assert results["a"].correct and results["c"].correct
    hung = results["b"]
    assert hung.status == "error" and hung.error.startswith("timed out after 1s") and not hung.correct
    assert ws.db.run_row(hung.run_id)["status"] == "interrupted"  # stopped cooperatively, trajectory kept


def test_step_and_token_limits(ws, warm_litellm):
    def chatter(messages, tools):
        return call("note", text="still thinking " * 50)

    @ws.tools.tool
    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    model = ScriptedModel(chatter)
    agent = ws.agent("chatter", model=model.name, tools=["note"], max_steps=50)
    stepped = evaluate(
        ws, agent, [{"id": "s", "question": "go", "answer": "x"}], name="steps", max_steps=3, progress="off"
    )
    assert stepped["s"].steps == 3 and stepped["s"].run_status == "max_steps"
    assert stepped["s"].status == "scored" and stepped["s"].correct is False  # an answer, and a wrong one
    budget = evaluate(
        ws, agent, [{"id": "t", "question": "go", "answer": "x"}], name="tokens", max_tokens=2500, progress="off"
    )
    over = budget["t"]
    assert over.status == "error" and over.error.startswith("token budget exceeded")
    assert 2500 < over.tokens < 2500 + 3000 and over.steps < 50  # stopped soon after it went over


class PricedAgent:
    """Not an LLM agent: answers every question with '42' at a fixed price, as a recorded run."""

    kind = "priced"

    def __init__(self, ws, price):
        self.ws, self.price, self.name, self.runs = ws, price, "priced", 0

    async def run(self, task, files=None, *, context=None, model=None):
        from tea_notebook.runtime.agent import RunResult
        from tea_notebook.runtime.runlog import Process

        self.runs += 1
        async with Process(self.ws, self.name, task, model="tea/test", context=context) as p:
            p.cost = self.price
            p.step("answer", {}, "42")
            p.finish("success", "42")
        return RunResult(p.run_id, self.name, task, p.model, "success", "42", p.steps, 0, 0, p.cost, workspace=self.ws)


def test_the_cost_cap_stops_new_tasks_and_says_so(ws):
    agent = PricedAgent(ws, 0.02)
    tasks = [{"id": f"p{i}", "question": f"q{i}", "answer": "42"} for i in range(10)]
    capped = evaluate(ws, agent, tasks, name="capped", cost_cap=0.05, progress="off")
    assert agent.runs == 3 and len(capped) == 3 and capped.cost == pytest.approx(0.06)
    assert capped.stopped.startswith("cost cap $0.05 reached ($0.0600 spent); 7 task(s) not started")
    assert "stopped: cost cap" in capped.headline()
    more = evaluate(ws, agent, tasks, name="capped", cost_cap=0.10, progress="off")  # earlier spending counts
    assert agent.runs == 5 and len(more) == 5 and more.cost == pytest.approx(0.10)


def test_concurrency_runs_that_many_tasks_at_once(ws, warm_litellm):
    live, peak = [0], [0]

    @ws.tools.tool
    async def pause() -> str:
        """Pause a moment."""
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        await asyncio.sleep(0.2)
        live[0] -= 1
        return "paused"

    def script(messages, tools):
        text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        return call("done", success=True, text="FINAL ANSWER: 1") if "paused" in text else call("pause")

    agent = ws.agent("pauser", model=ScriptedModel(script).name, tools=["pause"])
    tasks = [{"id": f"c{i}", "question": f"q{i}", "answer": "1"} for i in range(7)]
    started = time.monotonic()
    results = evaluate(ws, agent, tasks, name="conc", concurrency=3, progress="off")
    assert results.correct == 7 and peak[0] == 3
    assert time.monotonic() - started < 7 * 0.2  # not one after another


# -- scorers --------------------------------------------------------------------------------------------
def test_a_scorer_that_raises_is_that_tasks_error(ws, solver):
    agent, _ = solver

    def picky(answer, expected, task):
        if task.id == "t1":
            raise ValueError("cannot judge this one")
        return answer == expected

    results = evaluate(ws, agent, _sum_tasks(3), name="picky", scorer=picky, progress="off")
    assert results["t0"].correct and results["t2"].correct and results.errors == 1
    assert results["t1"].error == "the scorer picky raised ValueError: cannot judge this one"
    assert results["t1"].answer == "3"  # the answer is kept
    assert ws.evaluation("picky").config["scorer"] == {"scorer": "picky", "custom": True}


def test_exact_and_contains_scorers(ws, solver):
    agent, _ = solver
    exact = evaluate(ws, agent, _sum_tasks(2), name="exact", scorer="exact", final_answer=False, progress="off")
    assert [r.correct for r in exact] == [False, False]  # "Thinking... FINAL ANSWER: 1" is not "1"
    contains = evaluate(
        ws, agent, _sum_tasks(2), name="contains", scorer="contains", final_answer=False, progress="off"
    )
    assert [r.correct for r in contains] == [True, True]
    with pytest.raises(TeaError, match="unknown scorer 'fuzzy'"):
        evaluate(ws, agent, _sum_tasks(2), name="fuzzy", scorer="fuzzy", progress="off")


def test_an_llm_judge_decides_and_its_prompt_is_stored(ws, solver):
    agent, _ = solver

    def judge(messages, tools):
        text = messages[-1]["content"]
        want = re.search(r"Reference answer: (.*)", text).group(1).strip()
        got = re.search(r"Answer to grade: (.*)", text).group(1).strip()
        if want == "5":
            return "Hmm, maybe?"  # not a verdict: that task's error
        return "CORRECT" if want == got else "INCORRECT, the sum is off"

    judge_model = ScriptedModel(judge)
    results = evaluate(ws, agent, _sum_tasks(4), name="judged", scorer=LLMJudge(judge_model.name), progress="off")
    assert [r.correct for r in results] == [True, True, False, False]
    assert results["t3"].scorer_note.startswith("INCORRECT") and results["t3"].status == "scored"
    assert results["t2"].status == "error" and "replied 'Hmm, maybe?'" in results["t2"].error
    stored = ws.evaluation("judged").config["scorer"]
    assert stored == {"scorer": "llm_judge", "model": judge_model.name, "prompt": JUDGE_PROMPT}
    assert len(judge_model.calls) == 4 and "What is 0 + 1?" in judge_model.calls[0][0]["content"]


# -- progress, plots ---------------------------------------------------------------------------------------
def test_progress_shows_done_correct_errors_and_cost(ws, solver):
    from tea_notebook.eval.progress import Progress, _Snapshot

    out = io.StringIO()
    bar = Progress("demo", 4, mode="lines", stream=out, every=2, model="tea/script:x (scripted, not an LLM)")
    for done in range(1, 5):
        bar.update(done=done, correct=done - 1, errors=1 if done > 2 else 0, cost=0.01 * done, force=True)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("demo: 2/4 done · 1 correct · 0 errors · $0.0200")
    assert lines[-1].startswith("demo: 4/4 done · 3 correct · 1 errors · $0.0400") and len(lines) == 2
    assert "(scripted, not an LLM)" in lines[-1]
    html = _Snapshot(bar)._repr_html_()
    assert "width:75.00%" in html and "4/4 done" in html  # the green part: 3 correct of 4
    tty = io.StringIO()
    tty.isatty = lambda: True  # type: ignore[method-assign]
    term = Progress("t", 2, stream=tty)
    assert term.mode == "terminal"
    term.update(done=1, correct=1, errors=0, cost=0, force=True)
    term.close()
    assert tty.getvalue().startswith("\rt: 1/2 done") and tty.getvalue().endswith("\n")


def test_plots_of_one_evaluation_and_of_two_side_by_side(ws, solver):
    from tea_notebook.eval.plots import rolling_accuracy

    agent, _ = solver
    a = evaluate(ws, agent, _sum_tasks(6), name="A", progress="off")
    b = evaluate(ws, agent, _sum_tasks(6), name="B", scorer="exact", final_answer=False, progress="off")
    assert rolling_accuracy(a, window=2) == [1.0, 1.0, 1.0, 0.5, 0.5, 1.0]  # the script is wrong on t3
    fig = a.plot(window=2)
    assert [ax.get_title() for ax in fig.axes] == [
        "accuracy by level",
        "cost per task (USD)",
        "steps per task",
        "accuracy over tasks (last 2)",
    ]
    bars = fig.axes[0].patches
    assert [round(p.get_height(), 1) for p in bars] == [100.0, 66.7]  # level 1: 3/3, level 2: 2/3
    cmp = a.compare(b)
    assert len(cmp.axes) == 3 and "A: 5/6" in cmp._suptitle.get_text() and "B: 0/6" in cmp._suptitle.get_text()
    assert cmp._suptitle.get_text().count("(scripted, not an LLM)") == 2
    # steps and task numbers tick at whole numbers only
    for figure, ax in ((fig, fig.axes[2]), (fig, fig.axes[3]), (cmp, cmp.axes[2])):
        figure.canvas.draw()
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)


# -- the sample set ----------------------------------------------------------------------------------------
def test_the_sample_set_ships_with_answers_and_attachments(ws, warm_litellm):
    from tea_notebook.eval import datasets

    tasks = datasets.sample()
    assert 20 <= len(tasks) <= 40 and {t.level for t in tasks} == {"1", "2", "3"}
    attached = [t for t in tasks if t.files]
    assert len(attached) >= 15 and all(Path(f).is_file() for t in attached for f in t.files)
    assert len({Path(f).name for t in attached for f in t.files}) >= 4
    assert all(gaia_score(t.answer, t.answer) for t in tasks)
    key = {t.question: t.answer for t in tasks}

    def answer_key(messages, tools):  # reads the answer key: a scripted stand-in, not an agent
        text = messages[-1]["content"]
        question = next(q for q in key if q in text)
        return call("done", success=True, text=f"FINAL ANSWER: {key[question]}")

    agent = ws.agent("key", model=ScriptedModel(answer_key).name, tools=[])
    results = evaluate(ws, agent, datasets.sample_path(), name="sample", progress="off")
    assert results.correct == len(tasks) and results.errors == 0


# -- the magic and the CLI --------------------------------------------------------------------------------------
def test_the_tea_eval_magic(ip, tmp_path, warm_litellm):
    ip.run_line_magic("tea", f"workspace {tmp_path / 'mws'}")
    magics = ip.magics_manager.registry["TeaMagics"]
    model = ScriptedModel(_sum_solver)
    magics.workspace.agent("solver", model=model.name, tools=[])
    tasks = tmp_path / "sum.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in _sum_tasks(4)))
    results = ip.run_line_magic("tea", f"eval solver {tasks} --name m1 --quiet")
    assert isinstance(results, EvalResults) and results.correct == 3 and len(results) == 4
    shown = ip.run_line_magic("tea", "eval show m1")
    assert [r.run_id for r in shown] == [r.run_id for r in results]
    listed = ip.run_line_magic("tea", "eval list")
    assert listed[0] == {"name": "m1", "tasks": 4, "correct": 3, "errors": 0}
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="line 1, field 'question': missing"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"answer": "1"}\n')
        ip.run_line_magic("tea", f"eval solver {bad} --quiet")
    assert "%tea eval AGENT TASKS" in ip.run_line_magic("tea", "help")


def test_the_tea_eval_command(tmp_path, capsys, warm_litellm):
    from tea_notebook.cli import main

    tasks = tmp_path / "qa.csv"
    tasks.write_text("id,question,answer\nq1,Say hi,hi\nq2,Say bye,bye\n")
    assert (
        main(
            [
                "-w",
                str(tmp_path / "cws"),
                "eval",
                str(tasks),
                "--model",
                "tea/test",
                "--name",
                "c1",
                "--scorer",
                "contains",
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"] == 2 and summary["done"] == 2 and summary["model"] == "tea/test (scripted, not an LLM)"
    assert main(["-w", str(tmp_path / "cws"), "eval", "show", "--name", "c1"]) == 0
    assert "evaluation c1: 2/2 done" in capsys.readouterr().out
    assert main(["-w", str(tmp_path / "cws"), "eval", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err


# -- Ray, local, 2 CPUs -----------------------------------------------------------------------------------------------
def _ray_solver(messages, tools):
    """Scripted (runs inside the Ray worker): reads the attached file, dies on CRASH, else adds."""
    text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    if "CRASH" in text:
        os._exit(7)  # the worker process dies mid-task
    attached = re.search(r"Attached files \(absolute paths\): ([^\s<]+)", text)
    if attached:
        path = Path(attached.group(1))
        return call("done", success=True, text=f"FINAL ANSWER: {path.read_text().strip()} from {path.parent.name}")
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", text).groups())
    return call("done", success=True, text=f"FINAL ANSWER: {a + b}")


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_runs_tasks_ships_back_trajectories_and_survives_a_dead_worker(ws, local_ray, tmp_path):
    note = tmp_path / "secret.txt"
    note.write_text("31337")
    model = ScriptedModel(_ray_solver)
    agent = ws.agent("ray_solver", model=model.name, tools=[])
    tasks = [{"id": f"r{i}", "question": f"What is {i} + 2?", "answer": str(i + 2)} for i in range(4)]
    tasks.insert(2, {"id": "crash", "question": "CRASH now", "answer": "x"})
    tasks.append({"id": "file", "question": "What does the file say?", "answer": "31337 from 0", "files": [str(note)]})
    results = evaluate(ws, agent, tasks, name="on-ray", engine="ray", concurrency=2, progress="off")
    assert model.calls == []  # the driver's copy of the script was never asked: workers ran the tasks
    assert len(results) == 6 and results.correct == 5 and results.errors == 1
    dead = results["crash"]
    assert dead.status == "error" and dead.error.startswith("the Ray worker running it failed")
    assert "WorkerCrashedError" in dead.error or "died" in dead.error
    # the attachment travelled with the task: the worker read its own copy, not the driver's file
    assert results["file"].correct
    for r in results:
        if r.status == "scored":
            row = ws.db.run_row(r.run_id)  # the worker's run is in the driver's workspace now
            assert row is not None and row["status"] == "success" and row["agent"] == "ray_solver"
            traj = ws.trajectory(r.run_id)
            assert traj.answer.startswith("FINAL ANSWER") and len(traj.steps) == 1
    started = [e for e in ws.events.events(results["file"].run_id) if e.type == "run_started"][0]
    assert started.data["files"] and started.data["files"][0] != str(note)
    assert ws.evaluation("on-ray").config["engine"] == "ray"

    @ws.tools.tool
    def shout(text: str) -> str:
        """Shout a text."""
        return text.upper() + "!"

    def shouter(messages, tools):
        text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        said = re.search(r"-> (\S+!)", text)
        return call("done", success=True, text=f"FINAL ANSWER: {said.group(1)}") if said else call("shout", text="hey")

    loud = ws.agent("shouter", model=ScriptedModel(shouter).name, tools=["shout"])
    shouted = evaluate(ws, loud, [{"id": "s", "question": "shout hey", "answer": "HEY!"}], engine="ray", progress="off")
    assert shouted["s"].correct and shouted["s"].steps == 2  # the tool travelled in the spec and ran in the worker
    assert "shout(text='hey') -> HEY!" in ws.trajectory(shouted["s"].run_id).text()
    again = evaluate(ws, agent, tasks, name="on-ray", engine="ray", concurrency=2, progress="off")
    assert again.skipped == 6 and [r.run_id for r in again] == [r.run_id for r in results]


DRIVER_SECRET_NAME = "TEA_TEST_DRIVER_ONLY_SECRET"
DRIVER_SECRET = "drv-only-zq8k3lmn0px7"  # no known shape, no upper case (so no entropy finding): only the driver's environment makes it a secret


def _echo_solver(messages, tools):
    """Scripted (runs inside the Ray worker): answers with the attached file's text, once short and once
    past the stored clip, and says whether the worker knows the driver's secret."""
    text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    said = Path(re.search(r"Attached files \(absolute paths\): ([^\s<]+)", text).group(1)).read_text().strip()
    known = DRIVER_SECRET_NAME in os.environ
    return call("done", success=True, text=f"FINAL ANSWER: {said} worker-knows={known} " + "x" * 70_000 + said)


def _raw_store(ws) -> bytes:
    ws.events.flush()
    return b"".join(p.read_bytes() for p in ws.path.glob("tea.db*"))


def test_a_worker_run_tree_is_redacted_again_by_the_driver(tmp_path, monkeypatch):
    from tea_notebook.eval.ray_engine import redacted_tree

    monkeypatch.delenv(DRIVER_SECRET_NAME, raising=False)
    worker = tea_notebook.Workspace(tmp_path / "worker", embedder="hashing")  # knows no secret
    model = ScriptedModel([call("done", success=True, text=f"said {DRIVER_SECRET} " + "y" * 70_000 + DRIVER_SECRET)])
    result = worker.agent("w", model=model.name, tools=[]).run_sync(f"Echo {DRIVER_SECRET}")
    worker.events.flush()
    tree = worker.db.export_run_tree(result.run_id)
    worker.close()
    assert DRIVER_SECRET.encode() in _raw_store(worker)  # the worker stored it: it did not know
    driver = tea_notebook.Workspace(tmp_path / "driver", embedder="hashing")
    try:
        monkeypatch.setenv(DRIVER_SECRET_NAME, DRIVER_SECRET)
        driver.db.import_run_tree(redacted_tree(tree))
        assert DRIVER_SECRET.encode() not in _raw_store(driver)
        traj = driver.trajectory(result.run_id)
        assert f"[{DRIVER_SECRET_NAME} redacted]" in traj.answer and traj.task.startswith("Echo [")
        final = [e for e in driver.events.events(result.run_id) if e.type == "run_finished"][-1]
        text = driver.events.full_text(final.data["answer"])  # the clipped field's full text
        assert len(text) > 70_000 and text.endswith(f"[{DRIVER_SECRET_NAME} redacted]")
    finally:
        driver.close()


def test_attachments_land_beneath_the_task_folder_under_a_plain_name(tmp_path):
    from tea_notebook.eval.ray_engine import write_attachment

    folder = tmp_path / "task"
    folder.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    assert write_attachment(folder, 0, "notes.txt", b"hello") == "files/0/notes.txt"
    assert (folder / "files/0/notes.txt").read_bytes() == b"hello"
    for bad in ("../escape.txt", "/etc/passwd", "..", "", "a/b.txt"):
        with pytest.raises(TeaError, match="must be a plain file name"):
            write_attachment(folder, 1, bad, b"x")
    (folder / "files" / "2").mkdir(parents=True)
    (folder / "files" / "2" / "planted.txt").symlink_to(outside)  # a link where the file will be written
    with pytest.raises(Exception, match="leads outside"):
        write_attachment(folder, 2, "planted.txt", b"overwritten")
    (folder / "files" / "3").symlink_to(tmp_path)  # a folder swapped for a link out
    with pytest.raises(Exception, match="leads outside"):
        write_attachment(folder, 3, "outside.txt", b"overwritten")
    assert outside.read_text() == "keep"


@pytest.mark.slow
def test_ray_runs_are_redacted_again_with_the_drivers_secrets(ws, local_ray, monkeypatch, tmp_path):
    monkeypatch.setenv(DRIVER_SECRET_NAME, DRIVER_SECRET)  # after Ray started: its workers never see it
    note = tmp_path / "note.txt"  # the secret reaches the worker only inside an attachment
    note.write_text(DRIVER_SECRET)
    agent = ws.agent("echo", model=ScriptedModel(_echo_solver).name, tools=[])
    task = {"id": "e", "question": "What does the file say?", "answer": "x", "files": [str(note)]}
    results = evaluate(ws, agent, [task], name="redact-on-ray", engine="ray", progress="off")
    attempt = results["e"]
    assert attempt.run_id and "worker-knows=False" in attempt.raw_answer  # the worker could not redact it
    assert DRIVER_SECRET not in attempt.raw_answer and f"[{DRIVER_SECRET_NAME} redacted]" in attempt.raw_answer
    assert DRIVER_SECRET.encode() not in _raw_store(ws)
    traj = ws.trajectory(attempt.run_id)
    assert f"[{DRIVER_SECRET_NAME} redacted]" in traj.answer and "worker-knows=False" in traj.answer


def test_tn_eval_is_reached_from_the_package_without_importing_heavy_modules():
    code = (
        "import sys, tea_notebook as tn\n"
        "assert 'tea_notebook.eval' not in sys.modules\n"
        "assert tn.eval.gaia_score('$1,000', '1000') and not tn.eval.gaia_score('999', '1000')\n"
        "assert len(tn.eval.datasets.sample()) >= 20\n"
        "print(sorted(m for m in ('litellm', 'faiss', 'ray', 'onnxruntime') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_ray_engine_starts_ray_without_printing_into_the_cell(tmp_path):
    """The local Ray that ``engine="ray"`` starts prints no banners or warnings (its logger at ERROR,
    workers' output not forwarded): in a fresh process, because the module's Ray is started by hand."""
    pytest.importorskip("ray")
    code = (
        "import sys, tempfile, tea_notebook as tn\n"
        "from tea_notebook.models.offline import ScriptedModel, call\n"
        "from tea_notebook.eval.runner import evaluate\n"
        f"ws = tn.Workspace({str(tmp_path / 'ws')!r}, embedder='hashing')\n"
        "m = ScriptedModel(lambda messages, tools: call('done', success=True, text='4'), name='quiet-ray')\n"
        "agent = ws.agent('solver', model=m.name, tools=[])\n"
        "print('BEGIN', file=sys.stderr, flush=True)\n"
        "r = evaluate(ws, agent, [{'id': 'a', 'question': '2+2', 'answer': '4'}], engine='ray', progress='off')\n"
        "print('END', file=sys.stderr, flush=True)\n"
        "print(r.correct)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1"
    during = out.stderr.split("BEGIN", 1)[1].split("END", 1)[0].strip()
    assert during == "", during[-2000:]
