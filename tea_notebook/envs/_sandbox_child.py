"""The process inside the Python sandbox. Standard library only; started as a script with ``-I``.

Protocol: one JSON object per line. Requests come on the original stdin, answers go to the original
stdout; both are moved to private descriptors at start so user code sees /dev/null and its own
captured output. A reader thread takes requests; the main thread runs them, so an ``interrupt``
request can stop running code. Limits (rlimits, an interval timer for wall-clock time, dropped
privileges) are applied here before any user code runs.
"""

import ast
import errno
import io
import json
import linecache
import mmap
import os
import queue
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

MAIN_PID = os.getpid()
# address space held back while user code runs and given up as soon as it fails, so the child can
# still build its answer when user code ran out of memory (CPython 3.11 can spin forever on a
# MemoryError raised inside an exception handler)
RESERVE = 8 * 1024 * 1024


class LimitHit(BaseException):
    """Raised into user code when a limit is reached (BaseException: ``except Exception`` won't catch it)."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


ARMED = False  # True while user code runs: a late timer signal must not hit the child's own code


def _on_alarm(signum, frame):
    if ARMED:
        raise LimitHit("timeout", "the wall-clock limit was reached")


def _on_xcpu(signum, frame):
    if ARMED:
        raise LimitHit("cpu", "the CPU-time limit was reached")


def _set_limits(cfg):
    mb = 1024 * 1024
    if cfg.get("memory_mb"):
        resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_mb"] * mb, cfg["memory_mb"] * mb))
    if cfg.get("file_mb"):
        resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_mb"] * mb, cfg["file_mb"] * mb))
    if cfg.get("cpu_budget"):
        resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_budget"], cfg["cpu_budget"]))
    if cfg.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _drop_privileges(cfg):
    if cfg.get("uid") is None:
        return
    os.setgroups([])
    os.setgid(cfg["gid"])
    os.setuid(cfg["uid"])


def _reap_children():
    """Collect finished children (killed copies of a fork bomb stay zombies, and count as processes,
    until their parent waits for them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _confine(rules):
    """Permissions for untrusted code (generated tools), as an audit hook user code cannot remove:
    writes only inside the working directory, reads only there and in the interpreter's own
    folders, no network, no new programs. Code in C extensions that makes system calls itself
    is not covered; the process limits still are."""

    def roots(paths):
        return tuple(os.path.realpath(p) for p in paths if p)

    readable, writable = roots(rules["read"]), roots(rules["write"])
    network = rules.get("network", False)
    blocked_programs = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile")

    def inside(path, allowed):
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in allowed)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            path = os.fsdecode(path)
            writing = bool(mode and any(ch in mode for ch in "wax+")) or bool(
                (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)
            )
            if writing and not inside(path, writable):
                raise PermissionError("writing %s is not permitted (only inside the working directory)" % path)
            if not writing and not inside(path, readable):
                raise PermissionError("reading %s is not permitted (only the working directory)" % path)
        elif event.startswith("socket.") and event not in ("socket.__new__", "socket.gethostname") and not network:
            raise PermissionError("network access is not permitted (%s)" % event)
        elif event in blocked_programs:
            raise PermissionError("starting programs is not permitted (%s)" % event)

    sys.addaudithook(hook)


def _cpu_used():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Child:
    """The request loop."""

    def __init__(self, cfg, ctrl_in, ctrl_out):
        self.cfg = cfg
        self.ctrl_in = ctrl_in
        self.ctrl_out = ctrl_out
        self.namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        self.requests = queue.Queue()
        self.busy = threading.Event()
        self.current = None  # the id of the request running now
        self.started = 0  # the highest request id that has started
        self.cancelled = set()  # ids interrupted before they started
        self.guard = threading.Lock()
        self.reserve = None
        self.cells = 0
        self.iodir = tempfile.mkdtemp(prefix=".io-", dir=cfg["iodir"])

    # -- the reader thread -----------------------------------------------------------------
    def read_requests(self):
        for line in self.ctrl_in:
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if request.get("op") == "interrupt":
                self.interrupt(request.get("id"))
                continue
            self.requests.put(request)
        os._exit(0)  # the parent went away: nothing may outlive it, even code still running

    def interrupt(self, rid):
        """Stop request ``rid`` (the running one when None); one that has not started yet is
        remembered and answered as interrupted when its turn comes."""
        with self.guard:
            if self.busy.is_set() and (rid is None or rid == self.current):
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            elif rid is not None and rid > self.started:
                self.cancelled.add(rid)

    # -- answering -------------------------------------------------------------------------
    def answer(self, payload):
        if os.getpid() != MAIN_PID:  # a forked copy of user code must never speak
            os._exit(0)
        self.ctrl_out.write(json.dumps(payload, default=repr) + "\n")
        self.ctrl_out.flush()

    def serve(self):
        threading.Thread(target=self.read_requests, name="tea-sandbox-reader", daemon=True).start()
        self.answer({"ready": True, "pid": os.getpid(), "uid": os.getuid(), "python": sys.version.split()[0]})
        while True:
            request = self.requests.get()
            try:
                payload = self.run(request)
            except BaseException as exc:  # noqa: BLE001 - the loop itself must survive
                payload = {"error": {"type": type(exc).__name__, "message": str(exc), "traceback": ""}}
            payload["id"] = request.get("id")
            self.answer(payload)

    # -- running one request -----------------------------------------------------------------
    def run(self, request):
        global ARMED
        _reap_children()
        op = request.get("op")
        if op == "ping":
            return {"value": "pong"}
        if op == "reset":
            self.namespace = {"__name__": "__main__", "__builtins__": __builtins__}
            return {"value": "reset"}
        if op not in ("exec", "shell"):
            return {"error": {"type": "ValueError", "message": "unknown op %r" % op, "traceback": ""}}
        timeout = float(request.get("timeout") or self.cfg["timeout"])
        cpu = float(request.get("cpu") or self.cfg.get("cpu_seconds") or timeout)
        out_path = os.path.join(self.iodir, "out")
        err_path = os.path.join(self.iodir, "err")
        saved = os.dup(1), os.dup(2)
        out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        result = {"value": None, "error": None, "limit": None}
        started = time.perf_counter()
        used = _cpu_used()
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard != resource.RLIM_INFINITY and used + cpu >= hard:
            cpu = max(hard - used - 1, 1)
        resource.setrlimit(resource.RLIMIT_CPU, (int(used + cpu + 1), hard))
        try:
            self.reserve = mmap.mmap(-1, RESERVE)
        except (OSError, ValueError, MemoryError):
            self.reserve = None  # the memory is already taken: run without the spare
        ARMED = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        rid = request.get("id")
        try:
            try:
                with self.guard:
                    self.current = rid
                    if isinstance(rid, int):
                        self.started = max(self.started, rid)
                    self.busy.set()
                    stop = rid in self.cancelled
                    self.cancelled.discard(rid)
                if stop:
                    raise KeyboardInterrupt
                if op == "exec":
                    result["value"] = self.exec_code(request.get("code", ""))
                else:
                    result.update(self.shell(request.get("command", ""), timeout))
            except BaseException:
                self.reserve = None  # first give the spare back, then build the answer
                raise
        except LimitHit as exc:
            result["limit"] = exc.kind
            result["error"] = {"type": "LimitHit", "message": str(exc), "traceback": self.user_traceback(exc)}
        except MemoryError as exc:
            result["limit"] = "memory"
            result["error"] = {"type": type(exc).__name__, "message": str(exc), "traceback": self.user_traceback(exc)}
        except KeyboardInterrupt as exc:
            result["limit"] = "interrupted"
            result["error"] = {
                "type": "KeyboardInterrupt",
                "message": "interrupted",
                "traceback": self.user_traceback(exc),
            }
        except BaseException as exc:  # noqa: BLE001 - user code raises anything, SystemExit included
            result["error"] = {"type": type(exc).__name__, "message": str(exc), "traceback": self.user_traceback(exc)}
            if isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
                result["limit"] = "processes"
            elif isinstance(exc, OSError) and exc.errno == errno.EFBIG:
                result["limit"] = "file_size"
        finally:
            ARMED = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self.reserve = None
            with self.guard:
                self.busy.clear()
                self.current = None
            if os.getpid() != MAIN_PID:
                os._exit(0)
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        result["duration"] = time.perf_counter() - started
        result["stdout"], result["stdout_size"] = self.captured(out_path)
        result["stderr"], result["stderr_size"] = self.captured(err_path)
        return result

    def captured(self, path):
        limit = self.cfg["max_output"]
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as fh:
                data = fh.read(limit)
        except OSError:
            return "", 0
        return data.decode("utf-8", "replace"), size

    def exec_code(self, code):
        self.cells += 1
        filename = "<cell %d>" % self.cells
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(tree, filename, "exec"), self.namespace)
        if last is None:
            return None
        value = eval(compile(last, filename, "eval"), self.namespace)
        if value is None:
            return None
        self.namespace["_"] = value
        text = repr(value)
        limit = self.cfg["max_output"]
        return text if len(text) <= limit else text[:limit] + "… (%d characters in all)" % len(text)

    def shell(self, command, timeout):
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=1, stderr=2, start_new_session=False
        )
        try:
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return {"value": code, "exit_code": code}

    @staticmethod
    def user_traceback(exc):
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
        lines = traceback.format_list(frames) if frames else []
        lines += traceback.format_exception_only(type(exc), exc)
        return "".join(lines)


def main():
    cfg = json.loads(sys.argv[1])
    ctrl_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    ctrl_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0, closefd=False), encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0, closefd=False), encoding="utf-8", write_through=True)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGXCPU, _on_xcpu)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the file limit fail with EFBIG instead
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.chdir(cfg["workdir"])
    _set_limits(cfg)
    _drop_privileges(cfg)
    child = Child(cfg, ctrl_in, ctrl_out)
    if cfg.get("confine"):
        _confine(cfg["confine"])
    child.serve()


if __name__ == "__main__":
    main()
