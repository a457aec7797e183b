"""Comparing an answer with a ground truth, by the rules the GAIA leaderboard publishes (written here
from the rules, not copied from its code). Shared by evaluation (``tea_notebook.eval.scoring``) and the
evolution loop (``tea_notebook.evolve``, which checks its answer itself when given a ground truth), so it
sits under both floors and imports nothing of the package.

* ground truth that is a number: strip ``$``, ``%`` and ``,`` from the answer and compare as floats;
* ground truth containing ``,`` or ``;``: a list; split both on those, the lengths must agree, then
  element by element (a number element as a number, any other as a string with all whitespace
  removed and lowercased);
* anything else: strings compared with all whitespace and punctuation removed, lowercased.
"""

from __future__ import annotations

import re
import string
from typing import Any

_WHITESPACE = re.compile(r"\s+")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def is_number(text: Any) -> bool:
    """True when ``text`` reads as a float (``"17"``, ``"-0.5"``, ``"1e3"``), as GAIA decides it."""
    try:
        float(str(text))
    except (TypeError, ValueError):
        return False
    return True


def normalize_number(text: Any) -> float:
    """The answer as a number after removing ``$``, ``%`` and ``,`` (and spaces around it);
    ``inf`` when it still is not one (so it equals no ground truth)."""
    cleaned = str(text)
    for ch in ("$", "%", ","):
        cleaned = cleaned.replace(ch, "")
    try:
        return float(cleaned.strip())
    except ValueError:
        return float("inf")


def normalize_text(text: Any, *, remove_punctuation: bool = True) -> str:
    """All whitespace removed, lowercased, and (by default) ASCII punctuation removed."""
    out = _WHITESPACE.sub("", str(text)).lower()
    return out.translate(_PUNCTUATION) if remove_punctuation else out


def _split_list(text: str) -> list[str]:
    return [part.strip() for part in re.split(r"[,;]", text)]


def gaia_score(model_answer: Any, ground_truth: Any) -> bool:
    """Whether ``model_answer`` is right by the GAIA leaderboard's rules (see the module docstring).
    ``None`` as an answer is scored as the text ``"None"``."""
    answer = "None" if model_answer is None else str(model_answer)
    truth = str(ground_truth)
    if is_number(truth):
        return normalize_number(answer) == float(truth)
    if "," in truth or ";" in truth:
        expected, given = _split_list(truth), _split_list(answer)
        if len(expected) != len(given):
            return False
        for want, got in zip(expected, given):
            if is_number(want):
                if normalize_number(got) != float(want):
                    return False
            elif normalize_text(got, remove_punctuation=False) != normalize_text(want, remove_punctuation=False):
                return False
        return True
    return normalize_text(answer) == normalize_text(truth)


__all__ = ["gaia_score", "is_number", "normalize_number", "normalize_text"]
