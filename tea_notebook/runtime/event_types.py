"""What each event of the stream holds: one ``TypedDict`` per event type, declared once.

Every event is a ``type`` string (:data:`EventType`) and a JSON object; :data:`EVENT_DATA` maps each
type to the ``TypedDict`` of its object. Emit sites build the matching ``TypedDict``
(``self.emit("step", StepEvent(thinking=..., ...))``) and readers switch on the ``EventType``
literals, so a checker sees both sides. At run time a ``TypedDict`` is a plain ``dict``: nothing is
validated in the agent loop.

The same definitions make the JSON Schema the JupyterLab extension's TypeScript types are generated
from (``scripts/gen_event_types.py``). Events stored by earlier releases are brought to this shape
when a workspace opens (:data:`tea_notebook.store.database.EVENTS_VERSION`: a change to what an
event holds raises it, with a migration of the stored events).

``typing_extensions.TypedDict`` (not ``typing``'s) so that pydantic can read them on Python 3.11.
"""

# no ``from __future__ import annotations``: ``NotRequired`` must be seen at run time, so that each
# definition's ``__required_keys__`` / ``__optional_keys__`` are right (the test of stored events reads them)
from typing import Any, Literal, Union

from typing_extensions import NotRequired, TypedDict

EventType = Literal[
    "run_started",
    "model_request",
    "model_response",
    "step",
    "tool_call",
    "tool_result",
    "memory_written",
    "tool_created",
    "tool_discarded",
    "tool_reused",
    "error",
    "run_finished",
    "stage",
    "message",
    "thread",
    "egress_refused",
    "notice",
    "diverged",
    "cell_proposed",
    "cell_decided",
    "cell_ran",
]
"""The type of an event."""

FinishedStatus = Literal["success", "failed", "unverified", "error", "interrupted", "max_steps"]
"""How a run ended: ``success`` or ``failed`` (the agent said so), ``unverified`` (the demo model
finished without being able to check its answer), ``error``, ``interrupted`` (stopped) or
``max_steps`` (the step limit came first)."""

RunStatus = Literal["running", FinishedStatus]
"""How a run stands: ``running`` until it ends, then a :data:`FinishedStatus`."""

ForkUnit = Literal["steps", "messages", "stages"]
"""What ``ws.fork`` replays of a run: its steps (the agent loop), its messages (CORAL), its stages (ToolSelf)."""

ThreadStatus = Literal["open", "closed"]
"""A CORAL thread is open until its creator closes it."""

ErrorKind = Literal["model", "model_output", "tools_interrupted", "citation"]
"""The ``kind`` of an ``error`` event raised by the runtime itself; other errors name the
exception's class (``"EvolutionError"``, ``"RunFailed"`` …)."""

StopState = Literal["running", "stopped", "not_started"]
"""Where a stop left a tool call that had not returned: ``running`` (a synchronous tool still running in
its thread: what it returns is recorded later on the same step, with ``late``), ``stopped`` (it was
cancelled and ended without a result) or ``not_started`` (cancelled before it began)."""

ReplayChoice = Literal["recorded", "live", "refuse"]
"""How a fork's replay policy answers one tool's calls: from the original run's recording, by running
the tool again, or not at all (see :mod:`tea_notebook.runtime.replay_policy`)."""

DivergenceHow = Literal["model input", "action", "arguments", "observation", "ended", "message"]
"""How a fork first departed from the run it was forked from (a ``diverged`` event): the prompt sent to
the model differs, the tools called, their arguments, what they returned, one run ended where the other
went on (or they ended differently), or a CORAL message differs."""

CellProposalKind = Literal["new", "edit", "run"]
"""What a notebook proposal asks for: a new cell, an edit of an existing cell, or running one as it is."""

CellDecision = Literal["run", "edit_run", "reject"]
"""How a notebook proposal was decided: run as proposed, run after the person edited it, or rejected."""

StepResult = list[str]
"""One action of a step: ``[name, arguments as JSON, observation]`` (an observation starting
``"Error"`` is a failed action)."""


class EventBase(TypedDict):
    """What :class:`~tea_notebook.runtime.runlog.RunLog` adds to every event of a run (events written
    straight to the :class:`~tea_notebook.runtime.events.EventLog`, ``tool_created`` and
    ``tool_discarded``, have neither)."""

    root_run: NotRequired[str]
    agent: NotRequired[str]


class RunMemory(TypedDict):
    """The folded memory a fork starts from (``run_started.memory``)."""

    summaries: list[str]
    insights: list[str]
    folded: list[int]


class RunStartOptions(TypedDict, total=False):
    """What a run's start records besides its task and model (``RunLog.start(**options)``): its
    files, limits, and what it was forked or resumed from."""

    process: bool
    files: list[str]
    max_steps: int
    native_tools: bool
    forked_from: str | None
    fork_unit: ForkUnit | None
    edit: dict[str, Any]
    rerun_from: int
    resumed_from: str
    memory: RunMemory
    #: the insights recalled from earlier runs' memory at the start (a fork's, a resume's: its source's)
    recalled: list[str]
    fork_stage: dict[str, Any]
    replay: dict[str, ReplayChoice]
    #: what a resumed run's folder started with besides its source's at the step (``path -> sha256``, None: absent)
    folder: dict[str, str | None]
    #: what was changed by hand in the stopped run's folder before a forced resume (``added``/``removed``/``changed``)
    folder_by_hand: dict[str, list[str]]
    #: what a fork or resume of a run that made cell actions says of the notebook (its cells are not rewound)
    fork_note: str
    coral: bool
    members: list[str]
    budget_seconds: float | None
    max_messages: int


class RunStartedEvent(EventBase, RunStartOptions):
    """A run began: its task and model, and what it started from (files, a fork)."""

    task: str
    model: str
    model_display: str
    model_source: str
    note: str | None


class ModelRequestEvent(EventBase):
    """A model call is sent: how many messages, where its context is stored, its timeout and retries."""

    model: str
    messages: int
    context: str | None
    timeout: float | None
    retries: int | None
    api_base: str | None
    prompt_chars: NotRequired[int]
    stage: NotRequired[str]
    #: sha256 of the messages sent, the run's own id (and its run folder's) replaced by a placeholder
    input_hash: NotRequired[str]
    #: the tool protocol of this call: ``native`` (tools sent) or ``json`` (the paper's JSON action list)
    tool_mode: NotRequired[Literal["native", "json"]]


class ToolCallData(TypedDict):
    """One tool call a model asked for."""

    id: str
    name: str
    arguments: Any


class ModelResponseEvent(EventBase):
    """A model call came back: its text, the tool calls it asked for, tokens, cost and latency."""

    model: str
    content: str | None
    tool_calls: list[ToolCallData]
    prompt_tokens: int
    completion_tokens: int
    cost: float
    latency: float | None
    scripted: bool
    stage: NotRequired[str]


class StepEvent(EventBase):
    """A step is done: the model's thoughts and its actions' results (``folder``: what changed in the
    run folder during the step, ``path -> sha256``, ``None`` for a deleted file, ``"!link"`` or
    ``"!too-large"`` for a file not kept)."""

    thinking: str
    evaluation: str
    memory: str
    next_goal: str
    results: list[StepResult]
    note: NotRequired[str]
    replayed: NotRequired[bool]
    edited: NotRequired[dict[str, Any]]
    folder: NotRequired[dict[str, str | None]]
    #: beside ``folder``: ``"AT:SUM"``, a seal of the whole run folder then (a resume checks the folder against it)
    folder_seal: NotRequired[str]
    #: the run context after the step when it changed (``Context.snapshot``: what succeeded, toolkits' state)
    context: NotRequired[dict[str, Any]]


class ToolCallEvent(EventBase):
    """An action starts (``replayed``: a fork took its stored result instead of running it; ``policy``:
    how the fork's replay policy answered it)."""

    id: str
    name: str
    arguments: Any
    replayed: NotRequired[bool]
    policy: NotRequired[ReplayChoice]


class ToolResultEvent(EventBase):
    """An action returned (``returned``: what a tool stopped mid-run gave back on its own; ``late``: how
    many seconds after the stop it did; ``stop_state``: where the stop left a call that had not returned;
    ``policy``: how a fork's replay policy answered it)."""

    id: str
    name: str
    ok: bool
    error_type: str | None
    observation: str
    latency: float | None
    replayed: NotRequired[bool]
    returned: NotRequired[str]
    late: NotRequired[float]
    stop_state: NotRequired[StopState]
    policy: NotRequired[ReplayChoice]
    #: what changed in the run folder until a call cut short by a stop returned (as on ``step``)
    folder: NotRequired[dict[str, str | None]]


class MemoryWrittenEvent(EventBase):
    """The history was folded into a summary (``folded_steps``) or the summaries merged (``merged``)."""

    summary: str
    insights: list[str]
    folded_steps: NotRequired[list[int]]
    merged: NotRequired[bool]


class ToolCreatedEvent(EventBase):
    """The tool manager registered a tool (version) it made."""

    tool: str
    version: int
    first_pass: bool | None
    fix_iterations: int


class ToolDiscardedEvent(EventBase):
    """The tool manager gave up on a tool it tried to make, and why."""

    tool: str
    reason: str
    fix_iterations: int
    first_pass: bool | None


class ToolReusedEvent(EventBase):
    """The tool manager found an existing tool that does what was needed."""

    tool: str


class ErrorEvent(EventBase):
    """Something went wrong in a run (it may go on): ``kind`` is an :data:`ErrorKind` or an exception's class name."""

    kind: str
    message: str
    consecutive: NotRequired[int]
    stage: NotRequired[str]
    attempt: NotRequired[int]
    tools: NotRequired[list[str]]
    still_running: NotRequired[list[str]]


class RunFinishedEvent(EventBase):
    """A run ended: status, answer or error, and totals that include its sub-runs."""

    status: FinishedStatus
    answer: str
    error: str | None
    steps: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    files: list[str]
    #: what changed in the run folder after the last step until the run ended (as on ``step``)
    folder: NotRequired[dict[str, str | None]]


class StageEvent(EventBase):
    """A ToolSelf stage began: its configuration, and why (the first one, a reconfiguration, a fork)."""

    index: int
    first_step: int
    sub_goal: str
    strategy: str
    toolbox: list[str]
    knowledge: str
    knowledge_text: str
    reason: NotRequired[str]
    engine: NotRequired[dict[str, Any]]
    note: NotRequired[str]
    edited: NotRequired[Any]
    pool_entry: NotRequired[list[str]]
    update_content: NotRequired[str]
    proposed_sub_goal: NotRequired[str]
    details: NotRequired[dict[str, Any]]
    forced: NotRequired[bool]


class MessageEvent(EventBase):
    """A CORAL message, posted in a thread (``replayed``: copied from the run a fork started from)."""

    seq: int
    thread: str
    sender: str
    mentions: list[str]
    content: str
    replayed: bool
    #: seconds of the team's time budget used when it was posted (a fork at it goes on from there)
    elapsed: NotRequired[float]


class ThreadEvent(EventBase):
    """A CORAL thread was opened or closed (the latest event of an ``id`` is how it stands)."""

    id: str
    name: str
    participants: list[str]
    status: ThreadStatus
    summary: str
    by: str
    orchestrator: str


class EgressRefusedEvent(EventBase):
    """The egress policy refused a destination a tool or environment of the run tried to reach.
    ``count``: how many refusals of this rule and host in the step the event stands for, when more
    than one (past the first few of a step, refusals are counted, not stored one by one; ``host``
    ``"*"``: refusals to hosts past the step's first few, counted by rule); see
    :mod:`tea_notebook.runtime.refusals`."""

    url: str
    host: str
    port: int
    rule: str
    reason: str
    count: NotRequired[int]


class NoticeEvent(EventBase):
    """A line the run's view says while it matters (litellm's first import, and how long it took)."""

    message: str
    seconds: NotRequired[float]


class DivergedEvent(EventBase):
    """A fork first departed from the run it was forked from (``source``): at ``step`` (a CORAL team's:
    the message number), ``how``, with what the ``original`` and the ``replay`` did there, in words."""

    source: str
    step: int
    how: DivergenceHow
    original: str
    replay: str


class CellProposedEvent(EventBase):
    """The agent proposed a notebook cell (``kind``): a new one below ``after`` (None: the end), an edit
    of ``cell_id`` (``base_hash``: sha256 of the source it read, ``diff`` against it) or running it;
    ``mode``: the run's approval mode (``ask``, ``read``, ``auto``)."""

    proposal: str
    kind: CellProposalKind
    cell_id: str | None
    after: str | None
    code: str
    base_hash: str | None
    diff: str
    explanation: str
    mode: str


class CellDecidedEvent(EventBase):
    """A notebook proposal was decided, ``by`` the person or ``auto`` (the mode); ``code``: what runs
    (the person's edit included); ``grant``: this approval gave the run the right to run cells."""

    proposal: str
    decision: CellDecision
    code: str
    by: Literal["person", "auto"]
    grant: bool
    note: NotRequired[str]


class CellRanEvent(EventBase):
    """An approved notebook cell ran: its outputs as text (clipped as the model saw them) and its error."""

    proposal: str
    cell_id: str | None
    ok: bool
    execution_count: int | None
    outputs: str
    error: dict[str, str] | None


EVENT_DATA: dict[str, type] = {
    "run_started": RunStartedEvent,
    "model_request": ModelRequestEvent,
    "model_response": ModelResponseEvent,
    "step": StepEvent,
    "tool_call": ToolCallEvent,
    "tool_result": ToolResultEvent,
    "memory_written": MemoryWrittenEvent,
    "tool_created": ToolCreatedEvent,
    "tool_discarded": ToolDiscardedEvent,
    "tool_reused": ToolReusedEvent,
    "error": ErrorEvent,
    "run_finished": RunFinishedEvent,
    "stage": StageEvent,
    "message": MessageEvent,
    "thread": ThreadEvent,
    "egress_refused": EgressRefusedEvent,
    "notice": NoticeEvent,
    "diverged": DivergedEvent,
    "cell_proposed": CellProposedEvent,
    "cell_decided": CellDecidedEvent,
    "cell_ran": CellRanEvent,
}
"""Each event type's ``TypedDict``."""

EventData = Union[
    RunStartedEvent,
    ModelRequestEvent,
    ModelResponseEvent,
    StepEvent,
    ToolCallEvent,
    ToolResultEvent,
    MemoryWrittenEvent,
    ToolCreatedEvent,
    ToolDiscardedEvent,
    ToolReusedEvent,
    ErrorEvent,
    RunFinishedEvent,
    StageEvent,
    MessageEvent,
    ThreadEvent,
    EgressRefusedEvent,
    NoticeEvent,
    DivergedEvent,
    CellProposedEvent,
    CellDecidedEvent,
    CellRanEvent,
]
"""The data of any event."""
