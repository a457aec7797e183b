"""Inspect AI interoperability: our evaluations written as Inspect logs and read back by Inspect's own
reader (``read_eval_log``, ``samples_df``, its ``inspect log dump`` command); our agents run as
Inspect agents by ``inspect_ai.eval`` offline. Models are scripted (``tea/script:...``, not LLMs).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import litellm
import pytest
from prompt_parts import all_text as _text

pytest.importorskip("inspect_ai")

from inspect_ai import Task  # noqa: E402
from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402
from inspect_ai.scorer import match  # noqa: E402

from tea_notebook.errors import TeaError  # noqa: E402
from tea_notebook.eval import eval_set, evaluate, inspect_agent, no_tool_errors, tool_called  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402


@pytest.fixture
def looked_up(ws, warm_litellm):
    """An evaluation with a tool call per sample, two epochs, a wrong answer and a provider failure."""
    ws.model_retries = 0

    @ws.tools.tool
    def lookup(q: str) -> str:
        """Look a sum up."""
        return f"the sum is {eval(q, {}, {})}" if re.fullmatch(r"[\d+ ]+", q) else "Error: not a sum"

    def script(messages, tools):
        text = _text(messages)
        a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", text).groups())
        if a == 9:
            raise litellm.ServiceUnavailableError("503 down", llm_provider="openai", model="x")
        said = re.search(r"the sum is (\d+)", text)
        if not said:
            return call("lookup", q=f"{a} + {b}")
        return call("done", success=True, text=f"FINAL ANSWER: {int(said.group(1)) + (1 if a == 2 else 0)}")

    agent = ws.agent("looker", model=ScriptedModel(script).name, tools=["lookup"])
    tasks = [{"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in (0, 1, 2, 9)]
    results = evaluate(
        ws,
        agent,
        tasks,
        name="looked",
        epochs=2,
        checks=[tool_called("lookup"), no_tool_errors()],
        retries=0,
        progress="off",
    )
    return ws, results


def test_an_evaluation_written_as_an_inspect_log_is_read_by_inspect(looked_up, tmp_path):
    ws, results = looked_up
    path = results.to_inspect(tmp_path / "logs" / "looked.eval")
    log = read_eval_log(str(path))
    assert log.status == "success" and log.eval.task == "looked" and log.eval.config.epochs == 2
    assert log.eval.model == results.config["model"] and log.eval.solver == "looker"
    assert len(log.samples) == 8 and {(s.id, s.epoch) for s in log.samples} == {
        (f"t{i}", e) for i in (0, 1, 2, 9) for e in (1, 2)
    }
    by_key = {(s.id, s.epoch): s for s in log.samples}
    ours = {(r.task_id, r.epoch): r for r in results}
    good = by_key[("t1", 2)]
    assert good.input == "What is 1 + 1?" and good.target == "2" and good.output.completion.endswith("2")
    assert good.scores["correct"].value == 1.0 and good.scores["correct"].answer == "2"
    assert good.scores["tool_called:lookup"].value == 1.0 and good.scores["no_tool_errors"].value == 1.0
    assert by_key[("t2", 1)].scores["correct"].value == 0.0  # the script is wrong on 2 + 1
    assert good.metadata["tea_run_id"] == ours[("t1", 2)].run_id
    # the run as messages: the question, the tool call, its observation, ..., the answer
    roles = [m.role for m in good.messages]
    assert roles[0] == "user" and roles[-1] == "assistant" and "tool" in roles
    tool_msg = next(m for m in good.messages if m.role == "tool" and m.function == "lookup")
    assert tool_msg.text == "the sum is 2"
    # our trajectory as the transcript: a model event per step, a tool event per call
    kinds = [e.event for e in good.events]
    assert kinds.count("model") == ours[("t1", 2)].steps and "tool" in kinds
    tool_event = next(e for e in good.events if e.event == "tool" and e.function == "lookup")
    assert tool_event.arguments == {"q": "1 + 1"} and tool_event.result == "the sum is 2"
    usage = good.model_usage[results.config["model"]]
    assert usage.input_tokens == ours[("t1", 2)].prompt_tokens and usage.total_tokens == ours[("t1", 2)].tokens
    # the provider's failure: an error, no scores (not the agent's failure)
    down = by_key[("t9", 1)]
    assert down.scores is None and down.error.message.startswith("the model provider failed")
    assert down.metadata["provider_failure"] is True
    # results: each score's mean and stderr over tasks, as ours
    metrics = {s.name: s.metrics for s in log.results.scores}
    assert metrics["correct"]["mean"].value == pytest.approx(results.estimate().mean)
    assert metrics["correct"]["stderr"].value == pytest.approx(results.estimate().stderr)
    assert metrics["tool_called:lookup"]["mean"].value == pytest.approx(1.0)
    assert log.results.total_samples == 8 and log.results.completed_samples == 8
    assert log.stats.model_usage[results.config["model"]].input_tokens == sum(r.prompt_tokens for r in results)
    header = read_eval_log(str(path), header_only=True)
    assert header.samples is None and header.results.scores[0].name == "correct"


def test_inspect_dataframes_and_its_command_line_open_our_log(looked_up, tmp_path):
    pytest.importorskip("pyarrow")
    from inspect_ai.analysis import samples_df

    ws, results = looked_up
    path = results.to_inspect(tmp_path / "looked.eval")
    frame = samples_df(str(path))
    assert len(frame) == 8 and "score_correct" in frame.columns
    assert frame["score_correct"].dropna().astype(float).mean() == pytest.approx(results.accuracy)
    dumped = subprocess.run(
        [sys.executable, "-m", "inspect_ai", "log", "dump", str(path)], capture_output=True, text=True, timeout=120
    )
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    data = json.loads(dumped.stdout)
    assert data["eval"]["task"] == "looked" and len(data["samples"]) == 8
    json_path = results.to_inspect(tmp_path / "looked.json", transcripts=False)
    again = read_eval_log(str(json_path))
    assert len(again.samples) == 8 and all(s.events == [] for s in again.samples)


def test_an_unwritable_inspect_log_path_is_a_clear_error_before_anything_is_written(looked_up, tmp_path):
    ws, results = looked_up
    with pytest.raises(TeaError, match=r"an Inspect log is a .eval or a .json file, not 'x.txt'"):
        results.to_inspect(tmp_path / "x.txt")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(TeaError, match=r"cannot write the Inspect log .*cannot make its folder"):
        results.to_inspect(blocker / "sub" / "x.eval")
    with pytest.raises(TeaError, match="is a folder"):
        (tmp_path / "d.eval").mkdir()
        results.to_inspect(tmp_path / "d.eval")
    assert not list(tmp_path.glob("**/*.eval")) or all(p.is_dir() for p in tmp_path.glob("**/*.eval"))


def test_an_eval_set_writes_one_inspect_log_per_configuration(ws, warm_litellm, tmp_path):
    ws.model_retries = 0
    a = ScriptedModel(lambda m, t: call("done", success=True, text="FINAL ANSWER: 2"))
    b = ScriptedModel(lambda m, t: call("done", success=True, text="FINAL ANSWER: 3"))
    ws.agent("s", model=a.name, tools=[])
    tasks = [{"id": "q", "question": "1 + 1?", "answer": "2"}, {"id": "r", "question": "2 + 0?", "answer": "2"}]
    s = eval_set(ws, "two", agents=["s"], models=[a.name, b.name], tasks=tasks, epochs=2, progress="off")
    paths = s.to_inspect(tmp_path / "set")
    assert [p.name for p in paths] == [f"s@{a.id}.eval", f"s@{b.id}.eval"]
    means = [read_eval_log(str(p)).results.scores[0].metrics["mean"].value for p in paths]
    assert means == [1.0, 0.0]


def test_an_inspect_task_runs_our_agent_offline(ws, warm_litellm, tmp_path):
    def script(messages, tools):
        a, b = re.search(r"What is (\d+) \+ (\d+)", _text(messages)).groups()
        return call("done", success=True, text=str(int(a) + int(b) + (1 if a == "5" else 0)))

    model = ScriptedModel(script)
    ws.agent("adder", model=model.name, tools=[])
    task = Task(
        dataset=[Sample(input="What is 2 + 1?", target="3"), Sample(input="What is 5 + 5?", target="10")],
        solver=inspect_agent(ws, "adder"),
        scorer=match(),
        name="adder",
    )
    [log] = inspect_eval(task, model="mockllm/model", log_dir=str(tmp_path / "ilogs"), display="none")
    assert log.status == "success" and len(model.calls) == 2  # our scripted model answered, not Inspect's mock
    assert log.results.scores[0].metrics["accuracy"].value == 0.5  # the script is wrong on 5 + 5
    first = next(s for s in log.samples if s.input == "What is 2 + 1?")
    assert first.output.completion == "3" and first.scores["match"].value == "C"
    run = first.store["tea_run"]
    assert run["model"] == model.name and run["status"] == "success"
    assert ws.trajectory(run["run_id"]).answer == "3"  # the run is stored in our workspace
    info = [e for e in first.events if e.event == "info" and e.source == "tea"]
    assert info and info[0].data["run_id"] == run["run_id"]
    # Inspect's own reader opens the log Inspect wrote of our agent's runs
    assert len(read_eval_log(log.location).samples) == 2


def test_inspects_mock_model_has_no_counterpart_here(ws, warm_litellm, tmp_path):
    ws.agent("plain", model=ScriptedModel(["x"]).name, tools=[])
    task = Task(dataset=[Sample(input="hi", target="x")], solver=inspect_agent(ws, "plain", model="inspect"))
    [log] = inspect_eval(task, model="mockllm/model", log_dir=str(tmp_path / "ilogs"), display="none")
    assert log.status == "error" and "has no counterpart among our models" in log.error.message


def test_the_tea_eval_command_with_epochs_writes_an_inspect_log(tmp_path, capsys, warm_litellm):
    from tea_notebook.cli import main

    tasks = tmp_path / "qa.csv"
    tasks.write_text("id,question,answer\nq1,Say hi,hi\nq2,Say bye,bye\n")
    base = ["-w", str(tmp_path / "cws"), "eval", str(tasks), "--model", "tea/test", "--name", "c1"]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main([*base, "--epochs", "2", "--inspect-log", str(blocker / "x.eval")]) == 2
    assert "cannot write the Inspect log" in capsys.readouterr().err
    assert not (tmp_path / "cws").exists() or main(["-w", str(tmp_path / "cws"), "eval", "list"]) == 0
    assert "c1" not in capsys.readouterr().out  # refused before anything ran
    log_path = tmp_path / "logs" / "c1.eval"
    args = [*base, "--scorer", "contains", "--epochs", "2", "--reducer", "max", "--fail-on-error", "0.5"]
    assert main([*args, "--inspect-log", str(log_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["epochs"] == 2 and summary["done"] == 4 and summary["reducer"] == "max"
    log = read_eval_log(str(log_path))
    assert len(log.samples) == 4 and log.eval.config.epochs == 2 and log.eval.config.epochs_reducer == ["max"]
