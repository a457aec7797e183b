"""``tea doctor`` / ``%tea doctor`` / the eval set's preflight against real OpenAI-compatible HTTP
servers this test starts on loopback (one that does everything, one without tool support, one that
refuses the key with 401), a closed port, and a scripted model (``tea/script:...``, not an LLM).
"""

from __future__ import annotations

import json
import socket

import pytest
from loopback_http import QuietHandler, serve, stop

from tea_notebook.errors import TeaError
from tea_notebook.eval import eval_set, preflight
from tea_notebook.models.offline import ScriptedModel, call


class _Handler(QuietHandler):
    mode = "full"
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.mode == "401":
            return self._send(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
        text = " ".join(m["content"] for m in body["messages"] if isinstance(m.get("content"), str))
        message: dict = {"role": "assistant", "content": "OK"}
        finish = "stop"
        if body.get("tools") and self.mode == "full":
            cities = ["Paris", "London"] if "London" in text else ["Paris"]
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": c})},
                    }
                    for i, c in enumerate(cities)
                ],
            }
            finish = "tool_calls"
        elif body.get("response_format", {}).get("type") == "json_object" and self.mode == "full":
            message = {"role": "assistant", "content": '{"ok": true}'}
        elif body.get("tools"):
            message = {"role": "assistant", "content": "I would look up the weather in Paris."}
        self._send(
            200,
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            },
        )

    def _send(self, status, payload):
        self.reply(json.dumps(payload).encode(), "application/json", status)


@pytest.fixture
def server():
    """Start a local chat-completions server in a given mode; stopped after the test."""
    started = []

    def start(mode):
        handler = type("H", (_Handler,), {"mode": mode, "seen": []})
        httpd = serve(handler)
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler.seen

    yield start
    for httpd in started:
        stop(httpd)


def test_a_capable_server_passes_every_check(server, warm_litellm):
    url, seen = server("full")
    report = preflight("openai/local-model", api_base=url, timeout=10)
    assert report.ok and report.reachable and report.authenticated
    assert report.native_tools and report.parallel_tools and report.json_mode and report.tool_mode == "native"
    assert [p.name for p in report.probes] == ["reachable", "native_tools", "parallel_tools", "json_mode"]
    assert len(seen) == 4 and all(s["path"] == "/v1/chat/completions" for s in seen)
    assert seen[1]["body"]["tools"][0]["function"]["name"] == "get_weather"
    assert seen[3]["body"]["response_format"] == {"type": "json_object"}
    assert report.latency > 0 and report.probe("reachable").tokens == 15
    assert report.context_length is None and "price: unknown" in report.text()  # not in litellm's price list
    assert "recommended tool_mode='native'" in report.text() and report.to_dict()["parallel_tools"] is True


def test_a_server_without_tool_support_gets_the_json_tool_mode(server, warm_litellm):
    url, seen = server("no_tools")
    report = preflight("openai/local-model", api_base=url, timeout=10)
    assert report.ok and report.native_tools is False and report.parallel_tools is False
    assert report.json_mode is False and report.tool_mode == "json"
    assert "no tool call" in report.probe("native_tools").detail and len(seen) == 4


def test_a_refused_key_and_a_closed_port_are_told_apart(server, warm_litellm, capsys):
    from tea_notebook.cli import main

    url, seen = server("401")
    report = preflight("openai/local-model", api_base=url, timeout=10)
    assert not report.ok and report.reachable and not report.authenticated
    assert len(seen) == 1 and len(report.probes) == 1  # nothing more is tried
    assert "authentication failed" in report.probe("reachable").detail
    assert main(["doctor", "--model", "openai/local-model", "--api-base", url, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["reachable"] is True and out["authenticated"] is False
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, never listening: connections are refused
        report = preflight("openai/local-model", api_base=f"http://127.0.0.1:{closed}/v1", timeout=5)
    assert not report.ok and not report.reachable and "cannot reach" in report.probe("reachable").detail


def test_a_scripted_model_is_checked_and_says_it_is_scripted(warm_litellm, capsys):
    from tea_notebook.cli import main

    def script(messages, tools):
        text = messages[-1]["content"]
        if tools and "London" in text:
            return [call("get_weather", city="Paris"), call("get_weather", city="London")]
        if tools:
            return call("get_weather", city="Paris")
        return '{"ok": true}' if "JSON" in text else "OK"

    model = ScriptedModel(script)
    report = preflight(model.name)
    assert report.ok and report.native_tools and report.parallel_tools and report.json_mode
    assert report.cost == 0.0 and "(scripted, not an LLM)" in report.text()
    assert main(["doctor", "--model", model.name]) == 0
    assert "ready" in capsys.readouterr().out


def test_the_tea_doctor_magic(ip, tmp_path, server, warm_litellm):
    url, seen = server("full")
    ip.run_line_magic("tea", f"workspace {tmp_path / 'dws'}")
    report = ip.run_line_magic("tea", f"doctor openai/local-model --api-base {url}")
    assert report.ok and report.tool_mode == "native" and len(seen) == 4
    assert "doctor openai/local-model: ready" in report._repr_html_()
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="usage: %tea doctor"):
        ip.run_line_magic("tea", "doctor a b")
    assert "%tea doctor" in str(ip.run_line_magic("tea", "help"))


def test_an_eval_set_checks_its_live_models_before_anything_runs(ws, server, warm_litellm):
    url, seen = server("401")
    ws.api_base, ws.model_retries = url, 0
    ws.agent("live", model="openai/local-model", tools=[])
    tasks = [{"id": "a", "question": "2 + 2?", "answer": "4"}]
    with pytest.raises(TeaError, match=r"preflight: model 'openai/local-model' cannot run the set \(reachable, but "):
        eval_set(ws, "guarded", agents=["live"], tasks=tasks, progress="off")
    assert len(seen) == 1 and ws.evaluations() == [] and ws.runs() == []
    # skipped: the set runs, and the refused key is the provider's failure, not the agent's (and not retried)
    skipped = eval_set(ws, "guarded", agents=["live"], tasks=tasks, preflight=False, retries=3, progress="off")
    [result] = list(skipped)
    assert result.infra_errors == 1 and result.estimate().n == 0 and "not retried" in result["a"].error
    assert len(seen) == 2
