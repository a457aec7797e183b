"""Provider rules against a real OpenAI-compatible HTTP server this test starts on loopback (a server
thread; no key needed, as a local vLLM / Ollama / LM Studio): a ``429``'s ``retry-after`` is honoured
(seconds, ``retry-after-ms``, an HTTP date; bounded), ``tool_mode="auto"`` sends a model litellm does
not know native tools and falls back to JSON when the server refuses them, a ``429`` is reported with
what the server said (never "Set OPENAI_API_KEY"), and a doctor report that is not ready prints only
what it measured."""

from __future__ import annotations

import asyncio
import json
import time
from email.utils import formatdate

import pytest
from loopback_http import QuietHandler, serve, stop

from tea_notebook.eval import preflight
from tea_notebook.models.client import MAX_RETRY_AFTER, ModelClient, ModelError
from tea_notebook.notebook.live import LiveView

UNKNOWN = "openai/local-qwen"  # how a local server's model is named: litellm has no entry for it
HI = [{"role": "user", "content": "hi"}]
DONE_JSON = json.dumps({"thinking": "done", "action": [{"name": "done", "args": {"success": True, "text": "hi"}}]})


def completion(message: dict, model: str = "local-qwen") -> tuple[int, dict, dict]:
    """A chat completion answering ``message``."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }
    return 200, payload, {}


def done_call() -> dict:
    """A reply carrying a native call of ``done``."""
    arguments = json.dumps({"success": True, "text": "hi"})
    return {
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "done", "arguments": arguments}}],
    }


def rate_limited(headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    """A 429 as a local server says it."""
    return 429, {"error": {"message": "rate limit reached: 2 requests per minute", "type": "rate_limit"}}, headers or {}


class _Handler(QuietHandler):
    """Answers each request with the next of ``answers`` (a function of the request body; the last
    one repeats) and keeps ``seen``: when each request came and its body."""

    answers: list = []
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((time.monotonic(), body))
        answer = self.answers[min(len(self.seen), len(self.answers)) - 1]
        status, payload, headers = answer(body)
        self.reply(json.dumps(payload).encode(), "application/json", status, headers)


@pytest.fixture
def server(monkeypatch):
    """``start(*answers)``: a local chat-completions server (no key set anywhere); its URL and the
    requests it saw."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    started = []

    def start(*answers):
        handler = type("H", (_Handler,), {"answers": list(answers), "seen": []})
        httpd = serve(handler)
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler.seen

    yield start
    for httpd in started:
        stop(httpd)


def _gap_after_refusal(url, seen, **client) -> float:
    reply = asyncio.run(ModelClient(retries=1, **client).complete(UNKNOWN, HI, defaults={"api_base": url}))
    assert reply.content == "OK" and len(seen) == 2
    return seen[1][0] - seen[0][0]


# -- retry-after ----------------------------------------------------------------------------------
def test_retry_after_seconds_is_waited_not_our_backoff(server, warm_litellm):
    url, seen = server(lambda b: rate_limited({"retry-after": "3"}), lambda b: completion({"content": "OK"}))
    gap = _gap_after_refusal(url, seen, backoff=0.01)  # our own backoff would retry after about 0.01 s
    assert 2.9 <= gap < 4.5


def test_retry_after_ms_wins_over_a_longer_backoff(server, warm_litellm):
    headers = {"retry-after-ms": "1500", "retry-after": "9"}  # the precise one is read first
    url, seen = server(lambda b: rate_limited(headers), lambda b: completion({"content": "OK"}))
    gap = _gap_after_refusal(url, seen, backoff=20.0)  # our own backoff would wait 10-30 s
    assert 1.4 <= gap < 3.0


def test_retry_after_as_an_http_date(server, warm_litellm):
    when = {"retry-after": formatdate(time.time() + 3, usegmt=True)}  # whole seconds: 2 to 3 s away
    url, seen = server(lambda b: rate_limited(when), lambda b: completion({"content": "OK"}))
    gap = _gap_after_refusal(url, seen, backoff=20.0)
    assert 1.5 <= gap < 4.0


def test_a_503_with_retry_after_is_waited_too(server, warm_litellm):
    overloaded = (503, {"error": {"message": "overloaded"}}, {"retry-after": "1"})
    url, seen = server(lambda b: overloaded, lambda b: completion({"content": "OK"}))
    gap = _gap_after_refusal(url, seen, backoff=20.0)
    assert 0.9 <= gap < 2.5


def test_a_long_retry_after_is_bounded_by_the_call_timeout(server, warm_litellm):
    url, seen = server(lambda b: rate_limited({"retry-after": "3600"}), lambda b: completion({"content": "OK"}))
    gap = _gap_after_refusal(url, seen, backoff=0.01, timeout=2.0)
    assert 1.9 <= gap < 3.5 and MAX_RETRY_AFTER == 30.0  # and never more than MAX_RETRY_AFTER


# -- a 429 says what the server said --------------------------------------------------------------
def test_a_429_from_a_keyless_local_server_says_what_it_said(server, warm_litellm, ws):
    url, seen = server(lambda b: rate_limited())
    with pytest.raises(ModelError) as info:
        asyncio.run(ModelClient(retries=0).complete(UNKNOWN, HI, defaults={"api_base": url}))
    said = str(info.value)
    assert "HTTP 429" in said and "rate limit reached: 2 requests per minute" in said and url in said
    assert "OPENAI_API_KEY" not in said
    # the run says the same
    ws.api_base, ws.model_retries = url, 0
    result = ws.agent("local", model=UNKNOWN, tools=[]).run_sync("Say hi.", raise_on_error=False)
    assert result.status == "error" and "HTTP 429" in result.error and "2 requests per minute" in result.error
    assert "OPENAI_API_KEY" not in result.error
    # and so does the doctor, whose report prints only what it measured
    report = preflight(UNKNOWN, api_base=url, timeout=5)
    detail = report.probe("reachable").detail
    assert not report.ok and report.reachable and "HTTP 429" in detail and "OPENAI_API_KEY" not in detail
    text = report.text()
    assert "NOT READY" in text and "latency" not in text and "recommended" not in text and "per call" not in text
    assert "nothing else was checked" in text
    assert report.tool_mode is None and report.to_dict()["latency"] is None


# -- tool_mode="auto" with a model litellm does not know --------------------------------------------
def _requests(ws, run_id):
    return [e.data for e in ws.events.events(run_id) if e.type == "model_request"]


def _notices(ws, run_id):
    return [e.data["message"] for e in ws.events.events(run_id) if e.type == "notice" and e.data.get("message")]


def test_auto_sends_an_unknown_model_native_tools_and_uses_its_tool_calls(server, warm_litellm, ws):
    url, seen = server(lambda b: completion(done_call()) if b.get("tools") else completion({"content": "no tools"}))
    ws.api_base, ws.model_retries = url, 0
    view, shown = LiveView(display=False), []

    def watch(event):
        view(event)
        if event.type == "notice":
            shown.append(view.html())

    ws.events.subscribe(watch)
    result = ws.agent("local", model=UNKNOWN, tools=[]).run_sync("Say hi.")
    assert result.status == "success" and result.answer == "hi" and len(seen) == 1
    assert any("native tools are sent" in html for html in shown)  # the run's view says which protocol
    assert [t["function"]["name"] for t in seen[0][1]["tools"]] == ["done"]
    assert [r["tool_mode"] for r in _requests(ws, result.run_id)] == ["native"]
    assert any("native tools are sent" in n for n in _notices(ws, result.run_id))


def test_auto_falls_back_to_json_once_when_the_server_refuses_tools(server, warm_litellm, ws):
    refused = {"object": "error", "message": '"auto" tool choice requires --enable-auto-tool-choice', "code": 400}

    asked_in_json = []

    def answer(body):
        if body.get("tools"):
            return 400, refused, {}
        assert '"action"' in body["messages"][0]["content"]  # the JSON protocol's prompt
        asked_in_json.append(1)
        if len(asked_in_json) == 1:  # step 1 goes wrong (an unknown action), step 2 ends the run
            return completion({"content": json.dumps({"action": [{"name": "nope", "args": {}}]})})
        return completion({"content": DONE_JSON})

    url, seen = server(answer)
    ws.api_base, ws.model_retries = url, 0
    result = ws.agent("local", model=UNKNOWN, tools=[]).run_sync("Say hi.", raise_on_error=False)
    assert result.status == "success", result.error
    assert [bool(body.get("tools")) for _, body in seen] == [True, False, False]  # refused once, then JSON
    assert [r["tool_mode"] for r in _requests(ws, result.run_id)] == ["native", "json", "json"]
    assert any("refused native tools" in n and "JSON tool protocol" in n for n in _notices(ws, result.run_id))


def test_auto_switches_to_json_when_tools_on_trial_bring_no_tool_calls(server, warm_litellm, ws):
    # a server that accepts tools, with a model that answers in text all the same (no tool parser)
    url, seen = server(lambda b: completion({"content": "Hi! How can I help?" if b.get("tools") else DONE_JSON}))
    ws.api_base, ws.model_retries = url, 0
    result = ws.agent("local", model=UNKNOWN, tools=[]).run_sync("Say hi.", raise_on_error=False)
    assert result.status == "success" and result.steps == 2, result.error  # step 1 malformed, then JSON
    assert [bool(body.get("tools")) for _, body in seen] == [True, False]
    assert [r["tool_mode"] for r in _requests(ws, result.run_id)] == ["native", "json"]
    assert any("answered without native tool calls" in n for n in _notices(ws, result.run_id))


def test_auto_takes_native_tool_calls_a_json_mode_model_answers_with(server, warm_litellm, ws):
    url, seen = server(lambda b: completion(done_call()))  # answers natively, tools sent or not
    ws.api_base, ws.model_retries = url, 0
    known = "openai/gpt-3.5-turbo-16k"  # litellm knows it, without function calling: JSON mode first
    result = ws.agent("local", model=known, tools=[]).run_sync("Say hi.")
    assert result.status == "success" and "tools" not in seen[0][1]
    assert [r["tool_mode"] for r in _requests(ws, result.run_id)] == ["json"]
    assert any("answers with native tool calls" in n for n in _notices(ws, result.run_id))


def test_json_mode_against_native_tool_calls_says_to_use_native(server, warm_litellm, ws):
    url, seen = server(lambda b: completion(done_call()))
    ws.api_base, ws.model_retries = url, 0
    agent = ws.agent("local", model=UNKNOWN, tools=[], tool_mode="json", max_consecutive_errors=2)
    result = agent.run_sync("Say hi.", raise_on_error=False)
    assert result.status == "error" and "consecutive malformed model outputs" in result.error
    assert 'use tool_mode="native"' in result.error and "native tool calls (done)" in result.error
    assert all("tools" not in body for _, body in seen) and len(seen) == 2
