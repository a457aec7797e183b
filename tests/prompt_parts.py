"""Reading the prompts a scripted model receives, and writing the turns it answers with: the first user
or system message, a ``<tag>…</tag>`` section, a native-mode turn (text plus tool calls)."""

from __future__ import annotations

import json
import re


def user_text(messages: list[dict]) -> str:
    """The first user message's content."""
    return next(m["content"] for m in messages if m["role"] == "user")


def all_text(messages: list[dict]) -> str:
    """Every message's text content, joined with spaces (images and other parts left out)."""
    return " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))


def system_text(messages: list[dict]) -> str:
    """The system message's content."""
    return next(m["content"] for m in messages if m["role"] == "system")


def section(text: str, tag: str) -> str:
    """The first ``<tag>…</tag>`` section of a prompt; fails the test when the prompt has none."""
    assert f"<{tag}>" in text and f"</{tag}>" in text, f"<{tag}> missing from the prompt"
    return text.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


def block(text: str, tag: str) -> str:
    """The content of ``<tag>...</tag>`` in a prompt, without the newlines around it ('' when absent)."""
    m = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    return m.group(1) if m else ""


def thoughts(**fields: str) -> str:
    """The JSON text a native-mode model puts next to its tool calls."""
    return json.dumps(fields)


def turn(content: str | None, *calls: dict) -> dict:
    """A full model turn: text plus tool calls."""
    return {"content": content, "tool_calls": list(calls)}
