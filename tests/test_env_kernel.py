"""The ``kernel`` environment: the notebook namespace as an environment. Fast paths run on a plain
``namespace=`` dict; one test drives a REAL ipykernel (jupyter_client) where the environment picks up
the kernel's own ``user_ns`` and an agent granted ``kernel.write`` changes the user's data."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from tea_notebook.envs.base import EnvironmentFailure
from tea_notebook.envs.kernel import KernelEnvironment, describe
from tea_notebook.protocol.context import Context


class FakeFrame:
    """Quacks like a pandas DataFrame (pandas is not a test dependency)."""

    shape = (40, 2)
    columns = ["city", "temp"]

    def __init__(self):
        self.heads: list[int] = []

    def head(self, n: int) -> "FakeFrame":
        self.heads.append(n)
        return self

    def to_string(self) -> str:
        return "   city  temp\n0  Oslo   3.5\n1  Rome  18.0"

    @property
    def dtypes(self) -> Any:
        return types.SimpleNamespace(to_string=lambda: "city     object\ntemp    float64")


def granted() -> Context:
    ctx = Context()
    ctx.grants.add("kernel.write")
    return ctx


def reading() -> Context:
    """A context granted kernel.read only: values can be read, nothing changed."""
    ctx = Context()
    ctx.grants.add("kernel.read")
    return ctx


def started(ns: dict[str, Any], context: Context | None = None, **config: Any) -> KernelEnvironment:
    env = KernelEnvironment(Path("unused"), context, namespace=ns, **config)
    asyncio.run(env.start())
    return env


def run(env: KernelEnvironment, code: str) -> str:
    return asyncio.run(env.call("run", {"code": code}))


def run_failing(env: KernelEnvironment, code: str) -> str:
    """Code that raises makes the action fail (the run's status sees it); the message is the output."""
    with pytest.raises(EnvironmentFailure) as info:
        run(env, code)
    return str(info.value)


@pytest.fixture
def ns() -> dict[str, Any]:
    import numpy as np

    return {
        "scores": [3, 1, 2],
        "config": {"mode": "draft", "retries": 2},
        "grid": np.arange(6).reshape(2, 3),
        "frame": FakeFrame(),
        "title": "Quarterly report",
        "count": 7,
        "np": np,  # a module: not a variable
        "_private": 1,
        "__builtins__": __builtins__,
        "In": ["", "x = 1"],  # IPython's history and helpers
        "Out": {},
        "exit": object(),
        "get_ipython": lambda: None,
        "helper": lambda x: x,
        "Point": type("Point", (), {}),
    }


# -- construction --------------------------------------------------------------------------------
def test_init_has_no_side_effects_and_needs_a_kernel_or_namespace(monkeypatch):
    env = KernelEnvironment(Path("unused"))
    assert env.namespace is None and env.writes == []
    assert env.state() == "kernel: not attached"
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # plain Python: IPython never imported
    with pytest.raises(EnvironmentFailure, match="needs a running IPython kernel .* or a namespace"):
        asyncio.run(env.start())
    # IPython imported but no shell running: the same clear failure
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    with pytest.raises(EnvironmentFailure, match="ws.envs.add\\(KernelEnvironment, namespace=globals\\(\\)\\)"):
        asyncio.run(env.start())
    assert KernelEnvironment.scope == "run"
    specs = {a.name: a for a in KernelEnvironment.actions()}
    assert list(specs) == ["variables", "read", "write", "run"]
    assert specs["write"].parameters["required"] == ["name", "value_json"]
    assert "JSON" in specs["write"].parameters["properties"]["value_json"]["description"]
    assert specs["run"].parameters["properties"]["code"]["type"] == "string"


def test_start_picks_up_the_running_shells_namespace(monkeypatch):
    history = ["", "x = 1"]
    user_ns = {"In": history, "exit": object(), "x": 1, "_": None}
    shell = types.SimpleNamespace(user_ns=user_ns, user_ns_hidden={"In": history, "exit": user_ns["exit"]})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    env = KernelEnvironment(Path("unused"))
    asyncio.run(env.start())
    assert env.namespace is user_ns
    # no grant: names and types, no values
    assert env.variables() == "1 variable:\nx: int\n(names and types only: values need the kernel.read grant)"
    user_ns["In"] = [1, 2]  # the user rebinds a hidden name: now it is theirs
    assert "In: list, len 2" in env.variables().splitlines()
    asyncio.run(env.reset())
    assert env.namespace is user_ns


# -- reading --------------------------------------------------------------------------------------
def test_variables_lists_user_data_with_shapes(ns):
    env = started(ns, reading())
    lines = env.variables().splitlines()
    assert lines == [
        "6 variables:",
        "config: dict, len 2 = {'mode': 'draft', 'retries': 2}",
        "count: int = 7",
        "frame: FakeFrame, shape (40, 2), columns ['city', 'temp']",
        "grid: ndarray, shape (2, 3), dtype int64",
        "scores: list, len 3 = [3, 1, 2]",
        "title: str, len 16 = 'Quarterly report'",
        "functions and classes: Point, helper",
    ]
    # a user value that reuses a hidden IPython name is still the user's
    env._hidden = {"exit": ns["exit"], "data": "ipython's"}
    ns["data"] = [1]
    assert "data: list, len 1 = [1]" in env.variables()
    assert "exit" not in env.variables()


def test_variables_and_state_are_bounded(ns):
    ns.update({f"v{i:03d}": list(range(1000)) for i in range(300)})
    env = started(ns, reading())
    listing = env.variables().splitlines()
    assert listing[0] == "306 variables:"
    assert len("\n".join(listing)) < env.max_chars + 200
    assert any(line.startswith("… ") and "more (read one by name)" in line for line in listing)
    assert "[0, 1, 2, 3, 4, ...]" in listing[1] or "[0, 1, 2, 3, 4, ...]" in listing[-3]
    state = env.state()
    assert len(state) < env.max_state_chars + 300
    assert state.endswith("writes this run: 0 (read-only (kernel.read granted, no kernel.write grant))")


def test_describe_duck_types_without_importing_pandas():
    assert describe([1, 2]) == "list, len 2"
    assert describe(types.SimpleNamespace(shape=(5,), dtype="int8")) == "SimpleNamespace, shape (5,), dtype int8"
    assert describe(3.5) == "float"
    assert describe(dict) == "class"

    class Raises:
        @property
        def shape(self):
            raise RuntimeError("lazy")

    assert describe(Raises()) == "Raises"
    source = Path(sys.modules["tea_notebook.envs.kernel"].__file__).read_text()
    assert "import pandas" not in source and "import numpy" not in source


def test_read_summaries(ns):
    env = started(ns, reading(), max_chars=300)
    assert env.read("scores") == "scores: list, len 3\n[3, 1, 2]"
    assert env.read("grid") == "grid: ndarray, shape (2, 3), dtype int64\narray([[0, 1, 2],\n       [3, 4, 5]])"
    frame = env.read("frame")
    assert frame.startswith("frame: FakeFrame, shape (40, 2), columns ['city', 'temp']\n   city  temp\n0  Oslo")
    assert "dtypes:\ncity     object" in frame and frame.endswith("(first 20 of 40 rows)")
    assert ns["frame"].heads == [20]
    assert env.read("frame.columns") == "frame.columns: list, len 2\n['city', 'temp']"
    assert env.read("config").endswith("{'mode': 'draft', 'retries': 2}")
    ns["essay"] = "word " * 200
    essay = env.read("essay")
    assert essay.startswith("essay: str, len 1000\nword word")
    assert essay.endswith("(first 300 of 1000 characters)")
    ns["big"] = list(range(10_000))
    assert len(env.read("big")) < 400
    with pytest.raises(EnvironmentFailure, match=r"no variable 'nope' in the notebook \(variables: .*scores"):
        env.read("nope")
    with pytest.raises(EnvironmentFailure, match="only public attribute names"):
        env.read("frame.__class__")
    with pytest.raises(EnvironmentFailure, match="frame has no attribute 'missing'"):
        env.read("frame.missing")


# -- writing needs the grant -----------------------------------------------------------------------
@pytest.mark.parametrize("context", [None, Context()], ids=["no context", "no grant"])
def test_write_and_run_are_refused_without_the_grant(ns, context):
    before = dict(ns)
    scores = list(ns["scores"])
    env = started(ns, context)
    with pytest.raises(EnvironmentFailure) as info:
        env.write("scores", [])
    message = str(info.value)
    assert "kernel.write refused" in message
    assert "`%%agent --grant kernel.write`" in message and 'grants=["kernel.write"]' in message
    with pytest.raises(EnvironmentFailure, match="kernel.run refused"):
        run(env, "scores.clear()\nhacked = True")
    assert ns == before and ns["scores"] == scores and "hacked" not in ns
    assert env.writes == []
    # without kernel.read, values stay in the notebook: names and types only
    with pytest.raises(EnvironmentFailure, match="kernel.read refused.*--grant kernel.read"):
        env.read("scores")
    assert "[3, 1, 2]" not in env.variables() and "scores: list, len 3" in env.variables()
    assert "names and types only" in env.state() and "[3, 1, 2]" not in env.state()


def test_write_with_the_grant(ns):
    env = started(ns, granted())
    assert env.write("threshold", 2) == "set threshold = 2 (int) (new variable)"
    assert ns["threshold"] == 2
    out = env.write("config", {"mode": "final", "tags": ["a"]})
    assert out == "set config = {'mode': 'final', 'tags': ['a']} (dict, len 2); it was dict, len 2"
    assert ns["config"] == {"mode": "final", "tags": ["a"]}
    env.write("label", "[1, 2]")  # a JSON string stays a string
    assert ns["label"] == "[1, 2]"
    for bad, why in (("2x", "not a valid Python variable name"), ("class", "not a valid"), ("_x", "belong to IPython")):
        with pytest.raises(EnvironmentFailure, match=why):
            env.write(bad, 1)
    assert [w["name"] for w in env.writes] == ["threshold", "config", "label"]
    assert env.writes[1]["replaced"] == "dict, len 2"
    assert "writes this run: 3 (write granted)" in env.state()


def test_run_with_the_grant(ns):
    env = started(ns, granted())
    out = run(env, "scores.sort()\nprint('sorted', scores)\nimport sys\nprint('careful', file=sys.stderr)\nlen(scores)")
    assert out == "stdout:\nsorted [1, 2, 3]\nstderr:\ncareful\nvalue: 3"
    assert ns["scores"] == [1, 2, 3] and "sys" in ns
    assert run(env, "total = sum(scores)\nmean = total / len(scores)") == "variables set: mean, total"
    assert (ns["total"], ns["mean"]) == (6, 2.0)
    assert run(env, "del count") == "variables deleted: count"
    assert run(env, "grid * 2").startswith("value: array([[ 0,  2,  4],")
    assert run(env, "None") == "ran without output"
    assert run(env, "") == "ran without output"
    failed = run_failing(env, "print('before')\nscores.append(9)\nraise ValueError('bad data')")
    assert failed.startswith("stdout:\nbefore\nerror:\nTraceback (most recent call last):")
    assert 'File "<kernel-run-' in failed and "raise ValueError('bad data')" in failed
    assert failed.rstrip().endswith("ValueError: bad data")
    assert "_execute" not in failed  # the traceback starts at the agent's code
    assert ns["scores"] == [1, 2, 3, 9]  # what ran before the error stays done, as in a cell
    syntax = run_failing(env, "def broken(:")
    assert syntax.startswith("error:") and "SyntaxError" in syntax
    assert "SystemExit: 3" in run_failing(env, "raise SystemExit(3)")
    # an observation, not a crash
    assert run_failing(env, "raise KeyboardInterrupt").rstrip().endswith("KeyboardInterrupt")
    assert [w["action"] for w in env.writes] == ["run"] * 10
    assert env.writes[1]["changed"] == ["mean", "total"] and env.writes[2]["removed"] == ["count"]
    assert [w["ok"] for w in env.writes][-3:] == [False, False, False]
    assert sys.stdout.__class__.__name__ != "_ThreadRouted"  # restored


def test_run_output_capture_is_per_thread(ns):
    """While agent code prints, another thread's output (the kernel's own) is not captured."""
    import io

    env = started(ns, granted())
    ns["gate"], ns["go"] = threading.Event(), threading.Event()
    real, seen = sys.stdout, io.StringIO()
    sys.stdout = seen
    try:

        def other() -> None:
            ns["gate"].wait(5)
            print("from the kernel thread")
            ns["go"].set()

        t = threading.Thread(target=other)
        t.start()
        out = run(env, "print('from the agent')\ngate.set()\ngo.wait(5)\nprint('again')")
        t.join(5)
    finally:
        sys.stdout = real
    assert out.startswith("stdout:\nfrom the agent\nagain")
    assert seen.getvalue() == "from the kernel thread\n"


def test_run_that_times_out_is_interrupted(ns):
    env = started(ns, granted())
    ns["ticks"] = [0]

    async def attempt() -> None:
        await asyncio.wait_for(env.run("while True:\n    ticks[0] += 1"), 0.3)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(attempt())
    deadline = time.monotonic() + 5
    while not env.writes and time.monotonic() < deadline:
        time.sleep(0.02)
    assert env.writes and env.writes[0]["ok"] is False  # the loop was stopped, not left running
    stopped = ns["ticks"][0]
    time.sleep(0.1)
    assert ns["ticks"][0] == stopped > 0


# -- through ECP ---------------------------------------------------------------------------------
def test_through_ecp_with_a_namespace(ws, ns, warm_litellm):
    from tea_notebook.models.offline import ScriptedModel, call

    ws.envs.add(KernelEnvironment, namespace=ns)
    listing = ws.envs.invoke("kernel", "variables")
    assert listing.ok and "scores: list, len 3" in listing.value and "[3, 1, 2]" not in listing.value
    assert not ws.envs.invoke("kernel", "read", {"name": "config"}).ok  # no kernel.read grant
    with ws.context() as ctx:
        ctx.grants.add("kernel.read")
        listing = ws.envs.invoke("kernel", "variables", context=ctx)
        assert "scores: list, len 3 = [3, 1, 2]" in listing.value
        config = ws.envs.invoke("kernel", "read", {"name": "config"}, context=ctx).value
        assert config.endswith("{'mode': 'draft', 'retries': 2}")
    denied = ws.envs.invoke("kernel", "write", {"name": "scores", "value_json": []})
    assert not denied.ok and denied.error["type"] == "EnvironmentFailure"
    assert "--grant kernel.write" in denied.error["message"]
    assert ns["scores"] == [3, 1, 2]

    # an agent run without the grant: the refusal is an observation, the data stays as it was
    script = ScriptedModel(
        [
            call("kernel_run", code="scores.clear()"),
            call("done", success=True, text="could not change it"),
        ]
    )
    result = ws.agent("nogrant", model=script.name, envs=["kernel"]).run_sync("empty my scores")
    # the refused kernel_run was never recovered: the script's success=True is not taken at its word
    assert result.status == "failed" and ns["scores"] == [3, 1, 2]
    [attempt] = [a for s in result.trajectory.steps for a in s.actions if a["name"] == "kernel_run"]
    assert attempt["ok"] is False and "kernel.write grant" in attempt["observation"]
    assert [s.environment for s in ws.envs.sessions()] == ["kernel"]  # the run's own session was released


# -- a real kernel --------------------------------------------------------------------------------
KERNEL_NAME = "tea-env-kernel-test"


class KernelDriver:
    """A started ipykernel and a blocking client: run code, collect stdout, fail on errors."""

    def __init__(self, specs_dir: Path, cwd: Path):
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager

        env = dict(os.environ)
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        env.pop("TEA_MODEL", None)
        self.km = KernelManager(
            kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs_dir)])
        )
        self.km.start_kernel(env=env, cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=60)
        except Exception:
            self.close()
            raise

    def execute(self, code: str, timeout: float = 60) -> str:
        """Run a cell; its stdout, or an assertion error with the cell's traceback."""
        msg_id = self.kc.execute(code)
        deadline = time.monotonic() + timeout
        stdout: list[str] = []
        errors: list[str] = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                stdout.append(content["text"])
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                break
        reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        assert not errors and reply["content"]["status"] == "ok", (code, errors)
        return "".join(stdout)

    def value(self, expr: str) -> Any:
        """A JSON-able expression evaluated in the kernel."""
        out = self.execute(f"import json as _json\nprint('@@' + _json.dumps({expr}))")
        return json.loads(next(line for line in out.splitlines() if line.startswith("@@"))[2:])

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def real_kernel(tmp_path_factory):
    pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    specs = tmp_path_factory.mktemp("kernelspecs")
    (specs / KERNEL_NAME).mkdir()
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python"}
    (specs / KERNEL_NAME / "kernel.json").write_text(json.dumps(spec))
    driver = KernelDriver(specs, tmp_path_factory.mktemp("kernel-cwd"))
    try:
        yield driver
    finally:
        driver.close()


@pytest.mark.slow
def test_real_kernel_namespace_and_a_granted_agent(real_kernel, tmp_path):
    k = real_kernel
    has_pandas = k.value("__import__('importlib.util').util.find_spec('pandas') is not None")
    k.execute(
        textwrap.dedent(
            f"""
            import numpy as np
            import tea_notebook
            from tea_notebook.envs.kernel import KernelEnvironment
            from tea_notebook.models.offline import ScriptedModel as _ScriptedModel, call as _call

            _ws = tea_notebook.Workspace({str(tmp_path / "ws")!r}, embedder="hashing")
            scores = [3, 1, 2]
            config = {{"mode": "draft"}}
            grid = np.arange(6).reshape(2, 3)
            _ws.envs.add(KernelEnvironment)  # no namespace: the kernel's own user_ns
            """
        )
    )
    if has_pandas:
        k.execute("import pandas as pd\nframe = pd.DataFrame({'a': [1, 2], 'b': [3.0, 4.0]})")

    # no grant: names and types only, no values
    bare = k.value("_ws.envs.invoke('kernel', 'variables').value").splitlines()
    assert "scores: list, len 3" in bare and not any("[3, 1, 2]" in line for line in bare)
    assert not k.value("_ws.envs.invoke('kernel', 'read', {'name': 'scores'}).ok")
    k.execute("_reader = _ws.context()\n_reader.grants.add('kernel.read')")
    listing = k.value("(lambda r: [r.ok, r.value])(_ws.envs.invoke('kernel', 'variables', context=_reader))")
    assert listing[0], listing
    lines = listing[1].splitlines()
    assert "scores: list, len 3 = [3, 1, 2]" in lines
    assert "config: dict, len 1 = {'mode': 'draft'}" in lines
    assert "grid: ndarray, shape (2, 3), dtype int64" in lines
    assert "functions and classes: KernelEnvironment" in lines
    for hidden in ("In", "Out", "exit", "quit", "get_ipython", "np", "tea_notebook", "_ws", "_reader"):
        assert not any(line.startswith(f"{hidden}:") for line in lines), hidden
    if has_pandas:
        assert "frame: DataFrame, shape (2, 2), columns ['a', 'b']" in lines
        assert "0  1  3.0" in k.value("_ws.envs.invoke('kernel', 'read', {'name': 'frame'}, context=_reader).value")
    assert k.value("_ws.envs.invoke('kernel', 'read', {'name': 'grid'}, context=_reader).value").startswith(
        "grid: ndarray, shape (2, 3), dtype int64\narray([[0, 1, 2],"
    )
    k.execute("_reader.close()")
    assert k.value("[s.folder.name for s in _ws.envs.sessions()]") == ["interactive"]

    # without the grant: refused, with the way to grant it, and nothing changed
    denied = k.value(
        "[(r.ok, r.error['message']) for r in ("
        "_ws.envs.invoke('kernel', 'write', {'name': 'scores', 'value_json': []}),"
        "_ws.envs.invoke('kernel', 'run', {'code': 'scores.clear()'}))]"
    )
    for ok, message in denied:
        assert not ok and "%%agent --grant kernel.write" in message and 'grants=["kernel.write"]' in message
    assert k.value("[scores, config, 'threshold' in globals()]") == [[3, 1, 2], {"mode": "draft"}, False]

    # an agent granted kernel.write sets a variable and edits the user's data in place
    k.execute(
        textwrap.dedent(
            """
            _script = _ScriptedModel([
                _call("kernel_variables"),
                _call("kernel_write", name="threshold", value_json=2),
                _call("kernel_run", code="scores[:] = [s for s in scores if s >= threshold]\\n"
                                          "config['mode'] = 'final'\\nprint('kept', scores)\\nlen(scores)"),
                _call("done", success=True, text="filtered"),
            ])
            _result = _ws.agent("k", model=_script.name, envs=["kernel"]).run_sync(
                "keep the scores of at least 2", grants=["kernel.write"])
            """
        )
    )
    assert k.value("[_result.status, _result.error]") == ["success", None]
    assert k.value("[scores, threshold, config]") == [[3, 2], 2, {"mode": "final"}]
    assert k.value("scores is globals()['scores']")  # same list object, changed in place
    actions = k.value(
        "[{'name': a['name'], 'ok': a.get('ok'), 'arguments': a['arguments'], 'observation': a.get('observation')}"
        " for s in _result.trajectory.steps for a in s.actions]"
    )
    assert [a["name"] for a in actions] == ["kernel_variables", "kernel_write", "kernel_run", "done"]
    variables, write, ran = actions[:3]
    assert variables["ok"] and "scores: list, len 3" in variables["observation"]
    assert write["ok"] and write["arguments"] == {"name": "threshold", "value_json": 2}
    assert write["observation"] == "set threshold = 2 (int) (new variable)"
    assert ran["ok"] and ran["observation"].startswith("stdout:\nkept [3, 2]\nvalue: 2")
    tool_calls = k.value("[e.data['name'] for e in _result.trajectory.events if e.type == 'tool_call']")
    assert tool_calls[:3] == ["kernel_variables", "kernel_write", "kernel_run"]
    # the run's session is released with the run; the interactive one stays read-only
    assert k.value("[s.folder.name for s in _ws.envs.sessions()]") == ["interactive"]
    assert k.value("_ws.envs.invoke('kernel', 'write', {'name': 'x', 'value_json': 1}).ok") is False
    k.execute("_ws.close()")


# -- listing without a grant runs none of the person's code ---------------------------------------
def _booby_trapped(calls: list[str]) -> dict[str, Any]:
    """Values whose every dynamic hook records that it ran (the listing must call none of them)."""

    def hit(what: str) -> None:
        calls.append(what)

    class Shaped:
        @property
        def shape(self):
            hit("shape")
            return (2, 2)

        @property
        def dtype(self):
            hit("dtype")
            return "int8"

        @property
        def columns(self):
            hit("columns")
            return ["a"]

    class Sized:
        def __len__(self):
            hit("__len__")
            return 3

        def __repr__(self):
            hit("__repr__")
            return "Sized()"

    class Dynamic:
        def __getattr__(self, name):
            hit(f"__getattr__ {name}")
            return (1,)

        def __getattribute__(self, name):
            hit(f"__getattribute__ {name}")
            return object.__getattribute__(self, name)

    class Disguised:
        @property
        def __class__(self):  # isinstance() asks this when the real type does not match
            hit("__class__")
            return types.ModuleType

    class Meta(type):
        def __getattribute__(cls, name):
            hit(f"Meta.__getattribute__ {name}")
            return type.__getattribute__(cls, name)

        def __eq__(cls, other):
            hit("Meta.__eq__")
            return False

        __hash__ = type.__hash__

        def __instancecheck__(cls, obj):
            hit("Meta.__instancecheck__")
            return False

        @property
        def __name__(cls):
            hit("Meta.__name__")
            return "Spoofed"

    class Odd(metaclass=Meta):
        pass

    class ListSub(list):
        def __len__(self):
            hit("ListSub.__len__")
            return 99

    class Weird:
        __module__ = types.SimpleNamespace()  # not a string: str() of it would be code too

    return {
        "shaped": Shaped(),
        "sized": Sized(),
        "dynamic": Dynamic(),
        "disguised": Disguised(),
        "odd": Odd(),
        "odd_class": Odd,
        "items": ListSub([1, 2]),
        "weird": Weird(),
        "plain": [1, 2, 3],
    }


def test_listing_without_a_grant_runs_no_user_code():
    calls: list[str] = []
    ns = _booby_trapped(calls)
    env = started(ns)  # no grant at all
    listing = env.variables()
    state = env.state()
    assert calls == [], f"the listing ran user code: {calls}"
    lines = listing.splitlines()
    assert lines[0] == "8 variables:"
    assert "shaped: Shaped" in lines  # no shape: it is a user property
    assert "sized: Sized" in lines  # no len: a user __len__
    assert "dynamic: Dynamic" in lines
    assert "disguised: Disguised" in lines  # listed as what it is, not as the module it claims to be
    assert "odd: Odd" in lines  # the real name, not the metaclass's "Spoofed"
    assert "items: ListSub" in lines  # a list subclass: its __len__ is the user's
    assert "weird: Weird" in lines
    assert "plain: list, len 3" in lines
    assert "functions and classes: odd_class" in lines
    assert "odd_class" in state and calls == []


def test_listing_without_a_grant_still_shows_numpy_shapes_and_builtin_sizes():
    import numpy as np

    class Sub(np.ndarray):
        @property
        def shape(self):  # a user subclass: its shape is user code
            raise AssertionError("ran")

    ns = {"grid": np.arange(6).reshape(2, 3), "sub": np.zeros(3).view(Sub), "conf": {"a": 1}, "word": "hey"}
    lines = started(ns).variables().splitlines()
    assert "grid: ndarray, shape (2, 3), dtype int64" in lines
    assert "sub: Sub" in lines
    assert "conf: dict, len 1" in lines and "word: str, len 3" in lines


def test_a_grant_still_reads_duck_typed_shapes(ns):
    calls: list[str] = []
    trapped = _booby_trapped(calls)
    env = started({"shaped": trapped["shaped"]}, reading())
    assert "shaped: Shaped, shape (2, 2), columns ['a'], dtype int8" in env.variables()
    assert "shape" in calls  # with kernel.read, reading a value may run its code: that is the grant
