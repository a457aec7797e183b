"""Telling infrastructure from failure: did a sample end because the model provider failed (a rate
limit, a 5xx, a timeout or a lost connection — worth retrying; a wrong key or an unknown model — not
worth retrying, but not the agent's fault either), or because the agent failed?

A provider failure reaches a run as a :class:`~tea_notebook.models.client.ModelError` (after the
client's own few retries) and the run records it as an ``error`` event of kind ``"model"``; an agent
that is not a loop (a workflow) raises the ``ModelError`` instead. Only those are looked at: an
answer that is wrong, a step or token limit, the evaluation's own timeout, a tool that failed or a
script that broke are the agent's outcome, scored as such and never retried.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tea_notebook.eval.attempt import Attempt
    from tea_notebook.runtime.host import RunHost

#: words of a model error that mean the provider may answer if asked again
_TRANSIENT = re.compile(
    r"rate.?limit|\b429\b|cannot reach|no answer from|timed? ?out|timeout|apiconnectionerror|connection (?:reset|"
    r"error|aborted)|internalservererror|serviceunavailable|\bapierror\b|overloaded|bad gateway|\b50[0-4]\b",
    re.I,
)
#: words of a model error that mean asking again will not help (and the agent is not to blame)
_PERMANENT = re.compile(
    r"authentication failed|\b401\b|\b403\b|permission|needs [A-Z_]*API_KEY|not a litellm model name|"
    r"api key|credential",
    re.I,
)


@dataclass(frozen=True)
class ProviderFailure:
    """A sample's run ended because the model provider failed: ``transient`` ones are retried."""

    message: str
    transient: bool


def classify(message: str) -> ProviderFailure | None:
    """The provider failure a model error's message describes, or None when it is none of those
    (a bad request, a context overflow: the agent's outcome)."""
    if _PERMANENT.search(message):
        return ProviderFailure(message, transient=False)
    if _TRANSIENT.search(message):
        return ProviderFailure(message, transient=True)
    return None


def provider_failure(ws: "RunHost", attempt: "Attempt") -> ProviderFailure | None:
    """Whether ``attempt`` ended because the model provider failed (see the module docstring)."""
    if attempt.error is None:
        return None
    if attempt.run_status == "error" and "the agent raised ModelError" in attempt.error:
        return classify(attempt.error)
    if attempt.run_status != "error" or not attempt.run_id:
        return None
    for event in reversed(ws.events.events(attempt.run_id, nested=False)):
        if event.type == "error" and event.data.get("kind") == "model":
            return classify(str(event.data.get("message", "")))
    return None


def backoff_delay(retry: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (1, 2, …): ``base · 2^(retry-1)``, capped at
    ``cap``, times a jitter in [0.5, 1.5) so that samples retried together do not return together."""
    jitter = 0.5 + (rng or random).random()
    return min(cap, base * 2 ** (retry - 1)) * jitter


__all__ = ["ProviderFailure", "backoff_delay", "classify", "provider_failure"]
