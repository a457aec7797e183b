"""The parsers of the ``%tea`` subcommands the ``tea`` command line has too, built from the one flag
table (:mod:`tea_notebook.flags`): ``%tea eval``, ``%tea doctor``, ``%tea runs``.

Their positional arguments are the magics' own (``%tea eval AGENT TASKS``, ``%tea doctor [MODEL]``);
every flag comes from the table, so a flag added for ``tea eval`` is in ``%tea eval`` too.
"""

from __future__ import annotations

import textwrap
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

from tea_notebook.flags import Flag, add_flags, flags

#: each shared subcommand's positional arguments in ``%tea`` (name, nargs)
POSITIONALS: dict[str, tuple[tuple[str, Any], ...]] = {
    "eval": (("agent", None), ("tasks", None)),
    "doctor": (("model_word", "?"),),
    "runs": (),
}
USAGE = {
    "eval": "usage: %tea eval AGENT TASKS [options] (TASKS: a path or 'sample'); %tea help",
    "doctor": "usage: %tea doctor [MODEL] [--model M] [--api-base URL] [--timeout S]",
    "runs": "usage: %tea runs [--limit N]",
}


def magic_parser(subcommand: str) -> MagicArgumentParser:
    """The parser of ``%tea SUBCOMMAND``: its positional arguments, then the table's flags."""
    parser = MagicArgumentParser(prog=f"%tea {subcommand}", add_help=False)
    for name, nargs in POSITIONALS[subcommand]:
        parser.add_argument(name, nargs=nargs) if nargs else parser.add_argument(name)
    return add_flags(parser, subcommand, "magic")  # type: ignore[return-value]


def parse(subcommand: str, words: list[str]) -> Any:
    """``words`` parsed by :func:`magic_parser`; a UsageError saying the usage when they do not parse."""
    try:
        return magic_parser(subcommand).parse_args(words)
    except (UsageError, SystemExit):
        raise UsageError(USAGE[subcommand]) from None


def _synopsis(flag: Flag) -> str:
    if flag.action == "store_true":
        return f"[{flag.name}]"
    value = "|".join(flag.choices) if flag.choices else (flag.metavar or _VALUE.get(flag.type, "X"))
    return f"[{flag.name} {value}]"


_VALUE: dict[Any, str] = {int: "N", float: "S", None: "X"}


def synopsis(subcommand: str, lead: str, indent: int = 10, width: int = 112) -> str:
    """``%tea SUBCOMMAND``'s line in ``%tea help``: ``lead`` then every flag, wrapped."""
    words = " ".join(_synopsis(f) for f in flags(subcommand, "magic"))
    return textwrap.fill(f"{lead} {words}", width=width, subsequent_indent=" " * indent, break_on_hyphens=False)


__all__ = ["POSITIONALS", "USAGE", "magic_parser", "parse", "synopsis"]
