"""The validation harness that runs inside the sandbox. Standard library only: its source is sent to
the sandbox worker and run there, never imported by tea_notebook.

The harness never imports the code under test. It forks a **tool process** that closes every
descriptor but its own call pipe, imports the generated module, reports what it found (TOOL_CONFIG,
the public functions, the signature) and then answers calls. The harness gives the tests a proxy for
the function that forwards each call to the tool process, so the tool cannot reach the report, the
control channel or the tests' state. The tests run several times against the same proxy:

- ``real``: results as the tool returns them;
- ``constant:<i>``: the proxy returns the i-th example's output for every call (a constant stub with
  the real signature, indistinguishable from the real thing to a test);
- ``mutant``: results of calls whose arguments are not one of the specification's examples are
  changed (an int + 1, a string + "~", a list one longer …): tests that still pass do not check
  any result beyond the examples.

The report is plain data (what happened in each mode); the host decides what it means.
"""

import builtins
import inspect
import json
import os
import select
import signal
import sys
import time
import traceback
import types

ENCODED = "__tea__"  # tag of values JSON cannot carry as they are


def encode(value, depth=0):
    """A JSON-safe form of a tool's argument or result (tuples, sets, bytes and non-string keys tagged)."""
    if depth > 50:
        raise TypeError("the value is nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return (
            value
            if value == value and value not in (float("inf"), float("-inf"))
            else {ENCODED: "float", "v": repr(value)}
        )
    if isinstance(value, list):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {ENCODED: "tuple", "v": [encode(v, depth + 1) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {ENCODED: "set", "v": [encode(v, depth + 1) for v in value]}
    if isinstance(value, bytes):
        return {ENCODED: "bytes", "v": value.hex()}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and ENCODED not in value:
            return {k: encode(v, depth + 1) for k, v in value.items()}
        return {ENCODED: "dict", "v": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    raise TypeError("a value of type %s cannot leave the tool process" % type(value).__name__)


def decode(value):
    """The inverse of :func:`encode`."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(ENCODED)
    if kind is None:
        return {k: decode(v) for k, v in value.items()}
    if kind == "float":
        return float(value["v"])
    if kind == "tuple":
        return tuple(decode(v) for v in value["v"])
    if kind == "set":
        return set(decode(v) for v in value["v"])
    if kind == "bytes":
        return bytes.fromhex(value["v"])
    if kind == "dict":
        return {_hashable(decode(k)): decode(v) for k, v in value["v"]}
    raise ValueError("unknown encoded value %r" % kind)


def _hashable(value):
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, set):
        return frozenset(value)
    return value


def mutate(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, bytes):
        return value + b"~"
    if isinstance(value, list):
        return value + ["~"]
    if isinstance(value, tuple):
        return value + ("~",)
    if isinstance(value, (set, frozenset)):
        return set(value) | {"~"}
    if isinstance(value, dict):
        changed = dict(value)
        changed["~"] = "~"
        return changed
    return "~"


# -- the tool process ------------------------------------------------------------------------------
def _send(fd, payload):
    data = (json.dumps(payload) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def tool_process(config, calls_in, answers_out):
    """Import the module under test, describe it, then answer calls until the pipe closes."""
    low, high = sorted((calls_in, answers_out))
    os.closerange(3, low)  # everything of the harness's: the worker's answer channel above all
    os.closerange(low + 1, high)
    os.closerange(high + 1, 1 << 16)
    info = {"ok": False}
    try:
        # what the tool prints goes to a file of its own in the check folder, for a person to read
        output = os.open("tool_output.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        sys.path.insert(0, ".")
        import importlib

        module = importlib.import_module(config["module"])
        cfg = getattr(module, "TOOL_CONFIG", None)
        public = [
            n
            for n, v in vars(module).items()
            if inspect.isfunction(v) and v.__module__ == module.__name__ and not n.startswith("_")
        ]
        info.update(public=public, has_config=isinstance(cfg, dict))
        fn = cfg.get("function") if isinstance(cfg, dict) else None
        if isinstance(cfg, dict):
            info.update(
                name=cfg.get("name"),
                function=getattr(fn, "__name__", None),
                callable=callable(fn),
                input_schema=encode(cfg.get("input_schema")) if isinstance(cfg.get("input_schema"), dict) else None,
                returns=encode(cfg.get("returns")) if isinstance(cfg.get("returns"), dict) else {},
                description=cfg.get("description") if isinstance(cfg.get("description"), str) else "",
            )
        if callable(fn):
            params = []
            for p in inspect.signature(fn).parameters.values():
                params.append([p.name, int(p.kind), p.default is not p.empty])
            info["parameters"] = params
            info["doc"] = fn.__doc__ or ""
        constants = {}
        for key, value in vars(module).items():
            if key.isupper() and key != "TOOL_CONFIG":
                try:
                    constants[key] = encode(value)
                except TypeError:
                    pass
        info["constants"] = constants
        info["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - the module's failure is the report
        info["error"] = _error(exc, config["module"])
        fn = None
    _send(answers_out, info)
    stream = os.fdopen(calls_in, "r", encoding="utf-8")
    for line in stream:
        try:
            call = json.loads(line)
            result = fn(*decode(call["args"]), **decode(call["kwargs"]))
            answer = {"value": encode(result)}
        except BaseException as exc:  # noqa: BLE001 - a tool's exception goes back to the test
            answer = {"raised": _raised(exc)}
        _send(answers_out, answer)
    os._exit(0)


def _raised(exc):
    """The exception as the harness re-raises it: the nearest built-in class in its MRO."""
    base = next((c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c), "Exception")
    if base in ("SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"):
        base = "RuntimeError"
    return {"type": type(exc).__name__, "base": base, "message": str(exc)}


def _error(exc, module):
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(module + ".py")]
    if frames:
        last = frames[-1]
        text += " (%s.py line %d: %s)" % (module, last.lineno, (last.line or "").strip())
    return text


# -- the harness -------------------------------------------------------------------------------------
class ToolProcess:
    """The forked tool process, seen from the harness."""

    def __init__(self, config):
        self.timeout = float(config["call_timeout"])
        calls_r, calls_w = os.pipe()
        answers_r, answers_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(calls_w)
            os.close(answers_r)
            tool_process(config, calls_r, answers_w)
        os.close(calls_r)
        os.close(answers_w)
        self.calls, self.answers, self.buffer, self.gone = calls_w, answers_r, b"", None
        self.info = self.read(float(config["import_timeout"])) or {
            "ok": False,
            "error": "importing the module failed: %s" % (self.gone or "no report"),
        }
        if "public" not in self.info and "error" not in self.info:  # the tool wrote onto its own pipe
            self.info = {"ok": False, "error": "the tool's process sent a malformed import report"}

    def read(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                self.gone = "the tool did not answer within %g s and was stopped" % timeout
                return None
            poller = select.poll()  # not select.select: a descriptor past 1023 is refused there
            poller.register(self.answers, select.POLLIN)
            if poller.poll(remaining * 1000):
                chunk = os.read(self.answers, 1 << 20)
                if not chunk:
                    self.kill()
                    self.gone = "the tool process exited"
                    return None
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None

    def call(self, args, kwargs):
        if self.pid is None:
            raise RuntimeError("the tool cannot be called: %s" % (self.gone or "its process is gone"))
        _send(self.calls, {"args": encode(list(args)), "kwargs": encode(kwargs)})
        answer = self.read(self.timeout)
        if answer is None:
            raise TimeoutError(self.gone or "the tool gave no answer")
        if "raised" in answer:
            raised = answer["raised"]
            kind = getattr(builtins, raised.get("base") or "", RuntimeError)
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                kind = RuntimeError
            raise kind(raised.get("message", ""))
        return decode(answer.get("value"))

    def kill(self):
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        self.pid = None


class Proxy:
    """What the tests call instead of the tool; its behaviour depends on the mode, its face does not."""

    def __init__(self, tool, examples, names):
        self.tool, self.mode, self.constant = tool, "real", None
        self.examples, self.names = examples, names
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.mode == "constant":
            return decode(encode(self.constant))
        value = self.tool.call(args, kwargs)
        if self.mode == "mutant" and not self.is_example(args, kwargs):
            return mutate(value)
        return value

    def is_example(self, args, kwargs):
        """True when the call's arguments, positional ones named, are one of the examples' inputs."""
        bound = dict(zip(self.names, args))
        bound.update(kwargs)
        return any(bound == ex for ex in self.examples)


def make_function(proxy, name, parameters, doc):
    """A plain function with the tool's name and signature that forwards to the proxy."""

    def function(*args, **kwargs):
        return proxy(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    params = []
    for pname, kind, has_default in parameters:
        default = None if has_default else inspect.Parameter.empty
        params.append(inspect.Parameter(pname, inspect._ParameterKind(kind), default=default))
    try:
        function.__signature__ = inspect.Signature(params)
    except (TypeError, ValueError):
        pass
    return function


def run_tests(config, fake):
    """Import the tests afresh (against the fake module) and run every test function."""
    for name in (config["module"], config["tests"]):
        sys.modules.pop(name, None)
    sys.modules[config["module"]] = fake
    results = []
    try:
        import importlib

        tests = importlib.import_module(config["tests"])
    except BaseException as exc:  # noqa: BLE001 - tests that cannot load are a result
        return [["(import of the tests)", False, _error(exc, config["tests"])]]
    names = [n for n in dir(tests) if n.startswith("test") and callable(getattr(tests, n))]
    for name in names:
        try:
            getattr(tests, name)()
            results.append([name, True, ""])
        except BaseException as exc:  # noqa: BLE001 - each test's failure is recorded
            results.append([name, False, _error(exc, config["tests"])])
    return results


def run(config):
    """Import the tool in its own process, try the examples, run the tests in each mode; the report."""
    sys.path.insert(0, ".")
    report = {"import": None, "examples": [], "modes": {}, "calls": 0}
    tool = ToolProcess(config)
    try:
        info = tool.info
        report["import"] = info
        if not info.get("ok") or not info.get("callable"):
            return report
        examples = [decode(e) for e in config["examples"]]
        names = [p[0] for p in info.get("parameters") or []]
        proxy = Proxy(tool, [e["input"] for e in examples], names)
        function = make_function(
            proxy, info.get("function") or config["module"], info.get("parameters") or [], info.get("doc") or ""
        )
        for ex in examples:
            try:
                got = proxy(**ex["input"])
                report["examples"].append({"got": encode(got), "raised": None})
            except BaseException as exc:  # noqa: BLE001
                report["examples"].append({"got": None, "raised": _error(exc, config["module"])})
        fake = types.ModuleType(config["module"])
        fake.__dict__.update({k: decode(v) for k, v in (info.get("constants") or {}).items()})
        setattr(fake, info.get("function") or config["module"], function)
        fake.TOOL_CONFIG = {
            "name": info.get("name"),
            "description": info.get("description"),
            "function": function,
            "input_schema": decode(info.get("input_schema")),
            "returns": decode(info.get("returns")),
        }
        modes = [("real", None)] + [("constant", c) for c in config["constants"]]
        if config.get("mutant"):
            modes.append(("mutant", None))
        for mode, constant in modes:
            proxy.mode, proxy.constant = mode, decode(constant)
            key = mode if mode != "constant" else "constant:%s" % json.dumps(constant)
            report["modes"][key] = run_tests(config, fake)
        report["calls"] = proxy.calls
    finally:
        tool.kill()
    return report
