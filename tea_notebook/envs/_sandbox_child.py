"""The processes inside the Python sandbox. Standard library only; started as a script with ``-I``.

Two processes: the **supervisor** owns the control channel to the host (the original stdin and
stdout) and never runs user code; the **worker**, forked from it before anything else happens, runs
the requests. The worker reads its requests from a pipe only the host writes to (the read end is
all the sandbox gets of it) and writes its answers to the supervisor; it holds nothing of the
control channel, so user code cannot write onto it: the supervisor forwards exactly one well-formed
answer per request the host said it sent (an ``expect`` line on the control channel, written before
the request), drops everything else the worker writes, and reports the worker's death itself. The
supervisor is not dumpable, so the worker (same uid) cannot read or write its memory either.

Worker protocol: one JSON object per line. The main thread reads the requests and runs them; the
supervisor passes ``interrupt`` requests on a second pipe, read by a thread of the worker, so they
can stop running code. Limits (rlimits, an interval timer for wall-clock time, dropped privileges
in the fallback) are applied before any user code runs.
"""

import ast
import errno
import io
import json
import linecache
import mmap
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback

MAIN_PID = None  # the worker's pid (set after the fork)
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


def _on_interrupt(signum, frame):
    """SIGINT, sent by the interrupt thread: stops user code, and nothing else (ignored between calls)."""
    if ARMED:
        raise KeyboardInterrupt


try:  # the C function: signal.getsignal's enum conversion costs microseconds on every call
    from _signal import getsignal as _handler_of
except ImportError:  # an interpreter without it
    _handler_of = signal.getsignal


def _own_sigint():
    """Put :func:`_on_interrupt` back when user code installed a SIGINT handler of its own."""
    if _handler_of(signal.SIGINT) is not _on_interrupt:
        signal.signal(signal.SIGINT, _on_interrupt)


_ENCODE = json.JSONEncoder(default=repr).encode  # what json.dumps(payload, default=repr) builds per call


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
    """Permissions for untrusted code (generated tools under validation), as an audit hook user code
    cannot remove: writes, removals and renames only inside the working directory, reads only there
    and in the interpreter's own folders, no network, no new programs, no ctypes or cffi. A tripwire
    that names what was tried; the boundary itself is the sandbox (C code makes system calls the
    hook never sees)."""

    def roots(paths):
        return tuple(os.path.realpath(p) for p in paths if p)

    readable, writable = roots(rules["read"]), roots(rules["write"])
    network = rules.get("network", False)
    blocked_programs = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile")
    blocked_modules = ("ctypes", "_ctypes", "cffi", "_cffi_backend")
    # audit events whose first argument(s) are paths that get changed
    changing = {
        "os.remove": 1,
        "os.rmdir": 1,
        "os.rename": 2,
        "os.link": 2,
        "os.symlink": 2,
        "os.mkdir": 1,
        "os.chmod": 1,
        "os.chown": 1,
        "os.truncate": 1,
        "os.utime": 1,
        "shutil.rmtree": 1,
        "os.chflags": 1,
        "os.lchflags": 1,
        "os.setxattr": 1,
        "os.removexattr": 1,
    }
    listing = ("os.listdir", "os.scandir")

    def inside(path, allowed):
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in allowed)

    def path_of(value):
        if value is None or isinstance(value, int):
            return None
        return os.fsdecode(value)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            path = path_of(path)
            if path is None:
                return
            writing = bool(mode and any(ch in mode for ch in "wax+")) or bool(
                (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)
            )
            if writing and not inside(path, writable):
                raise PermissionError("writing %s is not permitted (only inside the working directory)" % path)
            if not writing and not inside(path, readable):
                raise PermissionError("reading %s is not permitted (only the working directory)" % path)
        elif event in changing:
            for value in args[: changing[event]]:
                path = path_of(value)
                if path is not None and not inside(path, writable):
                    raise PermissionError(
                        "%s on %s is not permitted (only inside the working directory)" % (event, path)
                    )
        elif event in listing:
            path = path_of(args[0]) if args else None
            if path is not None and not inside(path, readable):
                raise PermissionError("listing %s is not permitted (only the working directory)" % path)
        elif event.startswith("socket.") and event not in ("socket.__new__", "socket.gethostname") and not network:
            raise PermissionError("network access is not permitted (%s)" % event)
        elif event in blocked_programs:
            raise PermissionError("starting programs is not permitted (%s)" % event)
        elif event == "import" and args and args[0] in blocked_modules:
            raise PermissionError("loading native code through %s is not permitted" % args[0])
        elif event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata"):
            raise PermissionError("loading native code is not permitted (%s)" % event)

    sys.addaudithook(hook)


def _cpu_used():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Child:
    """The request loop."""

    def __init__(self, cfg, ctrl_in, ctrl_out, interrupts=None):
        self.cfg = cfg
        self.ctrl_in = ctrl_in
        self.ctrl_out = ctrl_out
        self.interrupts = interrupts
        self.namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        self.busy = threading.Event()
        self.current = None  # the id of the request running now
        self.started = 0  # the highest request id that has started
        self.cancelled = set()  # ids interrupted before they started
        self.guard = threading.Lock()
        self.reserve = None
        self.cells = 0
        self.tools = {}  # generated tools loaded in this session: source hash -> module namespace
        self.iodir = tempfile.mkdtemp(prefix=".io-", dir=cfg["iodir"])

    # -- the interrupt thread --------------------------------------------------------------
    def read_interrupts(self):
        """Interrupts come on a channel of their own, read by this thread while the main thread runs
        code (the main thread reads the requests itself: no hand-over between threads per call)."""
        for line in self.interrupts:
            request = _message(line)
            if request is not None and request.get("op") == "interrupt":
                self.interrupt(request.get("id"))
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
        # a leading newline too: a partial line user code left on the pipe cannot swallow the answer
        self.ctrl_out.write("\n" + _ENCODE(payload) + "\n")
        self.ctrl_out.flush()

    def serve(self):
        """Answer requests one after the other until the supervisor goes away."""
        if self.interrupts is not None:
            threading.Thread(target=self.read_interrupts, name="tea-sandbox-interrupts", daemon=True).start()
        self.answer({"ready": True, "pid": os.getpid(), "uid": os.getuid(), "python": sys.version.split()[0]})
        for line in self.ctrl_in:
            request = _message(line)
            if request is None:
                continue
            try:
                payload = self.run(request)
            except BaseException as exc:  # noqa: BLE001 - the loop itself must survive
                payload = {"error": {"type": type(exc).__name__, "message": str(exc), "traceback": ""}}
            payload["id"] = request.get("id")
            self.answer(payload)
        os._exit(0)  # the parent went away

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
        if op not in ("exec", "shell", "call"):
            return {"error": {"type": "ValueError", "message": "unknown op %r" % op, "traceback": ""}}
        timeout = float(request.get("timeout") or self.cfg["timeout"])
        cpu = float(request.get("cpu") or self.cfg.get("cpu_seconds") or timeout)
        used = _cpu_used()
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard != resource.RLIM_INFINITY and used + cpu >= hard:
            cpu = max(hard - used - 1, 1)
        if int(used + cpu + 1) != soft:  # whole seconds: most calls leave it as it is
            resource.setrlimit(resource.RLIMIT_CPU, (int(used + cpu + 1), hard))
        saved = os.dup(1), os.dup(2)
        captures = [self.capture_file(name) for name in ("out", "err")]
        os.dup2(captures[0][0], 1)
        os.dup2(captures[1][0], 2)
        result = {"value": None, "error": None, "limit": None}
        started = time.perf_counter()
        try:
            self.reserve = mmap.mmap(-1, RESERVE)
        except (OSError, ValueError, MemoryError):
            self.reserve = None  # the memory is already taken: run without the spare
        _own_sigint()
        ARMED = True
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
                elif op == "call":
                    result["value"] = self.call_tool(request)
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
            _own_sigint()  # a handler user code left must not run in the worker's own code
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
        result["stdout"], result["stdout_size"] = self.captured(*captures[0])
        result["stderr"], result["stderr_size"] = self.captured(*captures[1])
        return result

    def capture_file(self, name):
        """A fresh, empty file of the run folder for one stream of a call: (descriptor, identity, path)."""
        path = os.path.join(self.iodir, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        info = os.fstat(fd)
        return fd, (info.st_dev, info.st_ino), path

    def captured(self, fd, identity, path):
        """What a call wrote to one stream (its first ``max_output`` bytes) and its size, read through
        the descriptor opened for it; by path when user code closed that descriptor (its number may
        now be a file of user code's, which is left alone)."""
        limit = self.cfg["max_output"]
        try:
            info = os.fstat(fd)
            ours = (info.st_dev, info.st_ino) == identity
        except OSError:
            ours = False
        try:
            if not ours:
                size = os.path.getsize(path)
                with open(path, "rb") as fh:
                    data = fh.read(limit)
            else:
                size = info.st_size
                data = os.pread(fd, min(size, limit), 0) if size else b""
        except OSError:
            return "", 0
        finally:
            if ours:
                os.close(fd)
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

    def call_tool(self, request):
        """Call a registered generated tool: its module source is loaded once per session (keyed by
        its hash), then ``function(**args)``; the result as JSON text (its repr when JSON cannot
        carry it)."""
        key = request["hash"]
        namespace = self.tools.get(key)
        if namespace is None:
            namespace = {"__name__": "tea_tools." + request["name"], "__builtins__": __builtins__}
            code = compile(request["source"], "<tool %s>" % request["name"], "exec", dont_inherit=True)
            exec(code, namespace)
            self.tools[key] = namespace
        function = namespace.get(request["function"])
        if not callable(function):
            raise NameError("the tool's source defines no function %r" % request["function"])
        value = function(**request.get("args", {}))
        if hasattr(value, "__await__"):
            import asyncio

            value = asyncio.new_event_loop().run_until_complete(value)
        try:
            text = json.dumps({"json": value})
        except (TypeError, ValueError):
            text = json.dumps({"repr": repr(value)})
        limit = 4 * self.cfg["max_output"]
        if len(text) > limit:  # the supervisor drops longer lines: send the start and say so
            text = json.dumps({"clipped": text[:limit], "size": len(text)})
        return text

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


def _message(line):
    """The JSON object on one line, or None: an empty framing line, or what user code wrote."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _close_other_fds(keep):
    """Close every descriptor above 2 but ``keep`` (the host channel must not reach the worker)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def worker(cfg, requests_fd, answers_fd, interrupts_fd):
    """The process that runs user code; it talks only to the supervisor."""
    global MAIN_PID
    MAIN_PID = os.getpid()
    _close_other_fds({requests_fd, answers_fd, interrupts_fd})
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    ctrl_in = os.fdopen(requests_fd, "r", encoding="utf-8")
    ctrl_out = os.fdopen(answers_fd, "w", encoding="utf-8")
    interrupts = os.fdopen(interrupts_fd, "r", encoding="utf-8")
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0, closefd=False), encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0, closefd=False), encoding="utf-8", write_through=True)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGXCPU, _on_xcpu)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the file limit fail with EFBIG instead
    signal.signal(signal.SIGINT, _on_interrupt)
    os.chdir(cfg["workdir"])
    _set_limits(cfg)
    _drop_privileges(cfg)
    child = Child(cfg, ctrl_in, ctrl_out, interrupts)
    if cfg.get("confine"):
        _confine(cfg["confine"])
    child.serve()


class Supervisor:
    """Relays between the host (stdin/stdout) and the worker: notes the requests the host says it
    sent, passes interrupts on, and of what the worker writes forwards only one well-formed answer
    per outstanding request."""

    def __init__(self, cfg, worker_pid, from_worker, interrupts):
        self.worker_pid = worker_pid
        self.from_worker = from_worker
        self.host_buffer = b""
        self.interrupts = interrupts  # the worker's interrupt channel (its thread reads it while code runs)
        self.host_out = 1
        self.outstanding = set()
        self.ready_sent = False
        self.lock = threading.Lock()
        self.quota = cfg.get("quota")
        self.device = None  # the run folder's filesystem, for files deleted but held open
        # the longest answer a worker can legitimately send (output and value at their limits, escaped)
        self.max_line = 16 * int(cfg.get("max_output") or 20000) + (1 << 20)

    def send_host(self, payload):
        self.send_line((json.dumps(payload) + "\n").encode())

    def send_line(self, data):
        """Write one whole line to the host (threads share the channel: never interleaved)."""
        with self.lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self.host_out, view) :]

    def read_host(self):
        """Take what the host wrote: ``expect`` lines (the id of a request it wrote straight to the
        worker) and ``interrupt`` lines (passed on to the worker's interrupt channel); host EOF ends
        the sandbox."""
        try:
            chunk = os.read(0, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self.stop()
        self.host_buffer += chunk
        while b"\n" in self.host_buffer:
            line, _, self.host_buffer = self.host_buffer.partition(b"\n")
            request = _message(line)
            if request is None:
                continue
            if request.get("op") == "expect":
                with self.lock:
                    self.outstanding.add(request.get("id"))
            elif request.get("op") == "interrupt":
                try:  # the host's own bytes, checked to be one JSON object: passed on as they are
                    os.write(self.interrupts, b"\n" + line.rstrip(b"\r") + b"\n")
                except OSError:
                    self.stop()

    def drain_host(self):
        """Take every host line already written (without waiting). The host writes a request's
        ``expect`` line before the request itself, so once its answer is here, so is that line."""
        while select.select([0], [], [], 0)[0]:
            self.read_host()

    def relay(self):
        """Both directions in one thread: the host's lines, and the worker's answers (passed on
        when they answer a request the host said it sent). A request goes from the host straight
        to the worker, so a call crosses one process less on its way in."""
        watched = [0, self.from_worker]
        answers, skipping = b"", False
        while True:
            ready, _, _ = select.select(watched, [], [])
            if 0 in ready:
                self.read_host()
            if self.from_worker not in ready:
                continue
            try:
                chunk = os.read(self.from_worker, 65536)
            except OSError:
                chunk = b""
            if not chunk:  # the worker is gone (wait_worker reports it): keep serving the host
                watched = [0]
                continue
            answers += chunk
            while b"\n" in answers:
                line, _, answers = answers.partition(b"\n")
                if not skipping:
                    self.accept(line)
                skipping = False
            if len(answers) > self.max_line:
                answers, skipping = b"", True

    def stop(self):
        try:
            os.kill(self.worker_pid, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)

    def accept(self, line):
        """Forward one worker line when it is the answer the host is waiting for."""
        answer = _message(line)
        if answer is None:
            return
        if answer.get("ready") and not self.ready_sent:
            self.ready_sent = True
            answer["supervisor"] = os.getpid()
            self.send_host(answer)
            return
        rid = answer.get("id")
        if type(rid) is not int:  # the host numbers its requests: anything else is user code's
            return
        if rid not in self.outstanding:
            self.drain_host()  # its expect line may be written and not read yet
        with self.lock:
            if rid not in self.outstanding:
                return  # not a request the host sent, or already answered: user code wrote it
            self.outstanding.discard(rid)
        # what the supervisor says, not the worker: an answer carrying such a field is re-encoded
        # without it; any other is passed on byte for byte (the host parses it as json.loads did here)
        changed = "died" in answer or "disk" in answer
        answer.pop("died", None)
        answer.pop("disk", None)
        if self.quota:  # a burst faster than the watch: the call that wrote it says so
            used, entries = folder_usage(self.quota["root"], self.quota["entries"])
            if used > self.quota["bytes"] or entries > self.quota["entries"]:
                answer["disk"] = [used, entries]
                changed = True
        if changed:
            self.send_host(answer)
        else:
            self.send_line(bytes(line) + b"\n")
        if self.quota and "disk" not in answer:
            # files deleted but held open, which no listing shows (so the host could not refuse the
            # next call for them): counted right after the answer left, off the call's path; past
            # the quota they stop everything, as the watch does, and the next call says so
            if self.device is None:
                self.device = os.stat(self.quota["root"]).st_dev
            hidden = _held_deleted(self.device)
            if hidden and used + hidden > self.quota["bytes"]:
                self.stop_at_quota(used + hidden, entries)

    def wait_worker(self):
        """Reap every child (as the sandbox's pid 1, orphans come here too); report the worker's
        death (with its signal) once its last answer has been relayed."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return
            if pid == self.worker_pid:
                break
        time.sleep(0.05)
        died = {
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        }
        self.send_host({"id": None, "died": died})
        os._exit(0)

    def run(self):
        _not_dumpable()
        threading.Thread(target=self.relay, name="tea-relay", daemon=True).start()
        if self.quota:
            threading.Thread(target=self.watch_quota, name="tea-quota", daemon=True).start()
        self.wait_worker()

    def watch_quota(self):
        """Between calls too (a background thread of user code keeps running): when the run folder
        (files deleted but held open included) passes its quota, stop everything user code runs —
        as the sandbox's pid 1, every other process in it — and report it."""
        while True:
            time.sleep(self.quota["interval"])
            used, entries = _usage(self.quota["root"], self.quota["entries"])
            if used > self.quota["bytes"] or entries > self.quota["entries"]:
                self.stop_at_quota(used, entries)

    def stop_at_quota(self, used, entries):
        """Report the run folder over its quota, kill every process user code runs, and end."""
        self.send_host({"id": None, "died": {"signal": signal.SIGKILL, "disk": [used, entries]}})
        try:
            os.kill(-1 if os.getpid() == 1 else self.worker_pid, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)


def folder_usage(root, limit, dir_fd=None):
    """Bytes and entries under ``root`` (relative to the folder descriptor ``dir_fd`` when given),
    walked by folder descriptors (nesting past PATH_MAX is counted) without following symlinks; the
    walk stops once it has seen more than ``limit`` entries. A tree nested deeper than this process
    can hold descriptors for is reported as ``limit + 1`` entries (over quota), never undercounted.
    The host uses it too (imported; this module has no side effects).

    One ``scandir`` per folder and one ``fstatat`` per entry, iteratively: it runs after every call
    (the supervisor's check), so it costs a few dozen microseconds for a small run folder."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        top = os.open(root, flags, dir_fd=dir_fd)
    except OSError as exc:
        return (0, limit + 1) if exc.errno in (errno.EMFILE, errno.ENFILE) else (0, 0)
    # depth first; a frame is a folder's descriptor and its subfolders still to enter, so only one
    # descriptor per level of nesting is open at a time
    total, entries = 0, 0
    frames = [(top, [])]
    try:
        total, entries, folders = _scan(top)
        frames[0] = (top, folders)
        while frames and entries <= limit:
            fd, folders = frames[-1]
            if not folders:
                os.close(fd)
                frames.pop()
                continue
            try:
                child = os.open(folders.pop(), flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    raise
                continue  # gone, or replaced by a symlink, since it was listed
            frames.append((child, []))
            size, count, subfolders = _scan(child)
            frames[-1] = (child, subfolders)
            total += size
            entries += count
    except OSError:  # out of descriptors: too deep to walk, so over quota rather than uncounted
        return total, max(entries, limit + 1)
    finally:
        for fd, _ in frames:
            os.close(fd)
    return total, entries


def _scan(fd):
    """(bytes, entries, subfolder names) of the folder open as ``fd``, links not followed."""
    size, count, folders = 0, 0, []
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                count += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                size += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    folders.append(entry.name)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            raise
    return size, count, folders


def _usage(root, limit):
    """:func:`folder_usage`, plus files deleted but still held open by processes of this sandbox on
    the same filesystem (a listing cannot see them)."""
    total, entries = folder_usage(root, limit)
    return total + _held_deleted(os.stat(root).st_dev), entries


def _held_deleted(device):
    """Bytes of files on ``device`` deleted but still held open by processes of this sandbox (0
    outside a pid namespace of our own, where not every process is the sandbox's)."""
    if os.getpid() != 1:
        return 0
    total, seen = 0, set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == "1":  # the supervisor itself opens no file of the run folder
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                info = os.stat("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            if info.st_nlink == 0 and info.st_dev == device and info.st_ino not in seen:
                seen.add(info.st_ino)
                total += info.st_blocks * 512
    return total


def _not_dumpable():
    """PR_SET_DUMPABLE 0: a process of the same uid (the worker) cannot trace it or open its memory."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        pass


def main():
    cfg = json.loads(sys.argv[1])
    requests = cfg["requests_fd"]  # the read end of the host's request pipe, for the worker alone
    interrupts_r, interrupts_w = os.pipe()
    from_worker_r, from_worker_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        worker(cfg, requests, from_worker_w, interrupts_r)
        os._exit(0)
    os.close(requests)
    os.close(interrupts_r)
    os.close(from_worker_w)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the quota walk holds one descriptor per level of nesting of the run folder
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            pass
    if cfg.get("egress"):
        _start_egress_bridge(cfg["egress"])
    Supervisor(cfg, pid, from_worker_r, interrupts_w).run()


def _start_egress_bridge(egress):
    """The sandbox's only way out: a loopback port (in its own network namespace) forwarded to the
    host's egress proxy socket, served by the supervisor (tea_notebook/egress/bridge.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tea_egress_bridge", egress["bridge"])
    bridge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bridge)
    bridge.start_bridge(egress["socket"], int(egress["port"]))


if __name__ == "__main__":
    main()
