"""One client for every model: litellm names, the offline ``tea/...`` models, retries, timeouts,
costs, and recording to replay cassettes.

Resolution order for which model runs: explicit argument > the agent's own model > the workspace
default > ``TEA_MODEL`` > the offline demo model (with a note saying how to set a real one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tea_notebook.errors import TeaError

log = logging.getLogger(__name__)
DEMO_MODEL = "tea/demo"
NO_MODEL_NOTE = (
    "No model is configured, so the offline demo model (tea/demo, scripted, not an LLM) runs. "
    "Set one with TEA_MODEL=provider/model (any litellm model name, or a local server's), "
    "Workspace(..., model=...) or model=... on the agent."
)


class ModelError(TeaError):
    """A model call failed for a reason the user can act on (key, auth, quota, network, bad request)."""


@dataclass
class ToolCall:
    """A tool call the model asked for; ``arguments`` is the parsed JSON (or the raw text if it is not JSON)."""

    id: str
    name: str
    arguments: Any
    raw_arguments: str = ""


@dataclass
class ModelReply:
    """One model turn, with what it cost."""

    model: str
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    scripted: bool = False


def resolve_model(
    explicit: str | None = None, agent: str | None = None, workspace: str | None = None
) -> tuple[str, str]:
    """``(model, where it came from)`` by the documented order."""
    for value, source in ((explicit, "argument"), (agent, "agent"), (workspace, "workspace")):
        if value:
            return value, source
    env = os.environ.get("TEA_MODEL")
    if env:
        return env, "TEA_MODEL"
    return DEMO_MODEL, "default"


def is_offline(model: str) -> bool:
    """True for the scripted / replayed ``tea/...`` models."""
    return model.startswith("tea/")


def takes_images(model: str, override: bool | None = None) -> bool:
    """Whether to send ``model`` images: ``override`` when set, else what litellm knows of the model
    (offline and unknown models: no)."""
    if override is not None:
        return override
    if is_offline(model):
        return False
    try:
        return bool(_litellm().supports_vision(model=model))
    except Exception:  # noqa: BLE001 - unknown model: text only
        return False


def display_name(model: str) -> str:
    """A model name as shown to people: offline ones say that they are scripted or replayed."""
    if model.startswith("tea/replay:"):
        return f"{model} (replayed cassette, not a live model)"
    if is_offline(model):
        return f"{model} (scripted, not an LLM)"
    return model


_TRANSIENT = (
    "RateLimitError",
    "APIConnectionError",
    "Timeout",
    "ServiceUnavailableError",
    "InternalServerError",
    "APIError",
)


def _retryable(exc: Exception, model: str) -> bool:
    """Transient provider trouble is retried; offline models and credential problems never are."""
    name, text = type(exc).__name__, str(exc).lower()
    if name not in _TRANSIENT or "credential" in text or "api key" in text or "api_key" in text:
        return False
    # offline models have no network: only the rate-limit errors a script raises on purpose are retried
    return not is_offline(model) or name == "RateLimitError"


def _friendly(model: str, exc: Exception) -> ModelError:
    """One readable sentence naming the model and, where it helps, the variable to set."""
    kind = type(exc).__name__
    hint = ""
    try:
        litellm = _litellm()
        missing = litellm.validate_environment(model=model).get("missing_keys") or []
        if missing:
            hint = f" Set {', '.join(missing)} in the environment (or pass api_key=...)."
    except Exception:  # noqa: BLE001 - the hint is best effort
        pass
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else kind
    if kind == "AuthenticationError":
        return ModelError(f"model {model!r}: authentication failed.{hint or ' Check the API key.'} ({first})")
    if kind == "RateLimitError":
        return ModelError(f"model {model!r}: rate limited after retries.{hint} ({first})")
    if kind in ("APIConnectionError", "Timeout"):
        return ModelError(f"model {model!r}: cannot reach the provider (network or base_url).{hint} ({first})")
    if kind in ("NotFoundError", "BadRequestError") and "LLM Provider NOT provided" in str(exc):
        return ModelError(f"model {model!r} is not a litellm model name; use provider/model")
    return ModelError(f"model {model!r}: {kind}: {first}.{hint}")


def _cost(model: str, response: Any, prompt: int, completion: int) -> float:
    if is_offline(model):
        return 0.0
    hidden = getattr(response, "_hidden_params", {}) or {}
    if hidden.get("response_cost") is not None:
        return float(hidden["response_cost"])
    try:
        a, b = _litellm().cost_per_token(model=model, prompt_tokens=prompt, completion_tokens=completion)
        return float(a + b)
    except Exception:  # noqa: BLE001 - unknown price: counted as 0 and said so in the ledger
        return 0.0


def _litellm() -> Any:
    """Import litellm quietly and offline (no price-list download, no banner on errors)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _tea_cause(exc: BaseException) -> TeaError | None:
    """The TeaError that litellm wrapped, if any (our offline models raise those)."""
    seen = 0
    while exc is not None and seen < 6:
        if isinstance(exc, TeaError):
            return exc
        exc = getattr(exc, "original_exception", None) or exc.__cause__ or exc.__context__
        seen += 1
    return None


class ModelClient:
    """Calls models through litellm with retries, a timeout and cost accounting.

    ``record`` names a JSONL cassette: every real call is appended to it, so the same run can be
    replayed offline later as ``tea/replay:PATH``.
    """

    def __init__(
        self,
        *,
        retries: int = 3,
        timeout: float = 120.0,
        backoff: float = 1.0,
        record: str | Path | None = None,
        **params: Any,
    ):
        self.retries, self.timeout, self.backoff = retries, timeout, backoff
        self.record = Path(record) if record else None
        self.params = params

    async def complete(
        self, model: str, messages: list[dict], tools: list[dict] | None = None, **params: Any
    ) -> ModelReply:
        """One chat completion; raises :class:`ModelError` with a readable message on failure."""
        litellm = _litellm()
        call = {**self.params, **params}
        if is_offline(model):
            from tea_notebook.models.provider import ensure_registered

            ensure_registered()
        elif not any(k in call for k in ("api_key", "api_base", "base_url")):
            try:
                missing = litellm.validate_environment(model=model).get("missing_keys") or []
            except Exception:  # noqa: BLE001 - unknown providers are checked by the call itself
                missing = []
            if missing:
                raise ModelError(
                    f"model {model!r} needs {', '.join(missing)}: set it in the environment "
                    "(or pass api_key=... / api_base=... for a local OpenAI-compatible server)"
                )
        start = time.perf_counter()
        for attempt in range(self.retries + 1):
            try:
                response = await litellm.acompletion(
                    model=model, messages=messages, tools=tools or None, timeout=self.timeout, num_retries=0, **call
                )
                break
            except TeaError:
                raise
            except Exception as exc:  # noqa: BLE001 - litellm raises many types; sorted below
                inner = _tea_cause(exc)
                if inner is not None:  # an offline model's own error (script exhausted, replay diverged)
                    raise inner from None
                if _retryable(exc, model) and attempt < self.retries:
                    delay = self.backoff * (2**attempt) * (0.5 + random.random())
                    log.warning("model %s: %s, retrying in %.1fs", model, type(exc).__name__, delay)
                    await asyncio.sleep(delay)
                    continue
                raise _friendly(model, exc) from None
        latency = time.perf_counter() - start
        message = response.choices[0].message
        calls = []
        for tc in getattr(message, "tool_calls", None) or []:
            raw = tc.function.arguments or "{}"
            try:
                parsed: Any = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                parsed = raw
            calls.append(
                ToolCall(
                    tc.id or f"call_{len(calls)}",
                    tc.function.name,
                    parsed,
                    raw if isinstance(raw, str) else json.dumps(raw),
                )
            )
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        reply = ModelReply(
            model=model,
            content=message.content,
            tool_calls=calls,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost=_cost(model, response, prompt, completion),
            latency=latency,
            scripted=is_offline(model),
        )
        if self.record is not None and not is_offline(model):
            from tea_notebook.models.offline import Cassette

            turn = {
                "content": reply.content,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in calls],
            }
            Cassette.open(self.record).record(
                messages, tools, model, turn, {"prompt_tokens": prompt, "completion_tokens": completion}
            )
        return reply
