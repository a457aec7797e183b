"""Test-wide settings (litellm must never try to download its price list: no network in CI), and the
fixtures and helpers many test files share: workspaces, the in-process IPython shell, ``%tea`` and
``tea`` runners."""

import os
import subprocess
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("TEA_MODEL", None)  # tests choose their models explicitly


import pytest  # noqa: E402

import tea_notebook  # noqa: E402


@pytest.fixture
def ws(tmp_path):
    """A fresh workspace with the (fast, lexical) hashing embedder."""
    workspace = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    yield workspace
    workspace.close()


@pytest.fixture
def worker(ws):
    """The tool ``work(n)`` in ``ws``, returning "result <n>"; the list of the ``n`` it ran with."""
    executed: list[int] = []

    @ws.tools.tool
    def work(n: int) -> str:
        """Do one unit of work."""
        executed.append(n)
        return f"result {n}"

    return executed


@pytest.fixture(scope="session")
def warm_litellm(tmp_path_factory):
    """Import litellm and register the offline provider once (a scripted run alone no longer imports it)."""
    from tea_notebook.models.offline import ScriptedModel, call
    from tea_notebook.models.provider import ensure_registered

    ensure_registered()

    w = tea_notebook.Workspace(tmp_path_factory.mktemp("warm") / "ws", embedder="hashing")
    script = ScriptedModel([call("done", success=True, text="warm")])
    assert w.agent("warm", model=script.name, tools=[]).run_sync("warm up").success
    w.close()


@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    """An in-process IPython shell with the extension loaded (no history file, no ~/.ipython writes)."""
    import builtins

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    before = set(vars(builtins))
    cfg = Config()
    cfg.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=cfg, ipython_dir=str(tmp_path_factory.mktemp("ipython")))
    shell.run_line_magic("load_ext", "tea_notebook")
    yield shell
    magics = shell.magics_manager.registry["TeaMagics"]
    if magics._workspace is not None:
        magics._workspace.close()
    InteractiveShell.clear_instance()
    for name in set(vars(builtins)) - before:
        delattr(builtins, name)


@pytest.fixture
def magics(ip):
    """The shell's TeaMagics (its settings and current workspace)."""
    return ip.magics_manager.registry["TeaMagics"]


@pytest.fixture
def shown(monkeypatch):
    """What IPython would display (the live view, for one): every display and update, as HTML, in order."""
    updates: list[str] = []

    class Handle:
        def update(self, obj):
            updates.append(getattr(obj, "data", str(obj)))

    def fake_display(obj, display_id: bool = False, **_):
        updates.append(getattr(obj, "data", str(obj)))
        return Handle()

    monkeypatch.setattr("IPython.display.display", fake_display)
    return updates


def tea_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``tea <args>`` run as a command by this interpreter (``python -m tea_notebook``), its text output."""
    return subprocess.run(
        [sys.executable, "-m", "tea_notebook", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def tea(ip, line: str):
    """Run ``%tea <line>`` in the shell; what it returns."""
    return ip.run_line_magic("tea", line)


def magics_workspace(ip, tmp_path, monkeypatch, *, folder: str = "ws", **settings):
    """A fresh workspace ``tmp_path / folder`` (hashing embedder) made current for the shell's magics
    through ``%tea workspace``, from ``tmp_path`` as the working folder, with no model configured and
    the given ``%config TeaMagics`` settings (``live=True``...)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEA_MODEL", raising=False)
    path = tmp_path / folder
    tea_notebook.Workspace(path, embedder="hashing").close()
    ip.run_line_magic("config", "TeaMagics.default_model = None")
    for name, value in settings.items():
        ip.run_line_magic("config", f"TeaMagics.{name} = {value!r}")
    return ip.run_line_magic("tea", f"workspace {path}")
