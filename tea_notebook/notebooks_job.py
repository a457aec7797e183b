"""``tea notebooks``: open the tutorials in JupyterLab, or run them headless.

Without ``--headless`` it starts JupyterLab on the tutorials folder. With ``--headless`` it executes
the quickstart notebook with nbclient, in a kernel running this very Python (so it sees this
installation of tea_notebook, whatever kernels Jupyter has registered), and writes the executed
notebook and an HTML rendering of it.

The tutorials are found in the package (``tea_notebook/_notebooks``, where a wheel ships them) or
next to it in a source checkout or editable install (``<repo>/notebooks``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from tea_notebook.errors import TeaError

QUICKSTART = "01_quickstart.ipynb"
DEFAULT_OUT = Path("docs/_run")
CELL_TIMEOUT = 600
LAB_HINT = 'JupyterLab is not installed here. Install it with: {python} -m pip install "jupyterlab>=4.2,<5"'
RUN_HINT = 'running notebooks needs nbclient, nbconvert and ipykernel: {python} -m pip install "tea_notebook[lab]"'


def notebooks_dir() -> Path:
    """The folder of the tutorial notebooks (shipped in the wheel, or the checkout's ``notebooks/``)."""
    package = Path(__file__).resolve().parent
    candidates = (package / "_notebooks", package.parent / "notebooks")
    for folder in candidates:
        if (folder / QUICKSTART).is_file():
            return folder
    raise TeaError(f"the tutorial notebooks are not installed (looked in {', '.join(map(str, candidates))})")


def _current_env_kernels() -> Any:
    """A kernel spec manager whose kernel ``tea-current-env`` is ipykernel on ``sys.executable``."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager

    class CurrentEnvKernels(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> Any:
            if kernel_name == "tea-current-env":
                return self.kernel_spec_class(
                    resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict()
                )
            return super().get_kernel_spec(kernel_name)

    return CurrentEnvKernels()


def local_kernel_manager(**options: Any) -> Any:
    """A jupyter_client ``KernelManager`` for a kernel on this machine that talks over Unix sockets.

    ipykernel warns ("Kernel is running over TCP without encryption") for a TCP kernel without CurveZMQ
    keys, and rightly: every local user can reach a loopback port. Here the kernel's sockets are files in a
    private folder (mode 0700, removed with the manager). Where there are no Unix sockets (Windows) the
    manager provisions CurveZMQ keys when pyzmq has them. ``options`` go to ``KernelManager``.
    """
    import zmq
    from jupyter_client.manager import KernelManager

    if os.name != "posix":
        return KernelManager(transport_encryption="auto" if zmq.has("curve") else "disabled", **options)
    folder = tempfile.mkdtemp(prefix="tea-kernel-")  # short: a Unix socket path has at most ~107 bytes
    km = KernelManager(transport="ipc", connection_file=os.path.join(folder, "kernel.json"), **options)
    weakref.finalize(km, shutil.rmtree, folder, True)
    return km


def execute_notebook(path: Path, cwd: Path | None = None, timeout: int = CELL_TIMEOUT) -> tuple[Any, str | None]:
    """Execute a notebook in a kernel of this Python; ``(notebook, error)``, error None when every cell ran.

    On an error the notebook is returned as far as it ran (the failing cell holds the traceback).
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    km = local_kernel_manager(kernel_name="tea-current-env", kernel_spec_manager=_current_env_kernels())
    client = NotebookClient(
        nb,
        km=km,
        timeout=timeout,
        allow_errors=False,
        record_timing=False,  # no per-cell timestamps: executed notebooks stay diffable
        resources={"metadata": {"path": str(cwd or path.parent)}},
    )
    error = None
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    except RuntimeError as exc:  # the kernel did not start ("Kernel didn't respond in 60 seconds")
        error = f"the kernel ({sys.executable}) did not start: {exc}"
    finally:
        # nbclient shuts down only a kernel manager it made itself: this one is ours to stop
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    if error is None:
        unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count") is None]
        if unrun:
            error = f"cells {unrun} did not run"
    return nb, error


def to_html(nb: Any) -> str:
    """The notebook rendered by nbconvert's HTML exporter (rich outputs kept as they displayed)."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nb)
    return body


def run_headless(out: Path, name: str = QUICKSTART) -> int:
    """Execute the quickstart into ``out``: ``NAME.ipynb`` and ``NAME.html``; 0 only when every cell ran."""
    if not all(importlib.util.find_spec(m) for m in ("nbformat", "nbclient", "nbconvert", "ipykernel")):
        print(RUN_HINT.format(python=sys.executable), file=sys.stderr)
        return 2
    import nbformat

    source = notebooks_dir() / name
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"==> executing {source}", flush=True)
    started = time.monotonic()
    # the kernel runs in the output folder: a tutorial never writes into the installed package
    nb, error = execute_notebook(source, cwd=out)
    target = out / name
    nbformat.write(nb, target)
    html_path = target.with_suffix(".html")
    html_path.write_text(to_html(nb), encoding="utf-8")
    cells = sum(1 for c in nb.cells if c.cell_type == "code")
    print(f"executed notebook: {target}")
    print(f"HTML rendering:    {html_path}")
    if error:
        print(f"tea notebooks: {name} failed: {error}", file=sys.stderr)
        return 1
    print(f"==> {cells} code cells ran in {time.monotonic() - started:.1f} s")
    return 0


def open_lab(folder: Path, lab_args: list[str] | None = None) -> int:
    """Start JupyterLab on the tutorials folder (blocks until it is stopped); ``lab_args`` go to JupyterLab."""
    if importlib.util.find_spec("jupyterlab") is None:
        print(LAB_HINT.format(python=sys.executable), file=sys.stderr)
        return 2
    extra = list(lab_args or [])
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        extra.append("--allow-root")  # containers and CI machines often run as root; Jupyter refuses otherwise
    argv = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={folder}", *extra]
    print(f"==> starting JupyterLab on {folder} (Ctrl-C to stop)", flush=True)
    if os.name == "posix":
        os.execv(sys.executable, argv)  # JupyterLab takes over this process: Ctrl-C and signals reach it
    try:
        return subprocess.call(argv)
    except KeyboardInterrupt:
        return 0


def cmd_notebooks(args: argparse.Namespace) -> int:
    """The ``tea notebooks`` subcommand."""
    lab_args = list(getattr(args, "lab_args", None) or [])
    if lab_args[:1] == ["--"]:
        lab_args = lab_args[1:]
    if args.headless:
        if lab_args:
            print(f"tea notebooks: --headless takes no JupyterLab options ({' '.join(lab_args)})", file=sys.stderr)
            return 2
        return run_headless(Path(args.out))
    return open_lab(notebooks_dir(), lab_args)
