"""The ``tea`` litellm provider: serves the offline models under litellm model names.

``tea/test``, ``tea/demo``, ``tea/replay:PATH`` and ``tea/script:ID`` go through
``litellm.acompletion`` exactly like a hosted model. Registration happens on first use, never at
import time.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tea_notebook.errors import TeaError
from tea_notebook.models.offline import Cassette, DemoModel, ScriptedModel, TestModel

_registered = False
_lock = threading.Lock()
PROVIDER = "tea"


def offline_model(name: str) -> Any:
    """The offline model object behind a ``tea/...`` name (without the ``tea/`` prefix)."""
    if name == "test":
        return TestModel()
    if name == "demo":
        return DemoModel()
    if name.startswith("replay:"):
        return Cassette.open(name.split(":", 1)[1])
    if name.startswith("script:"):
        return ScriptedModel.get(name.split(":", 1)[1])
    raise TeaError(f"unknown offline model 'tea/{name}'; use tea/test, tea/demo, tea/replay:PATH or a ScriptedModel")


def _estimate_tokens(obj: Any) -> int:
    text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    return max(1, len(text) // 4)


def offline_reply(model: str, messages: list, tools: list | None) -> dict[str, Any]:
    """What the offline model behind ``model`` (without the ``tea/`` prefix) answers, in the shape
    of an OpenAI chat completion (one choice, usage estimated when the model gives none). litellm's
    ``tea`` provider returns it, and :class:`~tea_notebook.models.client.ModelClient` calls it
    directly, so a scripted run never imports litellm."""
    tools = tools or []
    turn = offline_model(model).respond(messages, tools)
    calls = [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in turn.get("tool_calls", [])
    ]
    usage = turn.get("usage") or {}
    prompt = usage.get("prompt_tokens") or _estimate_tokens(messages) + _estimate_tokens(tools)
    completion = usage.get("completion_tokens") or _estimate_tokens(turn)
    message = {"role": "assistant", "content": turn.get("content")}
    if calls:
        message["tool_calls"] = calls
    return {
        "model": f"tea/{model}",
        "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def ensure_registered() -> None:
    """Register the provider with litellm (idempotent; imports litellm)."""
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        from tea_notebook.models.client import import_litellm

        litellm = import_litellm()  # quietly, whoever imports it first
        from litellm import CustomLLM, ModelResponse

        class TeaProvider(CustomLLM):
            """litellm handler for offline tea models."""

            def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> ModelResponse:
                tools = (kwargs.get("optional_params") or {}).get("tools") or []
                return ModelResponse(**offline_reply(model, messages, tools))

            async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> ModelResponse:
                return self.completion(model, messages, *args, **kwargs)

        others = [p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER]
        litellm.custom_provider_map = [*others, {"provider": PROVIDER, "custom_handler": TeaProvider()}]
        _registered = True
