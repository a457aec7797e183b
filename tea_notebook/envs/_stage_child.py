"""Start bubblewrap as an unprivileged host user when the host is root (run as a script, standard library only).

    python -I -S _stage_child.py '{"uid": 65534, "gid": 65534, "stage": "/tmp/tea-stage-…",
                                   "mounts": [["/path", "name", "dir", fd or null], …]}' -- bwrap …

A sandbox that root starts with bubblewrap is host uid 0 behind its user namespace: root-owned files
in its read-only binds are readable there. Run as an unprivileged uid instead, bubblewrap maps the
sandbox to that uid, but it then resolves every bind source with that uid's permissions, and the run
folder, the interpreter or the egress socket may lie where only root can go (``/root/…``, a 0700
temporary folder). So, still root, this script enters a private mount namespace of its own (nothing
propagates to the host), mounts a small tmpfs (mode 0711) on the empty ``stage`` folder, binds each
source there (with a descriptor, the folder bound must be the one the host opened, not something
its path leads to by now), drops to ``uid``/``gid`` with no supplementary groups and no capabilities, and ``exec``s
bubblewrap, whose arguments name the staged paths. The process keeps its pid: bubblewrap's
``--die-with-parent`` still watches the host process that started this one.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000


def fail(text: str) -> None:
    """Say why on standard error and exit with status 125 (bubblewrap never ran)."""
    sys.stderr.write(f"tea sandbox staging: {text}\n")
    sys.exit(125)


def main() -> None:
    """Stage the sources, drop to the unprivileged identity and exec bubblewrap."""
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        fail("usage: _stage_child.py CONFIG -- bwrap ARGS…")
    config = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            fail(f"{what}: {os.strerror(ctypes.get_errno())}")

    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    stage = config["stage"]
    check(libc.mount(b"tea-stage", stage.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0711,size=64k"), "tmpfs")
    for path, name, kind, fd in config["mounts"]:
        target = os.path.join(stage, name)
        if kind == "dir":
            os.mkdir(target, 0o711)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        check(libc.mount(path.encode(), target.encode(), None, MS_BIND | MS_REC, None), f"binding {path}")
        # a descriptor's folder is bound by its path in this namespace (a descriptor of the host's
        # cannot be): it must be the very folder the host checked, whatever the path leads to now
        if fd is not None:
            held, bound = os.fstat(fd), os.stat(target)
            if (held.st_dev, held.st_ino) != (bound.st_dev, bound.st_ino):
                fail(f"{path} is no longer the folder the host opened")
    uid, gid = int(config["uid"]), int(config["gid"])
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root to another uid: the kernel clears every capability
    os.execv(sys.argv[3], sys.argv[3:])


if __name__ == "__main__":
    main()
