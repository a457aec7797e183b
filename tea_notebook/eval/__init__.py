"""Batch evaluation: run an agent over a task set (GAIA's ``metadata.jsonl``, a JSONL / CSV of
questions and answers, or the shipped sample), score the answers (GAIA's rules, exact, contains, an
LLM judge), store each result in the workspace as it ends (resumable), in this process or on Ray.

    from tea_notebook.eval import evaluate, datasets
    results = evaluate(ws, ws.agent("solver", model=...), datasets.sample_path(), name="sample-1")
    results.plot()

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
)

__all__ = [*_EXPORTS, "datasets"]


__getattr__ = lazy_getattr("tea_notebook.eval", _EXPORTS, _SUBMODULES, globals())
