"""A guided tour of the TEA registries, run by ``tea demo`` (and the README's first command)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tea_notebook.protocol import transformations as tx
from tea_notebook.protocol.records import ActionSpec, AgentRecord, EnvironmentRecord
from tea_notebook.protocol.tools import tool
from tea_notebook.workspace import Workspace


class _Notebook:
    """A tiny in-memory text environment with two actions: open a page, then read a line."""

    def __init__(self) -> None:
        self.pages = {"intro": ["TEA has three protocols.", "They are TCP, ECP and ACP."]}
        self.page: str | None = None

    def open(self, page: str) -> str:
        if page not in self.pages:
            raise KeyError(f"no page {page!r}; pages: {', '.join(self.pages)}")
        self.page = page
        return f"opened {page} ({len(self.pages[page])} lines)"

    def read(self, line: int) -> str:
        return self.pages[self.page][line]

    def state(self) -> str:
        return f"page={self.page}"


def _say(title: str) -> None:
    print(f"\n== {title}")


def run_demo(path: str | Path) -> Workspace:
    """Build a small workspace at ``path`` (replacing an earlier demo there) and print what happens."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    ws = Workspace(path)
    print(f"workspace: {ws.path} (SQLite + vector index, embedder {ws.embedder.id})")

    _say("register typed Python functions as tools")

    @tool(workspace=ws, category="math")
    def convert_temperature(value: float, unit: str = "C") -> float:
        """Convert a temperature between Celsius and Fahrenheit.

        Args:
            value: the temperature to convert
            unit: the unit of ``value``, "C" or "F"
        """
        return value * 9 / 5 + 32 if unit == "C" else (value - 32) * 5 / 9

    @tool(workspace=ws, category="text")
    def count_words(text: str) -> int:
        """Count the words in a piece of text."""
        return len(text.split())

    @tool(workspace=ws, category="web")
    def fetch_page(url: str, timeout: float = 10.0) -> str:
        """Download the HTML of a web page."""
        raise ConnectionError(f"the demo has no network; cannot reach {url}")

    for name in ws.tools.names():
        print(" ", ws.tools.get(name).to_openai()["function"]["name"], "-", ws.tools.get(name).description)

    _say("semantic search (offline MiniLM embeddings + BM25)")
    for query in ("how hot is 30 degrees in fahrenheit", "how long is this paragraph"):
        best = ws.tools.search(query, k=1)[0]
        print(f"  {query!r} -> {best.name} (score {best.score:.2f})")

    _say("invoke: good arguments, bad arguments, a failing tool")
    print("  ", ws.tools.invoke("convert_temperature", {"value": 30}).value)
    print("  ", ws.tools.invoke("convert_temperature", {"value": "hot"}).error)
    print("  ", ws.tools.invoke("fetch_page", {"url": "https://example.org"}).error)

    _say("versions and rollback")

    @tool(workspace=ws, category="text", name="count_words")
    def count_words_v2(text: str) -> int:
        """Count the words in a piece of text, ignoring punctuation-only tokens."""
        return sum(1 for w in text.split() if any(c.isalnum() for c in w))

    print("  ", ws.tools.versions("count_words"))
    ws.tools.rollback("count_words", 1)
    print("   after rollback:", ws.tools.get("count_words").description)

    _say("environments and E2T: an environment's actions become a toolkit")
    ws.envs.register(
        EnvironmentRecord(
            name="notes",
            description="A small set of text pages to open and read.",
            rules="Open a page before reading lines from it.",
            actions=[
                ActionSpec(
                    name="open",
                    description="Open a page by name.",
                    parameters={"type": "object", "properties": {"page": {"type": "string"}}, "required": ["page"]},
                ),
                ActionSpec(
                    name="read",
                    description="Read one line of the open page.",
                    parameters={"type": "object", "properties": {"line": {"type": "integer"}}, "required": ["line"]},
                    preconditions=["open"],
                ),
            ],
        ),
        runtime=_Notebook(),
    )
    lifted = tx.e2t(ws, "notes")
    print("   toolkit:", lifted.toolkit.name, "tools:", lifted.toolkit.tools)
    with ws.context("demo-run") as ctx:
        ws.tools.bind("notes", ctx)
        print("   offered before opening:", [t.name for t in ws.tools.route(context=ctx)])
        print("  ", ws.tools.invoke("notes_open", {"page": "intro"}, ctx).value)
        print("   offered after opening: ", [t.name for t in ws.tools.route(context=ctx)])
        print("  ", ws.tools.invoke("notes_read", {"line": 1}, ctx).value)

    _say("agents and A2T: an agent becomes a tool")
    ws.agents.register(
        AgentRecord(
            name="summarizer",
            description="Summarises a text in one sentence.",
            role="writer",
            competencies=["summarisation"],
        ),
        runtime=lambda task, files: f"(scripted runner, no LLM) summary of: {task[:40]}",
    )
    agent_tool = tx.a2t(ws, "summarizer")
    print("  ", agent_tool.name, "->", ws.tools.invoke(agent_tool.name, {"task": "TEA in one line"}).value)

    _say("an agent run (no model configured: the offline demo model, scripted, not an LLM)")
    helper = ws.agent("helper", tools=["convert_temperature", "count_words"], max_steps=5)
    result = helper.run_sync("Convert 30 degrees Celsius to Fahrenheit")
    print(f"   status {result.status}, {result.steps} steps, {result.prompt_tokens} prompt tokens")
    print("   " + result.trajectory.text().replace("\n", "\n   "))

    _say("the tool manifest")
    manifest = path / "tools.json"
    ws.tools.export_manifest(manifest)
    print(f"   {len(ws.tools)} tools written to {manifest}")
    print(f"\n{ws}")
    return ws
