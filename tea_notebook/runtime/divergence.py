"""Where a replay departs from the run it was forked from.

A fork (not a resume) compares each step it takes after its fork point with the original run's step of
the same number and, at the first difference, emits one ``diverged`` event: ``{source, step, how,
original, replay}``. In order, a step differs by its **model input** (the ``input_hash`` of the step's
``model_request``, when both runs recorded one: runs recorded before it existed are compared by what
follows only), the **action** (the tools called), their **arguments**, their **observations**; a run
that **ended** where the other went on (or both ended at the same step, differently) departs there.
The edit a fork makes is not a departure: an observation edited at step N shows at step N+1, where the
model's input first differs; actions edited at step N are compared from step N+1.

:class:`DivergenceWatch` does this live in the agent loop (one per run; inert unless the run is a
fork), reading the original's steps after the fork point once. :func:`watch_messages` does it for a
CORAL team's fork, message by message (sender, recipients, content; ``how`` is ``"message"``).
:func:`compare_step` and :func:`first_departure` are the comparison itself, which ``ws.compare(a, b)``
uses too (:class:`~tea_notebook.runtime.branches.Comparison`).

What is run-specific is not a difference: :func:`input_hash` and the comparison of texts replace the
run's own id, and the ids of the runs it was forked from, by a placeholder (a run's folder is
``runs/<id>``, so its paths are covered too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, cast

from tea_notebook.redaction import Clean, redact
from tea_notebook.runtime.event_types import DivergedEvent, DivergenceHow
from tea_notebook.runtime.prompts import joins_to
from tea_notebook.store.blobs import clip_value

if TYPE_CHECKING:
    from tea_notebook.runtime.events import Event
    from tea_notebook.runtime.forking import ForkPlan
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.runlog import RunLog
    from tea_notebook.runtime.steps import StepRecord

#: what a run's own id (and the ids of the runs it was forked from) becomes before texts are compared
PLACEHOLDER = "<run>"
#: forks of forks followed at most this far back for their ids (a family is a tree; this guards a damaged store)
MAX_CHAIN = 50
#: characters of a text kept in a ``diverged`` event's ``original`` / ``replay``
SHOWN = 300
#: each ``how`` in words ("step 5: different arguments")
WORDS: dict[str, str] = {
    "model input": "different model input",
    "action": "different action",
    "arguments": "different arguments",
    "observation": "different observation",
    "ended": "ended differently",
    "message": "different message",
}

Same = Callable[[str, str], bool]
"""``same(original_text, replay_text)``: whether two texts of the compared runs are the same."""


def _clip(text: Any) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= SHOWN else flat[: SHOWN - 1] + "…"


@dataclass(frozen=True)
class Divergence:
    """Where a replay first departed from the run ``source``: at ``step`` (``unit`` says of what: a
    step, or a CORAL team's message), ``how`` (one of :data:`WORDS`), and what each run did there."""

    source: str
    step: int
    how: DivergenceHow
    original: str
    replay: str
    unit: str = "step"

    @classmethod
    def of(cls, data: Mapping[str, Any], unit: str = "step") -> "Divergence":
        """The divergence a ``diverged`` event records."""
        return cls(
            str(data.get("source", "")),
            int(data.get("step", 0)),
            cast(DivergenceHow, data.get("how", "")),
            str(data.get("original", "")),
            str(data.get("replay", "")),
            unit,
        )

    def text(self) -> str:
        """In a few words: "step 5: different arguments"."""
        return f"{self.unit} {self.step}: {self.words()}"

    def words(self) -> str:
        """How, in words: "different arguments"."""
        return WORDS.get(self.how, self.how)

    def first(self) -> str:
        """As a run's header says it: "first departs in step 5 (different arguments)"."""
        return f"first departs in {self.unit} {self.step} ({self.words()})"

    def event(self) -> DivergedEvent:
        """The ``diverged`` event's data."""
        return DivergedEvent(
            source=self.source, step=self.step, how=self.how, original=self.original, replay=self.replay
        )

    def __str__(self) -> str:
        return f"{self.text()} (original: {self.original}; replay: {self.replay})"


# -- what is run-specific -------------------------------------------------------------------------
class RunNames:
    """The ids that are one run's own, replaced by :data:`PLACEHOLDER` before texts are compared or
    hashed: the run's id and the ids of the runs it was forked (or resumed) from."""

    def __init__(self, ids: Iterable[str]):
        self.ids = tuple(dict.fromkeys(i for i in ids if i))

    @classmethod
    def of(cls, ws: "RunHost", run_id: str, source: str | None = None) -> "RunNames":
        """``run_id`` and the runs it descends from by forks, from ``source`` (its fork's source, if
        any; read from the store when not given) back to the first run."""
        ids = [run_id]
        if source is None:
            row = ws.db.run_row(run_id)
            source = row["forked_from"] if row is not None else None
        while source and source not in ids and len(ids) < MAX_CHAIN:
            ids.append(source)
            row = ws.db.run_row(source)
            source = row["forked_from"] if row is not None else None
        return cls(ids)

    def __add__(self, other: "RunNames") -> "RunNames":
        return RunNames(self.ids + other.ids)

    def normal(self, text: str) -> str:
        """``text`` with these ids replaced by the placeholder."""
        for run_id in self.ids:
            if run_id in text:
                text = text.replace(run_id, PLACEHOLDER)
        return text


#: the JSON form a prompt is hashed in (made once: ``json.dumps`` with options builds an encoder per call)
_HASHED_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
_PIECES_KEPT = 4096  # encoded texts a run keeps (its system prompt, its history blocks)


def input_hash(
    messages: list[dict[str, Any]],
    names: RunNames,
    pieces: dict[Any, bytes] | None = None,
    last_text: tuple[str, ...] | None = None,
) -> str:
    """sha256 of the messages sent to a model, the run's own ids replaced (see :class:`RunNames`): two
    runs sent the same prompt have the same hash.

    The hash is that of the whole list as compact, key-sorted JSON. It is computed piece by piece (a
    list's JSON is its items' joined by ``,``; a string's is its characters' escapes; a run id, made
    of letters and digits, never spans two items or two pieces cut at markup), so ``pieces`` can keep
    the encoded form of what recurs: a plain ``{role, content}`` message (a run's system prompt), and
    the pieces ``last_text`` of the last message's text (its history blocks, see
    :class:`~tea_notebook.runtime.prompts.Prompt`). The same messages hash the same either way."""
    digest = hashlib.sha256(b"[")
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if i:
            digest.update(b",")
        key = _piece_key(message)
        if key is None or pieces is None:
            digest.update(names.normal(_HASHED_JSON.encode(message)).encode("utf-8", "surrogatepass"))
        elif i < last:  # a message that recurs (the system prompt); the last one changes every step
            digest.update(_kept(pieces, key, _HASHED_JSON.encode, names))
        elif last_text is not None and len(last_text) > 2 and joins_to(last_text, key[1]):
            # the first and last pieces change every step: not kept
            encoded = [b'{"content":"', _hashed(_escaped(last_text[0]), names)]
            known = pieces.get
            for text in last_text[1:-1]:
                piece = known(text)
                encoded.append(_kept(pieces, text, _escaped, names) if piece is None else piece)
            encoded += [
                _hashed(_escaped(last_text[-1]), names),
                b'","role":',
                _hashed(_HASHED_JSON.encode(key[0]), names),
            ]
            digest.update(b"".join(encoded) + b"}")
        else:
            digest.update(_hashed(_HASHED_JSON.encode(message), names))
    digest.update(b"]")
    return digest.hexdigest()


def _escaped(text: str) -> str:
    """``text`` as inside a JSON string (the escapes of its characters, without the quotes)."""
    return str(encode_basestring(text))[1:-1]


def _hashed(json_text: str, names: RunNames) -> bytes:
    return names.normal(json_text).encode("utf-8", "surrogatepass")


def _kept(pieces: dict[Any, bytes], key: Any, encode: Callable[[Any], str], names: RunNames) -> bytes:
    """The hashed bytes of ``key`` (a message's ``(role, content)`` or a text piece), made once."""
    piece = pieces.get(key)
    if piece is None:
        source = {"role": key[0], "content": key[1]} if isinstance(key, tuple) else key
        piece = _hashed(encode(source), names)
        if len(pieces) >= _PIECES_KEPT:
            pieces.clear()
        pieces[key] = piece
    return piece


def _piece_key(message: Any) -> tuple[str, str] | None:
    """``(role, content)`` of a message made of exactly those two texts (None for any other)."""
    if type(message) is not dict or len(message) != 2:
        return None
    role, content = message.get("role"), message.get("content")
    return (role, content) if type(role) is str and isinstance(content, str) else None


def as_stored(text: str) -> str:
    """``text`` as the event store keeps it (secrets redacted, a long text clipped to its mark): what a
    live value is compared as with a stored one."""
    return str(clip_value(redact(text), {}))


# -- one step of each run -------------------------------------------------------------------------
@dataclass(frozen=True)
class StepFacts:
    """What is compared of one step: its actions ``(tool, arguments as JSON, observation)`` and the
    hash and size of the prompt its model call was sent (None: no model call, or recorded before
    hashes were)."""

    number: int
    results: tuple[tuple[str, str, str], ...]
    input_hash: str | None = None
    prompt_chars: int | None = None

    @classmethod
    def of(cls, number: int, results: Iterable[Any], request: tuple[str, int | None] | None = None) -> "StepFacts":
        """A step from its results (``[tool, arguments, observation]`` items) and ``(hash, chars)``."""
        rows = tuple((str(r[0]), str(r[1]), str(r[2])) for r in results)
        digest, chars = request if request is not None else (None, None)
        return cls(number, rows, digest, chars)

    def actions(self) -> str:
        """The step's actions in words: ``tool({"n": 1}) → observation; …``."""
        return "; ".join(f"{t}({_clip(a)}) → {_clip(o)}" for t, a, o in self.results) or "(no action)"


def stored_facts(rows: Iterable[tuple[str, int | None, str]]) -> dict[int, StepFacts]:
    """The steps of a run from its stored ``step`` and ``model_request`` events (``(type, step, data)``
    rows, data as JSON text), by number."""
    requests: dict[int, tuple[str, int | None]] = {}
    steps: dict[int, list[Any]] = {}
    for type_, step, raw in rows:
        if step is None:
            continue
        data = json.loads(raw)
        if type_ == "model_request":
            if not data.get("stage") and data.get("input_hash") and step not in requests:
                requests[step] = (str(data["input_hash"]), data.get("prompt_chars"))
        elif type_ == "step":
            steps[step] = list(data.get("results") or [])
    return {n: StepFacts.of(n, results, requests.get(n)) for n, results in steps.items()}


def _prompt(facts: StepFacts) -> str:
    size = f"{facts.prompt_chars} chars, " if facts.prompt_chars is not None else ""
    return f"a prompt of {size}sha256 {str(facts.input_hash)[:12]}"


def compare_step(
    original: StepFacts, replay: StepFacts, same: Same, *, inputs: bool = True
) -> tuple[DivergenceHow, str, str] | None:
    """How two steps of the same number differ, first difference first (see the module's docstring),
    with what each did in words; None when they do not. ``inputs=False``: the model inputs are not
    compared (a step whose prompt a fork edited)."""
    if inputs and original.input_hash and replay.input_hash and original.input_hash != replay.input_hash:
        return "model input", _prompt(original), _prompt(replay)
    tools_o, tools_r = [r[0] for r in original.results], [r[0] for r in replay.results]
    if tools_o != tools_r:
        return "action", ", ".join(tools_o) or "(no action)", ", ".join(tools_r) or "(no action)"
    pairs = list(zip(original.results, replay.results))
    for (tool, args_o, _), (_, args_r, _) in pairs:  # all arguments were chosen before any tool answered
        if not same(args_o, args_r):
            return "arguments", f"{tool}({_clip(args_o)})", f"{tool}({_clip(args_r)})"
    for (tool, _, obs_o), (_, _, obs_r) in pairs:
        if not same(obs_o, obs_r):
            return "observation", f"{tool} → {_clip(obs_o)}", f"{tool} → {_clip(obs_r)}"
    return None


@dataclass(frozen=True)
class End:
    """How a run ended: its last step and status (``running``: not yet)."""

    last_step: int
    status: str

    def text(self) -> str:
        """How it ended, in words: "ended after step 4 (success)"."""
        if self.status == "running":
            return f"still running after step {self.last_step}"
        return f"ended after step {self.last_step} ({self.status})"


def ended_apart(
    original: End, replay: End, steps_o: Mapping[int, StepFacts], steps_r: Mapping[int, StepFacts], start: int
) -> tuple[int, str, str] | None:
    """Where two runs whose compared steps were the same part by how they ended: the first step (from
    ``start``) that only the one that went on took, or their common last step when they ended
    differently; ``(step, original in words, replay in words)``, or None."""

    def went_on(steps: Mapping[int, StepFacts], step: int) -> str:
        taken = steps.get(step)
        return f"step {step}: {taken.actions()}" if taken is not None else f"went on to step {step}"

    if original.last_step > replay.last_step:
        step = max(replay.last_step + 1, start)
        return step, went_on(steps_o, step), replay.text()
    if replay.last_step > original.last_step:
        step = max(original.last_step + 1, start)
        return step, original.text(), went_on(steps_r, step)
    if "running" in (original.status, replay.status) or original.status == replay.status:
        return None
    if original.last_step < start:
        return None
    return original.last_step, original.text(), replay.text()


def first_departure(
    source: str,
    original: Mapping[int, StepFacts],
    replay: Mapping[int, StepFacts],
    same: Same,
    ends: tuple[End, End],
    start: int = 1,
) -> Divergence | None:
    """Where ``replay`` first departs from ``original`` (the run ``source``), comparing their steps from
    ``start`` on and then how they ended (``ends``: the original's, the replay's); None when nowhere."""
    for n in sorted(n for n in set(original) & set(replay) if n >= start):
        found = compare_step(original[n], replay[n], same)
        if found is not None:
            return Divergence(source, n, *found)
    apart = ended_apart(ends[0], ends[1], original, replay, start)
    return None if apart is None else Divergence(source, apart[0], "ended", apart[1], apart[2])


def texts_alike(names: RunNames) -> Same:
    """``same`` for two stored texts: equal once the runs' own ids are replaced."""

    def same(a: str, b: str) -> bool:
        return a == b or names.normal(a) == names.normal(b)

    return same


# -- live, in the agent loop -----------------------------------------------------------------------
class DivergenceWatch:
    """One agent-loop run's watch (see the module's docstring): :meth:`input_hash` for each model call
    (every run), :meth:`step_finished` after each step and :meth:`run_ended` before the run's end
    (they compare only for a fork). The original's steps after the fork point are read once, when the
    fork's first step is compared; after the first departure nothing more is compared."""

    def __init__(self, ws: "RunHost", run_id: str, fork: tuple[str, int] | None, plan: "ForkPlan"):
        self.ws, self.run_id = ws, run_id
        self.source = fork[0] if fork is not None else None
        #: whether the run is compared: a fork, not a resume (a resume continues its own run)
        self.active = self.source is not None and not plan.resumed
        self.start = plan.last_step + 1
        edit = plan.edit or {}
        step = edit.get("step") if isinstance(edit.get("step"), int) else None
        #: the step whose actions a fork edited (the edit is not a departure: compared from the next one)
        self.skip = {step} if step is not None and edit.get("kind") == "actions" else set()
        #: the step whose prompt a fork edited, directly or by a ToolSelf stage's configuration (what the
        #: model chose from it is compared)
        self.skip_input = {step} if step is not None and edit.get("kind") == "context" else set()
        if edit.get("kind") == "stage":
            self.skip_input.add(self.start)
        self.found: Divergence | None = None
        self._names: RunNames | None = None
        self._inputs: dict[int, tuple[str, int | None]] = {}
        self._pieces: dict[Any, bytes] = {}  # encoded messages and texts, see input_hash
        self._original: dict[int, StepFacts] | None = None
        self._original_end = End(0, "running")

    @property
    def names(self) -> RunNames:
        """The run's own ids (read once, at its first model call)."""
        if self._names is None:
            self._names = RunNames.of(self.ws, self.run_id, self.source) if self.source else RunNames([self.run_id])
        return self._names

    def input_hash(
        self, step: int, messages: list[dict[str, Any]], chars: int | None = None, pieces: tuple[str, ...] | None = None
    ) -> str:
        """The ``input_hash`` of a model call of ``step`` (kept to compare the step when it finishes);
        ``pieces``: the last message's text in pieces, when known (see :func:`input_hash`)."""
        digest = input_hash(messages, self.names, self._pieces, pieces)
        if self.active and self.found is None:
            self._inputs.setdefault(step, (digest, chars))
        return Clean(digest)  # a sha256: nothing in it for the event's redaction to scan

    def _same(self, original: str, replay: str) -> bool:
        # the original's texts are stored ones: the replay's live text is compared in that form
        if original == replay:
            return True
        names = self.names
        return names.normal(original) == names.normal(as_stored(replay))

    def _load(self) -> dict[int, StepFacts]:
        if self._original is None:
            assert self.source is not None
            rows = self.ws.db.step_events_after(self.source, ["step", "model_request"], self.start - 1)
            self._original = stored_facts(rows)
            row = self.ws.db.run_row(self.source)
            status = row["status"] if row is not None else "running"
            last = max(self._original) if self._original else self.ws.db.step_counts([self.source])[self.source][0]
            self._original_end = End(last, status)
        return self._original

    def step_finished(self, log: "RunLog", record: "StepRecord") -> None:
        """Compare the step just finished with the original's (emitting ``diverged`` at the first difference)."""
        n = record.number
        request = self._inputs.pop(n, None)
        if not self.active or self.found is not None or n < self.start or n in self.skip:
            return
        original = self._load()
        replay = StepFacts.of(n, record.results, request)
        theirs = original.get(n)
        if theirs is None:
            self._emit(log, Divergence(self.source or "", n, "ended", self._original_end.text(), replay.actions()))
            return
        found = compare_step(theirs, replay, self._same, inputs=n not in self.skip_input)
        if found is not None:
            self._emit(log, Divergence(self.source or "", n, *found))

    def run_ended(self, log: "RunLog", status: str, last_step: int) -> None:
        """At the run's end: a fork that stopped before the original did, or ended differently at the
        same step, departs there (unless it already departed). A fork whose last step is its edit ends
        as the edit made it: only where the original went on is a departure."""
        if not self.active or self.found is not None:
            return
        original = self._load()
        if last_step > self._original_end.last_step:  # it went on: said at its first step the original lacks
            return
        if last_step in self.skip and last_step == self._original_end.last_step:
            return
        apart = ended_apart(self._original_end, End(last_step, status), original, {}, self.start)
        if apart is not None:
            self._emit(log, Divergence(self.source or "", apart[0], "ended", apart[1], apart[2]))

    def _emit(self, log: "RunLog", found: Divergence) -> None:
        self.found = found
        self._inputs.clear()
        log.emit("diverged", found.event(), durable=True)


# -- live, in a CORAL team's run ---------------------------------------------------------------------
@dataclass
class _Sent:
    seq: int
    sender: str
    mentions: list[str]
    content: str
    matched: bool = False

    def text(self) -> str:
        to = ", ".join(f"@{m}" for m in self.mentions) or "(no mention)"
        return f"#{self.seq} {self.sender} → {to}: {_clip(self.content)}"


class MessageWatch:
    """A CORAL team fork's watch (made by :func:`watch_messages`): each message the fork's team sends
    is compared with the original's message of the same sender and rank after the fork point (members
    run concurrently, so two senders' messages may interleave differently without departing)."""

    def __init__(self, log: "RunLog", source: str, after: int):
        self.log, self.source, self.after = log, source, after
        self.found: Divergence | None = None
        self.last = after
        self.unsubscribe: Callable[[], None] = lambda: None
        self._sent: dict[str, int] = {}
        self._original: dict[str, list[_Sent]] | None = None
        self._names = RunNames([log.run_id, source])

    def _load(self) -> dict[str, list[_Sent]]:
        if self._original is None:
            self._original = {}
            for _, _, _, raw in self.log.ws.db.run_events_of_type([self.source], ["message"]):
                d = json.loads(raw)
                if int(d.get("seq", 0)) > self.after:
                    sent = _Sent(int(d["seq"]), str(d.get("sender")), list(d.get("mentions") or []), str(d["content"]))
                    self._original.setdefault(sent.sender, []).append(sent)
        return self._original

    def event(self, e: "Event") -> None:
        """An event of the team's run tree (the subscription's callback)."""
        if e.run_id != self.log.run_id:
            return
        if e.type == "run_finished":
            self.unsubscribe()
            self.ended(str(e.data.get("status", "")))
        elif e.type == "message" and not e.data.get("replayed") and self.found is None:
            self.message(e.data)

    def message(self, data: Mapping[str, Any]) -> None:
        """Compare one message the fork's team sent (a ``message`` event's data)."""
        mine = _Sent(int(data["seq"]), str(data.get("sender")), list(data.get("mentions") or []), str(data["content"]))
        self.last = max(self.last, mine.seq)
        rank = self._sent.get(mine.sender, 0)
        self._sent[mine.sender] = rank + 1
        theirs = self._load().get(mine.sender, [])
        if rank >= len(theirs):
            self._emit(mine.seq, "message", f"{mine.sender} sent no more messages", mine.text())
            return
        other = theirs[rank]
        other.matched = True
        alike = texts_alike(self._names)
        if sorted(other.mentions) != sorted(mine.mentions) or not alike(other.content, mine.content):
            self._emit(mine.seq, "message", other.text(), mine.text())

    def ended(self, status: str) -> None:
        """The fork's team run ended with ``status``: a message of the original it never sent, or an
        ending other than the original's, is where it departed."""
        if self.found is not None:
            return
        unsent = sorted((m for ms in self._load().values() for m in ms if not m.matched), key=lambda m: m.seq)
        row = self.log.ws.db.run_row(self.source)
        theirs = row["status"] if row is not None else status
        mine = f"the team ended after message {self.last} ({status})"
        if unsent:
            self._emit(unsent[0].seq, "ended", unsent[0].text(), mine)
        elif theirs != status:
            self._emit(self.last, "ended", f"the team ended ({theirs})", mine)

    def _emit(self, seq: int, how: DivergenceHow, original: str, replay: str) -> None:
        self.found = Divergence(self.source, seq, how, original, replay, "message")
        self.log.emit("diverged", self.found.event(), durable=True)


def watch_messages(log: "RunLog", fork: tuple[str, int] | None) -> MessageWatch | None:
    """Called once by a CORAL team's run after its start: when it is a fork (``fork``: the run and the
    message number it starts from), compare every message it sends with the original's and emit one
    ``diverged`` event at the first difference (see :class:`MessageWatch`); None for a fresh run."""
    if fork is None:
        return None
    watch = MessageWatch(log, fork[0], fork[1])
    watch.unsubscribe = log.events.subscribe(watch.event, log.run_id)
    return watch


__all__ = [
    "PLACEHOLDER",
    "WORDS",
    "Divergence",
    "DivergenceWatch",
    "End",
    "MessageWatch",
    "RunNames",
    "StepFacts",
    "as_stored",
    "compare_step",
    "ended_apart",
    "first_departure",
    "input_hash",
    "stored_facts",
    "texts_alike",
    "watch_messages",
]
