"""The parsers of the ``%tea`` subcommands: those the ``tea`` command line has too (``%tea eval``,
``%tea doctor``, ``%tea runs``) built from the one flag table (:mod:`tea_notebook.flags`), and the
words of the others (``%tea show RUN``, ``%tea model [NAME]``, ``%tea mcp list`` …).

Their positional arguments are the magics' own (``%tea eval AGENT TASKS``, ``%tea doctor [MODEL]``);
every flag comes from the table, so a flag added for ``tea eval`` is in ``%tea eval`` too. Every
subcommand is parsed the same way (:func:`parse`, argparse's ``parse_args``): a missing word, an
extra one and a bad or too large number are usage errors naming the argument, before anything runs.
:class:`TeaParser` is the parser the magics' own subcommands (``%tea fork`` …) build theirs from.
"""

from __future__ import annotations

import re
import sys
import textwrap
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

from tea_notebook.flags import TABLE, Flag, add_flags, flags, whole_number

#: each subcommand's positional arguments in ``%tea`` (name, nargs): the shared ones', then the words of
#: those without flags (a subcommand taking free text, ``%tea tools [QUERY]``, is not here)
POSITIONALS: dict[str, tuple[tuple[str, Any], ...]] = {
    "eval": (("agent", None), ("tasks", None)),
    "doctor": (("model_word", "?"),),
    "runs": (),
    "model": (("name", "?"),),
    "workspace": (("path", "?"),),
    "show": (("run", None),),
    "versions": (("name", None),),
    "plot": (("run", "?"),),
    "jobs": (),
    "stats": (),
    "eval list": (),
    "eval show": (("name", None),),
    "mcp list": (),
    "mcp remove": (("name", None),),
}
USAGE = {
    "eval": "usage: %tea eval AGENT TASKS [options] (TASKS: a path or 'sample'); %tea help",
    "doctor": "usage: %tea doctor [MODEL] [--model M] [--api-base URL] [--timeout S]",
    "runs": "usage: %tea runs [--limit N]",
    "model": "usage: %tea model [NAME]",
    "workspace": "usage: %tea workspace [PATH]",
    "show": "usage: %tea show RUN",
    "versions": "usage: %tea versions NAME",
    "plot": "usage: %tea plot [RUN | evolution]",
    "jobs": "usage: %tea jobs",
    "stats": "usage: %tea stats",
    "eval list": "usage: %tea eval list",
    "eval show": "usage: %tea eval show NAME",
    "mcp list": "usage: %tea mcp list",
    "mcp remove": "usage: %tea mcp remove NAME",
}


class TeaParser(MagicArgumentParser):
    """The parser of a ``%tea`` subcommand: every ``type=int`` option takes a bounded whole number
    (:func:`tea_notebook.flags.whole_number`), and an error is a UsageError naming the argument."""

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        """``argparse``'s ``add_argument``, with ``type=int`` bounded."""
        if kwargs.get("type") is int:
            kwargs["type"] = whole_number
        return super().add_argument(*args, **kwargs)


def magic_parser(subcommand: str) -> TeaParser:
    """The parser of ``%tea SUBCOMMAND``: its positional arguments, then the table's flags."""
    parser = TeaParser(prog=f"%tea {subcommand}", add_help=False)
    for name, nargs in POSITIONALS[subcommand]:
        parser.add_argument(name, nargs=nargs) if nargs else parser.add_argument(name)
    if subcommand in TABLE:
        add_flags(parser, subcommand, "magic")
    return parser


_REQUIRED = "the following arguments are required:"


def parse(subcommand: str, words: list[str]) -> Any:
    """``words`` parsed by :func:`magic_parser` (``parse_args``: nothing extra is ignored); a UsageError
    naming what is wrong (a missing, extra, empty or bad argument) and saying the usage."""
    comment = next((i for i, w in enumerate(words) if w.startswith("#")), len(words))
    words = words[:comment]  # `%tea workspace ./.tea  # a comment`: IPython hands the comment over too
    try:
        args = magic_parser(subcommand).parse_args(words)
    except UsageError as exc:
        text = str(exc)
        if text.startswith(_REQUIRED):
            missing = [w.strip().upper() for w in text[len(_REQUIRED) :].split(",")]
            raise UsageError(f"%tea {subcommand} needs {' and '.join(missing)}; {USAGE[subcommand]}") from None
        raise UsageError(f"%tea {subcommand}: {text}; {USAGE[subcommand]}") from None
    except SystemExit:
        raise UsageError(USAGE[subcommand]) from None
    for name, _ in POSITIONALS[subcommand]:
        value = getattr(args, name)
        if isinstance(value, str) and not value.strip():
            raise UsageError(f"%tea {subcommand}: {name.upper()} must not be empty; {USAGE[subcommand]}")
    return args


#: an environment variable's reference, ``${NAME}``: never filled in from a Python variable
_ENV_REFERENCE = re.compile(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\})")


def expand_variables(shell: Any, line: str) -> str:
    """``line`` with IPython's ``$name`` and ``{expression}`` filled in from the caller's variables, as
    IPython does for a line magic, except inside ``${NAME}`` references: those name environment
    variables (``--header 'Authorization=Bearer ${TOKEN}'``), read when the value is used, so a Python
    variable that happens to share the name is never substituted into a header or a command."""
    from IPython.utils.text import DollarFormatter

    namespace = dict(getattr(shell, "user_ns", None) or {})
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "run_line_magic":
        frame = frame.f_back  # type: ignore[assignment]
    if frame is not None and frame.f_back is not None:  # the frame that ran the magic (a function's locals)
        namespace.update(frame.f_back.f_locals)
    formatter = DollarFormatter()
    parts = _ENV_REFERENCE.split(line)
    for i in range(0, len(parts), 2):  # the text between references (odd parts are the references)
        try:
            parts[i] = formatter.vformat(parts[i], args=[], kwargs=namespace)
        except Exception:  # noqa: BLE001 - as IPython does: what cannot be expanded stays as written
            pass
    return "".join(parts)


def known_agent(ws: Any, name: str) -> str:
    """``name`` when it names an agent ``%tea eval`` can run (a registered one, a kind's shortcut, or
    ``agent``, a plain agent); else a UsageError naming it, before any task runs."""
    from tea_notebook.agents.kinds import shortcut, shortcut_names

    if name == "agent" or name in ws.agents or shortcut(name) is not None:
        return name
    registered = ", ".join(sorted(ws.agents.names())[:20]) or "none"
    raise UsageError(
        f"%tea eval: no agent named {name!r} (registered: {registered}; or a kind: agent, "
        f"{', '.join(shortcut_names())}); nothing was run"
    )


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


__all__ = ["POSITIONALS", "USAGE", "TeaParser", "expand_variables", "known_agent", "magic_parser", "parse", "synopsis"]
