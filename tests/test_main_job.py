"""The main job, ``tea notebooks [--headless] [--out DIR]`` (what ``scripts/run.sh`` runs)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from tea_notebook import notebooks_job
from tea_notebook.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TEA_MODEL"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


@pytest.fixture(scope="module")
def headless(tmp_path_factory):
    work = tmp_path_factory.mktemp("job")
    out = work / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "tea_notebook", "notebooks", "--headless", "--out", str(out)],
        cwd=work,
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    printed = dict(re.findall(r"^(executed notebook|HTML rendering):\s+(.+)$", proc.stdout, re.M))
    return proc, out, printed


@pytest.mark.slow
def test_headless_exits_0_and_prints_both_paths(headless):
    proc, out, printed = headless
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    notebook, page = Path(printed["executed notebook"]), Path(printed["HTML rendering"])
    assert notebook == out / "01_quickstart.ipynb" and notebook.is_file()
    assert page == out / "01_quickstart.html" and page.is_file()


@pytest.mark.slow
def test_headless_kernel_does_not_talk_plain_tcp(headless):
    proc, _, _ = headless
    assert proc.returncode == 0
    assert "without encryption" not in proc.stderr, proc.stderr[-2000:]


def test_a_notebook_runs_in_a_kernel_over_private_unix_sockets(tmp_path):
    """What the headless job and the tutorial runs use: no TCP port, so no plain-text warning, and the
    sockets' folder is gone afterwards."""
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]), path)
    script = (
        "import sys, os; from pathlib import Path; from tea_notebook.notebooks_job import execute_notebook, "
        "local_kernel_manager\n"
        "km = local_kernel_manager(); folder = os.path.dirname(km.connection_file)\n"
        "print('transport', km.transport, oct(os.stat(folder).st_mode & 0o777)); del km\n"
        "print('kept', os.path.exists(folder))\n"
        "nb, error = execute_notebook(Path(sys.argv[1]))\n"
        "print('error', error); print('out', nb.cells[0].outputs[0].text.strip())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120, env=_offline_env()
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "transport ipc 0o700" in proc.stdout and "kept False" in proc.stdout
    assert "error None" in proc.stdout and "out 42" in proc.stdout
    assert "without encryption" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_executed_notebook_has_outputs_and_no_errors(headless):
    _, out, _ = headless
    nb = nbformat.read(out / "01_quickstart.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    agent_cells = [c for c in code if c.source.startswith("%%agent")]
    assert len(agent_cells) == 2
    # the first runs the demo model (it cannot check its answer: 'unverified'), the second a script
    for c, status in zip(agent_cells, ["unverified", "success"]):
        result = [o for o in c.outputs if o.output_type == "execute_result"]
        assert result and result[0].data["application/vnd.tea.trajectory+json"]["status"] == status
    # the fresh run id sits in the bundle's metadata, not in the payload
    meta = agent_cells[0].outputs[-1].metadata["application/vnd.tea.trajectory+json"]
    assert meta["run_id"] and meta["run_id"] not in str(
        agent_cells[0].outputs[-1].data["application/vnd.tea.trajectory+json"]
    )


@pytest.mark.slow
def test_html_holds_the_escaped_trajectory_and_the_scripted_label(headless):
    _, out, _ = headless
    page = (out / "01_quickstart.html").read_text(encoding="utf-8")
    # the trajectory's own HTML as displayed (nbconvert re-serialises it: double-quoted attributes)
    assert '<div class="tea-t">' in page
    # model and tool strings arrive as escaped text inside the markup, never as markup
    assert '<code>count_words({"text": "the tea is ready now"})</code><pre>5</pre>' in page
    assert "tea/demo (scripted, not an LLM)" in page
    assert "tea/script:quickstart (scripted, not an LLM)" in page
    assert "95 °C is 203 °F, and the note has 5 words." in page
    assert "image/png" in page or "data:image/png;base64" in page  # the plot


@pytest.mark.slow
def test_a_failing_cell_gives_exit_1_and_still_writes_both_files(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "nbs"
    folder.mkdir()
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("1 / 0"), nbformat.v4.new_code_cell("y")]
    )
    nbformat.write(nb, folder / notebooks_job.QUICKSTART)
    monkeypatch.setattr(notebooks_job, "notebooks_dir", lambda: folder)
    assert notebooks_job.run_headless(tmp_path / "out") == 1
    captured = capsys.readouterr()
    assert "ZeroDivisionError" in captured.err
    ran = nbformat.read(tmp_path / "out" / notebooks_job.QUICKSTART, as_version=4)
    assert ran.cells[1].outputs[0].output_type == "error" and ran.cells[2].execution_count is None
    assert (tmp_path / "out" / "01_quickstart.html").is_file()


def test_without_jupyterlab_it_says_how_to_install_and_exits_2(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jupyterlab" else real(name, *a))
    called = []
    monkeypatch.setattr(notebooks_job.os, "execv", lambda *a: called.append(a))
    monkeypatch.setattr(notebooks_job.subprocess, "call", lambda *a, **k: called.append(a) or 0)
    assert notebooks_job.open_lab(ROOT / "notebooks") == 2
    assert not called
    assert 'pip install "jupyterlab>=4.2,<5"' in capsys.readouterr().err


def test_interactive_mode_starts_jupyterlab_on_the_notebooks_folder(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "jupyterlab" else real(name, *a)
    )
    called = []
    monkeypatch.setattr(notebooks_job.os, "execv", lambda exe, argv: called.append(argv))  # POSIX: exec
    monkeypatch.setattr(notebooks_job.subprocess, "call", lambda argv, **k: called.append(argv) or 0)  # Windows
    args = build_parser().parse_args(["notebooks", "--", "--port", "8899"])
    assert args.func(args) == 0
    lab = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={ROOT / 'notebooks'}", "--port", "8899"]
    if os.geteuid() == 0:  # Jupyter refuses root without it
        lab.append("--allow-root")
    assert called[0] == lab


def test_headless_takes_no_jupyterlab_options(capsys):
    args = build_parser().parse_args(["notebooks", "--headless", "--", "--port", "1"])
    assert args.func(args) == 2 and "no JupyterLab options" in capsys.readouterr().err


def test_cli_options():
    args = build_parser().parse_args(["notebooks", "--headless", "--out", "somewhere"])
    assert args.headless and args.out == "somewhere"
    assert build_parser().parse_args(["notebooks"]).out == "docs/_run"


def test_notebooks_are_found_in_the_checkout():
    assert notebooks_job.notebooks_dir() == ROOT / "notebooks"


def test_notebooks_are_found_where_the_wheel_puts_them(tmp_path):
    package = tmp_path / "site" / "tea_notebook"
    (package / "_notebooks").mkdir(parents=True)
    (package / "_notebooks" / notebooks_job.QUICKSTART).write_text("{}")
    (package / "notebooks_job.py").write_text(Path(notebooks_job.__file__).read_text())
    spec = importlib.util.spec_from_file_location("installed_notebooks_job", package / "notebooks_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.notebooks_dir() == package / "_notebooks"
    (package / "_notebooks" / notebooks_job.QUICKSTART).unlink()
    with pytest.raises(Exception, match="tutorial notebooks are not installed"):
        module.notebooks_dir()


def test_the_wheel_ships_the_notebooks_where_the_job_looks():
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "notebooks" in wheel["only-include"] and "tea_notebook" in wheel["only-include"]
    assert wheel["sources"]["notebooks"] == "tea_notebook/_notebooks"


def test_run_sh_runs_the_job():
    script = (ROOT / "scripts" / "run.sh").read_text()
    assert 'setup.sh" lab' in script
    assert "notebooks --headless --out docs/_run" in script
    assert 'tea" notebooks ${1:+--} "$@"' in script  # other arguments go to JupyterLab
