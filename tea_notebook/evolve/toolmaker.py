"""The tool manager: retrieve → assess need → specify → write code → validate in the sandbox →
register (or discard), then reuse. AgentOrchestra's tool manager with Mem²Evolve's prompts.

Generated code runs only in a confined sandbox (no network, no files outside its folder, no new
programs) until it has passed, and there in a process of its own: the validation harness
(:mod:`tea_notebook.evolve.validation_harness`) forks it, calls it through a pipe and reports what
happened as data, so the code under test cannot touch the report; the verdict is made here. It
passes when it imports, its ``TOOL_CONFIG`` is consistent, the specification's examples give the
expected outputs, and tests written by the model pass. Tests that assert nothing, that a constant
function would also pass, or that still pass when every result beyond the examples is changed
(mutation) are rejected — the tests cannot tell these runs from the real one. Failures go back to the model for a
bounded number of fixes; then the tool is registered with its provenance (run, model, tests and
their output) or discarded with the reason. Every stage is a step of a recorded run, so a notebook
shows the code, the tests and their results in the trajectory.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import hashlib
import itertools
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JSONSchemaError

from tea_notebook._safe_open import Beneath, write_beneath
from tea_notebook._sync import run_sync
from tea_notebook.errors import EnvironmentFailure, EvolutionError, TeaError
from tea_notebook.evolve import prompts
from tea_notebook.evolve.gate import evolution_metadata
from tea_notebook.evolve.llm import ask_json, require_model
from tea_notebook.protocol.records import NAME_PATTERN, ToolRecord
from tea_notebook.runtime.event_types import ToolCreatedEvent, ToolDiscardedEvent, ToolReusedEvent
from tea_notebook.runtime.runlog import Process

if TYPE_CHECKING:
    from tea_notebook.models.client import ModelClient
    from tea_notebook.protocol.context import Context
    from tea_notebook.runtime.host import RunHost

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

HARNESS = Path(__file__).with_name("validation_harness.py")  # runs in the sandbox, imports the tool apart


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
    ``accept()``, ``edit(code)`` or ``reject(reason)``. ``candidate=True`` registers what passes as a
    candidate of the promotion gate (:mod:`tea_notebook.evolve.gate`): offered only by name until a
    held-out evaluation shows it helps. ``made_from``: tasks besides the request that the tools are
    made for (the gate refuses a held-out set that contains one).
    """

    def __init__(
        self,
        ws: "RunHost",
        *,
        model: str | None = None,
        client: "ModelClient | None" = None,
        max_fixes: int = 3,
        approval: str = "auto",
        k: int = 8,
        timeout: float = 10.0,
        retries: int = 2,
        candidate: bool = False,
        made_from: list[str] | None = None,
    ):
        if approval not in ("auto", "manual"):
            raise ValueError("approval must be 'auto' or 'manual'")
        self.ws, self.model, self.client = ws, model, client
        self.max_fixes, self.approval, self.k = max_fixes, approval, k
        self.timeout, self.retries = timeout, retries
        self.candidate, self.made_from = candidate, list(made_from or [])

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
                proc.emit("tool_reused", ToolReusedEvent(tool=name))
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

    async def _tests(self, proc: Process, cand: Candidate, problem: str | None = None) -> str:
        """Tests from the spec and its examples; vacuous ones (no assertion, or passing against a
        constant function) are sent back with the reason (``problem``: why the last ones were)."""
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
        # constant stubs returning each example's expected output in turn (tests asserting one example
        # only would pass against the stub for that example)
        outputs = {repr(e.get("output")): e.get("output") for e in examples if isinstance(e, dict)}
        constants = list(outputs.values())[:3] or [None]
        if problem:
            fields["spec"] += f"\nYour previous tests were rejected: {problem}."
        for attempt in range(self.retries + 1):
            tests = (await ask_json(proc, prompts.TOOL_TESTS, fields, validate=check, retries=self.retries))["tests"]
            verdict = await self._check(
                proc, cand.name, cand.code, tests, examples=examples, label="vacuity", constants=constants
            )
            problem = verdict.get("vacuous")
            if not problem:
                proc.step("write_tests", {"tool": cand.name}, tests)
                return tests
            proc.step("reject_tests", {"tool": cand.name, "attempt": attempt + 1}, f"{problem}\n\n{tests}", ok=False)
            fields["spec"] += f"\nYour previous tests were rejected: {problem}."
        raise EvolutionError("tool_tests", "the tests were rejected as vacuous after every attempt")

    async def _check(
        self,
        proc: Process,
        name: str,
        code: str,
        tests: str,
        *,
        examples: list[Any],
        label: str,
        constants: tuple[Any, ...] | list[Any] = (),
        mutant: bool = False,
    ) -> dict[str, Any]:
        """Run the harness for one version of the code in a fresh confined sandbox; the verdict."""
        from tea_notebook.envs.sandbox import PythonSandbox

        # the run folder is writable by the run's other sandboxes: the check folder is made, written
        # and handed to the sandbox beneath it, never through a link left there
        proc.folder.mkdir(parents=True, exist_ok=True)
        root = Beneath(proc.folder)
        try:
            root.folder("toolmaker", create=True).close()
            rel = f"toolmaker/{name}-{label}"
            for n in itertools.count(2):  # each check its own folder: files of the last one stay to read
                found = root.lookup(rel)
                if found is None:
                    raise EnvironmentFailure(f"{rel!r} leads outside the run folder (a link was left in the way)")
                if found[1] is None:
                    break
                rel = f"toolmaker/{name}-{label}-{n}"
            for file, text in ((f"{name}.py", code), (f"test_{name}.py", tests), ("tea_check.py", TEA_CHECK)):
                write_beneath(root, f"{rel}/sandbox/{file}", text)
        except EnvironmentFailure as exc:
            return {"ok": False, "stage": "run", "error": f"the check folder cannot be prepared: {exc}"}
        finally:
            root.close()
        folder = proc.folder / rel
        examples = [e for e in examples if isinstance(e, dict) and isinstance(e.get("input"), dict)]
        runs = 2 + len(constants) + int(mutant)  # import and examples, then each mode's pass over the tests
        box = PythonSandbox(
            folder,
            timeout=self.timeout * runs,
            confine=True,
            network=False,
            memory_mb=1024,
            processes=16,
            max_output=4_000_000,
            quota_mb=256,
            within=proc.folder,
        )
        config = {
            "module": name,
            "tests": f"test_{name}",
            "examples": examples,
            "constants": list(constants),
            "mutant": mutant,
            "call_timeout": self.timeout,
            "import_timeout": self.timeout,
        }
        script = f"{_harness_source()}\n__import__('json').dumps(run(__import__('json').loads({json.dumps(config)!r})))"
        try:
            await box.start()
            result = await asyncio.to_thread(box.request, "exec", box.timeout, code=script)
        finally:
            await box.stop()
        if result.limit or result.error:
            return {"ok": False, "stage": "run", "error": result.text()}
        try:
            report = json.loads(ast.literal_eval(result.value or ""))
        except (ValueError, SyntaxError, TypeError):
            return {"ok": False, "stage": "run", "error": f"the harness gave no report: {result.text()[:2000]}"}
        return judge(report, name, examples)

    async def _validate(self, proc: Process, cand: Candidate) -> None:
        examples = cand.spec.get("examples") or []
        rewrites = 0
        iteration = 0
        while iteration <= self.max_fixes:
            proc.check_stop()
            report = await self._check(
                proc, cand.name, cand.code, cand.tests, examples=examples, label=str(iteration), mutant=True
            )
            cand.test_output = report_text(report)
            proc.step(
                "validate", {"tool": cand.name, "iteration": iteration}, cand.test_output, ok=bool(report.get("ok"))
            )
            if report.get("ok") and report.get("vacuous"):  # the code passes tests that check too little
                proc.step("reject_tests", {"tool": cand.name, "mutation": True}, report["vacuous"], ok=False)
                rewrites += 1
                try:
                    if rewrites > self.retries:
                        raise EvolutionError("tool_tests", "the tests were rejected as vacuous after every attempt")
                    cand.tests = await self._tests(proc, cand, problem=report["vacuous"])
                except EvolutionError as exc:
                    cand.status, cand.reason = "discarded", str(exc)
                    self._record_discard(cand, cand._creation, proc)
                    return
                continue
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
            iteration += 1
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
            output = report_text(report)
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
        previous = self.ws.tools.current(cand.name)
        existed = previous is not None
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
            metadata=evolution_metadata(
                {
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
                candidate=self.candidate,
                tasks=[creation.request if creation else "", *self.made_from],
                runs=[run_id],
                parent=previous.version if previous is not None else None,
            ),
        )
        note = f"created by the tool manager (run {run_id})" + (", a new version" if existed else "")
        if self.candidate:
            note += ", a candidate of the promotion gate"
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
            ToolCreatedEvent(
                tool=cand.name,
                version=cand.tool.version,
                first_pass=cand.first_pass,
                fix_iterations=cand.fix_iterations,
            ),
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
            ToolDiscardedEvent(
                tool=cand.name,
                reason=cand.reason,
                fix_iterations=cand.fix_iterations,
                first_pass=cand.first_pass,
            ),
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


@functools.cache
def _harness_source() -> str:
    return HARNESS.read_text()


def judge(report: Any, name: str, examples: list[dict[str, Any]]) -> dict[str, Any]:
    """The verdict on a harness report. The report came out of the sandbox, so every field is checked
    before it is read; anything malformed fails the check. Returns ``ok``, ``stage``, ``error``,
    ``tests`` (name, passed, message), ``vacuous`` (why the tests check too little, or None) and, when
    the module imported, what its TOOL_CONFIG declares."""
    from tea_notebook.evolve.validation_harness import decode

    if not isinstance(report, dict) or not isinstance(report.get("import"), dict):
        return {"ok": False, "stage": "run", "error": "the harness report is malformed"}
    info = report["import"]
    verdict: dict[str, Any] = {"ok": False, "stage": "import", "tests": []}
    if not info.get("ok"):
        verdict["error"] = str(info.get("error") or "the module could not be imported")
        return verdict
    verdict["stage"] = "config"
    problems = []
    if not info.get("has_config"):
        problems.append("the module defines no TOOL_CONFIG dict")
    else:
        if info.get("name") != name:
            problems.append(f"TOOL_CONFIG['name'] is {info.get('name')!r}, not {name!r}")
        if not info.get("callable"):
            problems.append("TOOL_CONFIG['function'] is not a function")
        if not isinstance(info.get("input_schema"), dict):
            problems.append("TOOL_CONFIG['input_schema'] is not a JSON Schema object")
    public = info.get("public") if isinstance(info.get("public"), list) else []
    if len(public) != 1:
        problems.append(
            f"the module must define exactly one public function, it defines {len(public)}: "
            f"{', '.join(map(str, public)) or 'none'}"
        )
    params = info.get("parameters") if isinstance(info.get("parameters"), list) else []
    if any(isinstance(p, list) and len(p) == 3 and p[1] in (2, 4) for p in params):  # *args, **kwargs
        problems.append("the function must have explicit parameters (no *args or **kwargs)")
    if problems:
        verdict["error"] = "; ".join(problems)
        return verdict
    verdict.update(
        function=info.get("function"),
        input_schema=decode(info.get("input_schema")),
        returns=decode(info.get("returns")) if isinstance(info.get("returns"), dict) else {},
        description=info.get("description") if isinstance(info.get("description"), str) else "",
    )
    verdict["stage"] = "examples"
    got_list = report.get("examples") if isinstance(report.get("examples"), list) else []
    for i, ex in enumerate(examples):
        got = got_list[i] if i < len(got_list) and isinstance(got_list[i], dict) else {"raised": "no result"}
        if got.get("raised"):
            verdict["error"] = f"example {i + 1}: {info.get('function')}(**{ex['input']!r}) raised {got['raised']}"
            return verdict
        value, want = decode(got.get("got")), ex.get("output")
        if "output" in ex and not _same(value, want):
            verdict["error"] = (
                f"example {i + 1}: {info.get('function')}(**{ex['input']!r}) returned {value!r}, expected {want!r}"
            )
            return verdict
    verdict["stage"] = "tests"
    modes = report.get("modes") if isinstance(report.get("modes"), dict) else {}
    real = _results(modes.get("real"))
    verdict["tests"] = real
    if not real:
        verdict["error"] = "no test functions were found"
        return verdict
    failed = [r for r in real if not r[1]]
    if failed:
        detail = "; ".join(f"{n}: {m}" for n, _, m in failed)
        verdict["error"] = f"{len(failed)} of {len(real)} tests failed: {detail}"
        return verdict
    verdict["ok"], verdict["stage"], verdict["vacuous"] = True, "done", None
    for key, results in modes.items():
        results = _results(results)
        if key == "real" or not results or not all(ok for _, ok, _ in results):
            continue
        if key.startswith("constant:"):
            constant = json.loads(key.partition(":")[2])
            verdict["vacuous"] = (
                f"the tests pass against a function that always returns {constant!r}; "
                "they must check computed results for several different inputs"
            )
        elif key == "mutant":
            verdict["vacuous"] = (
                "the tests still pass when every result for inputs other than the specification's examples is "
                "changed: they must call the tool with other inputs and check its results exactly"
            )
        break
    return verdict


def _results(value: Any) -> list[list[Any]]:
    """Test results from a report: [name, passed, message] rows, anything else dropped."""
    rows = value if isinstance(value, list) else []
    return [[str(r[0]), bool(r[1]), str(r[2])] for r in rows if isinstance(r, list) and len(r) == 3]


def _same(got: Any, want: Any) -> bool:
    if isinstance(got, float) and isinstance(want, (int, float)) and not isinstance(want, bool):
        return abs(got - want) <= 1e-6 * max(1, abs(want))
    if isinstance(got, tuple) and isinstance(want, list):  # JSON has no tuples
        got = list(got)
    return got == want


def report_text(report: dict[str, Any]) -> str:
    """A validation report as the short text shown for a candidate (what passed, each test, the error)."""
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
