"""A small driver for a real Jupyter kernel, as a front end sees it: each cell's shell reply, its
iopub messages and its round-trip time. The kernel runs this interpreter (the venv under test)
through a kernel spec of its own, whatever kernels the user or the CI image have installed."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402

KERNEL = "tea-test"


@dataclass
class Execution:
    """One executed cell: the shell reply, this cell's iopub messages and the round-trip time."""

    reply: dict[str, Any]
    iopub: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def status(self) -> str:
        """The shell reply's status: ok, error or aborted."""
        return self.reply["content"]["status"]

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        """This cell's iopub messages of the given types, in order."""
        return [m for m in self.iopub if m["msg_type"] in types]

    @property
    def result(self) -> dict[str, Any]:
        """The content of the cell's one execute_result."""
        found = self.of_type("execute_result")
        assert len(found) == 1, f"expected one execute_result, got {[m['msg_type'] for m in self.iopub]}"
        return found[0]["content"]

    @property
    def stdout(self) -> str:
        """What the cell printed."""
        return "".join(m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == "stdout")

    def htmls(self) -> list[str]:
        """Every text/html payload the cell sent (displays, live updates and the result)."""
        return [
            m["content"]["data"]["text/html"]
            for m in self.of_type("display_data", "update_display_data", "execute_result")
            if "text/html" in m["content"].get("data", {})
        ]


def iopub_until_idle(kc: Any, msg_id: str, deadline: float) -> list[dict[str, Any]]:
    """The iopub messages of request ``msg_id`` until the kernel is idle again (its status message
    not included), waiting until ``deadline`` (``time.monotonic()``) at the most."""
    out: list[dict[str, Any]] = []
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return out
        out.append(msg)


class Kernel:
    """A kernel started by a ``KernelManager`` and a blocking client on it, ready for cells."""

    def __init__(self, km: KernelManager):
        self.km = km
        self.kc = km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def send(self, code: str) -> str:
        """Send a cell without waiting; its message id."""
        return self.kc.execute(code)

    def wait(self, msg_id: str, timeout: float = 60, sent: float | None = None) -> Execution:
        """The execution of a cell sent earlier, once the kernel is idle again."""
        deadline = time.monotonic() + timeout
        while True:
            reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        elapsed = time.monotonic() - sent if sent is not None else 0.0
        return Execution(reply, iopub_until_idle(self.kc, msg_id, deadline), elapsed)

    def run(self, code: str, timeout: float = 60) -> Execution:
        """Run a cell and wait for it, whatever its status."""
        sent = time.monotonic()
        return self.wait(self.send(code), timeout, sent)

    def ok(self, code: str, timeout: float = 60) -> Execution:
        """Run a cell that must succeed."""
        ex = self.run(code, timeout)
        assert ex.status == "ok", (code, ex.reply["content"], [m["content"] for m in ex.of_type("stream", "error")])
        return ex

    def json(self, expr: str) -> Any:
        """The value of a JSON-able expression in the kernel."""
        ex = self.ok(f"import json as _json\nprint('@@' + _json.dumps({expr}))")
        line = next(x for x in ex.stdout.splitlines() if x.startswith("@@"))
        return json.loads(line[2:])

    def workspace(self, path: Path) -> None:
        """Switch the kernel's %tea workspace to a fresh folder."""
        self.ok(f"%tea workspace {path}")
        assert self.json("str(get_ipython().magics_manager.registry['TeaMagics'].workspace.path)") == str(
            path.resolve()
        )

    def close(self) -> None:
        """Stop the client and shut the kernel down."""
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def make_kernel_specs(root: Path, name: str = KERNEL) -> KernelSpecManager:
    """A kernel spec ``name`` in ``root`` that runs ipykernel on THIS interpreter (the venv under
    test), whatever kernels the user or the CI image have installed."""
    (root / name).mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tea_notebook tests",
        "language": "python",
    }
    (root / name / "kernel.json").write_text(json.dumps(spec))
    return KernelSpecManager(kernel_dirs=[str(root)])


def start_kernel(specs: KernelSpecManager, cwd: Path) -> Kernel:
    """A kernel of the test spec started in ``cwd``, with no model configured and matplotlib's Agg."""
    env = dict(os.environ)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.pop("TEA_MODEL", None)  # no model configured unless a test says so
    env["MPLBACKEND"] = "Agg"
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    km.start_kernel(env=env, cwd=str(cwd))
    try:
        return Kernel(km)
    except Exception:
        km.shutdown_kernel(now=True)
        raise


def tool_cell(k: Kernel, body: str, line: str = "") -> Execution:
    """A ``%%tool`` cell (``body`` dedented) that must succeed."""
    return k.ok(f"%%tool {line}\n{textwrap.dedent(body).strip()}\n")


def agent_cell(k: Kernel, task: str, line: str = "", timeout: float = 60) -> Execution:
    """An ``%%agent`` cell, whatever its status."""
    return k.run(f"%%agent {line}\n{task}", timeout)
