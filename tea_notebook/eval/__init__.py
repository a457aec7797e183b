"""Batch evaluation: run an agent over a task set (GAIA's ``metadata.jsonl``, a JSONL / CSV of
questions and answers, or the shipped sample), score the answers (GAIA's rules, exact, contains, an
LLM judge), store each result in the workspace as it ends (resumable), in this process or on Ray.

    from tea_notebook.eval import evaluate, datasets
    results = evaluate(ws, ws.agent("solver", model=...), datasets.sample_path(), name="sample-1")
    results.plot()

Repeated runs with their spread (``epochs=5``: ``accuracy 0.63 ± 0.04 (k=5, 30 tasks)``, pass@k, pass^k,
reducers, Student-t intervals, McNemar, Holm / BH; :mod:`.stats`), a sample-size planner (:mod:`.planning`),
reliability across epochs (:mod:`.reliability`), retries of samples the model provider failed
(:mod:`.failures`), trajectory checks (:mod:`.checks`), eval sets of agents × models × task files with
intervals, paired tests and adjusted comparisons (:mod:`.sets`), a model preflight (:mod:`.doctor`), and
Inspect AI logs and agents (:mod:`.inspect_log`, :mod:`.inspect_run`).

Nothing is imported until used (``tea_notebook.eval.gaia_score`` loads only the scorer).
"""

from __future__ import annotations

from tea_notebook._lazy import lazy_getattr

_EXPORTS = {
    "evaluate": "tea_notebook.eval.runner",
    "aevaluate": "tea_notebook.eval.runner",
    "load": "tea_notebook.eval.runner",
    "resolve_agent": "tea_notebook.eval.runner",
    "gaia_score": "tea_notebook.eval.scoring",
    "exact_score": "tea_notebook.eval.scoring",
    "contains_score": "tea_notebook.eval.scoring",
    "extract_final_answer": "tea_notebook.eval.scoring",
    "LLMJudge": "tea_notebook.eval.scoring",
    "JUDGE_PROMPT": "tea_notebook.eval.scoring",
    "GAIA_PROMPT": "tea_notebook.eval.scoring",
    "Verdict": "tea_notebook.eval.scoring",
    "Task": "tea_notebook.eval.tasks",
    "TaskFileError": "tea_notebook.eval.tasks",
    "load_tasks": "tea_notebook.eval.tasks",
    "load_gaia": "tea_notebook.eval.tasks",
    "load_plain": "tea_notebook.eval.tasks",
    "EvalResults": "tea_notebook.eval.results",
    "TaskResult": "tea_notebook.eval.results",
    "Limits": "tea_notebook.eval.attempt",
    "eval_set": "tea_notebook.eval.sets",
    "aeval_set": "tea_notebook.eval.sets",
    "load_set": "tea_notebook.eval.sets",
    "EvalSet": "tea_notebook.eval.sets",
    "Configuration": "tea_notebook.eval.sets",
    "Estimate": "tea_notebook.eval.stats",
    "paired_bootstrap": "tea_notebook.eval.stats",
    "paired_t_test": "tea_notebook.eval.stats",
    "mcnemar": "tea_notebook.eval.stats",
    "adjust_p_values": "tea_notebook.eval.stats",
    "clustered_estimate": "tea_notebook.eval.stats",
    "plan_sample_size": "tea_notebook.eval.planning",
    "SamplePlan": "tea_notebook.eval.planning",
    "pass_at_k": "tea_notebook.eval.stats",
    "pass_hat_k": "tea_notebook.eval.stats",
    "tool_called": "tea_notebook.eval.checks",
    "tool_not_called": "tea_notebook.eval.checks",
    "max_steps": "tea_notebook.eval.checks",
    "no_tool_errors": "tea_notebook.eval.checks",
    "cost_under": "tea_notebook.eval.checks",
    "Rubric": "tea_notebook.eval.checks",
    "write_inspect_log": "tea_notebook.eval.inspect_log",
    "inspect_agent": "tea_notebook.eval.inspect_run",
    "preflight": "tea_notebook.eval.doctor",
    "apreflight": "tea_notebook.eval.doctor",
    "Preflight": "tea_notebook.eval.doctor",
}
_SUBMODULES = (
    "datasets",
    "plots",
    "scoring",
    "tasks",
    "results",
    "runner",
    "attempt",
    "progress",
    "spec",
    "ray_engine",
    "stats",
    "distributions",
    "planning",
    "reliability",
    "failures",
    "checks",
    "sets",
    "inspect_log",
    "inspect_run",
    "doctor",
)

__all__ = [*_EXPORTS, "datasets"]


__getattr__ = lazy_getattr("tea_notebook.eval", _EXPORTS, _SUBMODULES, globals())
