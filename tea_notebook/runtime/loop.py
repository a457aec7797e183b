"""The tool-calling loop of one run (AgentOrchestra App. I), readable in one sitting.

:meth:`AgentRun.execute` takes steps until a control tool (``done``) ends the run, the step limit
comes, or the run is stopped. One step (:meth:`AgentRun._step`): :meth:`~AgentRun._choose` what to
do (ask the model, or take a fork's override), then either a control tool ends or continues the
run, or the actions run in order (sub-agent dispatches concurrently); the step is recorded and old
steps are folded into summaries when over budget. A reply the loop cannot act on is handled in one
place (:meth:`~AgentRun._malformed`): shown to the model, counted, and the run ends in ``error``
after ``max_consecutive_errors`` in a row. Everything that happens is an event in the workspace store.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook._threads import ACTION_THREADS, THREAD_JOBS
from tea_notebook.errors import TeaError
from tea_notebook.models.client import (
    DEMO_MODEL,
    ModelError,
    ModelReply,
    ToolCall,
    is_offline,
    litellm_ready,
    takes_images,
)
from tea_notebook.protocol.context import Context
from tea_notebook.runtime.action_tally import INVALID_CALL, ActionTally
from tea_notebook.runtime.divergence import DivergenceWatch
from tea_notebook.runtime.event_types import (
    ErrorEvent,
    FinishedStatus,
    ForkUnit,
    MemoryWrittenEvent,
    ModelResponseEvent,
    NoticeEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from tea_notebook.runtime.folder_snapshots import FolderSnapshots, manifest, restore
from tea_notebook.runtime.forking import ForkPlan, StepOverride
from tea_notebook.runtime.prompts import DONE_TOOL, Prompt, build_prompt
from tea_notebook.runtime.records import RunResult, StepRecord
from tea_notebook.runtime.replay_policy import Answer as ReplayAnswer
from tea_notebook.runtime.replay_policy import answer as replay_answer
from tea_notebook.runtime.replies import MalformedReply, read_reply
from tea_notebook.runtime.runlog import RunInterrupted
from tea_notebook.runtime.stop_reason import stop_reason
from tea_notebook.runtime.stopping import STOP_GRACE, StoppableRun
from tea_notebook.runtime.time_limits import TimeLimits
from tea_notebook.runtime.todo import TodoList

if TYPE_CHECKING:
    from tea_notebook.protocol.records import ToolRecord
    from tea_notebook.runtime.agent import Agent
    from tea_notebook.runtime.memory import MemoryStore

log = logging.getLogger(__name__)

TODO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "complete", "update", "list", "clear", "show", "export"]},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "priority": {"type": "string", "enum": ["high", "medium", "low"]},
                    "category": {"type": "string"},
                    "parameters": {"type": "object"},
                },
                "required": ["description"],
            },
        },
        "step_id": {"type": "integer"},
        "status": {"type": "string", "enum": ["success", "failed"]},
        "result": {"type": "string"},
        "description": {"type": "string"},
        "priority": {"type": "string", "enum": ["high", "medium", "low"]},
    },
    "required": ["action"],
    "additionalProperties": False,
}
TODO_TOOL = {
    "type": "function",
    "function": {
        "name": "todo",
        "description": (
            "Keep the plan in todo.md: add steps, complete/update a step, list, clear finished, show, export."
        ),
        "parameters": TODO_SCHEMA,
    },
}
#: a tool still running this long (s) after its ``tool_call`` has the step's events so far committed, at
#: the run's next look (at most ``STOP_POLL`` later; they were made durable in the intent journal before
#: it started; see ``_durable_before_tool``)
COMMIT_SLOW_TOOL = 0.05
#: the :meth:`Context.state` scope where a fork leaves the sub-agent forks its delegated calls continue
SUBFORKS = "tea.subforks"


def routable(record: Any) -> bool:
    """Whether a tool may be offered to an agent that did not name it (tools marked
    ``metadata["routing"] == "explicit"``, like CORAL's message tools, are offered only by name)."""
    return record.metadata.get("routing") != "explicit"


def pending_subforks(context: Context | None, agent: str) -> list[ForkPlan]:
    """The fork plans that ``agent``'s runs delegated from the run of ``context`` continue, in order
    (a forked run whose step re-runs a call of ``agent`` continues that call's own fork)."""
    if context is None:
        return []
    plans: list[ForkPlan] = context.state(SUBFORKS).get(agent, [])
    return plans


@dataclass
class Outcome:
    """What a control tool (one the loop handles itself: ``done``, ToolSelf's ``finish`` and
    ``reconfigure``, CORAL's ``submit_answer``) did: ``end`` the run with ``status``, ``go_on`` with
    ``observation``, or was ``invalid`` (``observation`` says why; it counts as a malformed output)."""

    kind: str
    observation: str = ""
    status: FinishedStatus = "success"  # read only when ``kind`` is "end"
    answer: str = ""
    files: list[str] = field(default_factory=list)


@dataclass
class Ending:
    """How a run ends: its status, answer, error and the files it shows."""

    status: FinishedStatus
    answer: str = ""
    error: str | None = None
    files: list[str] = field(default_factory=list)


def _content_chars(message: dict[str, Any]) -> int:
    content = message["content"]
    if isinstance(content, str):
        return len(content)
    return sum(len(part.get("text", "")) for part in content)


class AgentRun(StoppableRun):
    """The state of one run; :meth:`execute` is the loop. Subclasses change the rules through the hooks
    ``_controls``/``_control`` (loop-handled tools), ``_messages`` (the prompt) and ``_before_step``."""

    #: what ``ws.fork`` replays of such a run (recorded in ``run_started``; None: it cannot be forked)
    fork_unit: ForkUnit | None = "steps"

    def __init__(
        self,
        agent: "Agent",
        task: str,
        files: list[str],
        model: str | None,
        parent: Context | None,
        max_steps: int,
        replay: "ForkPlan | list[StepRecord] | None",
        fork: tuple[str, int] | None,
    ):
        resolved, source = agent.resolved_model(model)
        super().__init__(agent.workspace, agent.name, task, resolved, source, parent)
        self.agent, self.max_steps = agent, max_steps
        self.files = self.attach(files) if files else []
        self.todo = TodoList(self.folder / "todo.md") if agent.todo else None
        self.snapshots = FolderSnapshots(self.folder)
        #: how this run starts from a stored one (a fork, a resume); empty for a fresh run
        self.plan = replay if isinstance(replay, ForkPlan) else ForkPlan.of_steps(list(replay or []))
        self.steps: list[StepRecord] = list(self.plan.live)
        self.last_step = self.plan.last_step
        self.summaries: list[str] = list(self.plan.summaries)
        #: ``(steps, how many of them, their size)``: what :meth:`_history_size` counted last
        self._counted: tuple[list[StepRecord], int, int] | None = None
        if self.plan.source is None:
            recalled = self.ws.memory_store.recall(task) if len(self.ws.memory) else []
            self.plan.recalled = recalled  # recorded on run_started: a fork or resume takes them from there
        else:  # a fork or resume: its source's recalled insights (in plan.insights), not a new ranking
            recalled = []
        self.insights: list[str] = list(self.plan.insights) + [i for i in recalled if i not in self.plan.insights]
        #: the step being taken without asking the model (see :class:`StepOverride`), if any
        self.override: StepOverride | None = None
        self.fork = fork
        self.agent_tools: set[str] = set()
        #: steps in a row the model got wrong (see :meth:`_malformed`)
        self.consecutive_errors = 0
        #: tools whose call failed since the last action that succeeded (see :meth:`_decided_status`)
        self.unrecovered: list[str] = []
        #: how every action of the run went (see :meth:`_control_step`); a fork's from its replayed steps on
        self.tally = ActionTally(frozenset({"todo", *self._controls()}))
        for replayed, _ in self.plan.shown:
            self.tally.replayed(replayed.results)
        self.start_stopping()
        #: the time limits of the tool calls running now (``agent.tool_timeout``)
        self.time_limits = TimeLimits()
        #: the tool calls running now whose events are not committed yet: call id -> when they started
        #: (``time.monotonic()``; see :meth:`_durable_before_tool`)
        self.acting: dict[str, float] = {}
        self.native = self._native()
        #: the tool protocol a notice last said this run uses ("": none said; see :meth:`_say_tool_mode`)
        self.tool_mode_said = ""
        #: the server answered with native tool calls in this run (see :meth:`_follow_server`)
        self.tools_answered = False
        #: the named tools' offer: ``(key, tools, sub-agent tools, precondition tools, which of them had
        #: succeeded)`` (see :meth:`_offered`)
        self._offer_cache: tuple[tuple, list[dict[str, Any]], set[str], tuple[str, ...], tuple[bool, ...]] | None = None
        self._hidden: tuple[int, int] | None = None
        #: a stored tool version's OpenAI definition, made once a run: a routed step offers the same
        #: objects again, so the stored context keeps each one's JSON once (see :meth:`_tool_form`)
        self._tool_forms: dict[tuple[str, int], dict[str, Any]] = {}
        #: hashes each model input; a fork's compares its steps with the original's (see runtime.divergence;
        #: a CORAL member's fork is compared by its team, message by message)
        self.divergence = DivergenceWatch(self.ws, self.run_id, fork if self.fork_unit else None, self.plan)
        #: the prompt :meth:`_messages` built last (its pieces spare the stored context and the hash work)
        self._prompt: Prompt | None = None
        #: the embeddings of this run's memory folds, on a thread (see :meth:`_embed_memory`)
        self._embedding: list[concurrent.futures.Future] = []

    def _native(self) -> bool:
        if self.agent.tool_mode != "auto":
            return self.agent.tool_mode == "native"
        if is_offline(self.model):
            return True
        if not litellm_ready():
            return False  # decided again in execute(), once litellm is imported off the event loop
        from tea_notebook.models.client import function_calling

        # a model litellm does not know (every local server's) is sent tools on trial (see _call_model)
        return function_calling(self.model) is not False

    def _tools_on_trial(self) -> bool:
        """Native tools are sent on trial (``tool_mode="auto"`` and a model litellm does not know): a
        server that refuses them gets the JSON protocol for the rest of the run."""
        from tea_notebook.models.client import function_calling

        auto = self.agent.tool_mode == "auto" and not is_offline(self.model) and litellm_ready()
        return auto and function_calling(self.model) is None

    def _follow_server(self, reply: ModelReply, step: int) -> None:
        """``tool_mode="auto"`` follows what the server does: native tool calls in a JSON-protocol reply
        are used (and tools sent from then on); a reply without any, while tools are sent on trial and
        none came yet, switches the run to the JSON protocol (the reply is read as one)."""
        if self.agent.tool_mode != "auto":
            return
        if reply.tool_calls:
            self.tools_answered = True
            if not self.native:
                self.native = True
                self._say_tool_mode(step, "tool_mode auto: the server answers with native tool calls: they are used")
        elif self.native and not self.tools_answered and self._tools_on_trial():
            self.native = False
            said = "tool_mode auto: the server answered without native tool calls"
            self._say_tool_mode(step, f"{said}; the JSON tool protocol is used for the rest of this run")

    def _say_tool_mode(self, step: int, message: str) -> None:
        """Say in the run's view (a ``notice``) which tool protocol the run uses from now on, and why."""
        self.tool_mode_said = "native" if self.native else "json"
        self.emit("notice", NoticeEvent(message=message), step)

    # -- the loop -------------------------------------------------------------------------
    async def execute(self) -> RunResult:
        """Run the loop to its end and return the run's result."""
        try:
            return await self._execute()
        finally:  # its timers no longer hold the run (and its workspace)
            self.stop_looking()
            self.time_limits.close()

    async def _execute(self) -> RunResult:
        await self._begin()
        ending = Ending("max_steps")
        try:
            for step in range(self.last_step + 1, self.max_steps + 1):
                self._check_stop()
                stop = await self._before_step(step)
                if stop is not None:
                    ending = Ending(*stop)
                    break
                ended = await self._step(step)
                if ended is not None:
                    ending = ended
                    break
            else:
                ending.answer = "The step limit was reached before the task was done."
        except RunInterrupted:
            ending = Ending("interrupted", error=stop_reason())
        except ModelError as exc:
            ending = Ending("error", error=str(exc))
            self.emit("error", ErrorEvent(kind="model", message=str(exc)))
        except TeaError as exc:
            ending = Ending("error", error=str(exc))
            self.emit("error", ErrorEvent(kind=type(exc).__name__, message=str(exc)))
        except asyncio.CancelledError:
            self._close(Ending("interrupted", error=stop_reason("cancelled")))
            self._release_sessions_later()
            raise
        result = self._close(ending)
        await self.release_sessions()
        return result

    async def _step(self, step: int) -> Ending | None:
        """Take one step; how the run ends there, or None to go on."""
        tools, self.agent_tools = self._offered()
        record, calls, problem = await self._choose(step, tools)
        if problem is not None:
            return self._malformed(record, problem)
        if calls[0].name in self._controls():
            return await self._control_step(record, calls[0])
        calls = calls[: self.agent.max_actions]
        outcomes = await self._run_actions(calls, step)
        for c, (obs, _ok, _err) in zip(calls, outcomes):
            record.results.append((c.name, json.dumps(c.arguments, ensure_ascii=False, default=str), obs))
        all_invalid = all(err in INVALID_CALL for _, _, err in outcomes)
        self.consecutive_errors = self.consecutive_errors + 1 if all_invalid else 0
        self._finish_step(record)
        ending = self._too_many_errors(f"{self.consecutive_errors} consecutive steps whose every action was invalid")
        if ending is None:
            await self._fold_memory(step)
        return ending

    async def _choose(self, step: int, tools: list[dict[str, Any]]) -> tuple[StepRecord, list[ToolCall], str | None]:
        """What step ``step`` does: the model's reply read into thoughts and actions, or the fork's
        override of the step (:meth:`_take_override`); with what is wrong with it (None: nothing)."""
        override = self._take_override(step)
        record = StepRecord(step, note=override.note if override is not None else "")
        if override is not None and override.calls is not None:
            thoughts, calls = dict(override.thoughts), list(override.calls)
        else:
            reply = await self._call_model(step, tools, override.messages if override is not None else None)
            self._follow_server(reply, step)
            try:
                thoughts, calls = read_reply(reply, self.native)
            except MalformedReply as exc:
                if reply.tool_calls and not self.native:  # tool_mode="json" against a server that calls natively
                    names = ", ".join(c.name for c in reply.tool_calls[:3])
                    hint = f'the reply carried native tool calls ({names}): use tool_mode="native"'
                    return record, [], f"{exc} ({hint})"
                return record, [], str(exc)
        record.take_thoughts(thoughts)
        return record, calls, self._check(calls, {t["function"]["name"] for t in tools})

    def _take_override(self, step: int) -> StepOverride | None:
        """The fork's override of ``step`` (None: the model is asked as usual), made the current one:
        its stored results and verbatim calls apply to :meth:`_run_action`, its sub-agent forks to the
        calls it delegates."""
        self.override = self.plan.overrides.get(step)
        self.ctx.state(SUBFORKS).clear()
        if self.override is not None:
            self.ctx.state(SUBFORKS).update(self.override.subforks)
        return self.override

    async def _control_step(self, record: StepRecord, call: ToolCall) -> Ending | None:
        """A step whose one action is a control tool (:meth:`_controls`): it ends the run or goes on."""
        shown_args = json.dumps(call.arguments, ensure_ascii=False, default=str)
        outcome = (
            await self._control(call, record.number)
            if isinstance(call.arguments, dict)
            else Outcome("invalid", self._not_an_object(call).removeprefix("Error: "))
        )
        if outcome.kind == "invalid":
            return self._malformed(record, outcome.observation, (call.name, shown_args))
        verdict = self.tally.verdict() if outcome.kind == "end" and outcome.status == "success" else None
        if verdict is not None:  # whatever the model claims (any model, any control tool): see ActionTally
            marked = f"{outcome.observation} (marked failed: {verdict})"
            outcome = Outcome("end", marked, "failed", outcome.answer, outcome.files)
        record.results.append((call.name, shown_args, outcome.observation))
        self._finish_step(record)
        if outcome.kind == "end":
            return Ending(outcome.status, outcome.answer, files=outcome.files)
        self.consecutive_errors = 0
        return None

    def _malformed(self, record: StepRecord, problem: str, action: tuple[str, str] = ("error", "{}")) -> Ending | None:
        """A step the model got wrong (a reply that is not the protocol's, an unknown or misplaced
        action, a control call with bad arguments): the step's result for ``action`` (its name and
        arguments) shows the model the ``problem``; after ``max_consecutive_errors`` such steps in a
        row the run ends in ``error``."""
        self.consecutive_errors += 1
        record.results.append((*action, f"Error: {problem}"))
        error = ErrorEvent(kind="model_output", message=problem, consecutive=self.consecutive_errors)
        self.emit("error", error, record.number)
        self._finish_step(record)
        return self._too_many_errors(f"{self.consecutive_errors} consecutive malformed model outputs; last: {problem}")

    def _too_many_errors(self, why: str) -> Ending | None:
        if self.consecutive_errors >= self.agent.max_consecutive_errors:
            return Ending("error", error=why)
        return None

    def _check_stop(self) -> None:
        if self.ctx.cancel.is_set():
            raise RunInterrupted("the run was stopped")

    def _check(self, calls: list[ToolCall], offered: set[str]) -> str | None:
        """What is wrong with the actions chosen (None: nothing)."""
        if not calls:
            return "the action list is empty; call at least one tool (or 'done')"
        names = [c.name for c in calls]
        control = [n for n in names if n in self._controls()]
        if control and len(names) > 1:
            return f"'{control[0]}' must be the only action in its step"
        unknown = [n for n in names if n not in offered]
        if unknown:
            return f"unknown action(s) {', '.join(unknown)}; available: {', '.join(sorted(offered))}"
        return None

    # -- starting and ending ----------------------------------------------------------------
    async def _begin(self) -> None:
        """Record the start (and a fork's replayed steps), importing litellm first when needed."""
        first_hosted = self.agent.tool_mode == "auto" and not is_offline(self.model) and not litellm_ready()
        self.start(
            fork=self.fork,
            files=self.files,
            max_steps=self.max_steps,
            native_tools=self.native,
            forked_from=self.fork[0] if self.fork else None,
            fork_unit=self.fork_unit,
            **self.plan.started(),
        )
        if first_hosted:
            await self._import_litellm()
        contexts = self._source_contexts()
        shown: dict[str, Any] = {"succeeded": [], "state": {}}
        for replayed, extra in self.plan.shown:  # one transaction for all of them, not one each
            event = replayed.to_event()
            event["replayed"] = True
            if "edited" in extra:
                event["edited"] = extra["edited"]
            if contexts.get(replayed.number, shown) != shown:  # a fork of this fork restores it too
                event["context"] = shown = contexts[replayed.number]
            self.emit("step", event, replayed.number, durable=False)
        self.events.flush()
        self._replay_todo()
        self._restore_context(shown)
        if self.fork:
            self._restore_folder(*self.fork)

    def _source_contexts(self, upto: int | None = None) -> dict[int, dict[str, Any]]:
        """The run context (:meth:`Context.snapshot`) the run this one starts from recorded after each
        of its steps up to ``upto`` (the last one replayed by default): step -> snapshot."""
        upto = self.plan.last_step if upto is None else upto
        if self.plan.source is None or upto < 1:
            return {}
        recorded: dict[int, dict[str, Any]] = {}
        for _, _, step, data in self.ws.db.run_events_of_type([self.plan.source], ["step"]):
            if step is None or step > upto or '"context"' not in data:
                continue
            context = json.loads(data).get("context")
            if isinstance(context, dict):
                recorded[step] = context
        last: dict[str, Any] = {"succeeded": [], "state": {}}
        for step in range(1, upto + 1):  # the context after each step (a step records it when it changed)
            last = recorded[step] = recorded.get(step, last)
        return recorded

    def _restore_context(self, context: dict[str, Any]) -> None:
        """Start from the run context after the last step replayed: the precondition tools that had
        succeeded (what is offered next depends on them) and the toolkits' shared state."""
        if self.plan.source is not None and self.plan.shown:
            self.ctx.restore(context)
        if context.get("unkept"):
            unkept = ", ".join(context["unkept"])
            self.emit("notice", NoticeEvent(message=f"not restored (not JSON when recorded): the state of {unkept}"))
        #: the run context as last recorded in a ``step`` event (a step records it when it changed)
        self.context_recorded = self.ctx.snapshot()
        #: the original run's context after its steps, read when a recorded replay follows it
        self.recorded_contexts: dict[int, dict[str, Any]] = {}

    def _follow_recording(self, step: int) -> None:
        """After a step of a fork whose replay policy answers tools from the original run's recording,
        and while the replay has not departed from it: the run context as the original's step left it
        (what its recorded tools set up holds, as if they had run: ``notes_read`` is offered after a
        recorded ``notes_open``, a toolkit's state is the original's)."""
        recording = self.plan.recording
        if recording is None or step <= self.plan.last_step:
            return
        if recording.departed is not None and recording.departed <= step:
            return
        if not self.recorded_contexts:  # read once: the original's steps after the fork point
            self.recorded_contexts = self._source_contexts(max([step, *recording.steps]))
        original = self.recorded_contexts.get(step)
        if original is not None:
            self.ctx.restore(original)

    def _restore_folder(self, source: str, step: int) -> None:
        """Put the source run's folder as it was after ``step`` into this run's folder (a resume's:
        as the stop left it, or as it is when the resume was forced, see ``resume_start``)."""
        start = self.plan.folder
        if start is not None:
            start.keep(self.ws)  # the contents of files changed by hand (a forced resume)
        missing = restore(
            self.ws, start.files if start else manifest(self.ws, source, step), self.folder, self.snapshots
        )
        if start is not None and start.by_hand:
            changed = f"the run folder of {source} was changed by hand since it stopped: {start.by_hand.describe()}"
            self.emit("notice", NoticeEvent(message=f"{changed}; this run starts with it as it is (forced)"))
        if missing:
            self.emit("notice", NoticeEvent(message="not restored (not kept): " + ", ".join(missing)))
        self.snapshots.changes(self.ws)  # what a fork starts from is not a change of its own

    async def _import_litellm(self) -> None:
        """The first hosted model call of a kernel imports litellm (seconds, once): off the shared
        loop, and said in the run's view while it lasts (a ``notice`` event), then how long it took."""
        from tea_notebook.models.client import import_litellm_off_loop

        starting = "importing litellm for the first hosted model call (a few seconds, once)"
        self.emit("notice", NoticeEvent(message=starting))
        started = time.perf_counter()
        try:
            await self._cancellable(import_litellm_off_loop())
        except RunInterrupted:  # a stop does not wait for the import (it ends in the background)
            return  # the loop's first stop check ends the run
        self.native = self._native()
        seconds = time.perf_counter() - started
        done = f"litellm imported in {seconds:.1f} s (once per kernel)" if seconds >= 1 else ""
        self.emit("notice", NoticeEvent(message=done, seconds=round(seconds, 2)), durable=True)

    def _replay_todo(self) -> None:
        """A fork's todo.md as it was after the replayed steps: their todo calls applied again (the
        list is this run's own file; nothing outside the run folder changes)."""
        if self.todo is None:
            return
        for replayed, _ in self.plan.shown:
            for tool, args, observation in replayed.results:
                if tool != "todo" or str(observation).startswith("Error"):
                    continue
                try:
                    arguments = json.loads(args)
                    if isinstance(arguments, dict):
                        self.todo.apply(**arguments)
                except (TypeError, ValueError):
                    continue  # the original call failed the same way: nothing to rebuild

    def _release_sessions_later(self) -> None:
        """On cancellation: the stop is scheduled on the background loop, not awaited here."""
        if self.owns_sessions():
            from tea_notebook._sync import submit

            submit(self.ws.envs.arelease(self.run_id))

    def _embed_memory(self, store: MemoryStore) -> None:
        """Embed the fold just kept on a thread while the run goes on (an embedding takes milliseconds
        to seconds); :meth:`_close` waits for it. Not awaited: runs that take turns on the event loop
        (a CORAL team's members) interleave the same way whatever the embedding's pace."""
        self._embedding.append(ACTION_THREADS.submit(store.registry, 1, "memory embedding", store.embed_kept))

    def _close(self, ending: Ending) -> RunResult:
        for job in self._embedding:  # the run's folds are searchable once it has ended
            try:
                job.result()
            except Exception as exc:  # noqa: BLE001 - the fold is kept; the next recall embeds it
                log.warning("a memory fold of run %s was kept without its vectors: %s", self.run_id, exc)
        self._embedding.clear()
        error, files = ending.error, ending.files or []
        status = ending.status
        self.divergence.run_ended(self, status, self.last_step)
        # what the step a stop cut short changed: a resume starts from the folder as the stop left it
        self.close(status, ending.answer, error, self.last_step, files, self.snapshots.changes(self.ws))
        return RunResult(
            self.run_id,
            self.agent.name,
            self.task,
            self.model,
            status,
            ending.answer or (error or ""),
            self.last_step,
            self.prompt_tokens,
            self.completion_tokens,
            self.cost,
            files,
            error,
            self.ws,
        )

    def _finish_step(self, record: StepRecord) -> None:
        self.steps.append(record)
        self.last_step = record.number
        event = record.to_event()
        changed = self.snapshots.changes(self.ws)
        if changed:
            event["folder"] = changed
            event["folder_seal"] = self.snapshots.seal()  # a resume checks the folder against it
        self._follow_recording(record.number)
        context = self.ctx.snapshot()
        if context != self.context_recorded:  # what a fork or resume from this step restores
            event["context"] = self.context_recorded = context
        # the step's events and its tools' usage counts: one transaction
        self.emit("step", event, record.number, uses=[(self.ws.tools.kind, self.ws.tools.take_usage())])
        self.divergence.step_finished(self, record)

    async def _fold_memory(self, step: int) -> None:
        """Keep the history within ``memory_budget`` tokens: fold the oldest steps into a summary,
        and once the summaries themselves pass half the budget, fold them into one."""
        budget, keep = self.agent.memory_budget, self.agent.keep_recent_steps
        live = (self.steps[:-keep] if keep else list(self.steps)) if self._history_size() > budget else []
        if live:
            from tea_notebook.runtime.memory import summarise_steps

            summary, insights = await summarise_steps(self, live)
            self.steps = self.steps[len(live) :]
            self.summaries.append(summary)
            self.insights = [i for i in self.insights if i not in insights] + insights
            store = self.ws.memory_store
            store.keep(self.run_id, self.task, summary, insights)  # durable before the run goes on
            self._embed_memory(store)
            folded = [s.number for s in live]
            fold = MemoryWrittenEvent(summary=summary, insights=insights, folded_steps=folded)
            self.emit("memory_written", fold, step)
        if sum(len(s) for s in self.summaries) // 4 > budget // 2:
            from tea_notebook.runtime.memory import merge_summaries

            self.summaries = [await merge_summaries(self, self.summaries, budget // 2)]
            merged = MemoryWrittenEvent(summary=self.summaries[0], insights=[], merged=True)
            self.emit("memory_written", merged, step)
        self.insights = self.insights[-8:]

    def _history_size(self) -> int:
        """Approximate tokens of the steps the history shows (:meth:`StepRecord.size`), each step
        counted once: a running total over the steps appended since the last count (a new list, as a
        fold leaves, is counted afresh)."""
        steps, counted = self.steps, self._counted
        if counted is None or counted[0] is not steps or counted[1] > len(steps):
            counted = (steps, 0, 0)
        total = counted[2] + sum(s.size() for s in steps[counted[1] :])
        self._counted = (steps, len(steps), total)
        return total

    # -- tools ----------------------------------------------------------------------------
    def _offered(self) -> tuple[list[dict[str, Any]], set[str]]:
        """OpenAI tool definitions offered this step, and which of them are sub-agents.

        Named tools are worked out again only when the tool or toolkit registries, the tools bound to
        the run, or which of their precondition tools have succeeded in the run changed (a toolkit's
        ordering: ``notes_read`` is offered the step after ``notes_open`` succeeded); routed ones every
        step (the router weighs how calls went). Without preconditions the check is one comparison of
        empty tuples."""
        key = self._offer_key()
        cache = self._offer_cache
        if key is not None and cache is not None and cache[0] == key:
            if tuple(map(self.ctx.has_succeeded, cache[3])) == cache[4]:
                return list(cache[1]), set(cache[2])
        tools, agent_tools = self._offer()
        if key is not None:
            gates = self.ws.tools.preconditions(self.agent.tools or [])
            passed = tuple(map(self.ctx.has_succeeded, gates))
            self._offer_cache = (key, list(tools), set(agent_tools), gates, passed)
        return tools, agent_tools

    def _offer_key(self) -> tuple | None:
        """What the named tools offered depend on (None: not cached, see :meth:`_offered`)."""
        if self.agent.tools is None or self.agent.envs:  # routed, or environments checked every step
            return None
        db = self.ws.db
        return (
            db.last_change(self.ws.tools.kind),
            db.last_change(self.ws.toolkits.kind),
            tuple(self.ctx.bound(self.ws.tools.kind)),
            tuple(self._controls()),
        )

    def _hidden_tools(self) -> int:
        """How many registered tools are offered only by name (counted once per registry change)."""
        seq = self.ws.db.last_change(self.ws.tools.kind)
        if self._hidden is None or self._hidden[0] != seq:
            # the store counts them (``routable`` reads this field) instead of every record being loaded
            self._hidden = (seq, self.ws.db.count_heads(self.ws.tools.kind, "$.metadata.routing", "explicit"))
        return self._hidden[1]

    def _offer(self) -> tuple[list[dict[str, Any]], set[str]]:
        ws = self.ws
        if self.agent.tools is not None:
            records = ws.tools.prune([ws.tools.get(n) for n in self.agent.tools], self.ctx)
        else:
            hidden = self._hidden_tools()
            k = 20 + hidden
            routed = (
                ws.tools.route(context=self.ctx, k=k)
                if len(ws.tools) <= k
                else ws.tools.route(self.task, self.ctx, k=k)
            )
            records = [r for r in routed if routable(r)][:20]
        offered_names = {r.name for r in records}
        extra = [ws.tools.get(n) for n in dict.fromkeys(self._environment_tools()) if n not in offered_names]
        records.extend(ws.tools.prune(extra, self.ctx))  # preconditions and conflicts apply to them too
        agent_tools: set[str] = set()
        for sub in self.agent.sub_agents:
            tool_name = sub if sub.endswith("agent") else f"{sub}_agent"
            if tool_name not in ws.tools:
                from tea_notebook.protocol.transformations import a2t

                a2t(ws, sub)
            if tool_name not in {r.name for r in records}:
                records.append(ws.tools.get(tool_name))
            agent_tools.add(tool_name)
        records = [r for r in records if r.origin != "agent" or r.name in agent_tools]
        tools = [self._tool_form(r) for r in records]
        if self.todo is not None:
            tools.append(TODO_TOOL)
        tools.extend(self._controls().values())
        return tools, agent_tools

    def _tool_form(self, record: "ToolRecord") -> dict[str, Any]:
        """``record.to_openai()``, the same object for the same stored version (a version never changes)."""
        if not record.version:
            return record.to_openai()
        key = (record.name, record.version)
        form = self._tool_forms.get(key)
        if form is None:
            form = self._tool_forms[key] = record.to_openai()
        return form

    # -- hooks ----------------------------------------------------------------------------
    def _controls(self) -> dict[str, dict[str, Any]]:
        """The tools this loop handles itself, by name (OpenAI definitions); a run ends through one."""
        return {"done": DONE_TOOL}

    async def _control(self, call: ToolCall, step: int) -> Outcome:
        """Handle a call of one of :meth:`_controls` (the only action of its step)."""
        bad = self._done_problem(call.arguments)
        if bad is not None:
            return Outcome("invalid", bad)
        args = call.arguments
        status, note = self._decided_status(bool(args.get("success")))
        return Outcome(
            "end", "finished" + note, status, str(args.get("text", "")), list(args.get("files_to_display") or [])
        )

    @staticmethod
    def _done_problem(args: Any) -> str | None:
        if not isinstance(args, dict):
            return "done needs an object {success, text, files_to_display}"
        if not isinstance(args.get("success"), bool):
            return "done needs 'success' (true or false)"
        if not isinstance(args.get("text"), str):
            return "done needs 'text' (the final answer)"
        return None

    def _decided_status(self, claimed: bool) -> tuple[FinishedStatus, str]:
        """The run's status when the model ends it claiming ``claimed`` success, and a note on why it
        differs. A scripted / offline model is not taken at its word: a tool that failed with no later
        action succeeding makes the run ``failed``; the demo model, which relays a tool's result
        without knowing whether it answers the task, ends ``unverified``. (No model is taken at its
        word when no action succeeded and some failed: see :meth:`_control_step`.)"""
        if not claimed:
            return "failed", ""
        if is_offline(self.model) and self.unrecovered:
            failed = ", ".join(dict.fromkeys(self.unrecovered))
            return "failed", f" (marked failed: {failed} failed and no later action succeeded)"
        if self.model == DEMO_MODEL:
            return "unverified", " (unverified: the demo model cannot check that the result answers the task)"
        return "success", ""

    async def _before_step(self, step: int) -> tuple[FinishedStatus, str] | None:
        """Called before each step: ``(status, answer)`` ends the run there, None goes on (ToolSelf
        configures its stages here; CORAL members stop when their session is over)."""
        return None

    def _messages(self, step: int, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The prompt of one step (its user text's pieces kept for :meth:`_call_model`)."""
        self._prompt = build_prompt(
            task=self.task,
            files=self.files,
            step=step,
            max_steps=self.max_steps,
            steps=self.steps,
            summaries=self.summaries,
            insights=self.insights,
            todo=self.todo.render() if self.todo else "",
            environments=self._environments(),
            tools=tools,
            max_actions=self.agent.max_actions,
            native=self.native,
            system_prompt=self.agent.system_prompt,
            final_tool=next(iter(self._controls()), ""),
        )
        return self._prompt.messages

    def _environment_tools(self) -> list[str]:
        """The tools of every bound environment (lifted by E2T into a toolkit on first use)."""
        from tea_notebook.protocol.transformations import e2t

        names: list[str] = []
        for env in self.agent.envs:
            self.ws.envs.ensure(env)
            if env not in self.ws.toolkits:
                e2t(self.ws, env)
            names.extend(self.ws.toolkits.get(env).tools)
        return names

    def _environments(self) -> list[dict[str, Any]]:
        out = []
        for name in self.agent.envs:
            rec = self.ws.envs.ensure(name)
            entry: dict[str, Any] = {"name": name, "rules": rec.rules, "state": self.ws.envs.state(name, self.ctx)}
            png = self.ws.envs.vision(name, self.ctx)
            if png:
                entry["vision"] = f"a screenshot of {name} is attached ({len(png) // 1024} KB PNG)"
                if self._sees_images():
                    entry["image"] = "data:image/png;base64," + base64.b64encode(png).decode()
            elif rec.screenshot:
                entry["vision"] = rec.screenshot
            out.append(entry)
        return out

    def _sees_images(self) -> bool:
        return takes_images(self.model, self.agent.vision)

    # -- the model --------------------------------------------------------------------------
    async def _call_model(
        self, step: int, tools: list[dict[str, Any]], messages: list[dict[str, Any]] | None = None
    ) -> ModelReply:
        from tea_notebook.models.client import ToolsRejected

        given = messages
        messages = self._messages(step, tools) if messages is None else messages
        client = self.agent.client
        chars = sum(map(_content_chars, messages))
        offered = tools if self.native else None
        # the user text's pieces, when this prompt is the one _messages built (a hook may build its own)
        pieces = self._prompt.pieces if self._prompt is not None and self._prompt.messages is messages else None
        context = self.contexts.record(messages, offered, {"model": self.model, **client.params}, text_pieces=pieces)
        request = self.request_event(client, self.model, messages=len(messages), prompt_chars=chars, context=context)
        request["input_hash"] = self.divergence.input_hash(step, messages, chars, pieces)
        request["tool_mode"] = "native" if self.native else "json"
        trial = self.native and self._tools_on_trial()
        if trial and not self.tool_mode_said:
            unknown = f"tool_mode auto: litellm does not know {self.model!r}"
            self._say_tool_mode(step, f"{unknown}; native tools are sent (JSON if the server refuses them)")
        self.emit("model_request", request, step)
        try:
            reply: ModelReply = await self._cancellable(
                client.complete(self.model, messages, tools if self.native else None, defaults=self.model_defaults())
            )
        except ToolsRejected as exc:
            if not trial:
                raise
            self.native = False  # for the rest of the run: asked again in the JSON protocol
            self._say_tool_mode(step, f"tool_mode auto: {exc}; the JSON tool protocol is used for the rest of this run")
            return await self._call_model(step, tools, given)
        self.count(reply)
        response = ModelResponseEvent(
            model=self.model,
            content=reply.content,
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            cost=reply.cost,
            latency=reply.latency,
            scripted=reply.scripted,
        )
        self.emit("model_response", response, step)
        return reply

    # -- actions ----------------------------------------------------------------------------
    async def _run_actions(self, calls: list[ToolCall], step: int) -> list[tuple[str, bool, str | None]]:
        """Run a step's actions: in order, or all at once when they are all sub-agent dispatches."""
        if len(calls) > 1 and all(c.name in self.agent_tools for c in calls):
            outcomes: list[tuple[str, bool, str | None]] = await self._cancellable(
                asyncio.gather(*(self._run_action(c, step) for c in calls))
            )
            return outcomes
        outcomes = []
        for c in calls:
            self._check_stop()
            outcomes.append(await self._cancellable(self._run_action(c, step)))
        return outcomes

    async def _run_action(self, call: ToolCall, step: int) -> tuple[str, bool, str | None]:
        """Run one action; returns ``(observation, ok, error type)``."""
        override = self.override
        verbatim = override is not None and call.id in override.verbatim
        if call.name in self.agent_tools and isinstance(call.arguments, dict) and not verbatim:
            call = self._delegation(call)
        if override is not None and call.id in override.stored:  # it returned before the run stopped
            return self._stored_action(call, override.stored[call.id], step)
        continued = override is not None and call.id in override.continued
        decided = replay_answer(self.plan, step, call.name, call.arguments, continued=continued)
        if decided is not None and decided.observation is not None:
            return self._answered_by_policy(call, decided, step)
        called = ToolCallEvent(id=call.id, name=call.name, arguments=call.arguments)
        if decided is not None:
            called["policy"] = decided.policy
        self.emit("tool_call", called, step)
        self._durable_before_tool()
        self.acting[call.id] = time.monotonic()  # committed if it runs long (see _looked)
        self.keep_looking()
        started = time.perf_counter()
        try:
            obs, ok, err, returned = await self._invoke(call, step)
        finally:
            self.acting.pop(call.id, None)
        self.tally.ran(call.name, ok, err)
        if ok:
            self.unrecovered.clear()
        elif err not in INVALID_CALL:  # the tool ran and failed (a call it refused is the model's mistake)
            self.unrecovered.append(call.name)
        result = ToolResultEvent(
            id=call.id, name=call.name, ok=ok, error_type=err, observation=obs, latency=time.perf_counter() - started
        )
        if returned is not None:
            result["returned"] = returned
        if decided is not None:
            result["policy"] = decided.policy
        self.emit("tool_result", result, step)
        return obs, ok, err

    def _durable_before_tool(self) -> None:
        """Make what the step did so far durable before a tool acts, so a run resumed after a crash
        repeats no call that returned (nor the model call that chose them): appended to the intent
        journal (one write), committed with the step. A tool still running after
        :data:`COMMIT_SLOW_TOOL` seconds has them committed at the run's next look, for readers in
        other processes (see :meth:`_looked`: one timer per run, not one per call)."""
        self.events.make_durable()

    def _looked(self) -> bool:
        """At each of the run's looks (:meth:`StoppableRun._look`): once a tool has run for
        :data:`COMMIT_SLOW_TOOL` seconds, commit the events so far (every tool running then has its
        call committed); look again while a tool runs."""
        if self.acting and time.monotonic() - min(self.acting.values()) >= COMMIT_SLOW_TOOL:
            self.events.flush()
            self.acting.clear()  # committed: a call that ends after this has nothing of its own left
        return bool(self.acting)

    def _answered_by_policy(self, call: ToolCall, answer: ReplayAnswer, step: int) -> tuple[str, bool, str | None]:
        """A call the fork's replay policy answers without running it: the original run's stored
        result (counted, and its success remembered for preconditions, as the original's was), or why
        it was not run (refused, or not in the recording: not counted)."""
        obs, ok, err = answer.observation or "", answer.ok, answer.error_type
        self.tally.ran(call.name, ok, err)
        if answer.from_recording:
            self.ctx.record_call(self.ws.tools.kind, call.name, ok)
            if ok:
                self.unrecovered.clear()
            elif err not in INVALID_CALL:
                self.unrecovered.append(call.name)
        called = ToolCallEvent(id=call.id, name=call.name, arguments=call.arguments, policy=answer.policy)
        result = ToolResultEvent(
            id=call.id, name=call.name, ok=ok, error_type=err, observation=obs, latency=None, policy=answer.policy
        )
        if answer.from_recording:
            called["replayed"] = result["replayed"] = True
        self.emit("tool_call", called, step)
        self.emit("tool_result", result, step)
        return obs, ok, err

    def _stored_action(self, call: ToolCall, obs: str, step: int) -> tuple[str, bool, str | None]:
        """A call of a step taken up again that had returned before its run stopped: its stored
        observation, recorded as replayed (it is not run again)."""
        ok = not str(obs).startswith("Error")
        self.tally.ran(call.name, ok)
        self.emit("tool_call", ToolCallEvent(id=call.id, name=call.name, arguments=call.arguments, replayed=True), step)
        result = ToolResultEvent(
            id=call.id, name=call.name, ok=ok, error_type=None, observation=obs, latency=None, replayed=True
        )
        self.emit("tool_result", result, step)
        return obs, ok, None

    async def _invoke(self, call: ToolCall, step: int) -> tuple[str, bool, str | None, str | None]:
        """Call the tool: ``(observation, ok, error type, what it returned when a stop cut it short)``."""
        if not isinstance(call.arguments, dict):
            return self._not_an_object(call), False, "ValidationError", None
        if call.name == "todo" and self.todo is not None:
            try:
                return self.todo.apply(**call.arguments), True, None, None
            except (TypeError, ValueError) as exc:
                return f"Error (todo): {exc}", False, "ValidationError", None
        self.in_flight[call.id] = (call.name, step)
        # the thread jobs the call starts (a synchronous tool's): a stop that cuts it short records what they return;
        # a sub-agent's run keeps its own (its calls are not this call's)
        jobs: list[concurrent.futures.Future] | None = None
        if call.name not in self.agent_tools:
            jobs = self.thread_jobs[call.id] = []
        token = THREAD_JOBS.set(jobs)
        cancelled = False
        try:
            # in this task (wait_for would start another), one timer per run (asyncio.timeout: one per call)
            result = await self.time_limits.within(
                self.agent.tool_timeout, self.ws.tools.ainvoke(call.name, call.arguments, self.ctx)
            )
            obs, ok = result.to_observation(), result.ok
            err = None if result.ok else (result.error or {}).get("type")
        except asyncio.TimeoutError:
            obs, ok, err = f"Error: {call.name} timed out after {self.agent.tool_timeout:g}s", False, "Timeout"
        except asyncio.CancelledError:
            cancelled = True  # still in flight: the cancelled wait (StoppableRun._cancellable) reports it
            raise
        finally:
            THREAD_JOBS.reset(token)
            if not cancelled:
                self.in_flight.pop(call.id, None)
        self.thread_jobs.pop(call.id, None)
        if not self.ctx.cancel.is_set() or call.id in self.reported_stops:
            return obs, ok, err, None
        # stopped while it ran, and it ended on its own (a sync tool that saw ToolContext.cancelled):
        # what it returned is what a resumed run takes as this call's result (it is not run again)
        self.reported_stops.add(call.id)
        message = f"stopped while running {call.name}; none of them is still running"
        stopped = ErrorEvent(kind="tools_interrupted", message=message, tools=[call.name], still_running=[])
        self.emit("error", stopped)
        interrupted = f"Error: {call.name} was interrupted when the run was stopped; it ended: {obs}"
        return interrupted, False, "Interrupted", obs

    def _delegation(self, call: ToolCall) -> ToolCall:
        """A sub-agent always receives the ORIGINAL task unmodified (AgentOrchestra's rule), with the
        caller's own wording kept as an instruction, and absolute file paths."""
        args = dict(call.arguments)
        given = str(args.get("task", "")).strip()
        task = (
            self.task
            if given in ("", self.task.strip())
            else f"{self.task}\n\nInstruction from {self.agent.name}: {given}"
        )
        files = [str(Path(f).expanduser().resolve()) for f in args.get("files") or [] if isinstance(f, str)]
        return ToolCall(call.id, call.name, {**args, "task": task, "files": files}, call.raw_arguments)

    def _not_an_object(self, call: ToolCall) -> str:
        """The observation for a call whose arguments are not one JSON object (a list, a number,
        text that is not JSON): what came, and the named arguments the tool takes."""
        from tea_notebook.protocol.schema import not_an_object

        record = self.ws.tools.current(call.name)
        problem = not_an_object(record.parameters if record is not None else None, call.arguments)
        return f"Error: arguments of {call.name} are not a JSON object: {problem.message}"


__all__ = [
    "INVALID_CALL",
    "STOP_GRACE",
    "TODO_SCHEMA",
    "TODO_TOOL",
    "AgentRun",
    "Ending",
    "Outcome",
    "pending_subforks",
    "routable",
]
