"""What an evaluation produced: one :class:`TaskResult` per task and the :class:`EvalResults` table
(HTML and text views, ``to_pandas()`` / ``to_list()``, per-level accuracy, plots, comparison).

The numbers and the table are :class:`~tea_notebook.eval.table.ResultsTable`; :class:`EvalResults`
adds the views built on it (which read it as that table, so they import nothing of this module).
"""

from __future__ import annotations

from typing import Any

from tea_notebook.eval.table import COLUMNS, ResultsTable, TaskResult, sample_key


class EvalResults(ResultsTable):
    """The results of one evaluation (as stored in the workspace): a table with one row per task.

    ``accuracy`` counts correct answers over all tasks with a result (errors count as wrong);
    ``stopped`` says why the evaluation ended early (cost cap, interrupt), if it did.
    """

    # -- views --------------------------------------------------------------------------------
    def browse(self) -> Any:
        """A list of the samples; choosing one renders its run's trajectory below (ipywidgets)."""
        from tea_notebook.eval.browse import ResultsBrowser

        return ResultsBrowser(self)

    def to_inspect(self, path: Any, *, transcripts: bool = True) -> Any:
        """Write these results as an Inspect AI log (``.eval`` / ``.json``; see
        :mod:`tea_notebook.eval.inspect_log`) and return its path."""
        from tea_notebook.eval.inspect_log import write_inspect_log

        return write_inspect_log(self, path, transcripts=transcripts)

    def reliability(self, score: str = "correct") -> Any:
        """Consistency across epochs, the clustered standard error and the calibration of stated
        confidence (:func:`tea_notebook.eval.reliability.reliability`)."""
        from tea_notebook.eval.reliability import reliability

        return reliability(self, score=score)

    # -- plots --------------------------------------------------------------------------------
    def plot(self, window: int = 10) -> Any:
        """Accuracy by level, cost and steps distributions, and rolling accuracy over the tasks."""
        from tea_notebook.eval.plots import plot_evaluation

        return plot_evaluation(self, window=window)

    def compare(self, other: "EvalResults") -> Any:
        """A figure of this evaluation beside ``other``: accuracy by level, cost per task, rolling accuracy."""
        from tea_notebook.eval.plots import plot_comparison

        return plot_comparison(self, other)


__all__ = ["COLUMNS", "EvalResults", "TaskResult", "sample_key"]
