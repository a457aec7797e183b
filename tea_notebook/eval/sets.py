"""Eval sets: several agents × models × task files (× epochs) as one named, resumable set, with a
comparison table of means and 95% intervals, a paired bootstrap test of two configurations on the
same tasks, per-task agreement, and a plot with error bars.

    s = eval_set(ws, "gaia-small", agents=["solver", "orchestra"], models=[MODEL, None],
                 tasks=["gaia/validation"], epochs=5, seed=0)
    s                                   # the table: accuracy 0.63 ± 0.04 (95% CI …) per configuration
    s.compare("solver@MODEL", "orchestra@MODEL")   # A − B, its interval and p-value

Each configuration is an evaluation of its own, named ``SET:LABEL`` (resumable on its own, listed
by ``ws.evaluations()``); running the set again runs only the samples that are missing. Two
configurations that would run the same agent with the same model on the same tasks are refused
before anything runs.
"""

from __future__ import annotations

import html
import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import NotFoundError, TeaError

if TYPE_CHECKING:
    from tea_notebook.eval.results import EvalResults
    from tea_notebook.eval.stats import Comparisons, McNemarTest, PairedTest
    from tea_notebook.runtime.host import RunHost


@dataclass
class Configuration:
    """One member of a set: an agent (a name or an object), a model (None: the agent's own), a task
    source, and options of :func:`~tea_notebook.eval.runner.aevaluate` for it alone."""

    agent: Any
    model: str | None = None
    tasks: Any = None
    label: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def _agent_name(agent: Any) -> str:
    return agent if isinstance(agent, str) else str(getattr(agent, "name", type(agent).__name__))


def _short_model(model: str | None) -> str:
    return "default" if not model else model.rsplit("/", 1)[-1].rsplit(":", 1)[-1]


def _source_name(tasks: Any) -> str:
    if isinstance(tasks, (str, Path)):
        path = Path(tasks)
        return path.parent.name if path.name == "metadata.jsonl" else path.stem
    return "tasks"


def configurations(
    agents: Any = None, models: Any = None, tasks: Any = None, configs: Any = None, ws: "RunHost | None" = None
) -> list[Configuration]:
    """The set's members: ``configs`` as given, else every agent × model × task source. A label is
    ``agent@model`` (the agent's own model when none is given, resolved in ``ws``), ``/tasks`` added
    when the set has several task sources."""
    if configs is not None:
        out = [c if isinstance(c, Configuration) else Configuration(**c) for c in configs]
        for c in out:
            if c.tasks is None:
                c.tasks = tasks
    else:
        if not agents:
            raise TeaError("an eval set needs agents=[...] (or configs=[...])")
        agent_list = agents if isinstance(agents, (list, tuple)) else [agents]
        model_list = models if isinstance(models, (list, tuple)) else [models]
        task_list = tasks if isinstance(tasks, (list, tuple)) and not _is_task_rows(tasks) else [tasks]
        out = [Configuration(a, m, t) for a, m, t in itertools.product(agent_list, model_list, task_list)]
    if not out:
        raise TeaError("an eval set needs at least one configuration")
    several_sources = len({_source_name(c.tasks) for c in out}) > 1
    for c in out:
        if c.tasks is None:
            raise TeaError(f"configuration {c.label or _agent_name(c.agent)!r} has no tasks")
        if c.label is None:
            c.label = f"{_agent_name(c.agent)}@{_short_model(c.model or _own_model(ws, c.agent))}"
            if several_sources:
                c.label += f"/{_source_name(c.tasks)}"
    return out


def _own_model(ws: "RunHost | None", agent: Any) -> str | None:
    """The model ``agent`` runs with when the set names none."""
    if ws is None and isinstance(agent, str):
        return None
    if ws is not None:
        from tea_notebook.eval.runner import resolve_agent

        agent = resolve_agent(ws, agent)
    resolved = getattr(agent, "resolved_model", None)
    return resolved(None)[0] if callable(resolved) else getattr(agent, "model", None)


def _is_task_rows(tasks: Any) -> bool:
    """A list of task dicts / Task objects (one task set), as opposed to a list of task files."""
    return bool(tasks) and not isinstance(tasks[0], (str, Path))


class EvalSet:
    """The results of an eval set: one :class:`~tea_notebook.eval.results.EvalResults` per
    configuration label, in order."""

    def __init__(self, name: str, members: dict[str, "EvalResults"], *, stopped: str | None = None):
        self.name, self.members, self.stopped = name, members, stopped
        #: the preflight report of each live model the set checked before it started
        self.preflight: dict[str, Any] = {}

    @classmethod
    def load(cls, ws: "RunHost", name: str) -> "EvalSet":
        """The stored set ``name`` (its members are the evaluations ``name:LABEL``)."""
        from tea_notebook.eval.results import EvalResults

        members = {}
        for row in sorted(ws.db.evaluations(), key=lambda r: r["created"]):
            record = ws.db.evaluation(row["name"])
            config = record["config"] if record else {}
            if config.get("set") == name:
                members[config["set_label"]] = EvalResults.load(ws, row["name"])
        if not members:
            raise NotFoundError(f"no eval set {name!r} in {ws.path}")
        return cls(name, members)

    def __getitem__(self, label: str) -> "EvalResults":
        try:
            return self.members[label]
        except KeyError:
            raise KeyError(
                f"{label!r} is not a configuration of set {self.name!r}: {', '.join(self.members)}"
            ) from None

    def __iter__(self):
        return iter(self.members.values())

    def __len__(self) -> int:
        return len(self.members)

    # -- numbers ------------------------------------------------------------------------------
    def table(self, score: str = "correct") -> list[dict[str, Any]]:
        """One row per configuration: mean ± stderr over tasks, its 95% Student-t interval, pass@k and pass^k
        (k = its epochs), samples, errors (provider failures apart) and cost."""
        rows = []
        for label, r in self.members.items():
            est = r.estimate(score)
            low, high = est.ci95
            k = r.epochs
            rows.append(
                {
                    "config": label,
                    "agent": r.config.get("agent", ""),
                    "model": r.model_label(),
                    "tasks": est.n,
                    "epochs": k,
                    "samples": len(r),
                    "mean": est.mean,
                    "stderr": est.stderr,
                    "ci95_low": low,
                    "ci95_high": high,
                    "pass@k": r.pass_at(k) if score == "correct" else None,
                    "pass^k": r.pass_hat(k) if score == "correct" else None,
                    "errors": r.agent_errors,
                    "provider_failures": r.infra_errors,
                    "cost": r.cost,
                }
            )
        return rows

    def to_pandas(self, score: str = "correct") -> Any:
        """:meth:`table` as a DataFrame indexed by configuration (pandas is imported here)."""
        import pandas as pd

        return pd.DataFrame(self.table(score)).set_index("config")

    def compare(
        self, a: str, b: str, *, score: str = "correct", resamples: int = 10_000, seed: int = 0, test: str = "bootstrap"
    ) -> "PairedTest":
        """A paired test of configuration ``a`` minus ``b`` over the tasks both scored: ``bootstrap``
        (resampled tasks) or ``t`` (Student's paired t-test)."""
        from tea_notebook.eval.stats import paired_bootstrap, paired_t_test

        sa, sb = self[a].task_scores(score), self[b].task_scores(score)
        if test == "t":
            return paired_t_test(sa, sb)
        if test != "bootstrap":
            raise TeaError(f"unknown paired test {test!r}; use 'bootstrap' or 't'")
        return paired_bootstrap(sa, sb, resamples=resamples, seed=seed)

    def mcnemar(self, a: str, b: str, *, score: str = "correct") -> "McNemarTest":
        """McNemar's exact test of ``a`` against ``b`` on right/wrong per task (a task's reduced score
        of at least 0.5 is right)."""
        from tea_notebook.eval.stats import mcnemar

        return mcnemar(self[a].task_scores(score), self[b].task_scores(score))

    def compare_all(
        self,
        baseline: str | None = None,
        *,
        score: str = "correct",
        test: str = "bootstrap",
        adjustment: str = "holm",
        alpha: float = 0.05,
        resamples: int = 10_000,
        seed: int = 0,
    ) -> "Comparisons":
        """Every configuration against ``baseline`` (default: the first) by a paired ``test``, the
        p-values adjusted for the several comparisons at once (``holm``, ``bh`` or ``none``)."""
        from tea_notebook.eval.stats import compare_many

        base = baseline if baseline is not None else next(iter(self.members), "")
        self[base]  # an unknown baseline is refused with the configurations' names
        scores = {label: r.task_scores(score) for label, r in self.members.items()}
        return compare_many(scores, base, test=test, adjustment=adjustment, alpha=alpha, resamples=resamples, seed=seed)

    def agreement(self, a: str, b: str, *, score: str = "correct") -> list[dict[str, Any]]:
        """Per task both scored: the two reduced scores and whether they agree (both ≥ 0.5 or both below)."""
        sa, sb = self[a].task_scores(score), self[b].task_scores(score)
        rows = []
        for task in [t for t in sa if t in sb]:
            rows.append({"task_id": task, a: sa[task], b: sb[task], "agree": (sa[task] >= 0.5) == (sb[task] >= 0.5)})
        return rows

    def agreement_view(self, a: str, b: str, *, score: str = "correct") -> Any:
        """:meth:`agreement` as a table (HTML and text), agreeing tasks green, the others red."""
        from tea_notebook.eval.browse import Agreement

        return Agreement(a, b, self.agreement(a, b, score=score))

    # -- views --------------------------------------------------------------------------------
    def text(self, score: str = "correct") -> str:
        """The table as plain text (every mean with its spread)."""
        lines = [
            f"eval set {self.name}: {len(self)} configurations"
            + (f" · stopped: {self.stopped}" if self.stopped else "")
        ]
        for row in self.table(score):
            lines.append(
                f"  {row['config']:<32} {score} {row['mean']:.2f} ± {row['stderr']:.2f} "
                f"(95% CI {row['ci95_low']:.2f}–{row['ci95_high']:.2f}; k={row['epochs']}, {row['tasks']} tasks)"
                + (f" · pass@{row['epochs']} {row['pass@k']:.2f}" if row["pass@k"] is not None else "")
                + f" · {row['errors']} errors"
                + (f" · {row['provider_failures']} provider failures" if row["provider_failures"] else "")
                + f" · ${row['cost']:.4f}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"EvalSet({self.name!r}, configurations={list(self.members)})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(
            f"<th style='text-align:left'>{h}</th>"
            for h in (
                "configuration",
                "model",
                "mean ± stderr",
                "95% CI",
                "k",
                "tasks",
                "pass@k",
                "pass^k",
                "errors",
                "cost",
            )
        )
        body = []
        for row in self.table():
            cells = [
                esc(row["config"]),
                esc(row["model"]),
                f"{row['mean']:.3f} ± {row['stderr']:.3f}",
                f"{row['ci95_low']:.3f} – {row['ci95_high']:.3f}",
                str(row["epochs"]),
                str(row["tasks"]),
                "–" if row["pass@k"] is None else f"{row['pass@k']:.3f}",
                "–" if row["pass^k"] is None else f"{row['pass^k']:.3f}",
                str(row["errors"]) + (f" (+{row['provider_failures']} provider)" if row["provider_failures"] else ""),
                f"${row['cost']:.4f}",
            ]
            body.append("<tr>" + "".join(f"<td style='text-align:left'>{c}</td>" for c in cells) + "</tr>")
        note = f"<div>stopped: {esc(self.stopped)}</div>" if self.stopped else ""
        return (
            f"<div class='tea-eval-set'><b>eval set {esc(self.name)}</b>{note}<table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table><div style='font-size:85%;color:#57606a'>mean over tasks of each "
            "task's reduced epochs; stderr over tasks; 95% CI = mean ± t<sub>0.975, tasks−1</sub>·stderr (Student). "
            "Compare two: <code>s.compare(a, b)</code> (paired bootstrap), <code>s.mcnemar(a, b)</code>; all "
            "against one: <code>s.compare_all(baseline)</code> (Holm-adjusted)</div>" + self._samples_html() + "</div>"
        )

    def _samples_html(self, limit: int = 200) -> str:
        """Every sample as a mark (✓ right, ✗ wrong, ! error, – provider failure) in a grid of tasks ×
        configurations; each mark opens its run (``data-run``, as a results table's rows do)."""
        esc = html.escape
        by_task: dict[str, dict[str, list[Any]]] = {}
        for label, results in self.members.items():
            for r in results.results:
                by_task.setdefault(r.task_id, {}).setdefault(label, []).append(r)
        rows = []
        for task, cells in list(by_task.items())[:limit]:
            tds = []
            for label in self.members:
                marks = []
                for r in cells.get(label, []):
                    mark = "–" if r.infra_error else "✓" if r.correct else "!" if r.status == "error" else "✗"
                    said = "right" if r.correct else "error, scored wrong" if r.status == "error" else "wrong"
                    title = f"{label} · {r.key}: " + ("provider failure, not scored" if r.infra_error else said)
                    attrs = f" data-run='{esc(r.run_id)}'" if r.run_id else ""
                    marks.append(f"<span{attrs} title='{esc(title)}'>{mark}</span>")
                tds.append(f"<td style='text-align:left'>{' '.join(marks)}</td>")
            rows.append(f"<tr><td style='text-align:left'>{esc(task)}</td>{''.join(tds)}</tr>")
        more = f"<p>… {len(by_task) - limit} more tasks</p>" if len(by_task) > limit else ""
        head = "".join(f"<th style='text-align:left'>{esc(label)}</th>" for label in self.members)
        return (
            "<details class='tea-eval tea-eval-samples'><summary>samples by task (✓ right, ✗ wrong, ! error, "
            "– provider failure; click one to open its run)</summary>"
            f"<table><thead><tr><th style='text-align:left'>task</th>{head}</tr></thead><tbody>{''.join(rows)}"
            f"</tbody></table>{more}</details>"
        )

    def to_inspect(self, folder: str | Path, *, transcripts: bool = True) -> list[Path]:
        """One Inspect log per configuration in ``folder`` (``LABEL.eval``, the label made file-safe)."""
        from tea_notebook.eval.inspect_log import check_log_path, write_inspect_log

        targets = {label: Path(folder) / f"{_safe(label)}.eval" for label in self.members}
        for target in targets.values():
            check_log_path(target)  # every path is checked before any log is written
        return [write_inspect_log(self.members[k], t, transcripts=transcripts) for k, t in targets.items()]

    def plot(self, score: str = "correct") -> Any:
        """Each configuration's mean with its 95% interval as error bars."""
        from tea_notebook.eval.plots import plot_set

        return plot_set(self, score)


def _safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.@" else "_" for ch in label)


def _check_distinct(ws: "RunHost", configs: list[Configuration]) -> None:
    """Refuse a set in which two configurations would run the same thing (or share a label)."""
    from tea_notebook.eval.tasks import fingerprint, load_tasks

    seen: dict[tuple, str] = {}
    labels: set[str] = set()
    for c in configs:
        options = tuple(sorted((k, repr(v)) for k, v in c.options.items()))
        key = (_agent_name(c.agent), c.model or "", fingerprint(load_tasks(c.tasks)), options)
        if key in seen:
            raise TeaError(
                f"configurations {seen[key]!r} and {c.label!r} are identical (agent {key[0]!r}, model "
                f"{c.model or 'its own'!r}, the same tasks and options): a set compares different configurations"
            )
        seen[key] = c.label
    for c in configs:
        if c.label in labels:
            raise TeaError(f"two configurations of the set are labelled {c.label!r}: give them label=...")
        labels.add(c.label)


async def aeval_set(
    ws: "RunHost",
    name: str,
    *,
    agents: Any = None,
    models: Any = None,
    tasks: Any = None,
    configs: Any = None,
    stop: threading.Event | None = None,
    preflight: bool = True,
    **options: Any,
) -> EvalSet:
    """Run (or resume) the eval set ``name``: each configuration's evaluation in turn, only the
    samples it is missing. ``options`` go to every evaluation (``epochs``, ``scorer``, ``checks``,
    ``concurrency``, ``retries``, ``fail_on_error``, ``cost_cap`` (per configuration) …); a
    configuration's own ``options`` override them. ``preflight``: check each model the set will
    call (:mod:`tea_notebook.eval.doctor`; scripted and replayed ones need none) before anything
    runs, and refuse to start when one is unreachable or refuses the key."""
    from tea_notebook.eval.runner import aevaluate

    if not name or ":" in name:
        raise TeaError(f"an eval set's name must be non-empty and without ':', not {name!r}")
    members = configurations(agents, models, tasks, configs, ws=ws)
    _check_distinct(ws, members)
    reports = await _preflight(ws, members) if preflight else {}
    results: dict[str, Any] = {}
    notes: list[str] = []
    for c in members:
        if stop is not None and stop.is_set():
            notes.append("stopped by the user")
            break
        run_options = {**options, **c.options}
        r = await aevaluate(
            ws,
            c.agent,
            c.tasks,
            name=f"{name}:{c.label}",
            model=c.model,
            stop=stop,
            member_of=(name, c.label),
            **run_options,
        )
        results[c.label] = r
        if r.stopped:
            notes.append(f"{c.label}: {r.stopped}")
            if r.stopped.startswith(("the model provider failed", "stopped by the user")):
                break  # the provider is down or the person said stop: the next configurations would fare no better
    out = EvalSet(name, results, stopped="; ".join(notes) or None)
    out.preflight = reports
    return out


async def _preflight(ws: "RunHost", members: list[Configuration]) -> dict[str, Any]:
    """Each live model of the set checked once; a model that cannot answer stops the set here."""
    from tea_notebook.eval.doctor import apreflight
    from tea_notebook.eval.runner import resolve_agent
    from tea_notebook.models.client import is_offline

    models: list[str] = []
    for c in members:
        runner = resolve_agent(ws, c.agent)
        resolved = getattr(runner, "resolved_model", None)
        model = resolved(c.model)[0] if callable(resolved) else (c.model or "")
        if model and not is_offline(model) and model not in models:
            models.append(model)
    reports = {}
    for model in models:
        report = await apreflight(model, ws=ws)
        reports[model] = report
        if not report.ok:
            raise TeaError(
                f"preflight: model {model!r} cannot run the set ({report.probes[0].detail}); nothing was run. "
                "Fix the key or the server (tea doctor --model ... says more), or pass preflight=False"
            )
    return reports


def eval_set(ws: "RunHost", name: str, **options: Any) -> EvalSet:
    """:func:`aeval_set` from synchronous code (a notebook cell too); the kernel's ■ stops it
    cooperatively and returns what was recorded."""
    from tea_notebook.eval.runner import run_stoppable

    stop = options.pop("stop", None)
    return run_stoppable(lambda event: aeval_set(ws, name, stop=event, **options), stop)


def load_set(ws: "RunHost", name: str) -> EvalSet:
    """The stored eval set ``name``."""
    return EvalSet.load(ws, name)


__all__ = ["Configuration", "EvalSet", "aeval_set", "configurations", "eval_set", "load_set"]
