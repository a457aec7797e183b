"""``%tea`` with careless input, in an in-process IPython shell: a workspace switch that fails keeps the
old workspace, every number flag is bounded, quoted words are one word, empty and extra words are
refused by name, and ``%tea eval`` refuses an agent that does not exist before any task runs. Nothing
is written when an input is refused."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from conftest import magics_workspace, tea  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402

HUGE = "99999999999999999999"


@pytest.fixture
def ws(ip, magics, tmp_path, monkeypatch):
    """A fresh workspace made current through ``%tea workspace``."""
    return magics_workspace(ip, tmp_path, monkeypatch)


def test_a_failed_switch_keeps_the_old_workspace(ip, magics, ws, tmp_path):
    with pytest.raises(UsageError, match=r"%tea workspace /dev/null: .*not a folder.*still using"):
        tea(ip, "workspace /dev/null")
    assert magics.workspace is ws and magics.workspace_path == str(ws.path)
    assert tea(ip, "workspace").path == ws.path  # every later %tea works on the old one
    assert tea(ip, "runs") == [] and tea(ip, "model").startswith("tea/demo")
    with pytest.raises(UsageError, match="PATH must not be empty"):
        tea(ip, "workspace ''")
    assert not (tmp_path / "''").exists() and magics.workspace is ws
    other = tea(ip, f"workspace '{tmp_path / 'with space'}'")  # quoted: one folder
    assert other.path == (tmp_path / "with space").resolve() and magics.workspace is other


def test_every_number_flag_is_bounded_and_named(ip, ws):
    for line, flag in [
        (f"fork r1 --step {HUGE}", "--step"),
        (f"fork r1 --stage {HUGE}", "--stage"),
        (f"fork r1 --step 1 --rerun-from {HUGE}", "--rerun-from"),
        (f"context r1 --step {HUGE}", "--step"),
        (f"runs --limit {HUGE}", "--limit"),
        (f"eval agent sample --concurrency {HUGE}", "--concurrency"),
        (f"eval agent sample --max-steps {HUGE}", "--max-steps"),
        (f"eval agent sample --epochs {HUGE}", "--epochs"),
        (f"create-tool --max-fixes {HUGE} add numbers", "--max-fixes"),
        (f"evolve --gate-epochs {HUGE} a task", "--gate-epochs"),
    ]:
        with pytest.raises(UsageError, match=f"argument {flag}: {HUGE} is too large") as caught:
            tea(ip, line)
        assert "OverflowError" not in str(caught.value), line
    with pytest.raises(UsageError, match="argument --step: 'two' is not a whole number"):
        tea(ip, "fork r1 --step two")
    assert ws.runs() == []


def test_quoted_hosts_are_one_word_and_a_host_with_spaces_is_refused(ip, ws):
    with pytest.raises(UsageError, match=r"%tea egress allow: 'a b' is not a host name \(it has spaces\)"):
        tea(ip, "egress allow 'a b'")
    assert ws.egress.allowed == [] or list(ws.egress.allowed) == []
    shown = str(tea(ip, "egress allow 'example.com'"))
    assert "allow: example.com" in shown and "'" not in shown.split("allow: ")[1].splitlines()[0]


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("model x y z", "unrecognized arguments: y z"),
        ("runs extra", "unrecognized arguments: extra"),
        ("show r1 r2", "unrecognized arguments: r2"),
        ("show", "%tea show needs RUN"),
        ("jobs now", "unrecognized arguments: now"),
        ("stats all", "unrecognized arguments: all"),
        ("versions a b", "unrecognized arguments: b"),
        ("plot a b", "unrecognized arguments: b"),
        ("mcp list everything", "unrecognized arguments: everything"),
        ("eval list all", "unrecognized arguments: all"),
        ("eval show a b", "unrecognized arguments: b"),
        ("model ''", "NAME must not be empty"),
    ],
)
def test_extra_missing_and_empty_words_are_refused_by_name(ip, ws, line, named):
    with pytest.raises(UsageError, match=named):
        tea(ip, line)
    assert tea(ip, "model").startswith("tea/demo")  # %tea model x y z set nothing


def test_eval_refuses_an_agent_that_does_not_exist_before_anything_runs(ip, ws):
    with pytest.raises(UsageError, match="no agent named 'nope-agent'.*nothing was run"):
        tea(ip, "eval nope-agent sample --quiet")
    assert ws.runs() == [] and "nope-agent" not in ws.agents and ws.evaluations() == []


def test_a_trailing_comment_and_python_variables_still_work(ip, ws):
    ip.user_ns.update(chosen="tea/test", TOKEN="from-python")
    assert tea(ip, "model {chosen}   # the scripted model").startswith("tea/test")
    assert tea(ip, "model $chosen").startswith("tea/test")
    assert tea(ip, "runs --limit 5  # the recent ones") == []
    from tea_notebook.notebook.tea_parsers import expand_variables

    assert expand_variables(ip, "a {chosen} b ${TOKEN} c $chosen") == "a tea/test b ${TOKEN} c tea/test"


def test_the_command_line_bounds_the_same_flags(tmp_path):
    from conftest import tea_cli

    done = tea_cli("runs", "--limit", HUGE, "-w", str(tmp_path / "cli-ws"))
    assert done.returncode == 2 and f"argument --limit: {HUGE} is too large" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "cli-ws").exists()
