"""One client for every model: litellm names, the offline ``tea/...`` models, retries, timeouts,
costs, and recording to replay cassettes.

Resolution order for which model runs: explicit argument > the agent's own model > the workspace
default > ``TEA_MODEL`` > the offline demo model (with a note saying how to set a real one).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tea_notebook._sync import on_background
from tea_notebook.errors import TeaError

log = logging.getLogger(__name__)
DEMO_MODEL = "tea/demo"
#: a model call's defaults, sized for a person waiting in a notebook (a provider that is down is
#: said within about two minutes, not eight): seconds per attempt, and retries of transient errors
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 1
#: the key sent to a local OpenAI-compatible server that needs none (litellm insists on one)
LOCAL_PLACEHOLDER_KEY = "sk-local-no-key-needed"
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0", "::1", "[::1]", "host.docker.internal")
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


#: how token counts of the scripted offline models are labelled wherever they are shown
ESTIMATED = "estimated: scripted model, no tokenizer"


def tokens_estimated(model: str) -> bool:
    """True when a model's token counts are estimates: the scripted offline models (``tea/demo``,
    ``tea/test``, ``tea/script:…``) count characters, not a tokenizer's tokens. A replayed cassette's
    counts are the recorded ones. ``model`` may be a display name (it starts with the model name)."""
    name = model.split(" ", 1)[0]
    return is_offline(name) and not name.startswith("tea/replay:")


def takes_images(model: str, override: bool | None = None) -> bool:
    """Whether to send ``model`` images: ``override`` when set, else what litellm knows of the model
    (offline and unknown models: no)."""
    if override is not None:
        return override
    if is_offline(model):
        return False
    try:
        return bool(import_litellm().supports_vision(model=model))
    except Exception:  # noqa: BLE001 - unknown model: text only
        return False


def function_calling(model: str) -> bool | None:
    """Whether litellm's price list says ``model`` takes native tool calls; None when it does not know
    the model (every local vLLM / Ollama / LM Studio model named ``openai/...`` or ``hosted_vllm/...``).
    Imports litellm: call it once that is done (:func:`litellm_ready`)."""
    litellm = import_litellm()
    try:
        litellm.get_model_info(model=model)
    except Exception:  # noqa: BLE001 - litellm raises for a model it has no entry for
        return None
    try:
        return bool(litellm.supports_function_calling(model=model))
    except Exception:  # noqa: BLE001 - an entry without the field
        return None


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


def api_base_of(model: str, params: dict[str, Any] | None = None) -> str | None:
    """The server URL a call to ``model`` goes to when one is set: ``api_base`` / ``base_url`` in
    ``params``, else (for OpenAI-compatible models) ``OPENAI_API_BASE`` / ``OPENAI_BASE_URL``."""
    params = params or {}
    for key in ("api_base", "base_url"):
        if params.get(key):
            return str(params[key])
    if is_offline(model):
        return None
    if model.startswith(("openai/", "text-completion-openai/")) or "/" not in model:
        return os.environ.get("OPENAI_API_BASE") or os.environ.get("OPENAI_BASE_URL") or None
    return None


def is_local(url: str | None) -> bool:
    """True for a server on this machine (``localhost``, ``127.0.0.1``, ``::1`` …)."""
    if not url:
        return False
    from urllib.parse import urlparse

    try:
        host = (urlparse(url if "://" in url else f"http://{url}").hostname or "").lower()
    except ValueError:
        return False
    return host in _LOCAL_HOSTS or host.startswith("127.")


def _unreachable(exc: BaseException | None) -> BaseException | None:
    """The connection-refused (or unknown host) error inside ``exc``'s chain: not transient, so
    never retried."""
    import socket

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
            return exc
        exc = getattr(exc, "original_exception", None) or exc.__cause__ or exc.__context__
        seen += 1
    return None


#: the longest wait (s) before a retry that a server's ``retry-after`` may ask for: a longer ask is cut
#: to this (and to the call's timeout), so a person waiting in a notebook hears back within minutes
MAX_RETRY_AFTER = 30.0


def _response_headers(exc: BaseException) -> dict[str, str]:
    """The HTTP response headers a provider error carries (lower-case names; empty when none): litellm
    keeps them in ``litellm_response_headers``, the OpenAI SDK's errors in ``response.headers``."""
    found: dict[str, str] = {}
    response = getattr(exc, "response", None)
    for source in (getattr(response, "headers", None), getattr(exc, "litellm_response_headers", None)):
        try:
            found.update({str(k).lower(): str(v) for k, v in (source or {}).items()})
        except (AttributeError, TypeError):  # not a mapping: nothing to read
            continue
    return found


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """The seconds a server asked to wait before the next attempt, from the error's response headers:
    ``retry-after-ms`` (milliseconds, OpenAI's), else ``retry-after`` as seconds or as an HTTP date;
    None when it asked nothing readable. ``now``: the current time (``time.time()``) for a date."""
    headers = _response_headers(exc)
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class ToolsRejected(ModelError):
    """The server refused a call because it carried native tools (a local server started without tool
    support answers 400 saying so): the JSON tool protocol works there."""


def server_said(exc: BaseException) -> str:
    """What the server's answer said, without litellm's and the SDK's prefixes (its first line)."""
    import re

    text = str(getattr(exc, "message", "") or exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return re.sub(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?", "", first)[:300] or first[:300]


def _friendly(model: str, exc: Exception, base: str | None = None, retried: int = 0) -> ModelError:
    """One readable sentence naming the model and what the server said (its HTTP status and message),
    and, where it helps, the variable to set: only when the provider refused the key (never for a
    local server, which got a placeholder key, nor for a rate limit)."""
    kind = type(exc).__name__
    hint = ""
    if kind == "AuthenticationError" and not is_local(base):
        try:
            litellm = import_litellm()
            missing = litellm.validate_environment(model=model).get("missing_keys") or []
            if missing:
                hint = f" Set {', '.join(missing)} in the environment (or pass api_key=...)."
        except Exception:  # noqa: BLE001 - the hint is best effort
            pass
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else kind
    status = getattr(exc, "status_code", None)
    where = base or "the provider"
    if kind == "AuthenticationError":
        if is_local(base):
            hint = " It needs a key: pass api_key=... (a local server gets a placeholder key otherwise)."
        return ModelError(f"model {model!r}: authentication failed.{hint or ' Check the API key.'} ({first})")
    if kind == "RateLimitError":
        limited = f"rate limited after retries ({retried})" if retried else "rate limited"
        return ModelError(f"model {model!r}: {limited}; {where} answered HTTP {status or 429}: {server_said(exc)}")
    if kind in ("APIConnectionError", "Timeout"):
        return ModelError(f"model {model!r}: cannot reach the provider (network or base_url).{hint} ({first})")
    if kind in ("NotFoundError", "BadRequestError") and "LLM Provider NOT provided" in str(exc):
        return ModelError(f"model {model!r} is not a litellm model name; use provider/model")
    if isinstance(status, int):
        return ModelError(f"model {model!r}: {where} answered HTTP {status} ({kind}): {server_said(exc)}")
    return ModelError(f"model {model!r}: {kind}: {first}.{hint}")


def _cost(model: str, response: Any, prompt: int, completion: int) -> float:
    if is_offline(model):
        return 0.0
    hidden = getattr(response, "_hidden_params", {}) or {}
    if hidden.get("response_cost") is not None:
        return float(hidden["response_cost"])
    try:
        a, b = import_litellm().cost_per_token(model=model, prompt_tokens=prompt, completion_tokens=completion)
        return float(a + b)
    except Exception:  # noqa: BLE001 - unknown price: counted as 0 and said so in the ledger
        return 0.0


def import_litellm() -> Any:
    """Import litellm quietly and offline (no price-list download, no banner on errors, its loggers
    at ERROR unless ``LITELLM_LOG`` asks otherwise): every use of litellm in the package goes through
    here, so whichever comes first, nothing of litellm's prints into a cell."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    first = "litellm" not in sys.modules
    import litellm

    litellm.suppress_debug_info = True
    if first and not os.environ.get("LITELLM_LOG"):
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            logging.getLogger(name).setLevel(logging.ERROR)
    if first:
        from tea_notebook import _sync

        _sync.exit_first()  # our exit handler stops litellm's logging worker before litellm's own runs
    return litellm


_import_lock = threading.Lock()
#: the background import of litellm started by :func:`import_litellm_off_loop` (None: none started,
#: or the last one failed and the next call tries again)
_background_import: "concurrent.futures.Future[Any] | None" = None


def litellm_ready() -> bool:
    """True when litellm is imported completely, so :func:`import_litellm` returns at once. False
    while the background import runs: ``"litellm" in sys.modules`` is true then already, and an
    ``import litellm`` would wait for that import to finish."""
    started = _background_import
    if started is not None:
        return started.done() and not started.cancelled() and started.exception() is None
    return "litellm" in sys.modules  # imported by the user's own code, on their thread


def _start_background_import() -> "concurrent.futures.Future[Any]":
    """The one import of litellm in a thread of its own (started on the first call)."""
    global _background_import
    with _import_lock:
        if _background_import is None:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_running_or_notify_cancel()  # a waiter that gives up cannot cancel it for the others

            def work() -> None:
                global _background_import
                try:
                    future.set_result(import_litellm())
                except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the import
                    with _import_lock:
                        _background_import = None  # the next hosted call tries again
                    future.set_exception(exc)

            threading.Thread(target=work, name="tea-import-litellm", daemon=True).start()
            _background_import = future
        return _background_import


async def import_litellm_off_loop() -> Any:
    """litellm, imported in a thread of its own the first time (seconds), so the event loop goes on
    meanwhile. Cancelling the await (a stop) does not wait for the import: it finishes in the
    background and the next call finds it done (or still running, and awaits it)."""
    if litellm_ready():
        return import_litellm()
    return await asyncio.wrap_future(_start_background_import())


def _offline_response(model: str, messages: list[dict], tools: list[dict] | None) -> Any:
    """An offline model's reply with the attributes of litellm's response (``choices[0].message``…)."""
    from types import SimpleNamespace

    from tea_notebook.models.provider import offline_reply

    def wrap(value: Any) -> Any:
        if isinstance(value, dict):
            return SimpleNamespace(**{k: wrap(v) for k, v in value.items()})
        return [wrap(v) for v in value] if isinstance(value, list) else value

    return wrap(offline_reply(model.removeprefix("tea/"), messages, tools))


def _tea_cause(exc: BaseException | None) -> TeaError | None:
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

    ``timeout`` (seconds per attempt) and ``retries`` (of transient errors: rate limits, timeouts,
    5xx) default to the caller's ``defaults`` (a workspace's ``model_timeout`` / ``model_retries``),
    else :data:`DEFAULT_TIMEOUT` and :data:`DEFAULT_RETRIES`. A server that refuses the connection
    is reported at once, naming its URL, and never retried. ``api_base`` (in ``params``) points at
    an OpenAI-compatible server; a local one gets a placeholder key when no key is set.
    ``record`` names a JSONL cassette: every real call is appended to it, so the same run can be
    replayed offline later as ``tea/replay:PATH``.
    """

    def __init__(
        self,
        *,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: float = 1.0,
        record: str | Path | None = None,
        **params: Any,
    ):
        self._retries, self._timeout, self.backoff = retries, timeout, backoff
        self.record = Path(record) if record else None
        self.params = params

    @property
    def timeout(self) -> float:
        """Seconds one attempt may take (this client's own, or the default)."""
        return float(self._timeout) if self._timeout is not None else DEFAULT_TIMEOUT

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._timeout = value

    @property
    def retries(self) -> int:
        """Retries of transient errors (this client's own, or the default)."""
        return int(self._retries) if self._retries is not None else DEFAULT_RETRIES

    @retries.setter
    def retries(self, value: int | None) -> None:
        self._retries = value

    def settings(self, model: str, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """What a call of ``model`` will use: ``timeout``, ``retries`` and ``api_base`` (None when
        the provider's own), from this client, else ``defaults`` (the workspace's), else the defaults."""
        defaults = {k: v for k, v in (defaults or {}).items() if v is not None}
        timeout = self._timeout if self._timeout is not None else defaults.get("timeout", DEFAULT_TIMEOUT)
        retries = self._retries if self._retries is not None else defaults.get("retries", DEFAULT_RETRIES)
        params = dict(self.params)
        if defaults.get("api_base") and not any(params.get(k) for k in ("api_base", "base_url")):
            params["api_base"] = defaults["api_base"]
        return {"timeout": float(timeout), "retries": int(retries), "api_base": api_base_of(model, params)}

    async def complete(
        self,
        model: str,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        defaults: dict[str, Any] | None = None,
        **params: Any,
    ) -> ModelReply:
        """One chat completion; raises :class:`ModelError` with a readable message on failure.
        ``defaults``: ``timeout`` / ``retries`` / ``api_base`` used where this client sets none."""
        offline = is_offline(model)  # served here directly: a scripted run never imports litellm
        # litellm's first import takes seconds: in a thread, so the loop (other runs, live views, a stop) goes on
        if offline:
            litellm: Any = None
        else:
            litellm = await import_litellm_off_loop()
        settings = self.settings(model, defaults)
        call = {**self.params, **params}
        base = settings["api_base"]
        if base and not any(call.get(k) for k in ("api_base", "base_url")) and (defaults or {}).get("api_base"):
            call["api_base"] = base
        if not offline and not call.get("api_key"):
            try:
                missing = litellm.validate_environment(model=model, api_base=base).get("missing_keys") or []
            except Exception:  # noqa: BLE001 - unknown providers are checked by the call itself
                missing = []
            if missing and is_local(base):
                call["api_key"] = LOCAL_PLACEHOLDER_KEY  # a local server needs no key; litellm wants one
            elif missing and not any(k in call for k in ("api_base", "base_url")):
                raise ModelError(
                    f"model {model!r} needs {', '.join(missing)}: set it in the environment "
                    "(or pass api_key=... / api_base=... for a local OpenAI-compatible server)"
                )
        timeout, retries = settings["timeout"], settings["retries"]
        start = time.perf_counter()
        for attempt in range(retries + 1):
            try:
                # on the library's background loop, whatever loop the caller runs on: litellm's logging
                # worker binds to the loop of its first call and is stopped there at exit (_sync)
                if offline:
                    response = _offline_response(model, messages, tools)
                    break
                response = await on_background(
                    litellm.acompletion(
                        model=model,
                        messages=messages,
                        tools=tools or None,
                        timeout=timeout,
                        num_retries=0,
                        max_retries=0,  # no hidden retries inside the provider's SDK: ours are counted
                        **call,
                    )
                )
                break
            except TeaError:
                raise
            except Exception as exc:  # noqa: BLE001 - litellm raises many types; sorted below
                inner = _tea_cause(exc)
                if inner is not None:  # an offline model's own error (script exhausted, replay diverged)
                    raise inner from None
                refused = _unreachable(exc)
                if refused is not None:
                    where = base or "the provider"
                    why = "connection refused" if isinstance(refused, ConnectionRefusedError) else "unknown host"
                    raise ModelError(
                        f"model {model!r}: cannot reach {where} ({why}: is the server running, and is the URL right?)"
                    ) from None
                if _retryable(exc, model) and attempt < retries:
                    delay = self.backoff * (2**attempt) * (0.5 + random.random())
                    asked = retry_after(exc)
                    if asked is not None:  # the server's own wait, not our backoff (bounded)
                        delay = min(asked, MAX_RETRY_AFTER, timeout)
                    log.warning("model %s: %s, retrying in %.1fs", model, type(exc).__name__, delay)
                    await asyncio.sleep(delay)
                    continue
                if type(exc).__name__ == "Timeout" or "timed out" in str(exc).lower():
                    raise ModelError(
                        f"model {model!r}: no answer from {base or 'the provider'} within {timeout:g} s "
                        f"({attempt + 1} attempt{'s' if attempt else ''}; set the timeout with "
                        "Workspace(model_timeout=...), ModelClient(timeout=...) or %config TeaMagics.model_timeout)"
                    ) from None
                status = getattr(exc, "status_code", None)
                if tools and status in (400, 422) and "tool" in str(exc).lower():
                    raise ToolsRejected(
                        f"model {model!r}: {base or 'the provider'} refused native tools (HTTP {status}): "
                        f"{server_said(exc)}"
                    ) from None
                raise _friendly(model, exc, base, attempt) from None
        latency = time.perf_counter() - start
        message = response.choices[0].message
        calls: list[ToolCall] = []
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
