"""The Workspace: one folder holding everything persistent, and the registries that live in it."""

from __future__ import annotations

import contextvars
import functools
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tea_notebook.envs import BUILTIN as BUILTIN_ENVIRONMENTS
from tea_notebook.envs.sessions import SessionManager
from tea_notebook.errors import WorkspaceError, WorkspaceSettingChanged
from tea_notebook.models.embedders import Embedder, embedder_spec, resolve_embedder
from tea_notebook.protocol.acp import AgentRegistry
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.current import CURRENT as _current
from tea_notebook.protocol.current import current_workspace  # noqa: F401 - public here too
from tea_notebook.protocol.ecp import EnvironmentRegistry
from tea_notebook.protocol.registry import Registry
from tea_notebook.protocol.tcp import ToolkitRegistry, ToolRegistry
from tea_notebook.runtime.host import LiveAgents, RunHost
from tea_notebook.store.database import Database

if TYPE_CHECKING:
    from tea_notebook.agents.analyzer import DeepAnalyzer
    from tea_notebook.agents.coral import CoralTeam
    from tea_notebook.agents.edit_effect import EditEffect
    from tea_notebook.agents.researcher import DeepResearcher
    from tea_notebook.agents.toolself import ToolSelfAgent
    from tea_notebook.agents.training_data import ExportReport
    from tea_notebook.egress.policy import EgressPolicy
    from tea_notebook.envs.mcp_client import MCPClients
    from tea_notebook.envs.tool_executor import GeneratedToolExecutor
    from tea_notebook.eval.results import EvalResults
    from tea_notebook.eval.spec import WorkerHost
    from tea_notebook.evolve.agent_bank import AgentBank
    from tea_notebook.evolve.experience import ExperienceMemory
    from tea_notebook.evolve.gate import PromotionGate
    from tea_notebook.evolve.lineage import Lineage
    from tea_notebook.evolve.toolmaker import ToolMaker
    from tea_notebook.protocol.records import AgentRecord, ExperienceRecord, MemoryRecord
    from tea_notebook.runtime.agent import Agent, RunResult
    from tea_notebook.runtime.branches import Branches, Comparison
    from tea_notebook.runtime.events import EventLog
    from tea_notebook.runtime.jobs import Jobs
    from tea_notebook.runtime.memory import MemoryStore
    from tea_notebook.runtime.trajectory import Trajectory

_DEFAULT_PATH = ".tea"


class Workspace:
    """A workspace folder: ``tea.db`` (SQLite, WAL) plus ``vectors/`` index files rebuilt from it.

    ``ws.tools`` (TCP), ``ws.toolkits``, ``ws.envs`` (ECP) and ``ws.agents`` (ACP) are registries.
    ``embedder`` is ``"minilm"`` (default, offline), ``"litellm:MODEL"`` for hosted embeddings,
    ``"hashing"`` (tests only) or an object; a named choice is remembered by the workspace.

    It is the façade on top: the floors below are handed it as the narrow services they are typed
    against (:class:`~tea_notebook.runtime.host.RunHost`, and
    :class:`~tea_notebook.protocol.host.RegistryHost` in ``protocol/``), never as a ``Workspace``.
    """

    def __init__(
        self,
        path: str | Path = _DEFAULT_PATH,
        *,
        embedder: "str | Embedder | None" = None,
        model: str | None = None,
        model_timeout: float | None = None,
        model_retries: int | None = None,
        api_base: str | None = None,
    ):
        self.path = Path(path).expanduser().resolve()
        #: model calls of this workspace's runs (where an agent's ModelClient sets none): seconds per
        #: attempt, retries of transient errors (defaults 60 s and 1), an OpenAI-compatible server URL
        self.model_timeout, self.model_retries, self.api_base = model_timeout, model_retries, api_base
        if self.path.exists() and not self.path.is_dir():
            raise WorkspaceError(f"workspace path {self.path} exists and is not a folder")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(f"cannot create workspace folder {self.path}: {exc.strerror}") from None
        self.db = Database(self.path / "tea.db")
        self._events: "EventLog | None" = None
        #: the agent objects made in this process, by name (``ws.live_agents.get("x")``)
        self.live_agents = LiveAgents()
        self._jobs: "Jobs | None" = None
        self._executor: "GeneratedToolExecutor | None" = None
        self._mcp: "MCPClients | None" = None
        self._egress: "EgressPolicy | None" = None
        self._memory_store: "MemoryStore | None" = None
        stored = self.db.meta("embedder")
        self.embedder = resolve_embedder(embedder if embedder is not None else stored)
        spec = embedder_spec(self.embedder)
        if spec is not None and spec != stored:
            if stored:  # a setting of the workspace changes for every later session: say so
                warnings.warn(
                    f"workspace {self.path}: its embedder is now {spec!r} (it was {stored!r}), kept for every later "
                    f"session; searches embed with it from now on. Open it with embedder={stored!r} to go back, or "
                    "use another folder to try an embedder out.",
                    WorkspaceSettingChanged,
                    stacklevel=2,
                )
            self.db.set_meta("embedder", spec)
        # registries named by kind: their record classes (and pydantic) load with the first record made or read
        self.tools = ToolRegistry(self, "tool")
        # TCP gets the out-of-process executor of generated tools and the tool manager from here too
        self.tools.executor = self._generated_tool_executor
        self.tools.tool_maker = _tool_maker
        self.tools.mcp = self._mcp_clients  # MCP import: sessions of ECP's session manager, from envs/
        self.toolkits = ToolkitRegistry(self, "toolkit")
        # ECP gets its session manager and built-in environments from here: protocol/ sits below envs/
        self.envs = EnvironmentRegistry(
            self, "environment", manager_factory=SessionManager, builtins=BUILTIN_ENVIRONMENTS
        )
        self.agents = AgentRegistry(self, "agent")
        # ACP rebuilds stored agents' runners through the agent kinds above it (after a restart)
        self.agents.restorer = functools.partial(_restore_agent, self)
        self.memory: Registry[MemoryRecord] = Registry(self, "memory")
        self.experience: Registry[ExperienceRecord] = Registry(self, "experience")
        if model is not None:
            self.default_model = model

    def _sessions(self) -> SessionManager:
        """ECP's session manager: envs' ``SessionManager``, the one this workspace gave ECP to make."""
        return cast(SessionManager, self.envs.manager)

    def _mcp_clients(self) -> "MCPClients":
        """The MCP servers this workspace imported tools from (made on first use)."""
        if self._mcp is None:
            from tea_notebook.envs.mcp_client import MCPClients

            self._mcp = MCPClients(self._sessions())
        return self._mcp

    def _generated_tool_executor(self) -> "GeneratedToolExecutor":
        """The executor of this workspace's generated tools (made on the first call of one)."""
        if self._executor is None:
            from tea_notebook.envs.tool_executor import GeneratedToolExecutor

            self._executor = GeneratedToolExecutor(self._sessions())
        return self._executor

    # -- runtime ----------------------------------------------------------------------------
    @property
    def default_model(self) -> str | None:
        """The workspace's default model (remembered in the database), or None."""
        return self.db.meta("default_model") or None

    @default_model.setter
    def default_model(self, value: str | None) -> None:
        self.db.set_meta("default_model", value or "")

    @property
    def egress(self) -> "EgressPolicy":
        """Where this workspace's model-chosen network actions may go (browser, page reader, sandboxes
        with network): ``ws.egress.allow("127.0.0.1:8765")``, ``.deny("*.example.com")``; kept in the
        workspace. See :mod:`tea_notebook.egress.policy` for the rules."""
        if self._egress is None:
            from tea_notebook.egress.policy import EgressPolicy

            self._egress = EgressPolicy.from_json(
                self.db.meta("egress"), on_change=lambda policy: self.db.set_meta("egress", policy.to_json())
            )
        return self._egress

    @property
    def jobs(self) -> "Jobs":
        """The background runs started from this workspace in this process (``agent.start(task)``,
        ``%%agent --background``): list them, wait for them, stop them."""
        if self._jobs is None:
            from tea_notebook.runtime.jobs import Jobs

            self._jobs = Jobs(self)
        return self._jobs

    @property
    def events(self) -> "EventLog":
        """The workspace's event stream (subscribe to follow runs live)."""
        if self._events is None:
            from tea_notebook.runtime.events import EventLog

            self._events = EventLog(self.db)
        return self._events

    @property
    def memory_store(self) -> "MemoryStore":
        """Summaries and insights of past runs (one store per workspace object, made on first use: what
        it keeps between folds, such as the next record number of a run, is kept)."""
        if self._memory_store is None:
            from tea_notebook.runtime.memory import MemoryStore

            self._memory_store = MemoryStore(self.memory)
        return self._memory_store

    @functools.cached_property
    def experiences(self) -> "ExperienceMemory":
        """Experience memory (Mem²Evolve): tool, success and failure entries in ``ws.experience``."""
        from tea_notebook.evolve.experience import ExperienceMemory

        return ExperienceMemory(self)

    @functools.cached_property
    def agent_bank(self) -> "AgentBank":
        """The bank of evolved expert agents (C.5 specs) in ``ws.agents``."""
        from tea_notebook.evolve.agent_bank import AgentBank

        return AgentBank(self)

    def agent(self, name: str = "agent", **options: Any) -> "Agent":
        """A tool-calling agent in this workspace (see :class:`tea_notebook.runtime.agent.Agent` for ``options``).

        A new ``name`` makes a new agent and its card in ``ws.agents``. A registered ``name`` loads that
        agent from its card (its tools, model, settings and provenance: an agent made by T2A keeps its tool
        list) and never replaces the card. ``options`` that differ from the card are applied as a new version
        of it, announced by an ``AgentCardUpdated`` warning that names what changed (the previous version is
        kept: ``ws.agents.versions(name)``, ``ws.agents.rollback(name, version)``); options equal to the
        card's change nothing. A name registered as another kind (a researcher, a ToolSelf agent, a CORAL
        team) is refused with a TeaError rather than replaced.
        """
        from tea_notebook.runtime.agent import Agent

        return Agent.open(self, name, **options)

    def planner(self, sub_agents: list[str], name: str = "planner", **options: Any) -> "Agent":
        """The planning agent: todo tool, sub-agents as tools (A2T), the paper's delegation rules."""
        from tea_notebook.agents.planner import make_planner

        return make_planner(self, sub_agents, name=name, **options)

    def make_agent(self, kind: str, name: str | None = None, **options: Any) -> Any:
        """A new agent of a registered ``kind`` (``"researcher"``, ``"coral"``, … or one registered with
        :func:`tea_notebook.agents.kinds.agent_kind`), registered as ``name`` (default: the kind's usual
        name); ``options`` go to the kind's constructor. The named methods below are this for their kind."""
        from tea_notebook.agents.kinds import make

        return make(self, kind, name, **options)

    def researcher(self, name: str = "deep_researcher", **options: Any) -> "DeepResearcher":
        """The deep researcher: multi-round search, reading and evidence extraction with checked
        citations (``engines=["web"]``, ``"corpus:FOLDER"`` or your own engine objects)."""
        return self.make_agent("researcher", name, **options)

    def analyzer(self, name: str = "deep_analyzer", **options: Any) -> "DeepAnalyzer":
        """The deep analyzer: attached files to markdown (in the sandbox, cached), map-reduce over long
        documents, answers with page / sheet / section references."""
        return self.make_agent("analyzer", name, **options)

    def browser_agent(self, name: str = "browser_use", **options: Any) -> "Agent":
        """The browser-use agent: operates the browser environment step by step and ends with what it extracted."""
        return self.make_agent("browser_use", name, **options)

    def orchestra(self, model: str | None = None, name: str = "orchestra", **options: Any) -> "Agent":
        """AgentOrchestra: the planner over the deep researcher, browser-use agent, deep analyzer and tool
        manager (``models={"researcher": ...}`` gives a role its own model)."""
        return self.make_agent("orchestra", name, model=model, **options)

    def toolself(self, name: str = "toolself", **options: Any) -> "ToolSelfAgent":
        """A ToolSelf agent: runs in stages and reconfigures its own sub-goal, strategy, toolbox and
        knowledge by calling ``reconfigure`` (``tools=[...]`` is its global tool pool,
        ``engine_model=`` the reconfiguration engine's model)."""
        return self.make_agent("toolself", name, **options)

    def coral(self, name: str = "coral", **options: Any) -> "CoralTeam":
        """A CORAL team: an information-flow orchestrator and workers that coordinate only by A2A
        messages (``workers={"web_agent": "deep_researcher", ...}`` brings registered agents in)."""
        return self.make_agent("coral", name, **options)

    def export_training_data(
        self, runs: Any, path: str | Path, *, format: str = "rft", label: Any = None, overwrite: bool = False
    ) -> "ExportReport":
        """Write the agent's and the reconfiguration engine's turns of stored ToolSelf runs as JSONL
        for fine-tuning (``format="rft"``: chat messages of successful runs; ``"kto"``: prompt,
        completion and a trajectory-level label). ``label(trajectory) -> bool`` overrides the run's
        status as the label (a judge). An existing file is kept unless ``overwrite``."""
        from tea_notebook.agents.training_data import export_training_data

        return export_training_data(self, runs, path, format=format, label=label, overwrite=overwrite)

    def evaluate(self, agent: Any, tasks: Any, **options: Any) -> "EvalResults":
        """Run ``agent`` (an agent object or a registered name) over a task set (GAIA ``metadata.jsonl``,
        a JSONL / CSV of questions and answers, or a list), score and store each answer; rerunning the
        same ``name=`` resumes. Options: see :func:`tea_notebook.eval.runner.aevaluate`."""
        from tea_notebook.eval.runner import evaluate

        return evaluate(self, agent, tasks, **options)

    async def aevaluate(self, agent: Any, tasks: Any, **options: Any) -> "EvalResults":
        """:meth:`evaluate`, awaited (``await ws.aevaluate(...)`` in a cell)."""
        from tea_notebook.eval.runner import aevaluate

        return await aevaluate(self, agent, tasks, **options)

    def promotion_gate(self, held_out: Any, *, agent: Any, **options: Any) -> "PromotionGate":
        """A gate that promotes candidate tools (experiences, expert agents: ``kind=``) only on a measured
        gain: ``gate.check(name)`` evaluates ``agent`` on the ``held_out`` tasks with and without the
        candidate and promotes it when the paired gain's interval lies above zero. Options: see
        :class:`tea_notebook.evolve.gate.PromotionGate`."""
        from tea_notebook.evolve.gate import PromotionGate

        return PromotionGate(self, held_out, agent=agent, **options)

    def keep_configuration(self, run_id: str, *, stage: int, name: str) -> "AgentRecord":
        """Keep the configuration of stage ``stage`` of a ToolSelf run (sub-goal, strategy, toolbox,
        knowledge) for reuse, as agent ``name`` in the expert-agent bank: a candidate of the promotion
        gate, made from the run's task and by the run, promoted only by
        ``ws.promotion_gate(held_out, agent=...).check(name, kind="agent")``. See
        :mod:`tea_notebook.evolve.kept_configurations`."""
        from tea_notebook.evolve.kept_configurations import keep_configuration

        return keep_configuration(self, run_id, stage=stage, name=name)

    def lineage(self, name: str | None = None, *, kind: str = "tool") -> "Lineage":
        """The evolution lineage of the tools (or of ``name``; ``kind="experience"`` or ``"agent"``: of
        the experience entries or the expert agents): every version with its parent, the runs that
        made and used it, the gate's evidence; ``.rollback(name, version)`` takes a version and what
        derives from it out of use (nothing is deleted)."""
        from tea_notebook.evolve.lineage import evolution_lineage

        return evolution_lineage(self, name, kind)

    def evaluation(self, name: str) -> "EvalResults":
        """The stored results of an evaluation."""
        from tea_notebook.eval.results import EvalResults

        return EvalResults.load(self, name)

    def evaluations(self) -> list[dict]:
        """Every stored evaluation with its counts, newest first."""
        return self.db.evaluations()

    def runs(self, limit: int = 20) -> list[dict]:
        """Recent top-level runs, newest first."""
        return self.db.runs(limit)

    def trajectory(self, run_id: str) -> "Trajectory":
        """A run rebuilt from its events."""
        from tea_notebook.runtime.trajectory import Trajectory

        return Trajectory.load(self, run_id)

    async def fork(
        self,
        run_id: str,
        step: int | None = None,
        *,
        edit: Any = None,
        stage: int | None = None,
        rerun_from: int | None = None,
        model: str | None = None,
        agent: "Agent | None" = None,
        task: str | None = None,
        context: Context | None = None,
        raise_on_error: bool = True,
        replay: "str | dict[str, str] | None" = None,
    ) -> "RunResult":
        """A new run that replays a stored run up to ``step`` and goes on live from there.

        ``edit`` changes what happened at ``step`` first: ``{"observation": text, "action": i}`` (what
        action ``i`` returned; the model sees the new text from the next step on),
        ``{"actions": [{"name": ..., "arguments": {...}}]}`` (what the model chose at ``step``: run
        live), ``{"context": messages}`` (the prompt of ``step``, e.g. an edited
        ``result.context(step).messages``), ``{"message": text}`` (a CORAL run's message ``step``).
        A sub-agent's run (``run_id`` of a nested run) is forked within its parent: the parent goes on
        from the step that called it, with the sub-agent's new answer. A ToolSelf run forks at
        ``stage=K``, with ``edit={"stage": {...}}`` changing that stage's configuration.
        Stored tool results are replayed; ``rerun_from=K`` runs the tools of steps K.. again live.

        ``replay`` says how the tool calls the new run makes (those of steps ``rerun_from``.. and every
        step after ``step``) are answered: ``"recorded"`` (from the forked run's stored result of the
        same call at the same step; the tool is not run), ``"live"`` (run again: the default) or
        ``"refuse"`` (not run), for every tool, or per tool: ``{"place_order": "refuse", "*": "recorded"}``
        (the text ``"place_order=refuse,*=recorded"`` says the same). Every kind that forks: a ToolSelf
        stage, a CORAL team's message (each member answered from its own run; the message tools always run).

        The new run keeps the forked run's model (and step limit) unless ``model`` is given. Nothing
        is written when the fork cannot be made (:class:`~tea_notebook.runtime.forking.ForkError`
        names why). A new run that ends in ``error`` raises :class:`~tea_notebook.errors.RunFailed`
        unless ``raise_on_error=False``.
        """
        from tea_notebook.agents.forks import fork_run

        return await fork_run(
            self,
            run_id,
            step,
            edit=edit,
            stage=stage,
            rerun_from=rerun_from,
            model=model,
            agent=agent,
            task=task,
            context=context,
            raise_on_error=raise_on_error,
            replay=replay,
        )

    async def resume(
        self,
        run_id: str,
        *,
        context: Context | None = None,
        raise_on_error: bool = True,
        rerun_unknown: bool = False,
        wait: float | None = None,
        replay: "str | dict[str, str] | None" = None,
        force: bool = False,
    ) -> "RunResult":
        """Continue an ``interrupted`` run (stopped, or its kernel died) or one that ended in ``error``
        from its last finished step, with its recorded model and settings, as a new run linked to it.
        The step it was in is taken up again: the model is not asked again and tool calls that had
        returned are not run again. A call still running in this kernel (a synchronous tool the stop
        could not end) is waited for, up to ``wait`` seconds (30 by default), and its late result
        used; a call whose kernel died while it ran runs again only when its tool is idempotent or
        ``rerun_unknown`` is set, else the resume is refused naming it. A run is resumed once.
        ``replay`` is a replay policy as for :meth:`fork`: it answers the calls of the stopped step that
        had not returned and those of every later step (``recorded`` only where a result is stored).
        The new run starts with the run folder as the stop left it; a folder changed since (by hand)
        refuses the resume, naming what changed, unless ``force``: then it starts with the folder as it
        is now and records what was changed by hand."""
        from tea_notebook.agents.forks import RESUME_WAIT, resume_run

        return await resume_run(
            self,
            run_id,
            context=context,
            raise_on_error=raise_on_error,
            rerun_unknown=rerun_unknown,
            wait=RESUME_WAIT if wait is None else wait,
            replay=replay,
            force=force,
        )

    async def edit_effect(
        self,
        run_id: str,
        step: int,
        edit: Any,
        *,
        k: int = 8,
        score: Any = None,
        scorer: Any = None,
        expected: Any = None,
        level: float = 0.95,
        interval: str = "t",
        concurrency: int = 4,
        replay: "str | dict[str, str] | None" = "live",
        model: str | None = None,
        progress: str | bool = True,
        seed: int = 0,
    ) -> "EditEffect":
        """Did ``edit`` at ``step`` cause the outcome? Forks the step ``k`` times with the edit and ``k``
        times without it (both arms sample again from there on), ``concurrency`` at a time, scores each
        fork (its status: success = 1, else 0; or ``score(result) -> number``; or ``scorer=`` with
        ``expected=``, an evaluation scorer) and returns an :class:`~tea_notebook.agents.edit_effect.EditEffect`:
        the mean paired difference (epoch i with epoch i) with its interval at ``level`` (``interval="t"``:
        Student-t; ``"bootstrap"``), McNemar's exact p for right/wrong scores, and each arm's run ids.
        The forks' tools run ``live`` unless ``replay`` says otherwise (``"recorded"``: the arms differ
        only by the edit and the model's sampling). ``k`` below 2, a run still running or an edit the
        fork refuses raise before any fork is written."""
        from tea_notebook.agents.edit_effect import edit_effect

        return await edit_effect(
            self,
            run_id,
            step,
            edit,
            k=k,
            score=score,
            scorer=scorer,
            expected=expected,
            level=level,
            interval=interval,
            concurrency=concurrency,
            replay=replay,
            model=model,
            progress=progress,
            seed=seed,
        )

    def branches(self, run_id: str) -> "Branches":
        """The family of a run: the run it was first forked from, and every fork and resume of it, as a tree."""
        from tea_notebook.runtime.branches import Branches

        return Branches.load(self, run_id)

    def compare(self, a: str, b: str) -> "Comparison":
        """Two runs side by side: where they diverge, their answers, status, steps, tokens and cost."""
        from tea_notebook.runtime.branches import Comparison

        return Comparison.load(self, a, b)

    def context(self, name: str | None = None) -> Context:
        """A new run context for bind / route / invoke (``with ws.context() as ctx:``)."""
        return Context(name)

    def activate(self) -> "_Activation":
        """Make this the current workspace (``@tool`` registers here).

        As a statement it stays current; as ``with ws.activate():`` only inside the block.
        """
        return _Activation(_current.set(self))

    def close(self) -> None:
        """Stop live environment sessions, write pending index files and close the database."""
        if _current.get() is self:
            _current.set(None)
        self.envs.release()
        for registry in (self.tools, self.toolkits, self.envs, self.agents, self.memory, self.experience):
            registry.flush()
        self.db.close()

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_html_(self) -> str:
        import html

        rows = "".join(
            f"<tr><td>{label}</td><td>{count}</td></tr>"
            for label, count in (
                ("tools", len(self.tools)),
                ("toolkits", len(self.toolkits)),
                ("environments", len(self.envs)),
                ("agents", len(self.agents)),
                ("memory items", len(self.memory)),
                ("runs", len(self.db.runs(10_000))),
            )
        )
        model = html.escape(self.default_model or "(none: tea/demo)")
        return (
            f"<b>tea workspace</b> <code>{html.escape(str(self.path))}</code> · embedder "
            f"<code>{html.escape(self.embedder.id)}</code> · default model <code>{model}</code>"
            f"<table>{rows}</table>"
        )

    def __repr__(self) -> str:
        return (
            f"Workspace({str(self.path)!r}, tools={len(self.tools)}, envs={len(self.envs)}, "
            f"agents={len(self.agents)}, embedder={self.embedder.id!r})"
        )


def _restore_agent(ws: Workspace, name: str) -> Any:
    from tea_notebook.agents.kinds import restore_runner

    return restore_runner(ws, name)


def _tool_maker(ws: Workspace, **options: Any) -> "ToolMaker":
    from tea_notebook.evolve.toolmaker import ToolMaker

    return ToolMaker(ws, **options)


class _Activation:
    """Returned by :meth:`Workspace.activate`; as a context manager it restores the previous one."""

    def __init__(self, token: contextvars.Token):
        self._token = token

    def __enter__(self) -> "_Activation":
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._token)


if TYPE_CHECKING:  # the type checker holds the façade to the services the floors below are typed against

    def _implements(ws: Workspace) -> tuple[RunHost, WorkerHost]:
        return ws, ws
