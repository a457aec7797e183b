"""IPython magics: ``%tea`` (workspace, registries, runs), ``%%tool`` and ``%%agent``.

``%%agent`` runs the agent on the library's background event loop while the cell's thread waits;
a kernel interrupt (■, or the live view's Stop button, which asks the Jupyter server for one)
arrives there as KeyboardInterrupt and becomes a cooperative stop, so the run ends as
``interrupted`` with its trajectory kept and the kernel usable.

This module dispatches; the rules live beside it: which agent ``%%agent`` runs and which options
reach it (:mod:`.agent_cell`, read from the agent kinds' registration), what ``%%tool`` registers
(:mod:`.tool_cell`), the flags ``%tea`` shares with the ``tea`` command line (:mod:`.tea_parsers`,
from :mod:`tea_notebook.flags`), and how listings display (:mod:`.listing`).
"""

from __future__ import annotations

import shlex
from typing import Any, Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import MagicArgumentParser, argument, magic_arguments, parse_argstring
from traitlets import Bool, Enum, Float, Integer, List, Unicode, observe

from tea_notebook.errors import TeaError
from tea_notebook.flags import REPLAY, RESUME_FORCE
from tea_notebook.notebook.agent_cell import (
    agent_for,
    agent_help,
    attached_files,
    cell_options,
    checked_steps,
    interpolate,
    kind_help,
)
from tea_notebook.notebook.cell_commands import CELLS_HELP, cells_envs, checked_grants, start_in_notebook
from tea_notebook.notebook.listing import Listing, Text, record_rows, run_row
from tea_notebook.notebook.tea_parsers import POSITIONALS, TeaParser, expand_variables, known_agent, parse

HELP_TEMPLATE = """%tea subcommands:
  %tea model [NAME]           show or set the workspace's default model
  %tea tools [QUERY]          browse or search tools        %tea agents [QUERY]   agents
  %tea envs [QUERY]           environments                  %tea memory [QUERY]   memory, experiences
  %tea toolkits [QUERY]       toolkits
  %tea runs [--limit N]       recent runs                   %tea show RUN         one run's trajectory
  %tea fork RUN --step N [--rerun-from K] [--replay SPEC] [--model M] [--task TEXT] [--quiet]
                              replay RUN's first N steps (CORAL: messages), then go on live
                              (--rerun-from K: run the stored tool calls of steps K..N again;
                              --replay recorded|live|refuse or work=recorded,*=live: how tools answer)
  %tea fork RUN --stage K [--model M] [--quiet]
                              a ToolSelf run again from the start of its stage K
  %tea fork RUN --step N --edit [observation|actions|context] [--action I]
  %tea fork RUN --stage K --edit
                              runs nothing: puts a cell below that forks RUN with the value to edit
                              (step N's observation of action I, its actions, the context the model saw;
                              a CORAL run's message N; a ToolSelf stage's configuration)
  %tea context RUN --step N [--stage S] [--run SUBRUN]
                              what the model saw at step N: its parts, their sizes, what is new
  %tea branches RUN           a run's forks and resumes as a tree   %tea compare A B   two runs side by side
  %tea resume RUN [--quiet]   go on with an interrupted run (or one that ended in error); once per run;
                              --rerun-unknown runs again calls its dead kernel left unfinished;
                              --force goes on with a run folder changed by hand since the stop;
                              --replay SPEC as for fork
  %tea jobs                   background runs (%%agent --background, agent.start) with Stop buttons
  %tea proposals              the agent's cells waiting for you (%%agent NAME --cells [ask|read|auto])
  %tea approve P              run proposal P (%%tea approve P + the code: run your edit of it)
  %tea reject P [REASON]      reject proposal P: it never runs
  %tea fix [CELL_ID] [--agent NAME] [--model M] [--grant PERM]
                              send a failing cell (default: the last one) to an agent, which proposes an edit
  %tea versions NAME          a tool's versions             %tea rollback NAME VERSION
  %tea workspace [PATH]       show or switch the workspace  %tea plot [RUN]       plot a run (or all runs)
  %tea create-tool [--manual] [--model M] [--max-fixes N] [--quiet] "WHAT THE TOOL SHOULD DO"
                              reuse a tool or write, test and register one (--manual: you approve it)
  %tea evolve [--ground-truth X] [--manual] [--model M] [--quiet] "TASK"
                              run the Mem²Evolve co-evolution loop on a task; --held-out TASKS
                              [--gate-agent A] [--level L] [--gate-epochs K] [--gate-scorer S]: new
                              tools are candidates, promoted only on a measured held-out gain
  %tea stats                  tools created, reuse rate, first-pass validity, mean fix iterations
  %tea mcp add NAME [--env K=V] [--prefix P] [--timeout S] (--url URL [--token-env NAME] | COMMAND [ARGS...])
                              register an MCP server's tools as toolkit NAME (stdio command or HTTP url)
  %tea mcp list               imported MCP servers          %tea mcp remove NAME
  %tea plot evolution         memory growth over tasks, tools created vs reused, first-pass validity
  %tea egress [allow|deny|remove PATTERN... | only-allowed on|off]
                              where model-chosen network actions may go (browser, page reader, sandboxes);
                              local addresses only with host and port: %tea egress allow localhost:8765
{eval}
                              evaluate an agent on a task set (a GAIA metadata.jsonl or folder, a JSONL /
                              CSV of questions and answers, or "sample"); the same --name resumes
  %tea eval show NAME         stored results of an evaluation   %tea eval list   all evaluations
{doctor}
                              preflight a model: key, tool calls, JSON mode, context, latency, price
  %tea help
Cell magics: %%tool [--name N] [--toolkit T] [--category C] [--idempotent] [--process]
             %%agent [AGENT] [options] (see %%agent?)"""


def help_text() -> str:
    """``%tea help``: the subcommands, the shared ones' flags from the flag table."""
    from tea_notebook.notebook.tea_parsers import synopsis

    return HELP_TEMPLATE.format(
        eval=synopsis("eval", "  %tea eval AGENT TASKS"), doctor=synopsis("doctor", "  %tea doctor [MODEL]")
    )


@magics_class
class TeaMagics(Magics):
    """The tea_notebook magics. Settings: ``%config TeaMagics.default_model = "provider/model"``."""

    default_model = Unicode(None, allow_none=True, config=True, help="Model for %%agent when none is given.")
    workspace_path = Unicode(".tea", config=True, help="Folder of the current workspace.")
    live = Bool(True, config=True, help="Show the live trajectory view while %%agent runs.")
    update_interval = Float(0.25, config=True, help="Seconds between live view updates.")
    tool_approval = Enum(
        ["auto", "manual"],
        default_value="auto",
        config=True,
        help="%tea create-tool / evolve: 'manual' holds tools that passed for accept(), edit(code) or reject(why).",
    )
    model_timeout = Float(
        None, allow_none=True, config=True, help="Seconds one model call may take (default 60; the workspace's)."
    )
    model_retries = Integer(
        None, allow_none=True, config=True, help="Retries of a model call's transient errors (default 1)."
    )
    api_base = Unicode(
        None, allow_none=True, config=True, help="URL of an OpenAI-compatible server (Ollama, vLLM, llama.cpp)."
    )
    egress_allow = List(
        Unicode(),
        config=True,
        help="Hosts model-chosen network actions may reach, added to the current workspace's egress policy "
        "(kept there): 'example.com', '*.example.com', and local addresses only with a port: 'localhost:8765'.",
    )
    egress_deny = List(
        Unicode(), config=True, help="Hosts refused to model-chosen network actions (added to the workspace's policy)."
    )

    def __init__(self, shell: Any = None, **kwargs: Any):
        super().__init__(shell=shell, **kwargs)
        self._workspace = None
        self._activation = None

    # -- the workspace --------------------------------------------------------------------
    @property
    def workspace(self) -> Any:
        """The current workspace (opened on first use, made current so ``@tool`` registers there)."""
        if self._workspace is None:
            from tea_notebook.workspace import Workspace

            self._workspace = Workspace(self.workspace_path)
            self._activation = self._workspace.activate()
            self._model_settings()
            self._egress_settings()
        return self._workspace

    @observe("model_timeout", "model_retries", "api_base")
    def _model_settings(self, change: Any = None) -> None:
        """``%config TeaMagics.model_timeout / model_retries / api_base`` apply to the current workspace."""
        if self._workspace is None:
            return
        for name in ("model_timeout", "model_retries", "api_base"):
            value = getattr(self, name)
            if value is not None or (change is not None and change["name"] == name):
                setattr(self._workspace, name, value)

    @observe("egress_allow", "egress_deny")
    def _egress_settings(self, change: Any = None) -> None:
        """``%config TeaMagics.egress_allow / egress_deny`` add to the current workspace's egress policy."""
        if self._workspace is None:
            return
        try:
            self._workspace.egress.allow(*self.egress_allow).deny(*self.egress_deny)
        except ValueError as exc:
            raise UsageError(f"TeaMagics.egress_allow/egress_deny: {exc}") from None

    def _switch(self, path: str) -> Any:
        """Open the workspace at ``path`` and make it current; when it cannot be opened, the current
        one stays (every later ``%tea`` keeps working) and the UsageError says why."""
        from pathlib import Path

        from tea_notebook.workspace import Workspace

        old = self._workspace
        if old is not None and Path(path).expanduser().resolve() == old.path:
            old.close()  # the same folder: reopened, never open twice at once
            self._workspace = old = None
        try:
            new = Workspace(path)
        except (TeaError, OSError) as exc:
            kept = f"; still using {old.path}" if old is not None else ""
            raise UsageError(f"%tea workspace {path}: {_short(exc)}{kept}") from None
        if old is not None:
            old.close()
        self._workspace = new
        self.workspace_path = path
        self._activation = new.activate()
        self._model_settings()
        self._egress_settings()
        return new

    # -- %tea -----------------------------------------------------------------------------
    def _doctor(self, words: list[str]) -> Any:
        """``%tea doctor [MODEL] [--model M] [--api-base URL] [--timeout S]`` → the model's preflight
        report (default: the workspace's model)."""
        from tea_notebook.eval.doctor import preflight
        from tea_notebook.models.client import resolve_model
        from tea_notebook.notebook.tea_parsers import USAGE, parse

        args = parse("doctor", words)
        if args.model_word and args.model:
            raise UsageError(USAGE["doctor"])
        ws = self.workspace
        model = args.model_word or args.model
        model = model or resolve_model(None, None, self.default_model or ws.default_model)[0]
        try:
            return preflight(model, ws=ws, api_base=args.api_base, timeout=args.timeout)
        except TeaError as exc:
            raise UsageError(str(exc)) from None

    @no_var_expand
    @line_cell_magic
    def tea(self, line: str, cell: str | None = None) -> Any:
        """Workspace, registries and runs; ``%tea help`` lists the subcommands (``%%tea`` is only for
        ``%%tea approve P`` + code)."""
        line = expand_variables(self.shell, line)  # $name and {expr}, never inside a ${NAME} reference
        words = _split(line)
        if not words or words[0] == "help":
            return Text(help_text())
        cmd, rest = words[0], words[1:]
        if cell is not None or cmd in ("proposals", "approve", "reject", "fix"):
            from tea_notebook.notebook.cell_commands import run_subcommand

            return run_subcommand(self, cmd, rest, cell)  # the agent's cells (notebook environment)
        if cmd in ("create-tool", "evolve"):
            tail = line.strip()[len(cmd) :]
            return self._create_tool(tail) if cmd == "create-tool" else self._evolve(tail)
        if cmd == "fork":
            return self._fork(line.strip()[len(cmd) :])
        if cmd in ("context", "resume", "branches", "compare"):
            return self._time_travel(cmd, line.strip()[len(cmd) :])
        if cmd == "eval":
            return self._eval(line.strip()[len(cmd) :])
        if cmd == "mcp":
            return self._mcp(line.strip()[len(cmd) :])
        if cmd == "doctor":
            return self._doctor(rest)
        if cmd == "egress":
            return self._egress(rest)
        if cmd in POSITIONALS:  # a missing, extra or empty word is refused by name before anything runs
            parse(cmd, rest)
        if cmd == "workspace" and rest:
            return self._switch(rest[0])  # before opening the default one
        ws = self.workspace
        try:
            if cmd == "model":
                from tea_notebook.models.client import display_name, resolve_model

                if rest:
                    ws.default_model = rest[0]
                if self.default_model:
                    return Text(f"{display_name(self.default_model)} (from %config TeaMagics.default_model)")
                model, source = resolve_model(None, None, ws.default_model)
                label = {"workspace": "the workspace default", "default": "no model set: the offline demo"}.get(
                    source, source
                )
                return Text(f"{display_name(model)} (from {label})")
            if cmd == "memory":
                from tea_notebook.notebook.memory_view import MemoryExplorer

                return MemoryExplorer(ws.memory, " ".join(rest) or None)
            if cmd in ("tools", "agents", "envs", "toolkits"):
                from tea_notebook.notebook.registry_view import RegistryBrowser

                registry = {"tools": ws.tools, "agents": ws.agents, "envs": ws.envs, "toolkits": ws.toolkits}[cmd]
                return RegistryBrowser(registry, " ".join(rest) or None, title=cmd)
            if cmd == "jobs":
                from tea_notebook.notebook.live import JobsView

                return JobsView(ws.jobs)
            if cmd == "runs":
                return Listing([run_row(ws, r) for r in ws.runs(parse("runs", rest).limit)], "runs")
            if cmd == "show":
                return ws.trajectory(self._arg(rest, "RUN"))
            if cmd == "versions":
                name = self._arg(rest, "NAME")
                rows = [
                    {"version": v.version, "hash": v.hash[:12], "current": v.current, "note": v.note}
                    for v in ws.tools.versions(name)
                ]
                return Listing(rows, f"versions of {name}")
            if cmd == "rollback":
                if len(rest) != 2 or not rest[1].isdigit():
                    raise UsageError("usage: %tea rollback NAME VERSION")
                return ws.tools.rollback(rest[0], int(rest[1]))
            if cmd == "workspace":
                return self._switch(rest[0]) if rest else ws
            if cmd == "stats":
                from tea_notebook.evolve.stats import tool_stats

                return tool_stats(ws)
            if cmd == "plot":
                from tea_notebook.runtime.plots import plot_evolution, plot_run, plot_runs

                if rest and rest[0] == "evolution":
                    return plot_evolution(ws)
                return plot_run(ws.trajectory(rest[0])) if rest else plot_runs(ws)
        except TeaError as exc:
            raise UsageError(str(exc)) from None
        raise UsageError(f"unknown %tea subcommand {cmd!r}; %tea help lists them")

    # -- %tea egress ------------------------------------------------------------------------------
    def _egress(self, words: list[str]) -> Any:
        """``%tea egress [allow|deny|remove PATTERN... | only-allowed on|off]``: the workspace's egress
        policy (where model-chosen network actions may go), after the change."""
        policy = self.workspace.egress
        usage = "usage: %tea egress [allow|deny|remove PATTERN ... | only-allowed on|off]"
        if words:
            sub, args = words[0], words[1:]
            try:
                spaced = [a for a in args if not a.strip() or any(c.isspace() for c in a)]
                if spaced:
                    raise UsageError(f"%tea egress {sub}: {spaced[0]!r} is not a host name (it has spaces)")
                if sub in ("allow", "deny", "remove") and args:
                    getattr(policy, sub)(*args)
                elif sub == "only-allowed" and args in (["on"], ["off"]):
                    policy.set_only_allowed(args == ["on"])
                else:
                    raise UsageError(usage)
            except ValueError as exc:
                raise UsageError(f"%tea egress {sub}: {exc}") from None
        return Text(policy.describe())

    # -- %tea create-tool / evolve ----------------------------------------------------------
    def _create_tool(self, tail: str) -> Any:
        """``%tea create-tool [--manual|--auto] [--model M] [--max-fixes N] [--quiet] TEXT`` → a Creation."""
        parser = TeaParser(prog="%tea create-tool", add_help=False)
        parser.add_argument("text", nargs="*")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--manual", action="store_true", help="wait for your approval before registering")
        mode.add_argument("--auto", action="store_true", help="register what passes (overrides tool_approval)")
        parser.add_argument("--model", help="model for the tool manager")
        parser.add_argument("--max-fixes", type=int, default=3, help="bound on fix iterations")
        parser.add_argument("--quiet", action="store_true", help="no live view")
        args = parser.parse_args(_split(tail))
        request = " ".join(args.text).strip()
        if not request:
            raise UsageError('usage: %tea create-tool [--manual] [--model M] "what the tool should do"')
        if args.max_fixes < 0:
            raise UsageError("--max-fixes must be 0 or more")
        approval = "manual" if args.manual else "auto" if args.auto else self.tool_approval
        ws = self.workspace
        model = self._model_for("create-tool", args.model)
        from tea_notebook.evolve.toolmaker import ToolMaker

        maker = ToolMaker(ws, model=model, approval=approval, max_fixes=args.max_fixes)
        try:
            return self._drive(ws, lambda ctx: maker.acreate(request, context=ctx), quiet=args.quiet)
        except TeaError as exc:
            raise UsageError(f"%tea create-tool: {_short(exc)}") from None

    FORK_USAGE = (
        "usage: %tea fork RUN --step N [--rerun-from K] [--replay SPEC] [--model M] [--task TEXT] [--quiet] · "
        "%tea fork RUN --stage K · %tea fork RUN --step N --edit [observation|actions|context] [--action I]"
    )

    def _fork(self, tail: str) -> Any:
        """``%tea fork RUN --step N [--rerun-from K] [--model M] [--task TEXT] [--quiet]`` (or ``--stage K``
        for a ToolSelf run) → the new run's RunResult (its view says which run and step it was forked
        from). With ``--edit [KIND]`` nothing runs: a cell below is prefilled with ``await ws.fork(...)``
        and the value to edit (see :mod:`tea_notebook.notebook.fork_cells`)."""
        parser = TeaParser(prog="%tea fork", add_help=False)
        parser.add_argument("run")
        parser.add_argument("--step", type=int, help="replay this many steps (CORAL: messages)")
        parser.add_argument("--stage", type=int, help="a ToolSelf run: fork at the start of this stage")
        parser.add_argument("--edit", nargs="?", const="", help="prefill a cell that forks with an edit")
        parser.add_argument("--action", type=int, help="with --edit observation: which action's observation")
        parser.add_argument("--rerun-from", dest="rerun_from", type=int, help="run steps K.. tools again")
        parser.add_argument("--model", help="model for the steps after the fork (default: the forked run's model)")
        parser.add_argument("--task", nargs="+", help="a different task for the new run")
        parser.add_argument("--quiet", action="store_true", help="no live view")
        REPLAY.add_to(parser)
        try:
            args = parser.parse_args(_split(tail))
        except (UsageError, SystemExit) as exc:
            raise UsageError(f"%tea fork: {exc}; {self.FORK_USAGE}") from None
        if (args.step is None) == (args.stage is None):
            raise UsageError(f"%tea fork needs --step N or --stage K (one of them). {self.FORK_USAGE}")
        if args.step is not None and args.step < 0:
            raise UsageError("--step must be 0 or more")
        if args.stage is not None and args.stage < 1:
            raise UsageError("--stage must be 1 or more (stages are numbered from 1)")
        if args.action is not None and args.edit is None:
            raise UsageError("--action goes with --edit observation (which action's observation to edit)")
        if args.action is not None and args.action < 1:
            raise UsageError("--action must be 1 or more (actions are numbered from 1)")
        if args.rerun_from is not None and args.stage is not None:
            raise UsageError("--rerun-from applies to a fork by --step, not --stage")
        if args.edit is not None and args.edit not in ("", "observation", "actions", "context", "message", "stage"):
            raise UsageError(
                f"--edit {args.edit}: an edit is observation, actions or context (a CORAL run: message; "
                "a ToolSelf stage: stage)"
            )
        ws = self.workspace
        model = args.model  # not the magics' default: a fork goes on with the forked run's model
        task = " ".join(args.task) if args.task else None
        if args.edit is not None:
            return self._fork_cell(ws, args, model, task)
        try:
            result = self._drive(
                ws,
                lambda ctx: ws.fork(
                    args.run,
                    args.step,
                    stage=args.stage,
                    rerun_from=args.rerun_from,
                    model=model,
                    task=task,
                    context=ctx,
                    raise_on_error=False,
                    replay=args.replay,
                ),
                quiet=args.quiet,
            )
        except TeaError as exc:
            raise UsageError(f"%tea fork: {_short(exc)}") from None
        if result.status == "error":
            raise UsageError(f"the forked run ended with an error: {result.error} (run {result.run_id})")
        return result

    def _fork_cell(self, ws: Any, args: Any, model: str | None, task: str | None) -> Any:
        """``%tea fork ... --edit``: a new cell below holding the fork with the value to edit; nothing runs."""
        from tea_notebook.notebook.fork_cells import fork_cell

        name, setup = self._workspace_name(ws)
        try:
            cell = fork_cell(
                ws,
                args.run,
                step=args.step,
                stage=args.stage,
                kind=args.edit,
                action=args.action,
                rerun_from=args.rerun_from,
                model=model,
                task=task,
                ws_name=name,
                setup=setup,
                replay=args.replay,
            )
        except TeaError as exc:
            raise UsageError(f"%tea fork --edit: {_short(exc, 600)}") from None
        self.shell.set_next_input(cell.code, replace=False)
        return Text(f"the cell below forks the run with {cell.what} edited: change it there, then run that cell")

    def _workspace_name(self, ws: Any) -> tuple[str, str]:
        """How a prefilled cell names the magics' workspace (see :func:`fork_cells.workspace_name`)."""
        from tea_notebook.notebook.fork_cells import workspace_name

        return workspace_name(getattr(self.shell, "user_ns", {}) or {}, ws)

    def _time_travel(self, cmd: str, tail: str) -> Any:
        """``%tea context RUN --step N [--stage S] [--run SUBRUN]``, ``%tea branches RUN``,
        ``%tea compare A B``, ``%tea resume RUN [--quiet]``."""
        usage = {
            "context": "usage: %tea context RUN --step N [--stage S] [--run SUBRUN]",
            "branches": "usage: %tea branches RUN",
            "compare": "usage: %tea compare RUN_A RUN_B",
            "resume": "usage: %tea resume RUN [--quiet] [--rerun-unknown] [--force] [--replay SPEC]",
        }[cmd]
        parser = TeaParser(prog=f"%tea {cmd}", add_help=False)
        parser.add_argument("runs", nargs="*")
        if cmd == "context":
            parser.add_argument("--step", type=int)
            parser.add_argument("--stage", default="")
            parser.add_argument("--run", dest="sub")
        if cmd == "resume":
            parser.add_argument("--quiet", action="store_true")
            parser.add_argument("--rerun-unknown", dest="rerun_unknown", action="store_true")
            RESUME_FORCE.add_to(parser)
            REPLAY.add_to(parser)
        try:
            args = parser.parse_args(_split(tail))
        except (UsageError, SystemExit) as exc:
            raise UsageError(f"%tea {cmd}: {exc}; {usage}") from None
        if len(args.runs) != (2 if cmd == "compare" else 1):
            raise UsageError(usage)
        ws = self.workspace
        try:
            if cmd == "context":
                if args.step is None:
                    raise UsageError(f"%tea context needs --step N. {usage}")
                from tea_notebook.runtime.contexts import load_context

                return load_context(ws, args.sub or args.runs[0], args.step, args.stage)  # the step's requests only
            if cmd == "branches":
                return ws.branches(args.runs[0])
            if cmd == "compare":
                return ws.compare(*args.runs)
            result = self._drive(
                ws,
                lambda ctx: ws.resume(
                    args.runs[0],
                    context=ctx,
                    raise_on_error=False,
                    rerun_unknown=args.rerun_unknown,
                    force=args.force,
                    replay=args.replay,
                ),
                quiet=args.quiet,
            )
        except TeaError as exc:
            raise UsageError(f"%tea {cmd}: {_short(exc, 600)}") from None
        if result.status == "error":
            raise UsageError(f"the resumed run ended with an error: {result.error} (run {result.run_id})")
        return result

    def _evolve(self, tail: str) -> Any:
        """``%tea evolve [--ground-truth X] [--manual|--auto] [--model M] [--quiet] [--held-out TASKS …] TASK`` →
        an EvolutionResult (with ``--held-out``, the promotion gate's flags :data:`~tea_notebook.flags.EVOLVE_GATE`)."""
        parser = TeaParser(prog="%tea evolve", add_help=False)
        parser.add_argument("task", nargs="*")
        parser.add_argument("--ground-truth", dest="ground_truth", help="the expected answer (judged against it)")
        parser.add_argument("--model", help="model for every stage of the loop")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--manual", action="store_true", help="new tools and fixed versions wait for approval")
        mode.add_argument("--auto", action="store_true", help="register what passes (overrides tool_approval)")
        parser.add_argument("--quiet", action="store_true", help="no live view")
        from tea_notebook.flags import EVOLVE_GATE

        for flag in EVOLVE_GATE:
            flag.add_to(parser)
        args = parser.parse_args(_split(tail))
        task = " ".join(args.task).strip()
        if not task:
            raise UsageError('usage: %tea evolve [--ground-truth X] [--manual] [--model M] [--held-out TASKS] "TASK"')
        gate_options = [f.name for f in EVOLVE_GATE[1:] if getattr(args, f.dest) != f.default]
        if gate_options and not args.held_out:
            raise UsageError(
                f"%tea evolve: {', '.join(gate_options)} configure the promotion gate: add --held-out TASKS"
            )
        from tea_notebook.evolve.loop import Mem2Evolve

        ws = self.workspace
        model = self._model_for("evolve", args.model)
        try:
            approval = "manual" if args.manual else "auto" if args.auto else self.tool_approval
            gate = None
            if args.held_out:
                gate = ws.promotion_gate(
                    args.held_out,
                    agent=args.gate_agent,
                    level=args.level,
                    epochs=args.gate_epochs,
                    scorer=args.gate_scorer,
                )
            loop = Mem2Evolve(ws, model=model, approval=approval, gate=gate)
            return self._drive(ws, lambda ctx: loop.arun(task, args.ground_truth, context=ctx), quiet=args.quiet)
        except TeaError as exc:
            raise UsageError(f"%tea evolve: {_short(exc)}") from None

    def _eval(self, tail: str) -> Any:
        """``%tea eval AGENT TASKS [options]`` → EvalResults (``show NAME``, ``list``: stored ones)."""
        words = _split(tail)
        ws = self.workspace
        if words[:1] == ["list"]:
            parse("eval list", words[1:])
            rows = [{k: r[k] for k in ("name", "tasks", "correct", "errors")} for r in ws.evaluations()]
            return Listing(rows, "evaluations")
        if words[:1] == ["show"]:
            try:
                return ws.evaluation(parse("eval show", words[1:]).name)
            except TeaError as exc:
                raise UsageError(str(exc)) from None
        from tea_notebook.flags import EVAL_OPTIONS
        from tea_notebook.notebook.tea_parsers import USAGE, magic_parser

        if len(words) < 2:
            raise UsageError(USAGE["eval"])
        args = magic_parser("eval").parse_args(words)
        known_agent(ws, args.agent)  # before any task runs
        if args.max_steps is not None:
            checked_steps(args.max_steps, "--max-steps")
        from tea_notebook.eval.runner import evaluate

        tasks: Any = args.tasks
        if tasks == "sample":
            from tea_notebook.eval.datasets import sample_path

            tasks = sample_path()
        options = {k: getattr(args, k) for k in EVAL_OPTIONS}
        if args.model is None and self.default_model:
            options["model"] = self.default_model
        try:
            return evaluate(ws, args.agent, tasks, progress="off" if args.quiet else "auto", **options)
        except TeaError as exc:
            raise UsageError(f"%tea eval: {_short(exc)}") from None

    # -- %tea mcp ---------------------------------------------------------------------------
    def _mcp(self, tail: str) -> Any:
        """``%tea mcp add NAME ...`` / ``list`` / ``remove NAME``: MCP servers' tools in TCP."""
        words = _split(tail)
        sub = words[0] if words else ""
        ws = self.workspace
        try:
            if sub == "add":
                return self._mcp_add(words[1:])
            if sub == "list":
                parse("mcp list", words[1:])
                rows = [
                    {
                        "server": kit.name,
                        "where": (kit.metadata.get("provenance") or {}).get("mcp", {}).get("where", ""),
                        "tools": ", ".join(kit.tools),
                    }
                    for kit in ws.toolkits.list(_usage=False)
                    if kit.origin == "mcp"
                ]
                return Listing(rows, "MCP servers")
            if sub == "remove" and len(words) == 2:
                removed = ws.tools.remove_mcp(words[1])
                return Text(f"removed MCP server {words[1]} and its tools: {', '.join(removed) or '(none)'}")
        except TeaError as exc:
            raise UsageError(f"%tea mcp {sub}: {_short(exc, 800)}") from None
        raise UsageError(
            "usage: %tea mcp add NAME (--url URL | COMMAND [ARGS...]) · %tea mcp list · %tea mcp remove NAME"
        )

    def _mcp_add(self, words: list[str]) -> Any:
        valued = {"--url", "--env", "--header", "--prefix", "--timeout", "--token-env"}
        i = 1  # options come after NAME and before the server's command (which has options of its own)
        while i < len(words) and words[i].startswith("-"):
            if words[i] == "--":
                break
            i += 2 if words[i] in valued else 1
        words, command = words[:i], words[i + 1 :] if words[i : i + 1] == ["--"] else words[i:]
        parser = MagicArgumentParser(prog="%tea mcp add", add_help=False)
        parser.add_argument("name")
        parser.add_argument("--url", help="streamable HTTP endpoint of the server")
        parser.add_argument("--env", action="append", default=[], metavar="K=V", help="environment of a stdio server")
        parser.add_argument("--header", action="append", default=[], metavar="K=V", help="HTTP header")
        parser.add_argument("--prefix", help="tool name prefix (default NAME_; '' keeps the server's names)")
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds to connect")
        parser.add_argument("--token-env", dest="token_env", metavar="NAME", help="bearer token from this variable")
        args = parser.parse_args(words)
        if bool(command) == bool(args.url):
            raise UsageError("%tea mcp add NAME needs a command (stdio) or --url URL (streamable HTTP), not both")
        pairs = {}
        for label, items in (("env", args.env), ("header", args.header)):
            pairs[label] = {}
            for item in items:
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise UsageError(f"--{label} takes KEY=VALUE, not {item!r}")
                pairs[label][key] = value
        if args.token_env:  # 'Authorization: Bearer ${NAME}', read from the environment at every connection
            from tea_notebook.envs.mcp_client import bearer_reference

            if not args.url or any(k.lower() == "authorization" for k in pairs["header"]):
                raise UsageError("--token-env goes with --url, instead of an --header Authorization=...")
            pairs["header"]["Authorization"] = bearer_reference(args.token_env)
        report = self.workspace.tools.import_mcp(
            args.name,
            command or None,
            env=pairs["env"],
            url=args.url,
            headers=pairs["header"],
            prefix=args.prefix,
            timeout=args.timeout,
        )
        return Listing(record_rows(report.tools), f"MCP server {args.name}: registered tools")

    def _model_for(self, what: str, explicit: str | None) -> str:
        """The model a self-evolution subcommand uses; the offline demo cannot do this, so none is an error."""
        from tea_notebook.evolve.llm import require_model

        try:
            return require_model(self.workspace, explicit or self.default_model, f"%tea {what}")
        except TeaError:
            raise UsageError(
                f"%tea {what} needs a model: --model NAME, %tea model NAME, "
                "%config TeaMagics.default_model = NAME or the TEA_MODEL environment variable"
            ) from None

    @staticmethod
    def _arg(rest: list[str], what: str) -> str:
        if not rest:
            raise UsageError(f"this %tea subcommand needs {what}")
        return rest[0]

    # -- %%tool ---------------------------------------------------------------------------
    @no_var_expand
    @cell_magic
    def tool(self, line: str, cell: str) -> Any:
        """Register the functions the cell defines as tools (their source kept exactly as written).

        %%tool [--name N] [--toolkit T] [--category C] [--idempotent] [--process]: the flags are
        those of ``tea_notebook.flags.TOOL_CELL`` (``--process``: each call in a child process, so
        Stop can end it)."""
        from tea_notebook.notebook.tool_cell import parse_tool_line, register_cell_tools

        args = parse_tool_line(line)
        registered = register_cell_tools(
            self.shell,
            self.workspace,
            cell,
            args.name,
            args.toolkit,
            args.category,
            idempotent=args.idempotent,
            process=args.process,
        )
        return Listing(record_rows(registered), "registered tools")

    # -- %%agent --------------------------------------------------------------------------
    @magic_arguments()
    @argument("agent", nargs="?", default="agent", help=agent_help())
    @argument("--kind", help=kind_help())
    @argument("--file", action="append", default=[], help="attach a file to the run (repeatable)")
    @argument("--model", help="litellm model name, or tea/test, tea/demo, tea/replay:PATH")
    @argument(
        "--api-base",
        metavar="URL",
        help="an OpenAI-compatible server for this run (e.g. http://localhost:11434/v1; no key needed locally)",
    )
    @argument("--max-steps", type=int, help="step limit (1 or more)")
    @argument("--tools", help="comma-separated tool names to offer (checked before the run starts)")
    @argument("--env", action="append", default=[], help="bind an environment (repeatable)")
    @argument(
        "--grant",
        action="append",
        default=[],
        metavar="PERM",
        help="grant a permission for this run only, e.g. kernel.write (repeatable)",
    )
    @argument("--cells", nargs="?", const="ask", metavar="MODE", help=CELLS_HELP)
    @argument("--out", help="also store the RunResult in this variable")
    @argument("--quiet", action="store_true", help="no live view")
    @argument("--interpolate", action="store_true", help="replace {name} in the task with variables")
    @argument(
        "--background",
        action="store_true",
        help="return at once with a handle (handle.result(), handle.cancel(), %%tea jobs); the kernel stays free",
    )
    @no_var_expand
    @cell_magic
    def agent(self, line: str, cell: str) -> Any:
        """Run an agent on the cell's text; the result (RunResult) is the cell's value."""
        args = parse_argstring(self.agent, line)
        task = cell.strip()
        if not task:
            raise UsageError("%%agent needs the task in the cell body")
        if args.interpolate:
            task = interpolate(task, self.shell.user_ns)
        grants = list(args.grant)
        if args.cells is not None:  # works in this notebook: background, the notebook environment bound
            grants = checked_grants(args.cells, grants)
            args.env = cells_envs(args.cells, args.env)
        ws = self.workspace
        options = cell_options(ws, args)
        files = attached_files(args.file)
        agent = agent_for(ws, args.agent, args.kind, options)
        if args.cells is not None:
            model = args.model or self.default_model
            handle = start_in_notebook(
                self, agent, task, model=model, grants=grants, quiet=args.quiet, files=files, api_base=args.api_base
            )
            if args.out:
                self.shell.user_ns[args.out] = handle
            return handle
        if args.background:
            handle = self._start(
                agent, task, args.model or self.default_model, args.quiet, args.grant, files, args.api_base
            )
            if args.out:
                self.shell.user_ns[args.out] = handle
            return handle
        result = self._run(
            agent,
            task,
            args.model or self.default_model,
            quiet=args.quiet,
            grants=args.grant,
            files=files,
            api_base=args.api_base,
        )
        if args.out:
            self.shell.user_ns[args.out] = result
        if result.status == "error":
            raise UsageError(f"the run ended with an error: {result.error} (run {result.run_id}; %tea show to see it)")
        return result

    def _run(
        self,
        agent: Any,
        task: str,
        model: str | None,
        quiet: bool,
        grants: list[str] | None = None,
        files: list[str] | None = None,
        api_base: str | None = None,
    ) -> Any:
        def start(ctx: Any) -> Any:
            if api_base:
                ctx.model_options["api_base"] = api_base  # this run tree's model server
            # the result is kept (--out) before the cell raises for an error
            return agent.run(
                task, files or None, model=model, context=ctx, grants=list(grants or ()), raise_on_error=False
            )

        return self._drive(agent.workspace, start, quiet=quiet)

    def _start(
        self,
        agent: Any,
        task: str,
        model: str | None,
        quiet: bool,
        grants: list[str],
        files: list[str],
        api_base: str | None = None,
    ) -> Any:
        """Start a background run: its live view (with a Stop button that stops just this run) keeps
        updating after the cell has ended, and becomes the run's trajectory when it ends."""
        from tea_notebook.notebook.live import LiveView, follow_in_view

        view = None if quiet or not self.live else LiveView(self.update_interval, background=True)
        handle = agent.start(
            task,
            files or None,
            model=model,
            grants=list(grants),
            on_event=view,
            model_options={"api_base": api_base} if api_base else None,
        )
        if view is not None:
            follow_in_view(handle, view)
        handle.wait_started()  # milliseconds: so the cell's value names the run
        return handle

    def _drive(self, ws: Any, start: Callable[[Any], Any], quiet: bool) -> Any:
        """Run ``start(ctx)`` (a coroutine making runs under the cell's context ``ctx``) on the
        background loop with the live view following its run tree; an interrupt stops it cooperatively."""
        from tea_notebook._sync import submit
        from tea_notebook.notebook.kernel_shutdown import after_interrupt
        from tea_notebook.notebook.live import LiveView
        from tea_notebook.runtime.jobs import RunTree

        ctx = ws.context()
        view = None if quiet or not self.live else LiveView(self.update_interval)
        follow = RunTree(ctx.id, view) if view else None
        unsubscribe = ws.events.subscribe(follow) if follow else None
        run = start(ctx)
        future = submit(follow.run(run) if follow else run)
        result = None
        try:
            try:
                result = future.result()
            except KeyboardInterrupt:  # the kernel's ■ or the live view's Stop button
                after_interrupt()  # a kernel restart sends ■ first: the run then records the restart
                ctx.cancel.set()  # cooperative stop: the run ends as 'interrupted' and is stored
                if view is not None:
                    view.mark_stopping()
                result = future.result(timeout=30)
        finally:
            if unsubscribe:
                unsubscribe()
            if view is not None:
                view.close(final=view.ended(result))  # a run shown as the cell's value: its header once
        return result


def _split(tail: str) -> list[str]:
    """Shell-like words of a subcommand's arguments; unbalanced quotes (an apostrophe) fall back to spaces."""
    try:
        return shlex.split(tail)
    except ValueError:
        return tail.split()


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load(ip: Any) -> TeaMagics:
    """Register the magics with a shell (``%load_ext tea_notebook``)."""
    from tea_notebook.notebook.hints import register

    magics = TeaMagics(shell=ip, config=ip.config)
    ip.register_magics(magics)
    register(ip)  # a cell magic below a comment: say IPython's rule instead of "not found"
    from tea_notebook.notebook.sidebar_comm import register as register_sidebar

    # the JupyterLab TEA sidebar's comm target (in a Jupyter kernel only); it shows the open workspace
    magics.sidebar = register_sidebar(ip, lambda: magics._workspace)
    from tea_notebook.notebook.cells_comm import register as register_cells

    magics.cells = register_cells(ip)  # the notebook the agent's cells go to (the extension's comm, or the fallback)
    from tea_notebook.notebook.kernel_shutdown import watch_kernel_shutdown

    watch_kernel_shutdown(ip)  # a run a restart interrupts says so, not "stopped by the user"
    return magics
