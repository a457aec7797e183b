"""Benchmark of the tool manager (issue: self-evolution): create → validate → register, per tool.

    .venv/bin/python bench/bench_toolmaker.py [--write] [--rounds 3]

A scripted model (``ScriptedModel`` through litellm and our ``tea`` provider, answering by the
prompt's ``Stage:``) plays every stage for 12 distinct tools (string, arithmetic, list and number
tools, 1–3 parameters each, 2 examples in the specification and 2 tests each, which check the
examples and a third case). Each tool is one
``ToolMaker(ws, client=timed).create(task)``: hybrid retrieval of the existing tools, need
assessment, specification, code, tests (checked for vacuity against constant stubs in the
sandbox), validation in a fresh confined sandbox, registration with provenance. Every figure
EXCLUDES model time: the time spent inside ``ModelClient.complete`` (litellm + the scripted
answer) is measured by wrapping it and subtracted.

Measured per creation (median over --rounds × 12 creations; each round a fresh workspace with the
hashing embedder, the 12 tools created one after the other, so retrieval sees 0..11 tools; after a
warm-up creation in a throwaway workspace, which imports litellm and probes ``unshare``):
  - overhead = wall time of ``create`` − model time;
  - of which sandbox validation: time inside ``ToolMaker._check`` (write the module, its tests and
    the helper, start the confined sandbox, run the checks, stop it), for the vacuity checks and the
    validation; and the number of sandbox runs per tool;
  - of which registration: time inside ``ToolMaker._register`` (record, version, embedding,
    ``tool_created`` event);
  - the rest: retrieval, prompt rendering, parsing and checking the answers, the run's events.
A second pass does the same with one failed validation and one fix per tool (the first code
raises ``NotImplementedError``).
With --write the figures replace the "Self-evolution: tool creation" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.evolve.llm import stage_of  # noqa: E402
from tea_notebook.evolve.toolmaker import ToolMaker  # noqa: E402
from tea_notebook.models.client import ModelClient, ModelReply  # noqa: E402
from tea_notebook.models.offline import ScriptedModel  # noqa: E402
from tea_notebook.models.provider import ensure_registered  # noqa: E402

TARGET_S = 2.0
JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "list": "array", "bool": "boolean"}

# name, description, parameters, input check, body, examples (input, output), invalid input
TOOLS: list[dict[str, Any]] = [
    dict(
        name="count_vowels",
        doc="Count the vowels (a, e, i, o, u) in a text.",
        params={"text": "str"},
        check="isinstance(text, str)",
        body='return sum(1 for ch in text.lower() if ch in "aeiou")',
        examples=[({"text": "banana"}, 3), ({"text": "queue"}, 4), ({"text": "sky"}, 0)],
        bad={"text": 3},
    ),
    dict(
        name="reverse_words",
        doc="Reverse the order of the words in a sentence.",
        params={"text": "str"},
        check="isinstance(text, str)",
        body='return " ".join(reversed(text.split()))',
        examples=[({"text": "a b c"}, "c b a"), ({"text": "hello world"}, "world hello"), ({"text": ""}, "")],
        bad={"text": None},
    ),
    dict(
        name="celsius_to_fahrenheit",
        doc="Convert a temperature from degrees Celsius to Fahrenheit.",
        params={"celsius": "float"},
        check="isinstance(celsius, (int, float))",
        body="return celsius * 9 / 5 + 32",
        examples=[({"celsius": 100}, 212.0), ({"celsius": 0}, 32.0), ({"celsius": -40}, -40.0)],
        bad={"celsius": "hot"},
    ),
    dict(
        name="greatest_common_divisor",
        doc="The greatest common divisor of two integers.",
        params={"a": "int", "b": "int"},
        check="isinstance(a, int) and isinstance(b, int)",
        body="while b:\n        a, b = b, a % b\n    return abs(a)",
        examples=[({"a": 12, "b": 18}, 6), ({"a": 7, "b": 5}, 1), ({"a": 0, "b": 9}, 9)],
        bad={"a": 1.5, "b": 2},
    ),
    dict(
        name="is_palindrome",
        doc="Whether a text reads the same backwards, ignoring case and spaces.",
        params={"text": "str"},
        check="isinstance(text, str)",
        body='clean = "".join(text.lower().split())\n    return clean == clean[::-1]',
        examples=[({"text": "Never odd or even"}, True), ({"text": "tea"}, False), ({"text": "abba"}, True)],
        bad={"text": 121},
    ),
    dict(
        name="word_frequency",
        doc="How often a word occurs in a text, case-insensitively.",
        params={"text": "str", "word": "str"},
        check="isinstance(text, str) and isinstance(word, str)",
        body="return text.lower().split().count(word.lower())",
        examples=[
            ({"text": "the cat and the hat", "word": "the"}, 2),
            ({"text": "a b", "word": "c"}, 0),
            ({"text": "Go go GO", "word": "go"}, 3),
        ],
        bad={"text": "a", "word": 1},
    ),
    dict(
        name="median_of_numbers",
        doc="The median of a non-empty list of numbers.",
        params={"numbers": "list"},
        check="isinstance(numbers, list) and numbers",
        body="s = sorted(numbers)\n    mid = len(s) // 2\n    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2",
        examples=[({"numbers": [3, 1, 2]}, 2), ({"numbers": [4, 1, 3, 2]}, 2.5), ({"numbers": [5]}, 5)],
        bad={"numbers": []},
    ),
    dict(
        name="factorial_of",
        doc="The factorial n! of a non-negative integer.",
        params={"n": "int"},
        check="isinstance(n, int) and n >= 0",
        body="result = 1\n    for k in range(2, n + 1):\n        result *= k\n    return result",
        examples=[({"n": 0}, 1), ({"n": 5}, 120), ({"n": 10}, 3628800)],
        bad={"n": -1},
    ),
    dict(
        name="caesar_shift",
        doc="Shift the letters of a text through the alphabet (Caesar cipher).",
        params={"text": "str", "shift": "int"},
        check="isinstance(text, str) and isinstance(shift, int)",
        body="out = []\n    for ch in text:\n        if ch.isalpha():\n            base = ord('A') if ch.isupper() else ord('a')\n"
        "            ch = chr((ord(ch) - base + shift) % 26 + base)\n        out.append(ch)\n    return ''.join(out)",
        examples=[
            ({"text": "abc", "shift": 1}, "bcd"),
            ({"text": "xyz", "shift": 3}, "abc"),
            ({"text": "Hi!", "shift": 0}, "Hi!"),
        ],
        bad={"text": "a", "shift": "1"},
    ),
    dict(
        name="to_roman_numeral",
        doc="Write a positive integer below 4000 as a Roman numeral.",
        params={"number": "int"},
        check="isinstance(number, int) and 0 < number < 4000",
        body="pairs = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'), (50, 'L'),\n"
        "             (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n    out = ''\n"
        "    for value, letters in pairs:\n        while number >= value:\n            out += letters\n"
        "            number -= value\n    return out",
        examples=[({"number": 4}, "IV"), ({"number": 1994}, "MCMXCIV"), ({"number": 3999}, "MMMCMXCIX")],
        bad={"number": 0},
    ),
    dict(
        name="compound_interest",
        doc="The final amount of a principal at a yearly rate compounded yearly.",
        params={"principal": "float", "rate": "float", "years": "int"},
        check="isinstance(principal, (int, float)) and isinstance(rate, (int, float)) and isinstance(years, int)",
        body="return principal * (1 + rate) ** years",
        examples=[
            ({"principal": 1000, "rate": 0.05, "years": 2}, 1102.5),
            ({"principal": 100, "rate": 0.1, "years": 1}, 110.0),
            ({"principal": 50, "rate": 0.0, "years": 9}, 50.0),
        ],
        bad={"principal": "x", "rate": 0.1, "years": 1},
    ),
    dict(
        name="count_primes_below",
        doc="How many prime numbers are smaller than a limit.",
        params={"limit": "int"},
        check="isinstance(limit, int) and limit >= 0",
        body="sieve = [True] * max(limit, 2)\n    sieve[0] = sieve[1] = False\n"
        "    for i in range(2, int(limit ** 0.5) + 1):\n        if sieve[i]:\n"
        "            sieve[i * i::i] = [False] * len(sieve[i * i::i])\n    return sum(sieve[:limit])",
        examples=[({"limit": 10}, 4), ({"limit": 2}, 0), ({"limit": 100}, 25)],
        bad={"limit": -5},
    ),
]


def module_code(t: dict[str, Any], broken: bool = False) -> str:
    sig = ", ".join(f"{p}: {typ}" for p, typ in t["params"].items())
    schema = {
        "type": "object",
        "properties": {p: {"type": JSON_TYPES[typ]} for p, typ in t["params"].items()},
        "required": list(t["params"]),
    }
    body = "raise NotImplementedError" if broken else t["body"]
    return f'''"""{t["doc"]}"""


def {t["name"]}({sig}):
    """{t["doc"]}"""
    if not ({t["check"]}):
        raise ValueError("invalid input for {t["name"]}")
    {body}


TOOL_CONFIG = {{"name": {t["name"]!r}, "description": {t["doc"]!r}, "function": {t["name"]},
               "input_schema": {json.dumps(schema)}, "returns": {{}}}}
'''


def tests_code(t: dict[str, Any]) -> str:
    lines = [f"from tea_check import raises\nfrom {t['name']} import {t['name']}\n\n", "def test_examples():"]
    for args, want in t["examples"]:
        call = f"{t['name']}(**{args!r})"
        lines.append(
            f"    assert abs({call} - {want!r}) < 1e-6" if isinstance(want, float) else f"    assert {call} == {want!r}"
        )
    lines += [
        "\n",
        "def test_rejects_invalid_input():",
        "    with raises(ValueError):",
        f"        {t['name']}(**{t['bad']!r})",
    ]
    return "\n".join(lines) + "\n"


def spec(t: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool_name": t["name"],
        "tool_description": t["doc"],
        "input_parameters": [
            {"name": p, "type": JSON_TYPES[typ], "description": p, "required": True} for p, typ in t["params"].items()
        ],
        "output_format": {"type": "any"},
        "core_logic": ["Step 1: validate the input", "Step 2: compute the result"],
        # two in the specification; the tests check those and the third (results beyond the examples)
        "examples": [{"input": a, "output": o} for a, o in t["examples"][:2]],
    }


def script_for(t: dict[str, Any], fix: bool) -> ScriptedModel:
    """The model's answers for one tool; with ``fix`` the first code fails and the fix repairs it."""
    need = {
        "need_creation": True,
        "required_capabilities": [t["name"]],
        "matching_tools": [],
        "missing_tools": [
            {
                "name": t["name"],
                "description": f"Does exactly this: {t['doc']}",
                "reason": "Essential because: exact",
                "example_input_output": f"Input: {json.dumps(t['examples'][0][0])} -> Output: {t['examples'][0][1]!r}",
            }
        ],
        "justification": "Exact computation.",
    }
    answers = {
        "assess_tool_need": json.dumps(need),
        "tool_spec": json.dumps({"tool_creation_specs": [spec(t)]}),
        "tool_code": json.dumps(
            {
                "name": t["name"],
                "description": t["doc"],
                "input_schema": {},
                "returns": {},
                "module_code": module_code(t, broken=fix),
            }
        ),
        "tool_tests": json.dumps({"tests": tests_code(t)}),
        "tool_fix": json.dumps({"module_code": module_code(t)}),
    }
    return ScriptedModel(lambda messages, _tools: answers[stage_of(messages)])


class TimedClient(ModelClient):
    """``ModelClient`` (through litellm) that adds up the time spent in ``complete``."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds, self.calls = 0.0, 0

    async def complete(
        self, model: str, messages: list[dict], tools: list[dict] | None = None, **params: Any
    ) -> ModelReply:
        start = time.perf_counter()
        try:
            return await super().complete(model, messages, tools, **params)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


class TimedMaker(ToolMaker):
    """``ToolMaker`` that adds up the time of its sandbox checks and its registrations."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sandbox_s = self.register_s = 0.0
        self.sandbox_runs = 0

    async def _check(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            return await super()._check(*args, **kwargs)
        finally:
            self.sandbox_s += time.perf_counter() - start
            self.sandbox_runs += 1

    def _register(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return super()._register(*args, **kwargs)
        finally:
            self.register_s += time.perf_counter() - start


def create_one(ws: Any, t: dict[str, Any], fix: bool) -> dict[str, float]:
    model = script_for(t, fix)
    client = TimedClient()
    maker = TimedMaker(ws, model=model.name, client=client)
    start = time.perf_counter()
    creation = maker.create(f"Use a tool to compute: {t['doc']}")
    wall = time.perf_counter() - start
    cand = creation.candidates[0] if creation.candidates else None
    expected = 1 if fix else 0
    if creation.status != "registered" or cand is None or cand.fix_iterations != expected:
        raise SystemExit(f"{t['name']}: expected registered after {expected} fixes, got\n{creation.summary()}")
    args, want = t["examples"][1]
    got = ws.tools.invoke(t["name"], args)
    if not got.ok or (got.value != want and abs(float(got.value) - float(want)) > 1e-6):
        raise SystemExit(f"{t['name']}: the registered tool answered {got.value!r} / {got.error}, expected {want!r}")
    overhead = wall - client.seconds
    return {
        "wall": wall,
        "model": client.seconds,
        "model_calls": client.calls,
        "overhead": overhead,
        "sandbox": maker.sandbox_s,
        "sandbox_runs": maker.sandbox_runs,
        "register": maker.register_s,
        "rest": overhead - maker.sandbox_s - maker.register_s,
    }


def run(rounds: int, fix: bool) -> dict[str, Any]:
    rows: list[dict[str, float]] = []
    round_medians = []
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            ws = tea_notebook.Workspace(Path(tmp) / "ws", embedder="hashing")
            mine = [create_one(ws, t, fix) for t in TOOLS]
            if len(ws.tools) != len(TOOLS):
                raise SystemExit(f"round {r}: {len(ws.tools)} tools registered, expected {len(TOOLS)}")
            ws.close()
        rows += mine
        round_medians.append(statistics.median(x["overhead"] for x in mine))
        print(
            f"{'one fix' if fix else 'first pass'} round {r + 1}: median overhead {round_medians[-1] * 1000:.0f} ms",
            flush=True,
        )
    med = {k: statistics.median(x[k] for x in rows) for k in rows[0]}
    return {
        "n": len(rows),
        "median": med,
        "p95_overhead": statistics.quantiles([x["overhead"] for x in rows], n=20)[-1],
        "max_overhead": max(x["overhead"] for x in rows),
        "round_medians": round_medians,
        "per_run_ms": 1000 * statistics.median(x["sandbox"] / x["sandbox_runs"] for x in rows),
    }


def warm_up() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = tea_notebook.Workspace(Path(tmp) / "ws", embedder="hashing")
        create_one(ws, TOOLS[0], fix=False)
        ws.close()


def render(results: dict[str, Any]) -> str:
    ok = lambda cond: "✅" if cond else "❌"  # noqa: E731
    first, fixed = results["first"], results["fix"]
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731

    def rows(label: str, r: dict[str, Any], target: bool) -> str:
        m = r["median"]
        spread = ", ".join(ms(x) for x in r["round_medians"])
        goal = f"< {TARGET_S:g} s | {ok(m['overhead'] < TARGET_S)}" if target else " | "
        return "\n".join(
            [
                f"| **{label}: overhead per tool** (wall − model time; rounds' medians {spread}; p95 "
                f"{ms(r['p95_overhead'])}) | **{ms(m['overhead'])}** | {goal} |",
                f"| of which sandbox validation ({m['sandbox_runs']:.0f} confined sandbox runs a tool, "
                f"{r['per_run_ms']:.0f} ms each) | {ms(m['sandbox'])} | | |",
                f"| of which registration (`ToolMaker._register`) | {ms(m['register'])} | | |",
                f"| of which the rest (retrieval, prompts, answer checks, the run's events) | {ms(m['rest'])} | | |",
                f"| model time, excluded ({m['model_calls']:.0f} calls, offline: `ModelClient` serves `tea/` models itself) | {ms(m['model'])} | | |",
                f"| wall time of `create`, model included | {ms(m['wall'])} | | |",
            ]
        )

    return f"""## Self-evolution: tool creation

Command: `{command_line()}` — machine: {results["machine"]}; run {results["when"]}; load average (1-min)
{results["load"][0]:.2f} before, {results["load"][1]:.2f} after, on 2 cores shared with other work.

Create → validate → register with a scripted model, excluding model time. 12 distinct tools
(`{"`, `".join(t["name"] for t in TOOLS)}`:
1–3 parameters, 2 examples in the specification, 2 tests each that check those and a third case),
each one `ToolMaker(ws, client=...).create(task)`
with a `ScriptedModel` answering every stage (offline, no litellm): hybrid retrieval of the tools
registered so far, need assessment, specification, code, tests checked for vacuity (run against
stubs returning each example's output), validation in a fresh sandbox (the bubblewrap boundary and
the audit tripwire; the tool in a process of its own; import, `TOOL_CONFIG`, the examples, the
tests, and the tests again against mutated results), registration with provenance; each
registered tool is then invoked once, out of process, to check it.
*Overhead* = wall time of `create` − time inside `ModelClient.complete` (timed by wrapping it);
*sandbox validation* = time inside `ToolMaker._check` (write the files, start the sandbox, run
the checks, stop it), vacuity checks included; *registration* = time inside `ToolMaker._register`.
Medians over {first["n"]} creations ({results["rounds"]} rounds, each a fresh workspace with the hashing
embedder creating the 12 tools one after the other), after a warm-up creation in a throwaway
workspace (first imports, the bubblewrap probe). The second block is the same with one failed
validation and one fix per tool (the first code raises `NotImplementedError`).

| what | median | target | |
|---|---|---|---|
{rows("first pass", first, True)}
{rows("with one fix", fixed, True)}

Most of a tool's overhead is its sandbox runs: each is a fresh bubblewrap sandbox (the sandbox's
cold start: see "Security boundary" for its figure) in which the harness forks the tool into
a process of its own, imports it there and runs the tests several times against it: one run checks
the tests against a constant stub per distinct example output, one validates (the tests against the
real results, then against mutated ones), and a fix adds one validation run. The previous validator
(one test pass, the code in the harness's own interpreter) took 355 ms a tool at the first pass.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--rounds", type=int, default=3, help="fresh workspaces of 12 creations each")
    args = parse_args(parser, rounds=1)
    ensure_registered()
    load = os.getloadavg()[0]
    warm_up()
    results = {
        "machine": machine(),
        "when": time.strftime("%Y-%m-%d"),
        "rounds": args.rounds,
        "first": run(args.rounds, fix=False),
        "fix": run(args.rounds, fix=True),
    }
    results["load"] = (load, os.getloadavg()[0])
    publish(render(results), args.write)


if __name__ == "__main__":
    main()
