"""A model's preflight (``tea doctor --model M``, ``%tea doctor M``, and before an eval set starts):
a few small calls that say whether a long evaluation can run on it, before it runs for an hour.

1. ``reachable`` / ``authenticated``: a one-word reply (a refused connection, an unknown host and a
   rejected key are told apart);
2. ``native_tools``: one native tool call when asked; ``parallel_tools``: two calls in one reply;
3. ``json_mode``: ``response_format={"type": "json_object"}`` gives a JSON object;
4. ``context_length`` and the price per token from litellm's local price list (no download), the
   latency of each call and what each cost;
5. the recommended ``tool_mode`` for agents (``native`` when native tool calls work, else ``json``,
   the paper's JSON protocol, which works with any model), and the cost of the doctor's own calls.

Scripted and replayed models (``tea/...``) are not LLMs: they are checked the same way, and their
report says so. Each call has no retries and a short timeout.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city's name"}},
            "required": ["city"],
        },
    },
}


@dataclass
class Probe:
    """One preflight call: did it pass (None: not tried), what was seen, how long it took, its cost."""

    name: str
    ok: bool | None
    detail: str = ""
    latency: float = 0.0
    cost: float = 0.0
    tokens: int = 0


@dataclass
class Preflight:
    """A model's preflight report (see the module docstring); ``ok`` means an evaluation can start."""

    model: str
    display: str
    probes: list[Probe] = field(default_factory=list)
    context_length: int | None = None
    input_price: float | None = None  # USD per token
    output_price: float | None = None

    def probe(self, name: str) -> Probe | None:
        """The probe called ``name``, if it ran."""
        return next((p for p in self.probes if p.name == name), None)

    def _ok(self, name: str) -> bool | None:
        p = self.probe(name)
        return None if p is None else p.ok

    @property
    def reachable(self) -> bool:
        """The server answered (even to say the key is wrong, or to slow down)."""
        p = self.probe("reachable")
        return bool(p and (p.ok or "authentication" in p.detail or "answered HTTP" in p.detail))

    @property
    def authenticated(self) -> bool:
        """The model answered a call."""
        return bool(self._ok("reachable"))

    @property
    def ok(self) -> bool:
        """An evaluation can start: the model is reachable and answers."""
        return self.authenticated

    @property
    def native_tools(self) -> bool | None:
        """One native tool call worked (None: not tried)."""
        return self._ok("native_tools")

    @property
    def parallel_tools(self) -> bool | None:
        """Two tool calls in one reply worked (None: not tried)."""
        return self._ok("parallel_tools")

    @property
    def json_mode(self) -> bool | None:
        """JSON mode gave a JSON object (None: not tried)."""
        return self._ok("json_mode")

    @property
    def tool_mode(self) -> str | None:
        """The tool mode to give agents on this model: ``native`` or ``json`` (None: native tool calls
        were not tried, as when the model did not answer)."""
        if self.native_tools is None:
            return None
        return "native" if self.native_tools else "json"

    @property
    def measured(self) -> bool:
        """At least one call answered, so latency and price per call were measured."""
        return any(p.ok is not None and p.latency for p in self.probes)

    @property
    def latency(self) -> float:
        """Mean seconds per call of the calls that answered (0.0 when none did)."""
        times = [p.latency for p in self.probes if p.ok is not None and p.latency]
        return sum(times) / len(times) if times else 0.0

    @property
    def cost(self) -> float:
        """What the doctor's own calls cost (USD)."""
        return sum(p.cost for p in self.probes)

    @property
    def price_per_call(self) -> float:
        """Mean cost of one of these small calls (USD)."""
        paid = [p.cost for p in self.probes if p.ok is not None]
        return sum(paid) / len(paid) if paid else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what ``tea doctor --json`` prints)."""
        return {
            "model": self.model,
            "display": self.display,
            "ok": self.ok,
            "reachable": self.reachable,
            "authenticated": self.authenticated,
            "native_tools": self.native_tools,
            "parallel_tools": self.parallel_tools,
            "json_mode": self.json_mode,
            "context_length": self.context_length,
            "input_price_per_token": self.input_price,
            "output_price_per_token": self.output_price,
            "latency": self.latency if self.measured else None,
            "price_per_call": self.price_per_call if self.measured else None,
            "tool_mode": self.tool_mode,
            "cost": self.cost,
            "probes": [asdict(p) for p in self.probes],
        }

    def text(self) -> str:
        """The report as plain text, one check a line."""
        mark = {True: "✓", False: "✗", None: "–"}
        lines = [f"doctor {self.display}: {'ready' if self.ok else 'NOT READY'}"]
        for p in self.probes:
            lines.append(f"  {mark[p.ok]} {p.name:<15} {p.detail}" + (f" ({p.latency:.2f}s)" if p.latency else ""))
        ctx = f"{self.context_length:,} tokens" if self.context_length else "unknown"
        price = (
            f"${self.input_price * 1e6:.2f} / ${self.output_price * 1e6:.2f} per million tokens in / out"
            if self.input_price is not None and self.output_price is not None
            else "unknown (not in litellm's price list)"
        )
        lines.append(f"  context length: {ctx}; price: {price}")
        said = []  # only what was measured: a model that did not answer has no latency nor tool mode
        if self.measured:
            said.append(f"latency {self.latency:.2f}s per call · ${self.price_per_call:.6f} per call")
        if self.tool_mode is not None:
            said.append(f"recommended tool_mode={self.tool_mode!r}")
        if self.measured:
            said.append(f"these checks cost ${self.cost:.6f}")
        if said:
            lines.append("  " + " · ".join(said))
        if not self.ok:
            lines.append("  nothing else was checked: the model did not answer")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Preflight({self.model!r}, ok={self.ok}, tool_mode={self.tool_mode!r})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return f"<pre class='tea-doctor'>{html.escape(self.text())}</pre>"


async def apreflight(
    model: str,
    *,
    ws: "RunHost | None" = None,
    api_base: str | None = None,
    timeout: float = 30.0,
    client: Any = None,
) -> Preflight:
    """Check ``model`` (see the module docstring); ``api_base`` (else the workspace's) names an
    OpenAI-compatible server."""
    from tea_notebook.models.client import ModelClient, ModelError, display_name

    if not model:
        raise TeaError("the doctor needs a model name (--model provider/model)")
    client = client or ModelClient(retries=0, timeout=timeout)
    base = api_base or (getattr(ws, "api_base", None) if ws is not None else None)
    defaults = {"timeout": timeout, "retries": 0, "api_base": base}
    report = Preflight(model, display_name(model))
    _prices(report)

    async def probe(name: str, messages: list[dict], check: Any, **params: Any) -> Probe:
        try:
            tools = params.pop("tools", None)
            reply = await client.complete(model, messages, tools, defaults=defaults, **params)
        except ModelError as exc:
            result = Probe(name, False, str(exc)[:300])
        except TeaError as exc:  # a scripted model's own error: it did not do what was asked
            result = Probe(name, False, f"{type(exc).__name__}: {str(exc)[:200]}")
        else:
            ok, detail = check(reply)
            result = Probe(name, ok, detail, reply.latency, reply.cost, reply.prompt_tokens + reply.completion_tokens)
        report.probes.append(result)
        return result

    def answered(reply: Any) -> tuple[bool, str]:
        return True, f"answered {str(reply.content or '')[:40]!r}"

    first = await probe("reachable", [{"role": "user", "content": "Reply with the single word OK."}], answered)
    if not first.ok:
        if "authentication" in first.detail.lower() or " 401" in first.detail:
            first.detail = "reachable, but authentication failed: " + first.detail
        return report

    def one_call(reply: Any) -> tuple[bool, str]:
        calls = [c for c in reply.tool_calls if c.name == "get_weather"]
        if not calls:
            return False, f"no tool call (replied {str(reply.content or '')[:60]!r})"
        args = calls[0].arguments if isinstance(calls[0].arguments, dict) else {}
        return ("city" in args), f"get_weather({json.dumps(args)[:60]})"

    def two_calls(reply: Any) -> tuple[bool, str]:
        n = sum(1 for c in reply.tool_calls if c.name == "get_weather")
        return n >= 2, f"{n} tool call(s) in one reply"

    def json_object(reply: Any) -> tuple[bool, str]:
        try:
            value = json.loads(reply.content or "")
        except (TypeError, ValueError):
            return False, f"not JSON: {str(reply.content or '')[:60]!r}"
        return isinstance(value, dict), f"JSON {type(value).__name__}"

    ask = "What is the weather in Paris? Use the get_weather tool."
    await probe("native_tools", [{"role": "user", "content": ask}], one_call, tools=[_WEATHER])
    both = "Get the weather in Paris and in London: call get_weather twice, in parallel, in this one reply."
    await probe("parallel_tools", [{"role": "user", "content": both}], two_calls, tools=[_WEATHER])
    as_json = 'Reply with a JSON object with one key "ok" set to true, and nothing else.'
    await probe(
        "json_mode", [{"role": "user", "content": as_json}], json_object, response_format={"type": "json_object"}
    )
    return report


def _prices(report: Preflight) -> None:
    """Context length and prices from litellm's local price list, when it knows the model."""
    from tea_notebook.models.client import is_offline

    if is_offline(report.model):
        return
    try:
        from tea_notebook.models.client import import_litellm

        info = import_litellm().get_model_info(model=report.model)
    except Exception:  # noqa: BLE001 - a model litellm does not know: unknown, and said so
        return
    report.context_length = info.get("max_input_tokens") or info.get("max_tokens")
    report.input_price = info.get("input_cost_per_token")
    report.output_price = info.get("output_cost_per_token")


def preflight(model: str, **options: Any) -> Preflight:
    """:func:`apreflight` from synchronous code (a notebook cell too)."""
    from tea_notebook._sync import submit

    return submit(apreflight(model, **options)).result()


__all__ = ["Preflight", "Probe", "apreflight", "preflight"]
