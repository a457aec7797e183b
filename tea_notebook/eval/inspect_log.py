"""Any of our evaluations as an Inspect AI log (``.eval``, or ``.json``), built from Inspect's own log
classes and written by its own writer, so that ``inspect view``, ``inspect_ai.log.read_eval_log``,
``inspect_ai.analysis.samples_df`` and the tools built on them open our runs:

    results = evaluate(ws, agent, tasks, epochs=5)
    write_inspect_log(results, "logs/solver.eval")        # or results.to_inspect("logs/solver.eval")

What goes where: each sample (task × epoch) is an ``EvalSample`` with its question (``input``), the
expected answer (``target``), the run as chat ``messages`` (the question, each step's thinking and
tool calls, each tool's observation, the answer), ``output``, one ``Score`` per named score
(``correct`` and each trajectory check, 1.0 / 0.0), ``model_usage`` (tokens and cost), timing, an
``error`` for samples that ended in one, and our trajectory as its ``events`` (a ``ModelEvent`` per
step, a ``ToolEvent`` per tool call, sub-agent runs inside ``agent`` spans); the sample's ``metadata``
keeps our run id (``ws.trajectory(run_id)`` opens it here). The log's results carry each score's
mean and standard error over tasks (epochs reduced with the evaluation's reducer), as Inspect's.

Needs the optional extra: ``pip install 'tea_notebook[inspect]'``.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.eval.table import ResultsTable, TaskResult
    from tea_notebook.runtime.trajectory import Trajectory


def require_inspect() -> None:
    """Raise a clear error when Inspect AI is not installed."""
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise TeaError("Inspect logs need Inspect AI: pip install 'tea_notebook[inspect]'") from None


def _iso(seconds: float | None) -> str:
    return datetime.fromtimestamp(seconds or 0.0, tz=timezone.utc).isoformat()


def check_log_path(path: str | Path) -> Path:
    """The log's path, checked before anything is built: ``.eval`` or ``.json``, in a folder that
    exists (or can be made) and can be written."""
    target = Path(path).expanduser()
    if target.suffix not in (".eval", ".json"):
        raise TeaError(f"an Inspect log is a .eval or a .json file, not {target.name!r}")
    if target.is_dir():
        raise TeaError(f"{target} is a folder; give the log's file name")
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TeaError(
            f"cannot write the Inspect log {target}: cannot make its folder ({exc.strerror or exc})"
        ) from None
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise TeaError(f"cannot write the Inspect log {target}: {folder} is not writable")
    return target


def model_texts(trajectory: "Trajectory") -> dict[int, str]:
    """What the model wrote at each step of the run (not its sub-runs), its calls' texts joined: the
    assistant text beside the tool calls (``model_response`` events keep it; the step only its thoughts)."""
    texts: dict[int, list[str]] = {}
    for e in trajectory.events:
        if e.type == "model_response" and e.run_id == trajectory.run_id and e.step is not None:
            content = e.data.get("content")
            if content and str(content).strip():
                texts.setdefault(e.step, []).append(str(content))
    return {step: "\n\n".join(parts) for step, parts in texts.items()}


def _step_text(step: Any, texts: dict[int, str]) -> str:
    """A step's assistant text: what the model wrote, else the thoughts the step recorded."""
    return texts.get(step.number) or step.thinking or step.next_goal or step.evaluation or ""


def _messages(result: "TaskResult", trajectory: "Trajectory | None") -> list[Any]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    messages: list[Any] = [ChatMessageUser(content=result.question or (trajectory.task if trajectory else ""))]
    if trajectory is not None:
        texts = model_texts(trajectory)
        for step in trajectory.steps:
            calls = [
                ToolCall(id=str(a.get("id") or f"s{step.number}-{i}"), function=str(a["name"]), arguments=_args(a))
                for i, a in enumerate(step.actions)
            ]
            text = _step_text(step, texts)
            messages.append(ChatMessageAssistant(content=text, tool_calls=calls or None, model=trajectory.model))
            for call, a in zip(calls, step.actions):
                error = None if a.get("ok", True) else ToolCallError("unknown", str(a.get("observation", ""))[:2000])
                messages.append(
                    ChatMessageTool(
                        content=str(a.get("observation", "")),
                        tool_call_id=call.id,
                        function=call.function,
                        error=error,
                    )
                )
    if result.raw_answer or result.answer:
        messages.append(ChatMessageAssistant(content=result.raw_answer or result.answer))
    return messages


def _args(action: dict[str, Any]) -> dict[str, Any]:
    args = action.get("arguments")
    return args if isinstance(args, dict) else {"input": args}


def _events(trajectory: "Trajectory") -> list[Any]:
    """Our trajectory as Inspect transcript events (sub-runs in ``agent`` spans)."""
    from inspect_ai.event import InfoEvent, ModelEvent, SpanBeginEvent, SpanEndEvent, ToolEvent
    from inspect_ai.model import ChatMessageAssistant, GenerateConfig, ModelOutput, ModelUsage
    from inspect_ai.model._model_output import ChatCompletionChoice
    from inspect_ai.tool import ToolCall, ToolCallError

    times: dict[int, float] = {}
    for e in trajectory.events:
        if e.step is not None and e.type in ("model_response", "step"):
            times.setdefault(e.step, e.time)
    start = trajectory.events[0].time if trajectory.events else 0.0
    texts = model_texts(trajectory)
    out: list[Any] = []
    for step in trajectory.steps:
        when = datetime.fromtimestamp(times.get(step.number, start), tz=timezone.utc)
        calls = [
            ToolCall(id=str(a.get("id") or f"s{step.number}-{i}"), function=str(a["name"]), arguments=_args(a))
            for i, a in enumerate(step.actions)
        ]
        reply = ChatMessageAssistant(content=_step_text(step, texts), tool_calls=calls or None)
        usage = ModelUsage(
            input_tokens=step.prompt_tokens,
            output_tokens=step.completion_tokens,
            total_tokens=step.prompt_tokens + step.completion_tokens,
            total_cost=step.cost,
        )
        output = ModelOutput(
            model=trajectory.model,
            choices=[ChatCompletionChoice(message=reply, stop_reason="tool_calls" if calls else "stop")],
            usage=usage,
            time=step.latency or None,
        )
        out.append(
            ModelEvent(
                model=trajectory.model,
                input=[],
                tools=[],
                tool_choice="auto",
                config=GenerateConfig(),
                output=output,
                timestamp=when,
                working_start=max(0.0, (when.timestamp() - start)),
                metadata={"tea_step": step.number, "next_goal": step.next_goal, "evaluation": step.evaluation},
            )
        )
        for call, a in zip(calls, step.actions):
            failed = not a.get("ok", True)
            out.append(
                ToolEvent(
                    id=call.id,
                    function=call.function,
                    arguments=call.arguments,
                    result=str(a.get("observation", "")),
                    error=ToolCallError("unknown", str(a.get("observation", ""))[:2000]) if failed else None,
                    timestamp=when,
                    working_start=max(0.0, (when.timestamp() - start)),
                    working_time=a.get("latency"),
                    failed=failed or None,
                )
            )
        for err in step.errors:
            out.append(InfoEvent(source="tea", data={"step": step.number, "error": err}, timestamp=when))
    for child in trajectory.children:
        span = f"run-{child.run_id}"
        out.append(SpanBeginEvent(id=span, name=child.agent, type="agent"))
        out.extend(_events(child))
        out.append(SpanEndEvent(id=span))
    return out


def _usage(result: "TaskResult") -> dict[str, Any]:
    from inspect_ai.model import ModelUsage

    if not result.model and not result.tokens:
        return {}
    return {
        result.model or "unknown": ModelUsage(
            input_tokens=result.prompt_tokens,
            output_tokens=result.completion_tokens,
            total_tokens=result.tokens,
            total_cost=result.cost,
        )
    }


def build_sample(result: "TaskResult", trajectory: "Trajectory | None") -> Any:
    """One of our samples as an Inspect ``EvalSample``."""
    from inspect_ai._util.error import EvalError
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score

    scores = {}
    if not result.infra_error:
        names = result.scores or {"correct": 1.0 if result.correct else 0.0}
        for name, value in names.items():
            note = result.scorer_note if name == "correct" else (result.extra.get("check_notes") or {}).get(name)
            scores[name] = Score(
                value=float(value),
                answer=result.answer if name == "correct" else None,
                explanation=note or None,
            )
    finished = (trajectory.events[-1].time if trajectory and trajectory.events else None) or None
    started = (trajectory.events[0].time if trajectory and trajectory.events else None) or None
    return EvalSample(
        id=result.task_id,
        epoch=result.epoch,
        input=result.question,
        target=result.expected,
        messages=_messages(result, trajectory),
        output=ModelOutput.from_content(result.model or "unknown", result.raw_answer or result.answer),
        scores=scores or None,
        metadata={
            "tea_run_id": result.run_id,
            "level": result.level,
            "run_status": result.run_status,
            "steps": result.steps,
            "retries": result.retries,
            "retried_runs": result.retried_runs,
            "provider_failure": result.infra_error,
        },
        model_usage=_usage(result),
        started_at=_iso(started) if started else None,
        completed_at=_iso(finished) if finished else None,
        total_time=result.seconds,
        working_time=result.seconds,
        error=EvalError(message=result.error, traceback="", traceback_ansi="") if result.error else None,
        retries=result.retries or None,
        events=_events(trajectory) if trajectory is not None else [],
    )


def build_log(results: "ResultsTable", *, transcripts: bool = True) -> Any:
    """The Inspect ``EvalLog`` of ``results`` (``transcripts=False`` leaves the runs' events out)."""
    require_inspect()
    from importlib.metadata import PackageNotFoundError, version

    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalPlan,
        EvalPlanStep,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ModelUsage

    from tea_notebook.runtime.trajectory import Trajectory

    ws = results.workspace
    samples = []
    for r in results.results:
        trajectory = None
        if transcripts and r.run_id and ws is not None:
            try:
                trajectory = Trajectory.load(ws, r.run_id)
            except TeaError:
                trajectory = None  # a run deleted since: the sample is written without its transcript
        samples.append(build_sample(r, trajectory))
    cfg = results.config
    k = results.epochs
    reducer = results.reducer if isinstance(results.reducer, str) else getattr(results.reducer, "__name__", "custom")
    scores = []
    for name in results.score_names():
        est = results.estimate(name)
        scores.append(
            EvalScore(
                name=name,
                scorer=name,
                reducer=reducer if k > 1 else None,
                scored_samples=sum(len(v) for v in results.samples(name).values()),
                unscored_samples=results.infra_errors,
                metrics={
                    "mean": EvalMetric(name="mean", value=est.mean),
                    "stderr": EvalMetric(name="stderr", value=est.stderr),
                },
            )
        )
    usage: dict[str, Any] = {}
    for sample in samples:
        for model, u in sample.model_usage.items():
            usage[model] = usage[model] + u if model in usage else ModelUsage(**u.model_dump())
    times = [s.started_at for s in samples if s.started_at] + [s.completed_at for s in samples if s.completed_at]
    try:
        ours = version("tea_notebook")
    except PackageNotFoundError:
        ours = "unknown"
    model = cfg.get("model") or results.model_label() or "unknown"
    spec = EvalSpec(
        created=min(times) if times else _iso(None),
        task=results.name,
        task_id=f"tea-{results.name}",
        run_id=f"tea-{results.name}",
        solver=str(cfg.get("agent") or ""),
        dataset=EvalDataset(
            name=str(cfg.get("source") or ""),
            location=str(cfg.get("source") or ""),
            samples=results.total,
            sample_ids=list(dict.fromkeys(r.task_id for r in results.results)),
        ),
        model=model,
        config=EvalConfig(
            epochs=k,
            epochs_reducer=[reducer],
            fail_on_error=cfg.get("fail_on_error") if isinstance(cfg.get("fail_on_error"), float) else None,
            retry_on_error=cfg.get("retries"),
            time_limit=int(cfg["timeout"]) if cfg.get("timeout") else None,
            token_limit=cfg.get("max_tokens"),
            cost_limit=cfg.get("cost_cap"),
        ),
        packages={"tea_notebook": ours},
        metadata={"tea": cfg},
    )
    complete = len(results.results) >= results.total * k and not results.stopped
    return EvalLog(
        status="success" if complete else "cancelled",
        eval=spec,
        plan=EvalPlan(steps=[EvalPlanStep(solver=str(cfg.get("agent") or "agent"), params={"model": model})]),
        results=EvalResults(total_samples=results.total * k, completed_samples=len(results.results), scores=scores),
        stats=EvalStats(
            started_at=min(times) if times else "",
            completed_at=max(times) if times else "",
            model_usage=usage,
        ),
        samples=samples,
    )


def write_log(log: Any, path: Path) -> None:
    """Inspect's own ``write_eval_log``, in a thread of its own: it runs its own event loop, and in
    a kernel it would patch the kernel's loop (nest_asyncio) instead."""
    from inspect_ai.log import write_eval_log

    failure: list[BaseException] = []

    def go() -> None:
        try:
            write_eval_log(log, str(path))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=go, name="tea-inspect-log")
    worker.start()
    worker.join()
    if failure:
        raise TeaError(f"cannot write the Inspect log {path}: {type(failure[0]).__name__}: {failure[0]}") from failure[
            0
        ]


def write_inspect_log(results: "ResultsTable", path: str | Path, *, transcripts: bool = True) -> Path:
    """Write ``results`` as an Inspect log at ``path`` (``.eval`` or ``.json``) and return the path."""
    require_inspect()
    target = check_log_path(path)
    write_log(build_log(results, transcripts=transcripts), target)
    return target


__all__ = [
    "build_log",
    "build_sample",
    "check_log_path",
    "model_texts",
    "require_inspect",
    "write_inspect_log",
    "write_log",
]
