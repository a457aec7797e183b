"""One flag table for the subcommands both front ends have: ``tea …`` (argparse, :mod:`tea_notebook.cli`)
and ``%tea …`` (the magics, :mod:`tea_notebook.notebook.magics`).

Each subcommand's flags are declared once here, as :class:`Flag` specs, and both parsers are built
from them (:func:`add_flags`), so ``tea eval`` and ``%tea eval`` cannot drift apart. A flag only one
front end has says so in ``only`` (how the CLI prints, say) and why, in ``help``. Positional
arguments stay with each front end: ``tea eval TASKS --agent A`` but ``%tea eval AGENT TASKS``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Literal

FrontEnd = Literal["cli", "magic"]


#: the largest whole number a flag takes: a larger one is refused by name when parsed, not found later as
#: an OverflowError (SQLite's integers, time spans)
MAX_WHOLE_NUMBER = 2**31 - 1


def whole_number(value: str) -> int:
    """A flag's whole number (``type=int`` in the table): refused by argparse, naming the flag, when it is
    not one or is larger than :data:`MAX_WHOLE_NUMBER`."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if abs(number) > MAX_WHOLE_NUMBER:
        raise argparse.ArgumentTypeError(f"{value} is too large (at most {MAX_WHOLE_NUMBER:,})")
    return number


def _count_or_share(value: str) -> int | float:
    """``--fail-on-error``: a count (``3``) or a share of the samples (``0.1``)."""
    return float(value) if "." in value else int(value)


@dataclass(frozen=True)
class Flag:
    """One option of a subcommand, as ``parser.add_argument`` takes it."""

    name: str
    help: str = ""
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    action: str | None = None
    metavar: str | None = None
    #: the one front end that has this flag (None: both)
    only: FrontEnd | None = None

    @property
    def dest(self) -> str:
        """The attribute the parsed arguments hold the value in (``--max-steps`` → ``max_steps``)."""
        return self.name.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Declare the flag on ``parser``."""
        options: dict[str, Any] = {"dest": self.dest, "default": self.default, "help": self.help or None}
        if self.action is not None:
            options["action"] = self.action
        else:
            for key in ("type", "choices", "metavar"):
                if getattr(self, key) is not None:
                    options[key] = getattr(self, key)
            if self.type is int:
                options["type"] = whole_number
        parser.add_argument(self.name, **options)


MODEL_HELP = "a litellm model name, or tea/test, tea/demo, tea/replay:PATH"

#: ``tea eval`` / ``%tea eval``: what goes to :func:`tea_notebook.eval.runner.evaluate` (and how it prints)
EVAL = (
    Flag("--name", "the evaluation's name (rerun it to resume)", metavar="NAME"),
    Flag("--model", MODEL_HELP, metavar="M"),
    Flag("--scorer", "how answers are scored", default="gaia", choices=("gaia", "exact", "contains")),
    Flag("--concurrency", "tasks at a time", type=int, default=1),
    Flag("--timeout", "seconds per task", type=float, metavar="S"),
    Flag("--max-steps", "step limit per task", type=int),
    Flag("--max-tokens", "token budget per task", type=int),
    Flag("--cost-cap", "USD for the evaluation: no new task starts past it", type=float, metavar="USD"),
    Flag("--retry-errors", "run the tasks that ended in an error again", action="store_true", default=False),
    Flag("--limit", "only the first N tasks", type=int),
    Flag("--engine", "where tasks run", default="local", choices=("local", "ray")),
    Flag("--address", "a Ray cluster to join (default: a local Ray)", metavar="A"),
    Flag("--epochs", "runs of each task (mean ± stderr, pass@k)", type=int, default=1, metavar="K"),
    Flag("--reducer", "a task's epochs to one score: mean, max, min, median, majority", default="mean", metavar="R"),
    Flag("--retries", "retries of a sample the model provider failed (default 3)", type=int, default=3),
    Flag(
        "--fail-on-error",
        "stop once this many samples (an int) or this share of them (0.1) failed on the provider's side",
        type=_count_or_share,
        metavar="N|SHARE",
    ),
    Flag("--inspect-log", "also write an Inspect AI log (.eval)", metavar="PATH"),
    Flag("--quiet", "no progress bar", action="store_true", default=False),
    Flag(
        "--agent",
        "a registered agent, or a kind's shortcut: researcher, orchestra, toolself, coral... (%tea eval takes AGENT "
        "as its first word)",
        default="agent",
        only="cli",
    ),
    Flag("--show", "rows of the results to print", type=int, default=20, only="cli"),
    Flag("--json", "print only the summary as JSON", action="store_true", default=False, only="cli"),
)
#: the :func:`~tea_notebook.eval.runner.evaluate` options among :data:`EVAL` (the rest say how to print)
EVAL_OPTIONS = tuple(f.dest for f in EVAL if f.only is None and f.dest != "quiet")

#: ``tea doctor`` / ``%tea doctor [MODEL]``
DOCTOR = (
    Flag("--model", "the model to check (default: $TEA_MODEL, else the offline demo)", metavar="M"),
    Flag("--api-base", "an OpenAI-compatible server's URL (http://127.0.0.1:8000/v1)", metavar="URL"),
    Flag("--timeout", "seconds per check call (default 30)", type=float, default=30.0, metavar="S"),
    Flag("--json", "print the report as JSON", action="store_true", default=False, only="cli"),
)

#: ``tea runs`` / ``%tea runs``
RUNS = (Flag("--limit", "how many recent runs", type=int, default=20),)

#: ``%%tool`` (the magic only: the CLI has no cells), parsed by :func:`tea_notebook.notebook.tool_cell.parse_tool_line`
TOOL_CELL = (
    Flag("--name", "tool name (only when the cell defines one function)", metavar="N", only="magic"),
    Flag("--toolkit", "toolkit the tools belong to", metavar="T", only="magic"),
    Flag("--category", "category of the tools", default="general", metavar="C", only="magic"),
    Flag(
        "--idempotent",
        "running a call twice is harmless: a resume may run again a call whose outcome is unknown",
        action="store_true",
        default=False,
        only="magic",
    ),
    Flag(
        "--process",
        "run each call in a child process (the run's), not in the kernel, so Stop can end it; the tool sees no "
        "kernel variables",
        action="store_true",
        default=False,
        only="magic",
    ),
)

#: ``%tea fork`` / ``%tea resume`` (and ``ws.fork`` / ``ws.resume``'s ``replay=``): the ``tea`` command line
#: has no fork or resume yet, so it is no subcommand of :data:`TABLE`; one that comes takes this flag
REPLAY = Flag(
    "--replay",
    "how the tool calls made again are answered: recorded (from the forked run), live (run again) or refuse, "
    "for every tool, or per tool: place_order=refuse,*=recorded",
    metavar="SPEC",
)

#: ``%tea resume`` (and ``ws.resume``'s ``force=``): go on although the stopped run's folder was changed by hand
RESUME_FORCE = Flag(
    "--force",
    "go on although the run folder was changed by hand since the stop (the new run records what changed)",
    action="store_true",
    default=False,
    only="magic",
)

#: ``%tea evolve``'s promotion gate (the ``tea`` command line has no evolve yet, so it is no subcommand of
#: :data:`TABLE`; one that comes takes these flags)
EVOLVE_GATE = (
    Flag(
        "--held-out",
        "tasks (a JSONL, CSV or GAIA folder) the promotion gate measures each new tool on, with and without it; "
        "without it promotion is unmeasured",
        metavar="TASKS",
        only="magic",
    ),
    Flag(
        "--gate-agent",
        "the tool-calling agent the gate gives the candidates to (default: a plain agent)",
        default="agent",
        metavar="A",
        only="magic",
    ),
    Flag(
        "--level", "the level of the gain's interval that must lie above zero", type=float, default=0.95, only="magic"
    ),
    Flag("--gate-epochs", "runs of each held-out task in each arm", type=int, default=1, metavar="K", only="magic"),
    Flag(
        "--gate-scorer",
        "how the gate scores answers",
        default="exact",
        choices=("gaia", "exact", "contains"),
        only="magic",
    ),
)

#: the subcommands both front ends have, with their flags
TABLE: dict[str, tuple[Flag, ...]] = {"eval": EVAL, "doctor": DOCTOR, "runs": RUNS}


def flags(subcommand: str, front_end: FrontEnd) -> tuple[Flag, ...]:
    """The flags ``subcommand`` has in ``front_end``."""
    return tuple(f for f in TABLE[subcommand] if f.only in (None, front_end))


def add_flags(parser: argparse.ArgumentParser, subcommand: str, front_end: FrontEnd) -> argparse.ArgumentParser:
    """Declare ``subcommand``'s flags (those of ``front_end``) on ``parser``; return it."""
    for flag in flags(subcommand, front_end):
        flag.add_to(parser)
    return parser


__all__ = [
    "DOCTOR",
    "EVAL",
    "EVAL_OPTIONS",
    "EVOLVE_GATE",
    "REPLAY",
    "RUNS",
    "TABLE",
    "MAX_WHOLE_NUMBER",
    "TOOL_CELL",
    "Flag",
    "add_flags",
    "flags",
    "whole_number",
]
