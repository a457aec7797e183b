"""The security boundary around sandboxed code: bubblewrap when it can run, a weaker fallback otherwise.

With bubblewrap (``bwrap``) a sandbox process gets its own user, PID, IPC, UTS, cgroup and network
namespaces; runs as uid 65534 with no capabilities (as root and as an ordinary user alike), which is
an unprivileged identity on the host too: the user who started it, or — when that is root — host uid
:data:`HOST_UID` (nobody), so that root-only files in its read-only binds stay unreadable (see
:func:`unprivileged_host`); sees a read-only view of the system folders and the interpreter, the run
folder as the only writable place besides a private size-limited ``/tmp`` and ``/dev/shm``, nothing
else of the host (no home folder, no workspace database, no other runs, no writable ``/proc/sys``);
dies with its parent; cannot create further user namespaces; and, on x86-64, runs under a seccomp
filter that refuses the obviously dangerous system calls (ptrace, mount, keyctl, bpf …).
Network is off unless an environment opts in with ``network=True``; even then the sandbox keeps its
own empty network namespace: its only way out is the host's egress proxy (:mod:`tea_notebook.egress`),
a Unix socket bound in, which checks every request against the workspace's egress policy.

Where bubblewrap cannot run (not installed, user namespaces disabled, not Linux) the sandbox falls
back to a child process with rlimits, a PID namespace when ``unshare`` works, and dropped privileges
when possible, and says once, loudly, what is not enforced (:func:`fallback_warning`).
"""

from __future__ import annotations

import functools
import json
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
# who a sandbox that root starts is on the host: nobody, not root (uid 65534 inside would otherwise
# be host uid 0 and could read every root-owned file of its read-only binds)
HOST_UID = 65534
HOST_GID = 65534
STAGE_SCRIPT = Path(__file__).with_name("_stage_child.py")
# where a sandbox with network finds the host's egress proxy, and the loopback port (in its own
# network namespace) that leads there: its clients take http://127.0.0.1:EGRESS_PORT as their proxy
EGRESS_SOCKET = "/run/tea-egress.sock"
EGRESS_PORT = 3128
SYSTEM_FOLDERS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
# what of /etc a Python process needs: the loader cache, time zone, alternatives links; names and
# certificates only with network access
ETC_ALWAYS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
# the public certificates and OpenSSL's settings only: never all of /etc/ssl or /etc/pki, whose
# private/ folders hold the host's keys
CERTIFICATES = (
    "/etc/ssl/certs",  # Debian's CA bundle (ca-certificates.crt) and hashed links
    "/etc/ssl/openssl.cnf",
    "/etc/ssl/cert.pem",  # Alpine, Arch
    "/etc/pki/tls/certs",  # Fedora, RHEL
    "/etc/pki/tls/cert.pem",
    "/etc/pki/tls/openssl.cnf",
    "/etc/pki/ca-trust/extracted",
)
ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", *CERTIFICATES)
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
# x86-64 calls that set a file's mode: (number, index of the mode argument, index of the flags
# argument when the mode counts only with some flags). Set-uid and set-gid bits are refused. A
# sandbox started by root is host uid 0 behind its user namespace, so a program it left set-uid in
# the run folder (the bind mount is nosuid inside, the host's file system is not) would run as root
# for any local user who reached it. Changing a mode (chmod …) and creating a file with one (open
# and openat with O_CREAT or O_TMPFILE, creat, mknod, mknodat) are both covered; without those flags
# open ignores its mode argument, which callers may leave as garbage, so it is not looked at.
# mkdir and mkdirat are not filtered: Linux keeps only the permission and sticky bits of their mode
# (a folder is set-gid only by inheriting it from a set-gid parent, which no call here can make).
# Device nodes need CAP_MKNOD in the first user namespace, which the sandbox never has (and the run
# folder is mounted nodev inside): mknod of a device fails with EPERM without any filter.
MODE_CHANGES_X86_64 = {
    "chmod": (90, 1, None), "fchmod": (91, 1, None), "fchmodat": (268, 2, None), "fchmodat2": (452, 2, None),
    "open": (2, 2, 1), "openat": (257, 3, 2), "creat": (85, 1, None), "mknod": (133, 1, None),
    "mknodat": (259, 2, None),
}  # fmt: skip
SET_ID_BITS = 0o6000
CREATING = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE (O_TMPFILE is __O_TMPFILE | O_DIRECTORY)
# openat2 carries its mode inside a struct (struct open_how) that a classic-BPF filter cannot read, so
# it is refused whole — with ENOSYS, not EPERM: "this kernel has no openat2" is what callers (glibc,
# Go, systemd, runc) already handle by falling back to openat, which the filter can read; EPERM would
# read as "this file may not be opened" and break them.
UNREADABLE_MODE_X86_64 = {"openat2": 437}
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
    host_uid: int | None = None  # who that uid is on the host (bubblewrap only)

    def describe(self) -> str:
        """One line for the environment's state and the README's promises."""
        if self.mechanism == "bubblewrap":
            parts = [
                f"bubblewrap: uid {self.uid} in its own user/pid/ipc/uts/net namespaces, no capabilities",
                host_identity(self.host_uid),
                "read-only system and interpreter folders, only the run folder writable",
                "network only through the egress proxy" if self.network else "no network",
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
    probe += ["--disable-userns", "--die-with-parent", *system_binds(), "--proc", "/proc", *PROC_SYS]
    probe += ["--dev", "/dev", *ROOT_READ_ONLY]
    try:
        done = subprocess.run([*probe, "--", "/bin/true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tool if done.returncode == 0 else None


def host_identity(host_uid: int | None) -> str:
    """Who the sandbox is on the host, in words (``host_uid`` from :func:`sandbox_host_uid`)."""
    if host_uid is None:
        return "host identity unknown"
    if host_uid == 0:
        return "host uid 0 (root: an unprivileged host identity could not be used here)"
    if host_uid == HOST_UID and os.geteuid() == 0:
        return f"host uid {host_uid} (nobody, not root)"
    return f"host uid {host_uid} (this user)"


@functools.lru_cache(maxsize=1)
def unprivileged_host() -> int | None:
    """:data:`HOST_UID` when this process is root and bubblewrap can make a sandbox as that uid (an
    unprivileged user namespace; probed once), else None. An ordinary user needs none of this: the
    sandbox is that user on the host. ``TEA_SANDBOX_HOST_ROOT=1`` keeps root's old mapping (host uid
    0), for a machine where the unprivileged identity breaks something."""
    tool = bubblewrap()
    if tool is None or os.geteuid() != 0 or os.environ.get("TEA_SANDBOX_HOST_ROOT") == "1":
        return None
    import tempfile

    # the way a sandbox starts: the staging script (a private mount namespace, a tmpfs, a drop to
    # HOST_UID; a container without CAP_SYS_ADMIN fails here), then bubblewrap as that uid
    stage = tempfile.mkdtemp(prefix="tea-stage-")
    probe = [tool, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    probe += ["--disable-userns", "--die-with-parent", *system_binds(), "--proc", "/proc", *PROC_SYS]
    probe += ["--dev", "/dev", *ROOT_READ_ONLY, "--", "/bin/true"]
    config = {"uid": HOST_UID, "gid": HOST_GID, "stage": stage, "mounts": []}
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", str(STAGE_SCRIPT), json.dumps(config), "--", *probe],
            capture_output=True,
            timeout=20,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        try:
            os.rmdir(stage)
        except OSError:
            pass
    return HOST_UID if done.returncode == 0 else None


def sandbox_host_uid(host_uid: int | None) -> int:
    """The host uid a bubblewrap sandbox is: ``host_uid`` (from :func:`unprivileged_host`) when
    given, else this process's own."""
    return os.geteuid() if host_uid is None else host_uid


def readable_by_others(path: str) -> bool:
    """True when ``path`` (a file or folder, links followed) can be read — and a folder entered — by
    any user, whatever the folders above it allow (the sandbox as :data:`HOST_UID` gets it staged)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & 0o004) and (not os.path.isdir(path) or bool(mode & 0o001))


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


_warned: set[type[Warning]] = set()  # the kinds of fallback already warned about in this process


def fallback_warning(text: str, category: type[Warning] = SandboxWarning, stacklevel: int = 3) -> None:
    """Warn once per process and ``category`` (the notebook shows it under the cell): the code sandbox
    and the browser each say once what their fallback does not enforce."""
    if category not in _warned:
        _warned.add(category)
        warnings.warn(text, category, stacklevel=stacklevel)


def system_binds() -> list[str]:
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
    return folders_to_bind(python, prefixes, "Use a virtual environment or an installed Python.")


def folders_to_bind(python: str, prefixes: list[str], advice: str) -> tuple[str, ...]:
    """The interpreter's ``prefixes`` that lie outside ``/usr`` and each other, shortest first; a
    prefix that holds the home folder is a :class:`ValueError` (binding it would show all of it)."""
    home = os.path.realpath(os.path.expanduser("~"))
    out: list[str] = []
    for folder in sorted({os.path.realpath(f) for f in prefixes if f.strip()}, key=len):
        if folder == "/" or home == folder or home.startswith(folder + os.sep):
            raise ValueError(
                f"the interpreter {python} has its prefix at {folder}, which holds the home folder {home}: the "
                f"sandbox would see all of it. {advice}"
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
    egress_socket: str | None = None,
    folder_fd: int | None = None,
    host_uid: int | None = None,
    stage: str | None = None,
) -> tuple[list[str], list[int]]:
    """The ``bwrap`` argument list for a sandbox whose writable place is ``folder`` (the run folder)
    and whose working directory is ``workdir``; ``readonly`` are extra files bound read-only at
    their own paths (the sandbox's server script). With ``network`` the sandbox still has no network
    of its own: ``egress_socket`` (the host's egress proxy, required then) is bound in at
    :data:`EGRESS_SOCKET`, its only way out. Returns the arguments and the file descriptors
    the child must inherit (the seccomp program, /etc/passwd); the caller closes them after start.

    With ``host_uid`` (root only, :func:`unprivileged_host`) bubblewrap runs as that uid, started by
    :data:`STAGE_SCRIPT`: the run folder, the interpreter's folders, ``readonly`` and the egress
    socket are bound from ``stage`` (an empty folder of the caller's), where the script binds them
    first, still as root. The caller gives the run folder and the socket to ``host_uid``."""
    fds: list[int] = []
    mounts: list[list[str | int | None]] = []

    def source(path: str, kind: str, fd: int | None = None) -> str:
        if host_uid is None:
            return path
        if stage is None:
            raise ValueError("a sandbox with host_uid needs a stage folder")
        name = str(len(mounts))
        mounts.append([path, name, kind, fd])
        return os.path.join(stage, name)

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
    if network and not egress_socket:
        raise ValueError("a sandbox with network reaches it only through the egress proxy: give egress_socket")
    args += system_binds()
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
        args += ["--ro-bind", source(path, "dir"), path]
    for path in readonly:
        args += ["--ro-bind", source(path, "dir" if os.path.isdir(path) else "file"), path]
    if network:
        args += ["--bind", source(str(egress_socket), "file"), EGRESS_SOCKET]
    # by descriptor when one is given: the folder the host checked, whatever its path leads to by now
    # (bwrap checks that what it mounted is that folder); the caller passes the descriptor on
    if host_uid is not None:
        bind = ["--bind", source(str(folder), "dir", folder_fd)]
    else:
        bind = ["--bind-fd", str(folder_fd)] if folder_fd is not None else ["--bind", str(folder)]
    args += [*bind, str(folder), *ROOT_READ_ONLY, "--chdir", str(workdir)]
    program = seccomp_program()
    if program is not None:
        args += ["--seccomp", data(program)]
    if host_uid is not None:
        config = {"uid": host_uid, "gid": HOST_GID, "stage": stage, "mounts": mounts}
        args = [sys.executable, "-I", "-S", str(STAGE_SCRIPT), json.dumps(config), "--", *args]
    return args, fds


@functools.lru_cache(maxsize=1)
def seccomp_program() -> bytes | None:
    """A classic-BPF seccomp filter refusing :data:`BLOCKED_X86_64` and set-uid/set-gid modes
    (:data:`MODE_CHANGES_X86_64`) with EPERM and :data:`UNREADABLE_MODE_X86_64` with ENOSYS (x32
    calls get EPERM, any other architecture is killed); None on machines that are not x86-64."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm, enosys = 0x7FFF0000, 0x80000000, 0x00050000 | 1, 0x00050000 | 38

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    def arg(index: int) -> bytes:  # the low half of an argument (seccomp_data.args, little-endian)
        return op(ld_abs, 16 + 8 * index)

    prog = [op(ld_abs, 4), op(jeq, AUDIT_ARCH_X86_64, 1, 0), op(ret, kill), op(ld_abs, 0)]
    prog += [op(jge, X32_SYSCALL_BIT, 0, 1), op(ret, eperm)]
    for number in sorted(BLOCKED_X86_64.values()):
        prog += [op(jeq, number, 0, 1), op(ret, eperm)]
    for number in sorted(UNREADABLE_MODE_X86_64.values()):
        prog += [op(jeq, number, 0, 1), op(ret, enosys)]
    for number, index, flags in sorted(MODE_CHANGES_X86_64.values()):
        # not this call: on to the next block (the accumulator still holds the call's number); else
        # decide its fate here: allowed unless it creates (when that depends on flags) with set-id bits
        check = [arg(index), op(jset, SET_ID_BITS, 0, 1), op(ret, eperm), op(ret, allow)]
        if flags is not None:
            check = [arg(flags), op(jset, CREATING, 0, 3), *check]
        prog += [op(jeq, number, 0, len(check)), *check]
    prog.append(op(ret, allow))
    return b"".join(prog)
