"""Trajectory scorers: scores that read the run, not only the answer. Each gives a sample one more
named score (1.0 / 0.0, or a number) beside the answer's ``correct``:

    evaluate(ws, agent, tasks, checks=[tool_called("search"), max_steps(5), no_tool_errors(),
                                        cost_under(0.05), Rubric(JUDGE_MODEL, "Cites a source")])

They read the stored trajectory (sub-agent runs included). A function ``f(trajectory) -> bool |
float`` (sync or async) is a check too, named after the function. A sample without a run (its
agent raised before starting one) gets no check scores.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.runtime.trajectory import Trajectory


@dataclass
class CheckResult:
    """A check's score for one sample, with what it cost (a rubric's model call) and a note."""

    value: float
    cost: float = 0.0
    note: str = ""


def actions(trajectory: "Trajectory") -> Iterator[dict[str, Any]]:
    """Every tool call of the run and of its sub-runs, in order."""
    for step in trajectory.steps:
        yield from step.actions
    for child in trajectory.children:
        yield from actions(child)


def _steps(trajectory: "Trajectory") -> int:
    return len(trajectory.steps)


class Check:
    """A trajectory scorer: ``name`` (the score's name), ``describe()`` (what the evaluation record
    keeps) and ``await check(trajectory) -> CheckResult``."""

    name = "check"

    def describe(self) -> dict[str, Any]:
        """What the evaluation's record keeps of this check."""
        return {"check": self.name}

    async def __call__(self, trajectory: "Trajectory") -> CheckResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _Predicate(Check):
    def __init__(self, name: str, fn: Any, described: dict[str, Any]):
        self.name, self._fn, self._described = name, fn, described

    def describe(self) -> dict[str, Any]:
        return dict(self._described)

    async def __call__(self, trajectory: "Trajectory") -> CheckResult:
        value = self._fn(trajectory)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, CheckResult):
            return value
        if isinstance(value, bool) or isinstance(value, (int, float)):
            return CheckResult(float(value))
        raise TeaError(f"check {self.name} returned {value!r}, not a bool or a number")


def tool_called(name: str, times: int = 1) -> Check:
    """1.0 when the run (or a sub-run) called tool ``name`` at least ``times`` times."""
    if times < 1:
        raise TeaError("times must be at least 1")

    def check(t: "Trajectory") -> bool:
        return sum(a.get("name") == name for a in actions(t)) >= times

    label = f"tool_called:{name}" + (f"x{times}" if times > 1 else "")
    return _Predicate(label, check, {"check": "tool_called", "tool": name, "times": times})


def tool_not_called(name: str) -> Check:
    """1.0 when no step of the run (nor of a sub-run) called tool ``name``."""
    return _Predicate(
        f"tool_not_called:{name}",
        lambda t: not any(a.get("name") == name for a in actions(t)),
        {"check": "tool_not_called", "tool": name},
    )


def max_steps(n: int) -> Check:
    """1.0 when the run took at most ``n`` steps (its own loop's, sub-runs not counted)."""
    if n < 1:
        raise TeaError("max_steps needs at least 1 step")
    return _Predicate(f"max_steps:{n}", lambda t: _steps(t) <= n, {"check": "max_steps", "steps": n})


def no_tool_errors() -> Check:
    """1.0 when no tool call of the run (or of a sub-run) failed."""
    return _Predicate(
        "no_tool_errors",
        lambda t: all(a.get("ok", True) for a in actions(t)),
        {"check": "no_tool_errors"},
    )


def cost_under(cap: float) -> Check:
    """1.0 when the run tree cost less than ``cap`` dollars."""
    if cap <= 0:
        raise TeaError("cost_under needs a positive cap in dollars")
    return _Predicate(f"cost_under:{cap:g}", lambda t: t.cost < cap, {"check": "cost_under", "cap": cap})


RUBRIC_PROMPT = """You grade how an AI agent worked on a task, from its transcript, against a rubric.
Read the whole transcript. Reply with PASS if the agent's work meets the rubric, FAIL if it does not,
then one sentence saying why. Judge the work shown, not whether you could do better.

Rubric: {rubric}

Task: {task}

Transcript:
{transcript}"""


class Rubric(Check):
    """An LLM judges the run's transcript (the plain-text trajectory) against a ``rubric``; its
    reply must start with PASS or FAIL (anything else is that sample's error). The prompt and the
    model are kept in the evaluation's record. ``max_chars`` bounds the transcript sent."""

    def __init__(
        self,
        model: str,
        rubric: str,
        *,
        name: str = "rubric",
        prompt: str = RUBRIC_PROMPT,
        max_chars: int = 20_000,
        client: Any = None,
    ):
        if not rubric.strip():
            raise TeaError("a rubric needs its criterion as text")
        for field_name in ("{rubric}", "{transcript}"):
            if field_name not in prompt:
                raise TeaError(f"the rubric prompt must contain {field_name}")
        self.model, self.rubric, self.name, self.prompt = model, rubric, name, prompt
        self.max_chars, self._client = max_chars, client

    def describe(self) -> dict[str, Any]:
        return {"check": "rubric", "name": self.name, "model": self.model, "rubric": self.rubric, "prompt": self.prompt}

    async def __call__(self, trajectory: "Trajectory") -> CheckResult:
        from tea_notebook.models.client import ModelClient

        transcript = trajectory.text(ids=False)
        if len(transcript) > self.max_chars:
            half = self.max_chars // 2
            transcript = transcript[:half] + "\n[… transcript shortened …]\n" + transcript[-half:]
        text = self.prompt.format(rubric=self.rubric, task=trajectory.task, transcript=transcript)
        client = self._client or ModelClient(retries=2)
        reply = await client.complete(self.model, [{"role": "user", "content": text}])
        said = (reply.content or "").strip()
        word = said.split()[0].strip(".,;:!*").upper() if said else ""
        if word not in ("PASS", "FAIL"):
            raise TeaError(f"the rubric judge {self.model} replied {said[:80]!r}, not PASS or FAIL")
        return CheckResult(1.0 if word == "PASS" else 0.0, reply.cost, said[:300])


def resolve_checks(checks: Any) -> list[Check]:
    """Checks from a list of :class:`Check` objects and functions of a trajectory; names must differ."""
    if checks is None:
        return []
    if isinstance(checks, (Check,)) or callable(checks) and not isinstance(checks, (list, tuple)):
        checks = [checks]
    out: list[Check] = []
    for item in checks:
        if isinstance(item, Check):
            out.append(item)
        elif callable(item):
            name = getattr(item, "__name__", type(item).__name__)
            out.append(_Predicate(name, item, {"check": name, "custom": True}))
        else:
            raise TeaError(f"a check is a Check or a function of a trajectory, not {type(item).__name__}")
    names = [c.name for c in out]
    clash = sorted({n for n in names if names.count(n) > 1} | ({"correct"} & set(names)))
    if clash:
        raise TeaError(f"two scores would have the same name ({', '.join(clash)}): name= them apart")
    return out


__all__ = [
    "RUBRIC_PROMPT",
    "Check",
    "CheckResult",
    "Rubric",
    "actions",
    "cost_under",
    "max_steps",
    "no_tool_errors",
    "resolve_checks",
    "tool_called",
    "tool_not_called",
]
