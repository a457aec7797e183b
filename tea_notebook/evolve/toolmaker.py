"""The tool manager: retrieve → assess need → specify → write code → validate in the sandbox →
register (or discard), then reuse. AgentOrchestra's tool manager with Mem²Evolve's prompts.

Generated code runs only in a confined sandbox (no network, no files outside its folder, no new
programs) until it has passed: it imports, its ``TOOL_CONFIG`` is consistent, the specification's
examples give the expected outputs, and tests written by the model pass — tests that a constant
function would also pass, or that assert nothing, are rejected. Failures go back to the model for a
bounded number of fixes; then the tool is registered with its provenance (run, model, tests and
their output) or discarded with the reason. Every stage is a step of a recorded run, so a notebook
shows the code, the tests and their results in the trajectory.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import itertools
import json
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JSONSchemaError

from tea_notebook._sync import run_sync
from tea_notebook.errors import EvolutionError, TeaError
from tea_notebook.evolve import prompts
from tea_notebook.evolve.llm import ask_json, require_model
from tea_notebook.protocol.records import NAME_PATTERN, ToolRecord
from tea_notebook.runtime.runlog import Process

if TYPE_CHECKING:
    from tea_notebook.models.client import ModelClient
    from tea_notebook.protocol.context import Context
    from tea_notebook.workspace import Workspace

# the helper tests import (``from tea_check import raises``): no pytest needed in the sandbox
TEA_CHECK = '''"""Helpers for generated tests."""


class raises:
    """``with raises(ValueError):`` fails unless the block raises that exception."""

    def __init__(self, *kinds):
        self.kinds = kinds or (Exception,)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError("expected %s to be raised" % " or ".join(k.__name__ for k in self.kinds))
        return issubclass(kind, self.kinds)
'''

# runs inside the sandbox: load the module, check TOOL_CONFIG, try the examples, run the tests
CHECK_SCRIPT = """
import importlib, inspect, json, sys, traceback
sys.path.insert(0, ".")
for name in [m for m in sys.modules if m in (%(module)r, %(tests)r)]:
    del sys.modules[name]
report = {"stage": "import", "ok": False}
try:
    mod = importlib.import_module(%(module)r)
    report["stage"] = "config"
    cfg = getattr(mod, "TOOL_CONFIG", None)
    problems = []
    if not isinstance(cfg, dict):
        problems.append("the module defines no TOOL_CONFIG dict")
    else:
        if cfg.get("name") != %(name)r:
            problems.append("TOOL_CONFIG['name'] is %%r, not %(name)r" %% cfg.get("name"))
        if not callable(cfg.get("function")):
            problems.append("TOOL_CONFIG['function'] is not a function")
        if not isinstance(cfg.get("input_schema"), dict):
            problems.append("TOOL_CONFIG['input_schema'] is not a JSON Schema object")
    public = [n for n, v in vars(mod).items() if inspect.isfunction(v) and v.__module__ == mod.__name__
              and not n.startswith("_")]
    if len(public) != 1:
        problems.append("the module must define exactly one public function, it defines %%d: %%s"
                        %% (len(public), ", ".join(public) or "none"))
    if problems and not %(vacuity)s:
        raise AssertionError("; ".join(problems))
    fn = cfg["function"]
    sig = inspect.signature(fn)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()) and not %(vacuity)s:
        raise AssertionError("the function must have explicit parameters (no *args or **kwargs)")
    report.update(function=fn.__name__, input_schema=cfg["input_schema"], returns=cfg.get("returns") or {},
                  description=cfg.get("description") or "")
    report["stage"] = "examples"
    for i, ex in enumerate(%(examples)s):
        got = fn(**ex["input"])
        want = ex.get("output", got)
        close = isinstance(got, float) and isinstance(want, (int, float))
        close = close and abs(got - want) <= 1e-6 * max(1, abs(want))
        if got != want and not close:
            raise AssertionError("example %%d: %%s(**%%r) returned %%r, expected %%r"
                                 %% (i + 1, fn.__name__, ex["input"], got, want))
    report["stage"] = "tests"
    tests = importlib.import_module(%(tests)r)
    names = [n for n in dir(tests) if n.startswith("test") and callable(getattr(tests, n))]
    results = []
    for n in names:
        try:
            getattr(tests, n)()
            results.append([n, True, ""])
        except BaseException as exc:
            results.append([n, False, "".join(traceback.format_exception_only(type(exc), exc)).strip()])
    report["tests"] = results
    failed = [r for r in results if not r[1]]
    if not names:
        raise AssertionError("no test functions were found")
    if failed:
        detail = "; ".join("%%s: %%s" %% (n, m) for n, _, m in failed)
        raise AssertionError("%%d of %%d tests failed: %%s" %% (len(failed), len(results), detail))
    report["ok"] = True
except BaseException as exc:
    report["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    ours = (%(module)r + ".py", %(tests)r + ".py")
    tb = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(ours)]
    if tb:
        last = tb[-1]
        where = (last.filename.rsplit("/", 1)[-1], last.lineno, (last.line or "").strip())
        report["where"] = "%%s line %%d: %%s" %% where
print(json.dumps(report, default=repr))
"""

STUB = """def {function}(*args, **kwargs):
    return {constant!r}

TOOL_CONFIG = {{"name": {name!r}, "description": "constant stub", "function": {function},
               "input_schema": {{"type": "object"}}, "returns": {{}}}}
"""


@dataclass
class Candidate:
    """One proposed tool on its way through validation."""

    name: str
    spec: dict[str, Any]
    code: str = ""
    tests: str = ""
    test_output: str = ""
    status: str = "validating"  # registered | discarded | pending
    reason: str = ""
    fix_iterations: int = 0
    first_pass: bool | None = None
    tool: ToolRecord | None = None
    checked: dict[str, Any] = field(default_factory=dict)
    _creation: "Creation | None" = field(default=None, repr=False)

    # -- approval ----------------------------------------------------------------------------
    def accept(self) -> ToolRecord:
        """Register a tool that passed and waits for approval."""
        if self.status != "pending":
            raise TeaError(f"tool {self.name!r} is {self.status}, not waiting for approval")
        assert self._creation is not None
        return self._creation.maker._register(self, self._creation, approved_by="person")

    def reject(self, reason: str = "rejected by the person") -> None:
        """Discard a tool that waits for approval, recording why."""
        if self.status != "pending":
            raise TeaError(f"tool {self.name!r} is {self.status}, not waiting for approval")
        self.status, self.reason = "discarded", reason
        assert self._creation is not None
        self._creation.maker._record_discard(self, self._creation)

    def edit(self, code: str) -> "Candidate":
        """Replace the code of a pending tool; it is validated again (and waits for approval again)."""
        if self.status != "pending":
            raise TeaError(f"tool {self.name!r} is {self.status}, not waiting for approval")
        assert self._creation is not None
        return run_sync(self._creation.maker._revalidate(self, code, self._creation))


@dataclass
class Creation:
    """What one tool-manager request produced."""

    request: str
    status: str  # reused | native | registered | pending | discarded
    run_id: str
    need: dict[str, Any] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    maker: "ToolMaker" = field(default=None, repr=False)  # type: ignore[assignment]

    @property
    def tools(self) -> list[ToolRecord]:
        """The tools registered by this request."""
        return [c.tool for c in self.candidates if c.tool is not None and c.status == "registered"]

    @property
    def tool(self) -> ToolRecord | None:
        """The first registered tool, if any."""
        return next(iter(self.tools), None)

    def summary(self) -> str:
        """One line per outcome."""
        lines = [f"tool manager ({self.run_id}): {self.status}"]
        if self.reused:
            lines.append(f"  reused: {', '.join(self.reused)}")
        for c in self.candidates:
            extra = f" v{c.tool.version}" if c.tool is not None else ""
            why = f" — {c.reason}" if c.reason else ""
            lines.append(f"  {c.name}{extra}: {c.status} after {c.fix_iterations} fixes{why}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        from tea_notebook.evolve.render import creation_text

        return creation_text(self)

    def _repr_html_(self) -> str:
        from tea_notebook.evolve.render import creation_html

        return creation_html(self)

    def _refresh_status(self) -> None:
        states = {c.status for c in self.candidates}
        if "registered" in states:
            self.status = "registered"
        elif "pending" in states:
            self.status = "pending"
        elif self.candidates:
            self.status = "discarded"


class ToolMaker:
    """Creates tools on demand (``ws.tools.create`` and the tool-manager agent use one).

    ``approval="manual"`` stops before registering: the :class:`Creation`'s candidates wait for
    ``accept()``, ``edit(code)`` or ``reject(reason)``.
    """

    def __init__(
        self,
        ws: "Workspace",
        *,
        model: str | None = None,
        client: "ModelClient | None" = None,
        max_fixes: int = 3,
        approval: str = "auto",
        k: int = 8,
        timeout: float = 10.0,
        retries: int = 2,
    ):
        if approval not in ("auto", "manual"):
            raise ValueError("approval must be 'auto' or 'manual'")
        self.ws, self.model, self.client = ws, model, client
        self.max_fixes, self.approval, self.k = max_fixes, approval, k
        self.timeout, self.retries = timeout, retries

    # -- public --------------------------------------------------------------------------------
    def create(self, request: str | dict[str, Any], *, context: "Context | None" = None) -> Creation:
        """Synchronous :meth:`acreate`."""
        return run_sync(self.acreate(request, context=context))

    async def acreate(self, request: str | dict[str, Any], *, context: "Context | None" = None) -> Creation:
        """Reuse an existing tool when one covers ``request`` (a task, or a ready spec dict with
        ``tool_name``), else create, validate and register (or discard) the missing ones."""
        require_model(self.ws, self.model, "tool manager")
        spec_given = isinstance(request, dict)
        text = request.get("tool_description", "") if spec_given else str(request)
        if spec_given:
            problem = _check_specs({"tool_creation_specs": [request]})
            if problem:
                raise EvolutionError("tool_spec", problem)
            text = f"{request['tool_name']}: {text}"
        async with Process(
            self.ws, "tool_manager", text, model=self.model, context=context, client=self.client
        ) as proc:
            creation = Creation(text, "native", proc.run_id, maker=self)
            if spec_given:
                specs = [dict(request)]
            else:
                specs = await self._plan(proc, text, creation)
            for spec in specs:
                candidate = Candidate(spec["tool_name"], spec, _creation=creation)
                creation.candidates.append(candidate)
                await self._build(proc, candidate, text)
            creation._refresh_status()
            proc.finish(
                "success" if creation.status in ("registered", "reused", "native", "pending") else "failed",
                creation.summary(),
            )
        return creation

    # -- stages ----------------------------------------------------------------------------------
    async def _plan(self, proc: Process, task: str, creation: Creation) -> list[dict[str, Any]]:
        hits = self.ws.tools.search(task, k=self.k) if len(self.ws.tools) else []
        available = [h.record for h in hits if h.record.origin != "agent"]
        listing = "\n".join(f"- {r.name}: {r.description}" for r in available) or "(none)"
        proc.step("retrieve_tools", {"query": task, "k": self.k}, listing)
        names = {r.name for r in available}
        need = await ask_json(
            proc,
            prompts.ASSESS_TOOL_NEED,
            {"task": task, "available_tools": listing},
            validate=lambda v: _check_need(v, names),
            retries=self.retries,
        )
        creation.need = need
        proc.step("assess_tool_need", {}, json.dumps(need, indent=1, ensure_ascii=False))
        creation.reused = list(need.get("matching_tools") or [])
        if not need.get("need_creation"):
            creation.status = "reused" if creation.reused else "native"
            for name in creation.reused:
                proc.emit("tool_reused", {"tool": name})
            return []
        missing = json.dumps(need["missing_tools"], indent=1, ensure_ascii=False)
        specs = await ask_json(
            proc,
            prompts.TOOL_SPEC,
            {"task": task, "available_tools": listing, "missing_tools": missing},
            validate=_check_specs,
            retries=self.retries,
        )
        proc.step("tool_spec", {}, json.dumps(specs, indent=1, ensure_ascii=False))
        return specs["tool_creation_specs"]

    async def _build(self, proc: Process, cand: Candidate, task: str) -> None:
        spec = cand.spec
        experience = self._experience(spec)
        proc.step("retrieve_experience", {"spec": spec["tool_name"]}, experience or "(none)")
        try:
            made = await ask_json(
                proc,
                prompts.TOOL_CODE,
                {
                    "task": task,
                    "tool_name": spec["tool_name"],
                    "tool_description": spec.get("tool_description", ""),
                    "input_parameters": json.dumps(spec.get("input_parameters", []), ensure_ascii=False),
                    "output_format": json.dumps(spec.get("output_format", {}), ensure_ascii=False),
                    "core_logic": "\n".join(spec.get("core_logic") or []),
                    "experience": experience or "(none)",
                },
                validate=lambda v: _check_code_answer(v, spec["tool_name"]),
                retries=self.retries,
            )
            cand.code = made["module_code"]
            proc.step("write_code", {"tool": cand.name}, cand.code)
            cand.tests = await self._tests(proc, cand)
        except EvolutionError as exc:
            cand.status, cand.reason = "discarded", str(exc)
            self._record_discard(cand, cand._creation, proc)
            return
        await self._validate(proc, cand)

    def _experience(self, spec: dict[str, Any]) -> str:
        memory = getattr(self.ws, "experiences", None)
        if memory is None:
            return ""
        try:
            found = memory.retrieve(f"{spec['tool_name']}: {spec.get('tool_description', '')}", kind="tool", k=2)
            return memory.render_for_prompt(found) if found else ""
        except TeaError:
            return ""

    async def _tests(self, proc: Process, cand: Candidate) -> str:
        """Tests from the spec and its examples; vacuous ones (no assertion, or passing against a
        constant function) are sent back with the reason."""
        function = _public_function(cand.code) or cand.name
        examples = cand.spec.get("examples") or []

        def check(value: dict[str, Any]) -> str | None:
            source = value.get("tests")
            if not isinstance(source, str) or not source.strip():
                return "'tests' must be Python source text"
            return _check_tests(source)

        fields = {
            "tool_name": cand.name,
            "module": cand.name,
            "function": function,
            "spec": json.dumps({k: v for k, v in cand.spec.items() if k != "examples"}, ensure_ascii=False),
            "examples": json.dumps(examples, ensure_ascii=False),
        }
        # a stub returning each example's expected output in turn (tests asserting one example only
        # would pass against the stub for that example)
        outputs = {repr(e.get("output")): e.get("output") for e in examples if isinstance(e, dict)}
        constants = list(outputs.values())[:3] or [None]
        for attempt in range(self.retries + 1):
            tests = (await ask_json(proc, prompts.TOOL_TESTS, fields, validate=check, retries=self.retries))["tests"]
            for constant in constants:
                stub = STUB.format(function=function, constant=constant, name=cand.name)
                report = await self._check(proc, cand.name, stub, tests, examples=[], label="vacuity")
                if report.get("ok"):
                    break
            else:
                proc.step("write_tests", {"tool": cand.name}, tests)
                return tests
            problem = (
                f"the tests pass against a function that always returns {constant!r}; "
                "they must check computed results for several different inputs"
            )
            proc.step("reject_tests", {"tool": cand.name, "attempt": attempt + 1}, f"{problem}\n\n{tests}", ok=False)
            fields["spec"] += f"\nYour previous tests were rejected: {problem}."
        raise EvolutionError("tool_tests", "the tests were rejected as vacuous after every attempt")

    async def _check(
        self, proc: Process, name: str, code: str, tests: str, *, examples: list[Any], label: str
    ) -> dict[str, Any]:
        """Run the checks for one version of the code in a fresh confined sandbox."""
        from tea_notebook.envs.sandbox import PythonSandbox

        folder = proc.folder / "toolmaker" / f"{name}-{label}"
        for n in itertools.count(2):  # each check its own folder: files of the last one stay to read
            if not folder.exists():
                break
            folder = proc.folder / "toolmaker" / f"{name}-{label}-{n}"
        box = PythonSandbox(folder, timeout=self.timeout, confine=True, network=False, memory_mb=1024, processes=16)
        box.workdir.mkdir(parents=True, exist_ok=True)
        (box.workdir / f"{name}.py").write_text(code)
        (box.workdir / f"test_{name}.py").write_text(tests)
        (box.workdir / "tea_check.py").write_text(TEA_CHECK)
        script = CHECK_SCRIPT % {
            "module": name,
            "tests": f"test_{name}",
            "name": name,
            "examples": repr([e for e in examples if isinstance(e, dict) and isinstance(e.get("input"), dict)]),
            "vacuity": label == "vacuity",
        }
        try:
            await box.start()
            result = await asyncio.to_thread(box.request, "exec", self.timeout, code=script)
        finally:
            await box.stop()
        if result.limit or result.error:
            return {"ok": False, "stage": "run", "error": result.text()}
        try:
            return json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"ok": False, "stage": "run", "error": result.text()}

    async def _validate(self, proc: Process, cand: Candidate) -> None:
        examples = cand.spec.get("examples") or []
        for iteration in range(self.max_fixes + 1):
            proc.check_stop()
            report = await self._check(proc, cand.name, cand.code, cand.tests, examples=examples, label=str(iteration))
            cand.test_output = _report_text(report)
            proc.step(
                "validate", {"tool": cand.name, "iteration": iteration}, cand.test_output, ok=bool(report.get("ok"))
            )
            if report.get("ok"):
                cand.first_pass = iteration == 0 if cand.first_pass is None else cand.first_pass
                cand.checked = report
                if self.approval == "manual":
                    cand.status = "pending"
                    proc.step(
                        "await_approval", {"tool": cand.name}, "passed; waiting for accept(), edit(code) or reject()"
                    )
                    return
                self._register(cand, cand._creation, proc=proc)
                return
            cand.first_pass = False
            if iteration == self.max_fixes:
                break
            cand.fix_iterations += 1
            try:
                fixed = await ask_json(
                    proc,
                    prompts.TOOL_FIX,
                    {
                        "tool_name": cand.name,
                        "spec": json.dumps(cand.spec, ensure_ascii=False),
                        "code": cand.code,
                        "failure": cand.test_output,
                    },
                    validate=lambda v: None if isinstance(v.get("module_code"), str) else "'module_code' is missing",
                    retries=self.retries,
                )
            except EvolutionError as exc:
                cand.status, cand.reason = "discarded", str(exc)
                self._record_discard(cand, cand._creation, proc)
                return
            cand.code = fixed["module_code"]
            proc.step("fix_code", {"tool": cand.name, "iteration": cand.fix_iterations}, cand.code)
        cand.status = "discarded"
        cand.reason = f"still failing after {self.max_fixes} fixes: {report.get('error', 'checks failed')}"
        self._record_discard(cand, cand._creation, proc)

    async def _revalidate(self, cand: Candidate, code: str, creation: Creation) -> Candidate:
        async with Process(
            self.ws, "tool_manager", f"edit of {cand.name}", model=self.model, client=self.client
        ) as proc:
            proc.step("edit_code", {"tool": cand.name}, code)
            report = await self._check(
                proc, cand.name, code, cand.tests, examples=cand.spec.get("examples") or [], label="edit"
            )
            output = _report_text(report)
            proc.step("validate", {"tool": cand.name, "edited": True}, output, ok=bool(report.get("ok")))
            if not report.get("ok"):  # the candidate keeps its validated code: accept() stays safe
                raise EvolutionError("validate", f"the edited code does not pass: {report.get('error')}")
            cand.code, cand.test_output, cand.checked = code, output, report
        return cand

    # -- outcomes --------------------------------------------------------------------------------
    def _register(
        self, cand: Candidate, creation: Creation | None, *, proc: Process | None = None, approved_by: str = "auto"
    ) -> ToolRecord:
        checked = cand.checked
        function = checked.get("function") or _public_function(cand.code) or cand.name
        schema = checked.get("input_schema") or {}
        try:
            Draft202012Validator.check_schema(schema)
            if schema.get("type") != "object":
                raise JSONSchemaError("not an object schema")
        except JSONSchemaError:
            schema = _schema_from_spec(cand.spec)
        existed = cand.name in self.ws.tools
        run_id = proc.run_id if proc is not None else (creation.run_id if creation else "")
        record = ToolRecord(
            name=cand.name,
            description=cand.spec.get("tool_description") or checked.get("description") or cand.name,
            parameters=schema,
            returns=checked.get("returns") if isinstance(checked.get("returns"), dict) else {},
            source=cand.code,
            # the runtime cache is keyed by this hash: a new version (or a rollback) runs its own code
            source_hash=hashlib.sha256(cand.code.encode()).hexdigest(),
            entrypoint=f"source:{function}",
            origin="generated",
            category=str(cand.spec.get("category") or "generated"),
            trusted=True,
            permissions=[],
            metadata={
                "provenance": {
                    "run": run_id,
                    "step": proc.steps if proc is not None else None,
                    "model": proc.model if proc is not None else self.model,
                    "tests": cand.tests,
                    "test_output": cand.test_output,
                    "fix_iterations": cand.fix_iterations,
                    "first_pass": cand.first_pass,
                    "approved_by": approved_by,
                    "spec": cand.spec,
                }
            },
        )
        note = f"created by the tool manager (run {run_id})" + (", a new version" if existed else "")
        cand.tool = self.ws.tools.register(record, note=note)
        cand.status = "registered"
        message = f"registered {cand.name} v{cand.tool.version}" + (
            f" (a new version; roll back with ws.tools.rollback({cand.name!r}, {cand.tool.version - 1}))"
            if existed and cand.tool.version > 1
            else ""
        )
        if proc is not None:
            proc.step("register", {"tool": cand.name}, message)
        self.ws.events.emit(
            run_id,
            "tool_created",
            {
                "tool": cand.name,
                "version": cand.tool.version,
                "first_pass": cand.first_pass,
                "fix_iterations": cand.fix_iterations,
            },
            flush=True,
        )
        if creation is not None:
            creation._refresh_status()
        return cand.tool

    def _record_discard(self, cand: Candidate, creation: Creation | None, proc: Process | None = None) -> None:
        run_id = proc.run_id if proc is not None else (creation.run_id if creation else "")
        if proc is not None:
            proc.step("discard", {"tool": cand.name}, cand.reason, ok=False)
        self.ws.events.emit(
            run_id,
            "tool_discarded",
            {
                "tool": cand.name,
                "reason": cand.reason,
                "fix_iterations": cand.fix_iterations,
                "first_pass": cand.first_pass,
            },
            flush=True,
        )
        if creation is not None:
            creation._refresh_status()


# -- checks of model answers ---------------------------------------------------------------------
def _check_need(value: dict[str, Any], available: set[str]) -> str | None:
    if not isinstance(value.get("need_creation"), bool):
        return "'need_creation' must be true or false"
    matching = value.get("matching_tools") or []
    if not isinstance(matching, list) or any(m not in available for m in matching):
        unknown = [m for m in matching if m not in available] if isinstance(matching, list) else matching
        return f"matching_tools must name existing tools exactly; unknown: {unknown}"
    missing = value.get("missing_tools") or []
    if value["need_creation"]:
        if not isinstance(missing, list) or not missing:
            return "need_creation is true but missing_tools is empty"
        names = [m.get("name") if isinstance(m, dict) else None for m in missing]
        if any(not isinstance(n, str) or not NAME_PATTERN.match(n) for n in names):
            return f"every missing tool needs a snake_case 'name'; got {names}"
        if len(set(names)) != len(names):
            return "missing tool names must be unique"
    return None


def _check_specs(value: dict[str, Any]) -> str | None:
    specs = value.get("tool_creation_specs")
    if not isinstance(specs, list) or not specs:
        return "'tool_creation_specs' must be a non-empty list"
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict):
            return f"spec {i + 1} is not an object"
        name = spec.get("tool_name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            return f"spec {i + 1}: 'tool_name' must be a snake_case name, got {name!r}"
        if not isinstance(spec.get("input_parameters", []), list):
            return f"spec {name}: 'input_parameters' must be a list"
        examples = spec.get("examples", [])
        if not isinstance(examples, list) or any(
            not isinstance(e, dict) or not isinstance(e.get("input"), dict) for e in examples
        ):
            return f'spec {name}: \'examples\' must be a list of {{"input": {{...}}, "output": ...}}'
    return None


def _check_code_answer(value: dict[str, Any], name: str) -> str | None:
    if value.get("name") != name:
        return f"'name' must be exactly {name!r}"
    if not isinstance(value.get("module_code"), str) or not value["module_code"].strip():
        return "'module_code' must be the module's source text"
    return None


def _check_tests(source: str) -> str | None:
    """Reject tests that cannot fail: no test functions, or a test without an assertion."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"the tests are not valid Python ({exc.msg}, line {exc.lineno})"
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    if not tests:
        return "there is no test_* function"
    for fn in tests:
        asserting = any(
            isinstance(node, ast.Assert)
            or (isinstance(node, ast.With) and any("raises" in ast.unparse(item.context_expr) for item in node.items))
            for node in ast.walk(fn)
        )
        if not asserting:
            return f"{fn.name} asserts nothing; every test needs an assert (or `with raises(...)`)"
        trivial = [n for n in ast.walk(fn) if isinstance(n, ast.Assert) and isinstance(n.test, ast.Constant)]
        if trivial and len(trivial) == sum(isinstance(n, ast.Assert) for n in ast.walk(fn)):
            return f"{fn.name} only asserts a constant"
    return None


def _public_function(code: str) -> str | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    names = [
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")
    ]
    return names[0] if len(names) == 1 else None


def _schema_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    props, required = {}, []
    for p in spec.get("input_parameters") or []:
        if isinstance(p, dict) and isinstance(p.get("name"), str):
            props[p["name"]] = {k: v for k, v in (("type", p.get("type")), ("description", p.get("description"))) if v}
            if p.get("required", "default" not in p):
                required.append(p["name"])
    return {"type": "object", "properties": props, "required": required}


def _report_text(report: dict[str, Any]) -> str:
    lines = [
        "passed: imports, TOOL_CONFIG, examples and tests" if report.get("ok") else f"failed at {report.get('stage')}"
    ]
    for name, ok, message in report.get("tests") or []:
        lines.append(f"  {'ok  ' if ok else 'FAIL'} {name}" + (f": {message}" if message else ""))
    if report.get("error"):
        lines.append(textwrap.shorten(str(report["error"]), 1500, placeholder=" …"))
    if report.get("where"):
        lines.append(f"at {report['where']}")
    return "\n".join(lines)
