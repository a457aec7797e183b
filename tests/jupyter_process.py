"""A Jupyter server (``jupyter server`` or ``jupyter lab``) started by a test, and the Chromium that drives it.

The server runs this interpreter as its only kernel (``tea-test``), with its own Jupyter folders (no
user configuration), token auth on a free loopback port, and no model configured (``TEA_MODEL`` is
dropped). ``api(method, path, body)`` calls its REST API.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from loopback_http import free_port

from tea_notebook.envs.browser import LAUNCH_ARGS

KERNEL = "tea-test"


class JupyterProcess:
    """``python -m APP`` (``jupyter_server`` or ``jupyterlab``) serving ``root``, its folders under ``home``.

    ``env`` adds to the server's environment, ``args`` to its command line."""

    def __init__(self, app: str, root: Path, home: Path, env: dict[str, str] | None = None, args: tuple = ()):
        self.root, self.home, self.runtime = root, home, home / "runtime"
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/"
        kernels = home / "data" / "kernels" / KERNEL
        kernels.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (kernels / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "tea", "language": "python"}))
        environ = {k: v for k, v in os.environ.items() if k != "TEA_MODEL"}
        environ.update(
            JUPYTER_PATH=str(home / "data"),  # our kernel spec: this interpreter
            JUPYTER_DATA_DIR=str(home / "userdata"),
            JUPYTER_CONFIG_DIR=str(home / "config"),  # no user configuration
            JUPYTER_RUNTIME_DIR=str(self.runtime),
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            MPLBACKEND="Agg",
            **(env or {}),
        )
        cmd = [
            sys.executable,
            "-m",
            app,
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={root}",
            *args,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log_path = home / "server.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, env=environ, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            try:
                self.api("GET", "api/status")
                return
            except (urllib.error.URLError, ConnectionError) as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{app} did not start:\n{self.log_path.read_text()[-3000:]}") from exc
                time.sleep(0.1)

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A REST call with the server's token; the JSON answer (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"token {self.token}")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def stop(self) -> None:
        """Terminate the server (killed if it does not go within 15 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


def running(make: Callable[[Path, Path], JupyterProcess], tmp_path_factory: Any) -> Iterator[JupyterProcess]:
    """For a fixture: the server ``make(root, home)`` started in fresh folders of its own, stopped
    after the last test that uses it."""
    server = make(tmp_path_factory.mktemp("jupyter-root"), tmp_path_factory.mktemp("jupyter-home"))
    yield server
    server.stop()


def launch_chromium() -> Iterator[Any]:
    """A headless Chromium through Playwright (the system one unless TEA_CHROMIUM names another);
    skips when there is none (CI sets TEA_REQUIRE_BROWSER and installs one)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = os.environ.get("TEA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not executable:
        if os.environ.get("TEA_REQUIRE_BROWSER"):
            pytest.fail("no Chromium to drive (scripts/test.sh installs Debian's chromium)")
        pytest.skip("no Chromium to drive (set TEA_CHROMIUM)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            browser.close()
