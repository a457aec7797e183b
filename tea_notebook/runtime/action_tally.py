"""How a run's actions went, for the status it ends with: a run in which no action succeeded and
some failed is not a success, whatever the model claims (hosted models included).

An action *failed* when a tool ran and failed: it raised, timed out, or an environment refused it
(a precondition that did not hold). A call refused before anything ran — a name that was not
offered, arguments that break the schema, a tool not bound to the run — is the model's mistake,
shown to it as an observation: it says nothing about whether the task could be done, so a model
that answers after one (from what it knows) may still succeed. Nor did a call a replay policy kept
from running (``Refused``, ``NotRecorded``: see :mod:`tea_notebook.runtime.replay_policy`) fail: it
is not counted either, and not taken for the model's mistake.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

#: error types of a call that never reached the tool (the model's malformed call, not a tool failure)
INVALID_CALL = frozenset({"ValidationError", "NotFoundError", "NotBoundError"})
#: error types of a call a fork's replay policy kept from running (refused, or no recorded answer)
NOT_RUN = frozenset({"Refused", "NotRecorded"})
#: error types of a call that is not counted: it never reached the tool
NOT_COUNTED = INVALID_CALL | NOT_RUN
#: how a failed call's observation starts: ``InvokeResult.to_observation`` gives its error's type
FAILED_CALL = re.compile(r"^Error(?: \((?P<type>[^)]*)\))?")
#: the loop's observation for arguments that are not one JSON object (``AgentRun._not_an_object``)
NOT_AN_OBJECT = re.compile(r"^Error: arguments of \S+ are not a JSON object")
#: the observation of a call a replay policy kept from running (``replay_policy.refused`` and ``not_recorded``)
NOT_RUN_OBSERVATION = re.compile(r"^Error: \S+ was not run: the replay policy ")
#: the failed actions a note names, at most (its count covers every failure)
NAMED = 5


@dataclass
class ActionTally:
    """What one run's actions did: how many succeeded, how many failed, and how each failed (see
    the module's docstring for what counts). The loop's own bookkeeping (``ignored``: ``todo`` and
    the control tools that end or reconfigure a run) is not an action."""

    ignored: frozenset[str] = frozenset()
    succeeded: int = 0
    failures: int = 0
    #: each failed tool and its last error's type, in the order of their first failure
    reasons: dict[str, str] = field(default_factory=dict)

    def ran(self, name: str, ok: bool, error_type: str | None = None) -> None:
        """Count a call: ``ok``, or failed with ``error_type`` (its error's class; a call refused
        before it ran, or kept from running by a replay policy, is not counted)."""
        if name in self.ignored or (not ok and error_type in NOT_COUNTED):
            return
        if ok:
            self.succeeded += 1
        else:
            self.failures += 1
            self.reasons[name] = error_type or "error"

    def replayed(self, results: Iterable[tuple[str, str, str]]) -> None:
        """Count a replayed step from what it recorded, ``(name, arguments, observation)`` per action,
        as its run counted it: a fork or resume keeps its source's tally up to where it starts. (A
        step the model got wrong records ``error`` as its action: nothing ran.)"""
        for name, _args, observation in results:
            if name == "error":
                continue
            text = str(observation)
            failed = FAILED_CALL.match(text)
            kind = "ValidationError" if NOT_AN_OBJECT.match(text) else failed["type"] if failed else None
            if NOT_RUN_OBSERVATION.match(text):
                kind = "Refused"
            self.ran(name, failed is None, kind)

    def verdict(self) -> str | None:
        """Why the run cannot be a success (None: it may be): no action succeeded and some failed."""
        if self.succeeded or not self.failures:
            return None
        named = [f"{name} ({why})" for name, why in list(self.reasons.items())[:NAMED]]
        more = len(self.reasons) - len(named)
        listed = ", ".join(named) + (f" and {more} more" if more > 0 else "")
        calls = "call" if self.failures == 1 else "calls"
        return f"no action succeeded; {self.failures} tool {calls} failed: {listed}"


__all__ = ["INVALID_CALL", "NOT_COUNTED", "NOT_RUN", "ActionTally"]
