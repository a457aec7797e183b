"""The sandbox's identity on the host and what of /etc it sees (issue 31, F3), from the attacker's side.

A sandbox that root started used to be host uid 0 behind its user namespace (``uid_map 65534 0 1``):
every root-owned 0600 file in its read-only binds was readable (the review read a private key in
``/etc/ssl/private`` with ``network=True``). Now it is an unprivileged host identity — nobody when
root starts it, the user otherwise — and only the public certificates of ``/etc/ssl`` are bound.
The attacks run as root and as an ordinary user, with and without network.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import json  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import test_boundary  # noqa: E402
from test_boundary import program, report_of  # noqa: E402

from tea_notebook.envs import boundary, browser_sandbox  # noqa: E402

AS_ROOT = os.geteuid() == 0
bwrap = test_boundary.bwrap  # the fixtures, by name: the host as root and as an ordinary user
host = test_boundary.host

ATTACK = """
import json, os
def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError as exc:
        return type(exc).__name__
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__
json.dumps({
    "planted": read(PLANTED),
    "ssl": listing("/etc/ssl"),
    "private": listing("/etc/ssl/private"),
    "status": {k: v.strip() for k, v in (l.split(":", 1) for l in open("/proc/self/status")) if k in ("Uid", "Gid")},
})
"""


@pytest.fixture
def planted():
    """A root-owned 0600 file in a folder every sandbox and the browser bind read-only
    (``/etc/ld.so.conf.d``; not named ``*.conf``, so the loader never reads it): its text is the secret."""
    if not AS_ROOT:
        pytest.skip("planting a root-only file needs root")
    folder = Path("/etc/ld.so.conf.d")
    if not folder.is_dir():
        pytest.skip("no /etc/ld.so.conf.d to plant in")
    path = folder / f"tea-root-only-{uuid.uuid4().hex[:8]}"
    secret = f"root-only-secret-{uuid.uuid4().hex}"
    path.write_text(secret)
    path.chmod(0o600)
    try:
        yield path, secret
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("network", [False, True], ids=["offline", "network"])
def test_root_only_files_in_the_binds_are_unreadable_inside(host, planted, network):
    path, secret = planted
    report = host.run([{"code": program(ATTACK, PLANTED=str(path))}], network=network)
    result = report["results"][0]
    assert result["error"] is None, result["text"]
    seen = report_of(result["value"])
    assert secret not in seen["planted"] and seen["planted"] == "PermissionError", seen
    # /etc/ssl: the public certificates only (with network), never the private keys' folder
    assert seen["private"] == "FileNotFoundError", seen
    if network:
        assert "certs" in seen["ssl"] and "private" not in seen["ssl"], seen
    else:
        assert seen["ssl"] == "FileNotFoundError", seen
    # and it is nobody on the host, not root (as root), or the user itself (as a user)
    expected = boundary.HOST_UID if host.kind == "root" else host.uid
    assert report["boundary"]["host_uid"] == expected, report["boundary"]
    # what the sandbox writes belongs to that host uid
    written = host.run([{"code": "open('mine.txt', 'w').write('x')"}], network=network)
    assert written["results"][0]["error"] is None
    folder = host.home / "ws" / "runs" / f"r{host.runs}" / "sandbox" / "mine.txt"
    assert folder.stat().st_uid == expected


@pytest.mark.skipif(not AS_ROOT, reason="the mapping of a sandbox started by root")
def test_root_sandbox_is_nobody_on_the_host(bwrap, tmp_path):
    from tea_notebook.envs.sandbox import PythonSandbox

    os.chmod(tmp_path, 0o700)  # a run folder only root can reach, like a workspace under /root
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "notes.txt").write_text("from the host\n")  # a tool wrote it, as root
    (run / "passwd-link").symlink_to("/etc/passwd")  # handed over? never followed
    outside = tmp_path / "outside.txt"
    outside.write_text("root's")
    os.link(outside, run / "hard-link")  # another name outside the run folder: left alone
    sb = PythonSandbox(run, isolation="bubblewrap", timeout=10)
    try:
        result = sb.exec_sync("open('../data/notes.txt', 'a').write('and the sandbox\\n')")
        assert result.ok, result.text()
        assert (run / "data" / "notes.txt").read_text() == "from the host\nand the sandbox\n"
        assert os.stat("/etc/passwd").st_uid == 0 and outside.stat().st_uid == 0
        assert (run / "passwd-link").lstat().st_uid == 0
        host_ids = {
            line.split(":")[0]: line.split()[1:]
            for line in Path(f"/proc/{sb._main}/status").read_text().splitlines()  # noqa: SLF001
            if line.startswith(("Uid:", "Gid:"))
        }
        assert host_ids["Uid"] == [str(boundary.HOST_UID)] * 4 and host_ids["Gid"] == [str(boundary.HOST_GID)] * 4
        assert "host uid 65534 (nobody, not root)" in sb.boundary.describe()
        assert sb.boundary.host_uid == boundary.HOST_UID
        # the host's root-only run folder is still the sandbox's, and nothing is left staged
        assert (tmp_path / "run").stat().st_uid == boundary.HOST_UID
        assert sb._stage is None  # noqa: SLF001 - the staging folder is gone once the sandbox runs
    finally:
        sb.kill()


def test_only_public_certificates_of_etc_are_bound():
    for binds in (boundary.ETC_NETWORK, browser_sandbox.ETC_BROWSER):
        assert "/etc/ssl" not in binds and "/etc/pki" not in binds
        assert "/etc/ssl/certs" in binds
        assert not any("private" in path for path in binds)
    args, _ = boundary.bwrap_command(
        "bwrap",
        python=os.path.realpath(os.sys.executable),
        folder=Path("/nonexistent/run"),
        workdir=Path("/nonexistent/run/sandbox"),
        readonly=[],
        network=True,
        tmp_mb=8,
        egress_socket="/nonexistent/egress.sock",
    )
    bound = {args[i + 1] for i, a in enumerate(args) if a in ("--ro-bind", "--ro-bind-try", "--bind")}
    assert "/etc/ssl" not in bound and "/etc/ssl/certs" in bound


@pytest.mark.skipif(not AS_ROOT, reason="a host uid is asked of a root host only")
def test_staging_refuses_without_a_stage_folder():
    with pytest.raises(ValueError, match="stage folder"):
        boundary.bwrap_command(
            "bwrap",
            python=os.path.realpath(os.sys.executable),
            folder=Path("/nonexistent/run"),
            workdir=Path("/nonexistent/run/sandbox"),
            readonly=[],
            network=False,
            tmp_mb=8,
            host_uid=boundary.HOST_UID,
        )


# -- the browser: the same binds, the same identity ---------------------------------------------------
@pytest.mark.parametrize("who", ["root", "user"])
def test_the_browser_cannot_read_root_only_files_in_its_binds(planted, who, tmp_path):
    import subprocess
    import sys

    from test_boundary import child_env, unprivileged_user, user_python

    from tea_notebook.envs.browser import find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium found (apt-get install chromium)")
    path, secret = planted
    script = Path(__file__).with_name("browser_host.py")
    if who == "root":
        os.chmod(tmp_path, 0o700)
        home, python, env, switch = tmp_path, sys.executable, {**child_env(), "HOME": str(tmp_path)}, {}
    else:
        uid, gid, user_home = unprivileged_user()
        home = Path(user_home)
        python, env = user_python(uid, gid, home)
        switch = {"user": uid, "group": gid, "extra_groups": []}
    folder = home / f"browser-run-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    if switch:
        os.chown(folder, switch["user"], switch["group"])
    config = {"folder": str(folder), "secrets": {str(path): secret}, "visible": "/etc/fonts/fonts.conf"}
    try:
        done = subprocess.run(
            [python, str(script), json.dumps(config)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(home),
            env=env,
            **switch,
        )
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if "unavailable" in report:
        pytest.skip(report["unavailable"])
    assert "fontconfig" in report["pages"]["/etc/fonts/fonts.conf"]  # the probe reads what it may
    assert secret not in report["pages"][str(path)], report["pages"][str(path)][:300]
    assert all(secret not in frame for frame in report["frames"].values())
    expected = boundary.HOST_UID if who == "root" else switch.get("user", os.geteuid())
    assert report["status"]["Uid"].split() == [str(expected)] * 4


@pytest.mark.skipif(not AS_ROOT, reason="staging runs as root")
def test_staging_binds_only_the_folder_the_host_opened(tmp_path):
    import subprocess
    import sys

    checked, swapped = tmp_path / "checked", tmp_path / "swapped"
    checked.mkdir()
    swapped.mkdir()
    stage = tmp_path / "stage"
    stage.mkdir()
    fd = os.open(checked, os.O_RDONLY | os.O_DIRECTORY)
    try:
        config = {"uid": boundary.HOST_UID, "gid": boundary.HOST_GID, "stage": str(stage)}
        for path, code in ((swapped, 125), (checked, 0)):  # the path now leads elsewhere: refused
            config["mounts"] = [[str(path), "0", "dir", fd]]
            done = subprocess.run(
                [sys.executable, "-I", "-S", str(boundary.STAGE_SCRIPT), json.dumps(config), "--", "/bin/true"],
                capture_output=True,
                text=True,
                pass_fds=[fd],
                timeout=30,
            )
            assert done.returncode == code, done.stderr
            if code:
                assert "no longer the folder the host opened" in done.stderr
    finally:
        os.close(fd)
    assert list(stage.iterdir()) == []  # the staging lived in its own mount namespace only
