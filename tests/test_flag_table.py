"""One flag table for ``tea …`` and ``%tea …``: every flag of a subcommand both front ends have is in
both parsers (a front end's own flags are declared as such in :mod:`tea_notebook.flags`), and the
flags the CLI had first (``--fail-on-error``) work from the magic too."""

from __future__ import annotations

import argparse
import json
import re

import litellm
import pytest

pytest.importorskip("IPython")

from tea_notebook.cli import build_parser  # noqa: E402
from tea_notebook.flags import TABLE  # noqa: E402
from tea_notebook.models.offline import ScriptedModel  # noqa: E402
from tea_notebook.notebook.tea_parsers import magic_parser  # noqa: E402


def long_flags(parser: argparse.ArgumentParser) -> set[str]:
    found = {s for action in parser._actions for s in action.option_strings if s.startswith("--")}
    return found - {"--help", "--workspace"}


def cli_parser(subcommand: str) -> argparse.ArgumentParser:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[subcommand]


@pytest.mark.parametrize("subcommand", sorted(TABLE))
def test_both_front_ends_have_every_shared_flag(subcommand):
    cli, magic = long_flags(cli_parser(subcommand)), long_flags(magic_parser(subcommand))
    declared = {f.name: f.only for f in TABLE[subcommand]}
    shared = {name for name, only in declared.items() if only is None}
    assert cli == shared | {name for name, only in declared.items() if only == "cli"}
    assert magic == shared | {name for name, only in declared.items() if only == "magic"}
    assert cli - magic <= {"--agent", "--show", "--json"}  # how the CLI prints, and its AGENT as a flag
    assert magic - cli == set()


def test_eval_flags_parse_to_the_same_values_in_both():
    words = ["--name", "n", "--concurrency", "2", "--timeout", "1.5", "--epochs", "3", "--fail-on-error", "0.2"]
    words += ["--retries", "0", "--retry-errors", "--scorer", "exact", "--quiet"]
    cli = cli_parser("eval").parse_args(["tasks.jsonl", *words])
    magic = magic_parser("eval").parse_args(["solver", "tasks.jsonl", *words])
    for flag in TABLE["eval"]:
        if flag.only is None:
            assert getattr(cli, flag.dest) == getattr(magic, flag.dest), flag.name
    assert (
        magic.fail_on_error == 0.2 and cli_parser("eval").parse_args(["t", "--fail-on-error", "3"]).fail_on_error == 3
    )


def test_help_lists_the_shared_flags(ip):
    text = ip.run_line_magic("tea", "help")
    for flag in TABLE["eval"]:
        if flag.only is None:
            assert flag.name in text, flag.name
    assert "--timeout" in text.split("%tea doctor")[1]


def test_fail_on_error_works_from_the_magic(ip, tmp_path, monkeypatch, warm_litellm):
    from conftest import magics_workspace

    ws = magics_workspace(ip, tmp_path, monkeypatch)

    def provider(messages, tools):
        raise litellm.ServiceUnavailableError("503 overloaded", llm_provider="openai", model="x")

    ws.agent("down", model=ScriptedModel(provider).name, tools=[])
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(6)
        )
    )
    results = ip.run_line_magic("tea", f"eval down {tasks} --retries 0 --fail-on-error 2 --name d --quiet")
    assert len(results) == 2 and results.infra_errors == 2
    assert re.match(r"the model provider failed on 2 sample\(s\) \(fail_on_error=2\)", results.stopped)
    assert "4 task(s) not started" in results.stopped


def test_doctor_and_runs_take_the_table_flags_in_the_magic(ip, tmp_path, monkeypatch):
    from conftest import magics_workspace
    from IPython.core.error import UsageError

    magics_workspace(ip, tmp_path, monkeypatch)
    assert ip.run_line_magic("tea", "runs --limit 1") == []
    with pytest.raises(UsageError, match="usage: %tea runs"):
        ip.run_line_magic("tea", "runs --limit many")
    with pytest.raises(UsageError, match="usage: %tea doctor"):
        ip.run_line_magic("tea", "doctor a --model b")
    report = ip.run_line_magic("tea", "doctor --model tea/test --timeout 5")
    assert report is not None
