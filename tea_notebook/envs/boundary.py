"""The security boundary around sandboxed code: bubblewrap when it can run, a weaker fallback otherwise.

With bubblewrap (``bwrap``) a sandbox process gets its own user, PID, IPC, UTS, cgroup and network
namespaces; runs as uid 65534 with no capabilities (as root and as an ordinary user alike); sees a
read-only view of the system folders and the interpreter, the run folder as the only writable place
besides a private size-limited ``/tmp`` and ``/dev/shm``, nothing else of the host (no home folder,
no workspace database, no other runs, no writable ``/proc/sys``); dies with its parent; cannot create
further user namespaces; and, on x86-64, runs under a seccomp filter that refuses the obviously
dangerous system calls (ptrace, mount, keyctl, bpf …).
Network is off unless an environment opts in with ``network=True``; then it shares the host's network.

Where bubblewrap cannot run (not installed, user namespaces disabled, not Linux) the sandbox falls
back to a child process with rlimits, a PID namespace when ``unshare`` works, and dropped privileges
when possible, and says once, loudly, what is not enforced (:func:`fallback_warning`).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import struct
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

SANDBOX_UID = 65534  # nobody, inside the sandbox's user namespace
SYSTEM_FOLDERS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
# what of /etc a Python process needs: the loader cache, time zone, alternatives links; names and
# certificates only with network access
ETC_ALWAYS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
ETC_NETWORK = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
)
PASSWD = "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:sandbox:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"
# /proc/sys is the machine's, not the sandbox's. A sandbox started by root is host uid 0 behind its
# user namespace, and the kernel lets uid 0 write most of /proc/sys with no capability at all
# (kernel.core_pattern = "|program" runs a program as real root): read-only, always.
PROC_SYS = ("--ro-bind", "/proc/sys", "/proc/sys")
# the root folder bwrap builds (and /dev) are tmpfs owned by the sandbox's uid, with no size limit:
# read-only once every mount point is made, so /tmp and /dev/shm (both tmp_mb) are the only memory
ROOT_READ_ONLY = ("--remount-ro", "/")

# x86-64 system calls a sandboxed program has no business making: debugging other processes,
# mounts and namespaces, kernel modules and keyrings, BPF and perf, io_uring (it bypasses seccomp's
# view of file operations), handles that escape bind mounts, the clock and the machine itself
BLOCKED_X86_64 = {
    "ptrace": 101, "syslog": 103, "personality": 135, "vhangup": 153, "pivot_root": 155, "adjtimex": 159,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212, "clock_settime": 227,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "mount_setattr": 442,
}  # fmt: skip
# x86-64 calls that change a file's mode, and the index of their mode argument: set-uid and set-gid
# bits are refused. A sandbox started by root is host uid 0 behind its user namespace, so a program
# it marked set-uid in the run folder would run as root for any local user who reached it.
MODE_CHANGES_X86_64 = {"chmod": (90, 1), "fchmod": (91, 1), "fchmodat": (268, 2), "fchmodat2": (452, 2)}
SET_ID_BITS = 0o6000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000


class SandboxWarning(UserWarning):
    """Shown once per process when the sandbox runs without its full boundary."""


@dataclass(frozen=True)
class Boundary:
    """What confines one sandbox process (``PythonSandbox.boundary``)."""

    mechanism: str  # "bubblewrap" or "process" (the fallback)
    network: bool
    seccomp: bool
    uid: int | None  # the uid code runs as, inside its namespace (None: this process's own)
    warning: str | None = None

    def describe(self) -> str:
        """One line for the environment's state and the README's promises."""
        if self.mechanism == "bubblewrap":
            parts = [
                f"bubblewrap: uid {self.uid} in its own user/pid/ipc/uts/net namespaces, no capabilities",
                "read-only system and interpreter folders, only the run folder writable",
                "network shared with the host" if self.network else "no network",
                "seccomp filter on" if self.seccomp else "no seccomp filter (not x86-64)",
            ]
            return "; ".join(parts)
        who = "user nobody" if self.uid == SANDBOX_UID else f"uid {self.uid}"
        return f"a fallback child process as {who} ({self.warning})"


@functools.lru_cache(maxsize=1)
def bubblewrap() -> str | None:
    """The ``bwrap`` program when it can make a sandbox here (probed once), else None.
    ``TEA_SANDBOX=process`` disables it (to test the fallback, or where a person chooses it)."""
    if os.environ.get("TEA_SANDBOX", "").lower() == "process" or sys.platform != "linux":
        return None
    tool = shutil.which("bwrap")
    if tool is None:
        return None
    probe = [tool, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    probe += ["--disable-userns", "--die-with-parent", *_system_binds(), "--proc", "/proc", *PROC_SYS]
    probe += ["--dev", "/dev", *ROOT_READ_ONLY]
    try:
        done = subprocess.run([*probe, "--", "/bin/true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tool if done.returncode == 0 else None


def fallback_reasons(*, root_inside: bool, isolated: bool, chosen: bool = False) -> str:
    """What the fallback does not enforce, in one sentence (``chosen``: the environment asked for it)."""
    missing = ["no separate network, mount or user namespace", "no seccomp filter"]
    if root_inside:
        missing.insert(0, "code runs AS ROOT")
    if not isolated:
        missing.append("other processes and their environments are visible")
    why = "bubblewrap is not installed" if shutil.which("bwrap") is None else "bubblewrap cannot run here"
    if os.environ.get("TEA_SANDBOX", "").lower() == "process":
        why = "TEA_SANDBOX=process is set"
    if chosen:
        why = "isolation='process' was chosen"
    return (
        f"sandbox without its security boundary ({why}): {', '.join(missing)}; the files the user can read are "
        "readable. Install bubblewrap (apt-get install bubblewrap) for the real boundary."
    )


_warned = False


def fallback_warning(text: str) -> None:
    """Warn once per process (the notebook shows it under the cell)."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(text, SandboxWarning, stacklevel=3)


def _system_binds() -> list[str]:
    """Read-only binds of the system folders (symlinks such as ``/lib -> usr/lib`` copied as links)."""
    args: list[str] = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    return args


@functools.lru_cache(maxsize=16)
def interpreter_folders(python: str) -> tuple[str, ...]:
    """The folders an interpreter needs to run — its prefixes, as it reports them (a venv's and its
    base interpreter's) — outside ``/usr``. A prefix that holds the home folder (``~/bin/python3``
    would make it ``~``) is refused: binding it would show the sandbox everything there."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        code = "import sys; print(sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, sep='\\n')"
        try:
            done = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ValueError(f"cannot run the interpreter {python}: {exc}") from None
        if done.returncode != 0:
            raise ValueError(f"the interpreter {python} does not run: {done.stderr.strip()[-300:]}")
        prefixes = done.stdout.split("\n")
    home = os.path.realpath(os.path.expanduser("~"))
    out: list[str] = []
    for folder in sorted({os.path.realpath(f) for f in prefixes if f.strip()}, key=len):
        if folder == "/" or home == folder or home.startswith(folder + os.sep):
            raise ValueError(
                f"the interpreter {python} has its prefix at {folder}, which holds the home folder {home}: the "
                "sandbox would see all of it. Use a virtual environment or an installed Python."
            )
        if not any(folder == o or folder.startswith(o + os.sep) for o in [*out, "/usr"]):
            out.append(folder)
    return tuple(out)


def bwrap_command(
    tool: str,
    *,
    python: str,
    folder: Path,
    workdir: Path,
    readonly: list[str],
    network: bool,
    tmp_mb: int,
) -> tuple[list[str], list[int]]:
    """The ``bwrap`` argument list for a sandbox whose writable place is ``folder`` (the run folder)
    and whose working directory is ``workdir``; ``readonly`` are extra files bound read-only at
    their own paths (the sandbox's server script). Returns the arguments and the file descriptors
    the child must inherit (the seccomp program, /etc/passwd); the caller closes them after start."""
    fds: list[int] = []

    def data(text: bytes) -> str:
        fd = os.memfd_create("tea-sandbox", 0)
        os.write(fd, text)
        os.lseek(fd, 0, os.SEEK_SET)
        fds.append(fd)
        return str(fd)

    # --as-pid-1: the sandbox's supervisor (not dumpable) is pid 1 itself; bwrap's own init would be
    # a process of the sandbox's uid that user code could inspect, holding the pipes to the host
    args = [tool, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
    args.append("--as-pid-1")
    args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--hostname", "sandbox"]
    if network:
        args.append("--share-net")
    args += _system_binds()
    for path in ETC_ALWAYS + (ETC_NETWORK if network else ()):
        args += ["--ro-bind-try", path, path]
    args += ["--ro-bind-data", data(PASSWD.encode()), "/etc/passwd"]
    args += ["--ro-bind-data", data(GROUP.encode()), "/etc/group"]
    args += ["--proc", "/proc", *PROC_SYS]
    size = str(tmp_mb * 1024 * 1024)
    args += ["--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    args += ["--size", size, "--tmpfs", "/tmp"]
    # after the private /tmp, so an interpreter (or this script) that lives under /tmp is not hidden by it
    for path in interpreter_folders(python):
        args += ["--ro-bind", path, path]
    for path in readonly:
        args += ["--ro-bind", path, path]
    args += ["--bind", str(folder), str(folder), *ROOT_READ_ONLY, "--chdir", str(workdir)]
    program = seccomp_program()
    if program is not None:
        args += ["--seccomp", data(program)]
    return args, fds


@functools.lru_cache(maxsize=1)
def seccomp_program() -> bytes | None:
    """A classic-BPF seccomp filter refusing :data:`BLOCKED_X86_64` and set-uid/set-gid mode changes
    (:data:`MODE_CHANGES_X86_64`) with EPERM (x32 calls too, any other architecture is killed); None
    on machines that are not x86-64."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    prog = [op(ld_abs, 4), op(jeq, AUDIT_ARCH_X86_64, 1, 0), op(ret, kill), op(ld_abs, 0)]
    prog += [op(jge, X32_SYSCALL_BIT, 0, 1), op(ret, eperm)]
    for number in sorted(BLOCKED_X86_64.values()):
        prog += [op(jeq, number, 0, 1), op(ret, eperm)]
    for number, index in sorted(MODE_CHANGES_X86_64.values()):
        # not this call: on to the next block; else load the mode (low half of the argument) and refuse
        # it with set-id bits (the accumulator now holds the mode, so the call's fate is decided here)
        prog += [op(jeq, number, 0, 4), op(ld_abs, 16 + 8 * index), op(jset, SET_ID_BITS, 0, 1)]
        prog += [op(ret, eperm), op(ret, allow)]
    prog.append(op(ret, allow))
    return b"".join(prog)
