"""Errors raised by tea_notebook. Every message names what was wrong."""

from __future__ import annotations


class TeaError(Exception):
    """Base class of every error tea_notebook raises on purpose."""


class EnvironmentFailure(TeaError):
    """An environment action failed in a way the agent should read (a limit, a refused path).
    Defined here, below every floor, because host code of any floor opens files in run folders
    through :mod:`tea_notebook._safe_open`, which raises it; ``tea_notebook.envs.base`` re-exports it."""


class WorkspaceError(TeaError):
    """A workspace folder or its database cannot be opened or is not ours."""


class WorkspaceSettingChanged(UserWarning):
    """A call changed a setting the workspace keeps for every later session (its embedder)."""


class SchemaError(TeaError):
    """A function cannot be turned into a tool schema (missing or unsupported hints, bad docstring)."""

    def __init__(self, function: str, parameter: str | None, problem: str):
        self.function = function
        self.parameter = parameter
        where = f"parameter {parameter!r} of {function}()" if parameter else f"{function}()"
        super().__init__(f"{where}: {problem}")


class NotFoundError(TeaError, KeyError):
    """A record, version or binding that does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class RegistryError(TeaError):
    """A registry operation that breaks a rule (bad record, bad relation, bad rollback)."""


class EmbeddingError(TeaError):
    """The embedder could not produce vectors; retrieval refuses to guess."""


class ManifestError(TeaError):
    """A tool manifest file that is corrupt, truncated or not a tea manifest."""


class TransformationError(TeaError):
    """A TEA transformation whose result breaks interface consistency or composition."""


class EvolutionError(TeaError):
    """A self-evolution stage could not get a usable answer from the model (after retries)."""

    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage}: {message}")
        self.stage = stage


class RunFailed(TeaError):
    """A run that ended with status ``error``: what ``agent.run(...)`` and ``agent.run_sync(...)`` raise
    (every agent kind; ``raise_on_error=False`` returns the result instead). Nothing is lost: the run and
    its trajectory are stored, and ``.result`` is its ``RunResult``."""

    def __init__(self, result: object):
        self.result = result
        run_id = getattr(result, "run_id", "?")
        why = getattr(result, "error", None) or getattr(result, "answer", "") or "no error message"
        super().__init__(
            f"the run of {getattr(result, 'agent', '?')!r} ended in error: {why} (run {run_id}: its trajectory is "
            f"stored, see exc.result.trajectory or ws.trajectory({run_id!r}); pass raise_on_error=False to get the "
            "result instead of this exception)"
        )
