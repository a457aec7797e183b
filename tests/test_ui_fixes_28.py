"""Issue 28, two UI fixes: the sidebar's Memory section lists what ``%tea memory`` lists (memory and
experience entries), and a context lists no one-character parts (the line breaks between blocks and
the bare ``<agent_history>`` wrappers are folded into their neighbours) and has a colour legend."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import re  # noqa: E402
from typing import Any  # noqa: E402

from prompt_parts import thoughts, turn  # noqa: E402

from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.notebook.memory_view import MemoryExplorer  # noqa: E402
from tea_notebook.notebook.sidebar_comm import SidebarComms  # noqa: E402
from tea_notebook.redaction import redact  # noqa: E402


class FakeComm:
    """Records what the kernel sends (the real comm needs a frontend)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, data: Any) -> None:
        self.sent.append(data)

    def on_msg(self, fn: Any) -> None:
        self.handler = fn

    def on_close(self, fn: Any) -> None:
        self.closer = fn


def test_the_sidebar_memory_section_lists_what_tea_memory_lists(ws):
    ws.memory_store.save("run1", "boil water", "Filled the kettle and boiled the water.", ["A kettle needs water."])
    ws.experiences.add("success", "Boil first", "Boil the water before brewing.", ["brew tea"], source_run="run1")
    listed = MemoryExplorer(ws).rows  # what %tea memory shows
    assert len(listed) == 3 and {r["kind"] for r in listed} == {"summary", "insight", "success"}

    comm = FakeComm()
    SidebarComms(lambda: ws).open(comm, {"content": {"data": {"request": "state"}}})
    memory = comm.sent[-1]["state"]["sections"]["memory"]
    assert [(m["name"], m["details"]["kind"]) for m in memory] == [(r["name"], r["kind"]) for r in listed]
    assert [m["description"] for m in memory] == [r["description"] for r in listed]
    experience = next(m for m in memory if m["details"]["kind"] == "success")
    assert experience["details"]["title"] == "Boil first" and experience["details"]["retrieved"] == 0


def test_a_long_run_lists_no_whitespace_or_wrapper_only_parts_and_keeps_the_messages(ws, worker):
    steps = [turn(thoughts(memory=f"did {n}"), call("work", n=n)) for n in range(1, 20)]
    script = ScriptedModel([*steps, call("done", success=True, text="all done")])
    result = ws.agent("worker", model=script.name, tools=["work"]).run_sync("do twenty steps of work")
    assert result.success and len(script.calls) == 20
    for step in (2, 10, 20):
        ctx = result.context(step)
        assert ctx.messages == redact(script.calls[step - 1])  # byte for byte what was sent
        texts = [p.text for p in ctx.parts]
        assert all(t.strip() for t in texts), "a whitespace-only row"
        assert not [t for t in texts if re.fullmatch(r"\s*</?[a-z_]+>\s*", t)], "a wrapper-only row"
        # the listed parts of each message still join to exactly its text
        for index, message in enumerate(ctx.messages):
            if isinstance(message.get("content"), str):
                assert "".join(p.text for p in ctx.parts if p.message == index) == message["content"]
        assert ctx.chars == sum(len(m["content"]) for m in ctx.messages) + sum(
            p.chars for p in ctx.parts if p.role == "tool-definition"
        )
    ctx = result.context(20)
    history = [p for p in ctx.parts if p.kind == "history"]
    assert len(history) >= 19 and all(p.text.lstrip().startswith(("<agent_history>", "<step_")) for p in history)
    html = ctx._repr_html_()
    assert "class='tea-ctx-key' data-kind='history'" in html and "background:#1a7f37" in html  # the legend
