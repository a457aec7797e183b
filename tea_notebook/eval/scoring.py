"""Scoring answers: GAIA's rules, exact and contains matches, an LLM judge, or your own function.

:func:`gaia_score` follows the rules the GAIA leaderboard publishes; it lives in
:mod:`tea_notebook.answers` (the evolution loop compares answers with it too) and is public here as well.

A scorer is anything :func:`resolve_scorer` accepts: ``"gaia"``, ``"exact"``, ``"contains"``, an
:class:`LLMJudge`, or a function ``f(answer, expected, task) -> bool`` (sync or async).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from tea_notebook.answers import gaia_score, is_number, normalize_number, normalize_text  # noqa: F401 - public here
from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.eval.tasks import Task

_FINAL = re.compile(r"final\s+answer\s*:\s*", re.I)


def extract_final_answer(text: str | None) -> str:
    """The part of an agent's answer after its last ``FINAL ANSWER:`` (the GAIA answer template), or
    the whole text stripped when there is none."""
    text = text or ""
    found = list(_FINAL.finditer(text))
    if found:
        text = text[found[-1].end() :]
    return text.strip()


def exact_score(model_answer: Any, ground_truth: Any) -> bool:
    """The answer equals the expected text, ignoring surrounding whitespace."""
    return str(model_answer or "").strip() == str(ground_truth).strip()


def contains_score(model_answer: Any, ground_truth: Any) -> bool:
    """The expected text appears in the answer (both lowercased, whitespace collapsed)."""
    want = " ".join(str(ground_truth).lower().split())
    return bool(want) and want in " ".join(str(model_answer or "").lower().split())


#: a task template for GAIA-style questions (``prompt=GAIA_PROMPT``): asks for the answer in the
#: form the scorer reads, in the spirit of GAIA's published instructions (worded here, not copied)
GAIA_PROMPT = """{question}

When you have the answer, end with one line: FINAL ANSWER: <answer>
The answer is a number, as few words as possible, or a comma-separated list of numbers and/or words.
Write numbers with digits, without thousands separators or units ($, %) unless asked; write words
without articles or abbreviations."""


JUDGE_PROMPT = """You grade one answer to a question against the reference answer.
Reply with exactly one word: CORRECT if the answer means the same as the reference (the same
entity, number or list, allowing differences of format, units written out, case or spacing),
INCORRECT otherwise. Do not solve the question yourself.

Question: {question}
Reference answer: {expected}
Answer to grade: {answer}"""


@dataclass
class Verdict:
    """A scorer's decision, with what it cost (an LLM judge's call) and a note (its reply)."""

    correct: bool
    cost: float = 0.0
    tokens: int = 0
    note: str = ""


class LLMJudge:
    """A model decides whether an answer is right. The prompt (``{question}``, ``{expected}``,
    ``{answer}`` filled in) is stored in the evaluation's record; the reply must start with
    CORRECT or INCORRECT, anything else is an error of that task."""

    name = "llm_judge"

    def __init__(self, model: str, prompt: str = JUDGE_PROMPT, client: Any = None):
        self.model = model
        self.prompt = prompt
        self._client = client

    def describe(self) -> dict[str, Any]:
        """What the evaluation record keeps of this scorer."""
        return {"scorer": self.name, "model": self.model, "prompt": self.prompt}

    async def __call__(self, answer: str, expected: str, task: "Task | None" = None) -> Verdict:
        from tea_notebook.models.client import ModelClient

        client = self._client or ModelClient(retries=2)
        question = task.question if task is not None else ""
        text = self.prompt.format(question=question, expected=expected, answer=answer)
        reply = await client.complete(self.model, [{"role": "user", "content": text}])
        said = (reply.content or "").strip()
        word = said.split()[0].strip(".,;:!*").upper() if said else ""
        if word not in ("CORRECT", "INCORRECT"):
            raise TeaError(f"the judge {self.model} replied {said[:80]!r}, not CORRECT or INCORRECT")
        return Verdict(word == "CORRECT", reply.cost, reply.prompt_tokens + reply.completion_tokens, said[:200])

    def __repr__(self) -> str:
        return f"LLMJudge({self.model!r})"


BUILTIN: dict[str, Callable[[Any, Any], bool]] = {
    "gaia": gaia_score,
    "exact": exact_score,
    "contains": contains_score,
}


class Scorer:
    """A scorer as the runner uses it: ``await scorer(answer, expected, task) -> Verdict``."""

    def __init__(self, fn: Any, name: str, described: dict[str, Any]):
        self.fn, self.name, self.described = fn, name, described

    async def __call__(self, answer: str, expected: str, task: "Task | None" = None) -> Verdict:
        if isinstance(self.fn, LLMJudge):
            return await self.fn(answer, expected, task)
        params = _arity(self.fn)
        value = self.fn(answer, expected, task) if params >= 3 else self.fn(answer, expected)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, Verdict):
            return value
        if not isinstance(value, (bool, int)) or isinstance(value, int) and value not in (0, 1):
            raise TeaError(f"scorer {self.name} returned {value!r}, not True or False")
        return Verdict(bool(value))


def _arity(fn: Any) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 3
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def resolve_scorer(scorer: Any = "gaia") -> Scorer:
    """A :class:`Scorer` from a name (``gaia``, ``exact``, ``contains``), an :class:`LLMJudge` or a
    function ``f(answer, expected[, task]) -> bool``."""
    if isinstance(scorer, Scorer):
        return scorer
    if isinstance(scorer, str):
        if scorer not in BUILTIN:
            raise TeaError(f"unknown scorer {scorer!r}; use {', '.join(BUILTIN)}, an LLMJudge or a function")
        return Scorer(BUILTIN[scorer], scorer, {"scorer": scorer})
    if isinstance(scorer, LLMJudge):
        return Scorer(scorer, scorer.name, scorer.describe())
    if callable(scorer):
        name = getattr(scorer, "__name__", type(scorer).__name__)
        return Scorer(scorer, name, {"scorer": name, "custom": True})
    raise TeaError(f"a scorer is a name, an LLMJudge or a function, not {type(scorer).__name__}")


__all__ = [
    "GAIA_PROMPT",
    "JUDGE_PROMPT",
    "LLMJudge",
    "Scorer",
    "Verdict",
    "contains_score",
    "exact_score",
    "extract_final_answer",
    "gaia_score",
    "is_number",
    "normalize_number",
    "normalize_text",
    "resolve_scorer",
]
