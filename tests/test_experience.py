"""Experience memory (Mem²Evolve §1.2, prompts C.8–C.10): add, retrieve, merge, edit, statistics, markdown."""

from __future__ import annotations

import pytest

import tea_notebook
from tea_notebook.errors import NotFoundError
from tea_notebook.evolve.experience import (
    ExperienceError,
    ExperienceMemory,
    ExperienceRecord,
    merge_content,
    parse_markdown,
    to_markdown,
)

EXCEL = dict(
    kind="tool",
    title="How to parse Excel files while keeping cell colours?",
    description="Read an xlsx workbook with openpyxl so cell fill colours survive, and emit them as HTML.",
    use_cases=["spreadsheet questions about coloured cells", "excel formatting analysis"],
    content="### Code Implementation\n```python\nimport openpyxl\n\ndef parse(path):\n    return path\n```",
    source_run="run-1",
    outcome="success",
)
YOUTUBE = dict(
    kind="tool",
    title="How to download YouTube audio and transcribe it?",
    description="Download a video's audio track with yt-dlp and transcribe it in chunks with speech recognition.",
    use_cases=["questions about what is said in a video"],
    content="### Code Implementation\n```python\nimport yt_dlp\n```",
    source_run="run-2",
)
SHOPS = dict(
    kind="success",
    title="How to compare prices across several web shops",
    description="Search each shop, extract the price table and normalise currencies before comparing.",
    use_cases=["price comparison between online stores"],
    content="### Experience of Success\n- **Successful Strategy**: normalise the currencies first",
    source_run="run-3",
    agent_role="Web Research Specialist",
)
PDF = dict(
    kind="failure",
    title="Common pitfalls when reading scanned PDF documents",
    description="Text extraction returns nothing for scanned PDF documents; optical character recognition is needed.",
    use_cases=["reading scanned pdf documents"],
    content="### Experience of Failure\n- **What Went Wrong**: the extracted text was empty",
    source_run="run-4",
    outcome="failure",
)


@pytest.fixture
def mem(ws) -> ExperienceMemory:
    return ws.experiences


def _add(mem: ExperienceMemory, entry: dict, **changes) -> ExperienceRecord:
    record, merged = mem.add(**{**entry, **changes})
    assert not merged
    return record


# -- add and retrieve ----------------------------------------------------------------------------
def test_workspace_wiring(ws):
    assert ws.experiences is ws.experiences  # created once, lazily
    assert ws.experiences.registry is ws.experience
    assert ws.experience.kind == "experience"


def test_add_stores_all_fields(mem):
    rec = _add(mem, SHOPS)
    assert rec.name == "how_to_compare_prices_across_several_web_shops"
    assert rec.version == 1 and rec.kind == "success" and not rec.disabled
    assert rec.body == SHOPS["content"]
    assert rec.source_run == "run-3" and rec.source_runs == ["run-3"]
    assert rec.agent_role == "Web Research Specialist"
    assert mem.get(rec.name) == rec


def test_retrieve_by_kind(mem):
    for entry in (EXCEL, YOUTUBE, SHOPS, PDF):
        _add(mem, entry)
    found = mem.retrieve("transcribe what is said in a youtube video")
    assert found[0].title == YOUTUBE["title"]
    tools = mem.retrieve("parse the coloured cells of an excel file", kind="tool", k=5)
    assert tools and {r.kind for r in tools} == {"tool"}
    assert tools[0].title == EXCEL["title"]
    assert [r.kind for r in mem.retrieve("reading a scanned pdf document", kind="failure")] == ["failure"]
    assert mem.retrieve("parse the coloured cells of an excel file", kind="failure") == []
    assert [r.kind for r in mem.retrieve("compare prices of online shops", kind="success")] == ["success"]


def test_threshold_excludes_unrelated(mem):
    for entry in (EXCEL, YOUTUBE, SHOPS, PDF):
        _add(mem, entry)
    assert mem.retrieve("the weather in Paris tomorrow") == []
    assert mem.retrieve("the weather in Paris tomorrow", threshold=-1.0)  # only the threshold kept them out
    scores = [c for _, c in mem.matches("parse the coloured cells of an excel file", k=4, threshold=-1.0)]
    assert scores == sorted(scores, reverse=True)
    mem.threshold = 0.99
    assert mem.retrieve("parse the coloured cells of an excel file") == []


def test_retrieve_k(mem):
    for entry in (EXCEL, YOUTUBE, SHOPS, PDF):
        _add(mem, entry)
    assert len(mem.retrieve("anything at all", k=2, threshold=-1.0)) == 2
    assert len(mem.retrieve("anything at all", k=10, threshold=-1.0)) == 4


# -- merging -------------------------------------------------------------------------------------
def test_near_duplicate_is_merged(mem):
    first = _add(mem, EXCEL)
    rec, merged = mem.add(
        "tool",
        "How to parse Excel files keeping the cell colours?",
        "Read an xlsx workbook with openpyxl so that cell fill colours survive, and emit them as HTML.",
        ["Excel formatting analysis", "green cells in a sheet"],
        "### Code Implementation\n```python\nimport openpyxl\n\ndef parse(path):\n    return path\n```\n\n"
        "### Tool Configuration\n- no API keys needed",
        source_run="run-9",
    )
    assert merged
    assert rec.name == first.name and rec.version == 2 and len(mem) == 1
    assert rec.title == EXCEL["title"] and rec.description == EXCEL["description"]  # the existing entry's
    assert rec.use_cases == [*EXCEL["use_cases"], "green cells in a sheet"]  # united, case-insensitively
    assert rec.body.startswith(EXCEL["content"])  # kept verbatim
    assert rec.body.count("import openpyxl") == 1  # the same code block is not repeated
    assert rec.body.endswith("### Tool Configuration\n- no API keys needed")  # the new section appended
    assert rec.source_runs == ["run-1", "run-9"]
    assert rec.metadata["merges"] == 1
    assert "merged a near-duplicate from run run-9" in mem.versions(rec.name)[-1].note


def test_identical_entry_merges_without_a_new_version(mem):
    first = _add(mem, EXCEL)
    rec, merged = mem.add(**{**EXCEL, "source_run": ""})
    assert merged and rec.version == first.version == 1


def test_distinct_entries_are_not_merged(mem):
    _add(mem, EXCEL)
    rec, merged = mem.add(**YOUTUBE)
    assert not merged and len(mem) == 2
    # near-identical text of another kind is not a duplicate either
    rec, merged = mem.add(**{**EXCEL, "kind": "success"})
    assert not merged and rec.kind == "success" and len(mem) == 3
    assert rec.name == "how_to_parse_excel_files_while_keeping_cell_colours_2"  # a distinct name
    # merging can be switched off, and the threshold set
    rec, merged = mem.add(**EXCEL, merge=False)
    assert not merged and len(mem) == 4
    mem.merge_threshold = 1.01
    assert not mem.add(**{**EXCEL, "title": EXCEL["title"] + " now"})[1]


def test_merge_content_rules():
    old = "Intro line\n\n### Steps\n- step one\n- step two\n\n### Code\n```python\nx = 1\n```"
    new = "### Steps\n* Step one\n- step three\n\n### Code\n```python\nx = 2\n```\n\n### Notes\nmind the units"
    merged = merge_content(old, new)
    assert merged == (
        "Intro line\n\n### Steps\n- step one\n- step two\n- step three\n\n"
        "### Code\n```python\nx = 1\n```\n```python\nx = 2\n```\n\n### Notes\nmind the units"
    )
    assert merge_content(old, old) == old
    assert merge_content(old, "") == old
    assert merge_content("", new) == new


# -- edit, disable, delete -----------------------------------------------------------------------
def test_edit_new_version_and_rollback(mem):
    rec = _add(mem, PDF)
    edited = mem.edit(rec.name, description="Scanned PDFs have no text layer; run OCR first.", use_cases=["ocr"])
    assert edited.version == 2 and edited.use_cases == ["ocr"]
    assert mem.get(rec.name).description.startswith("Scanned PDFs")
    assert mem.edit(rec.name, content="new body").body == "new body"
    assert [v.version for v in mem.versions(rec.name)] == [1, 2, 3]
    back = mem.rollback(rec.name, 1)
    assert back.description == PDF["description"] and back.body == PDF["content"]
    with pytest.raises(ExperienceError, match="'name' cannot be edited"):
        mem.edit(rec.name, name="other")
    with pytest.raises(ExperienceError, match="no fields given"):
        mem.edit(rec.name)
    with pytest.raises(ExperienceError, match="unknown experience kind 'lesson'"):
        mem.edit(rec.name, kind="lesson")
    with pytest.raises(ExperienceError, match="non-empty title"):
        mem.edit(rec.name, title="  ")


def test_disable_and_enable(mem):
    rec = _add(mem, YOUTUBE)
    query = "transcribe what is said in a youtube video"
    assert mem.retrieve(query)
    off = mem.disable(rec.name)
    assert off.disabled and off.version == 2
    assert mem.retrieve(query) == [] and mem.retrieve(query, threshold=-1.0) == []
    assert mem.disable(rec.name).version == 2  # already disabled: no new version
    assert mem.list(include_disabled=False) == [] and len(mem.list()) == 1
    on = mem.enable(rec.name)
    assert not on.disabled and on.version == 3
    assert [r.name for r in mem.retrieve(query)] == [rec.name]


def test_disabled_entry_absorbs_its_duplicates(mem):
    rec = _add(mem, EXCEL)
    mem.disable(rec.name)
    again, merged = mem.add(**{**EXCEL, "source_run": "run-7"})
    assert merged and again.name == rec.name and again.disabled
    assert mem.retrieve("parse the coloured cells of an excel file") == []


def test_delete(mem):
    rec = _add(mem, SHOPS)
    _add(mem, PDF)
    mem.delete(rec.name)
    assert rec.name not in [r.name for r in mem.list()] and len(mem) == 1
    with pytest.raises(NotFoundError, match=f"no experience named '{rec.name}'"):
        mem.get(rec.name)
    assert mem.retrieve("compare prices of online shops", kind="success") == []
    with pytest.raises(NotFoundError):
        mem.delete(rec.name)
    assert mem.rollback(rec.name, 1).title == SHOPS["title"]  # history kept: it can come back
    # a new entry with the same title does not take over the deleted one's history
    mem.delete(rec.name)
    new = _add(mem, SHOPS)
    assert new.name == f"{rec.name}_2" and new.version == 1


# -- statistics ----------------------------------------------------------------------------------
def test_retrieval_and_outcome_statistics(mem):
    excel, tube = _add(mem, EXCEL), _add(mem, YOUTUBE)
    query = "parse the coloured cells of an excel file"
    for _ in range(3):
        assert mem.retrieve(query, k=1)[0].name == excel.name
    mem.record_outcome([excel.name], success=True)
    mem.record_outcome(excel.name, success=False)
    stats = mem.stats(excel.name)
    assert (stats.retrieved, stats.succeeded, stats.failed, stats.unknown) == (3, 1, 1, 1)
    assert stats.success_rate == 0.5
    usage = mem.get(excel.name).usage
    assert (usage.calls, usage.failures) == (3, 1)
    assert mem.matches(query, k=1)  # matches() is not a retrieval
    assert mem.stats(excel.name).retrieved == 3
    fresh = mem.stats(tube.name)
    assert (fresh.retrieved, fresh.succeeded, fresh.failed, fresh.success_rate) == (0, 0, 0, None)
    mem.record_outcome([mem.get(tube.name)], success=True)  # records are accepted too
    assert mem.stats(tube.name).succeeded == 1
    with pytest.raises(NotFoundError, match="'nope'"):
        mem.record_outcome(["nope"], success=True)
    with pytest.raises(NotFoundError, match="'nope'"):
        mem.stats("nope")
    assert mem.stats(excel.name).retrieved == 3  # a failed report changed nothing


def test_statistics_survive_reopening(tmp_path):
    path = tmp_path / "ws"
    ws = tea_notebook.Workspace(path, embedder="hashing")
    rec, _ = ws.experiences.add(**EXCEL)
    ws.experiences.retrieve("parse the coloured cells of an excel file")
    ws.experiences.record_outcome([rec.name], success=False)
    ws.close()
    ws = tea_notebook.Workspace(path, embedder="hashing")
    try:
        stats = ws.experiences.stats(rec.name)
        assert (stats.retrieved, stats.failed) == (1, 1)
        assert ws.experiences.retrieve("parse the coloured cells of an excel file")[0].name == rec.name
    finally:
        ws.close()


# -- markdown (C.8, C.9, C.10) ---------------------------------------------------------------------
C8 = """## How to Analyze Images Using a Multimodal Model?

### Description
Send an image as base64 to a vision-capable chat model and ask a precise question about it.
The reply is plain text.

### Use Cases
- Counting objects in a photo
- Reading text from a screenshot

### Code Implementation
```python
import base64
import os

# ### not a heading inside code
def analyze_image(path: str, question: str) -> str:
    data = base64.b64encode(open(path, "rb").read()).decode()
    return data[:10]
```

### Tool Configuration
- `OPENAI_API_KEY`: the API key
- `OPENAI_BASE_URL`: the endpoint
"""

C9 = """## How to Extract and Summarize Information from Multiple Web Sources

### Description
A research agent gathered facts from several pages and reconciled them into one answer.

### Task Context
- Multi-source fact finding with conflicting pages

### Experience of Success
- **Successful Strategy**: search broadly, then read the three most authoritative pages.
- **Tools and Techniques**: web_search, then a page crawler.
- **Key Insights**: official sources settle disagreements.
- **Applicable Scenarios**: fact checking, literature lookups.
- **Potential Pitfalls**: stale cached pages.
"""

C10 = """## Common Pitfalls When Parsing Spreadsheets Without Their Formatting

### Description
The agent read an Excel file with pandas, lost the cell colours and answered wrongly.

### Task Context
- Questions whose answer is encoded in cell colours

### Experience of Failure
- **What Went Wrong**: colours were dropped by pandas.
- **Root Cause Analysis**: the reader ignores styles.
- **Corrective Actions**: read with openpyxl and keep fills.
- **Warning Signs**: the question mentions coloured cells.
- **Related Success Patterns**: parse_excel_with_styles.
- **Partial Successes**: the sheet names were right.
"""


@pytest.mark.parametrize(
    "kind, text, heading, title",
    [
        ("tool", C8, "Use Cases", "How to Analyze Images Using a Multimodal Model?"),
        ("success", C9, "Task Context", "How to Extract and Summarize Information from Multiple Web Sources"),
        ("failure", C10, "Task Context", "Common Pitfalls When Parsing Spreadsheets Without Their Formatting"),
    ],
)
def test_markdown_round_trip(mem, kind, text, heading, title):
    parsed = parse_markdown(text)
    assert parsed.title == title and parsed.use_cases_heading == heading
    assert parsed.description.startswith(("Send an image", "A research agent", "The agent read"))
    assert "### Description" not in parsed.content and f"### {heading}" not in parsed.content
    rec, merged = mem.from_markdown(kind, text, source_run="run-5", outcome="ok")
    assert not merged and rec.kind == kind and rec.title == title and rec.source_run == "run-5"
    assert rec.use_cases == parsed.use_cases and rec.body == parsed.content
    assert to_markdown(rec) == text  # the canonical layout comes back byte for byte
    assert mem.to_markdown(rec.name) == text
    again = parse_markdown(to_markdown(rec))
    assert again == parsed


def test_markdown_parts_of_c8(mem):
    parsed = parse_markdown(C8)
    assert parsed.use_cases == ["Counting objects in a photo", "Reading text from a screenshot"]
    assert parsed.description.endswith("The reply is plain text.")
    assert parsed.content.startswith("### Code Implementation\n```python")
    assert "# ### not a heading inside code" in parsed.content
    assert parsed.content.endswith("- `OPENAI_BASE_URL`: the endpoint")


def test_markdown_variants():
    # prose task context, a fenced answer, chatter before the title, '###' title (C.9's last line)
    text = (
        "Here is the entry:\n```markdown\n### How to Plan a Trip Within a Budget\n\n### Description\nKeep a running total."
        "\n\n### Task Context\nA three-day trip with a fixed budget.\nHotels were the largest cost.\n\n"
        "### Experience of Success\n- **Key Insights**: book hotels first\n```"
    )
    parsed = parse_markdown(text.split("\n", 1)[1])
    assert parsed.title == "How to Plan a Trip Within a Budget"
    assert parsed.use_cases == ["A three-day trip with a fixed budget. Hotels were the largest cost."]
    assert parsed.content == "### Experience of Success\n- **Key Insights**: book hotels first"
    assert parse_markdown("Here you go.\n\n## A Title Here\n\n### Description\nd").title == "A Title Here"
    # applicable scenarios win over task context; no use-case section at all is fine
    both = "## T\n### Description\nd\n### Task Context\n- ctx\n### Applicable Scenarios\n- scen\n"
    assert parse_markdown(both).use_cases == ["scen"] and "### Task Context\n- ctx" in parse_markdown(both).content
    assert parse_markdown("## T\n### Description\nd\n### Notes\nn").use_cases == []
    # a description-less entry uses the text under its title
    assert parse_markdown("## T\nthe gist\n### Notes\nn").description == "the gist"


def test_to_markdown_default_headings(mem):
    tool = _add(mem, EXCEL)
    assert "### Use Cases\n- spreadsheet questions" in to_markdown(tool)
    success = _add(mem, SHOPS)
    assert "### Applicable Scenarios\n- price comparison" in to_markdown(success)
    assert parse_markdown(to_markdown(success)).use_cases == success.use_cases


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("just some words", "no title"),
        ("### Description\nonly a description", "no title"),
        ("## Title\n\n### Use Cases\n- a", "has no description"),
        ("## \n### Description\nd", "title heading is empty"),
    ],
)
def test_bad_markdown(mem, text, message):
    with pytest.raises(ExperienceError, match=message):
        mem.from_markdown("tool", text)
    assert len(mem) == 0


# -- prompts ---------------------------------------------------------------------------------------
def test_render_for_prompt(mem):
    shops, pdf = _add(mem, SHOPS), _add(mem, PDF)
    text = mem.render_for_prompt([shops, pdf])
    assert text.startswith(f"### {SHOPS['title']}\n{SHOPS['description']}\nUse cases: price comparison")
    assert "#### Experience of Success" in text and "#### Experience of Failure" in text
    assert "\n### Experience of" not in text
    assert mem.render_for_prompt([]) == "(none)"
    assert mem.render_for_prompt([shops, pdf], max_chars=50).count("### ") == 2  # first entry only
    code = mem.render_for_prompt([_add(mem, {**EXCEL, "content": "```python\n# ## comment\n```"})])
    assert "# ## comment" in code  # code is not touched


# -- bad input ------------------------------------------------------------------------------------
def test_bad_inputs(mem):
    with pytest.raises(ExperienceError, match="unknown experience kind 'lesson'"):
        mem.add("lesson", "A title", "a description")
    with pytest.raises(ExperienceError, match="non-empty title"):
        mem.add("tool", "   ", "a description")
    with pytest.raises(ExperienceError, match="non-empty description"):
        mem.add("tool", "A title", "")
    with pytest.raises(ExperienceError, match="use_cases must be a list of strings"):
        mem.add("tool", "A title", "a description", [1, 2])
    with pytest.raises(ExperienceError, match="body must be a string"):
        mem.add("tool", "A title", "a description", [], content=["x"])
    with pytest.raises(ExperienceError, match="unknown experience kind"):
        mem.from_markdown("howto", C8)
    with pytest.raises(ExperienceError, match="unknown experience kind 'x'"):
        mem.retrieve("query", kind="x")
    with pytest.raises(ExperienceError, match="non-empty query"):
        mem.retrieve("  ")
    with pytest.raises(ExperienceError, match="k must be a positive integer"):
        mem.retrieve("query", k=0)
    for op in (mem.get, mem.disable, mem.enable, mem.delete, mem.versions, lambda n: mem.edit(n, title="x")):
        with pytest.raises(NotFoundError, match="no experience named 'missing'"):
            op("missing")
    assert len(mem) == 0
    rec, _ = mem.add("tool", "A title", "a description", "one use case")  # a single use case as text
    assert rec.use_cases == ["one use case"]
    assert ExperienceError.__mro__[1].__name__ == "TeaError" and issubclass(ExperienceError, ValueError)


@pytest.mark.slow
def test_semantic_retrieval_and_merge_with_minilm(tmp_path):
    """The real embedder: paraphrases retrieve and merge, unrelated text does not pass δ."""
    ws = tea_notebook.Workspace(tmp_path / "ws")
    try:
        mem = ws.experiences
        for entry in (EXCEL, YOUTUBE, SHOPS, PDF):
            _add(mem, entry)
        assert mem.retrieve("Which spreadsheet cells are highlighted in green?")[0].title == EXCEL["title"]
        assert mem.retrieve("What does the speaker say in this online clip?", kind="tool")[0].title == YOUTUBE["title"]
        assert mem.retrieve("OCR an image-only PDF", kind="failure")[0].title == PDF["title"]
        assert mem.retrieve("Find the cheapest offer among online retailers")[0].title == SHOPS["title"]
        assert mem.retrieve("Write a haiku about autumn leaves") == []
        assert mem.retrieve("What is the weather in Paris tomorrow?") == []
        rec, merged = mem.add(
            "tool",
            "How to read Excel files and keep the cell colours?",
            "Open an xlsx workbook with openpyxl so cell fill colours are preserved, and output them as HTML.",
            ["questions about coloured spreadsheet cells"],
            "### Notes\n- ARGB colours: keep the last six hex digits",
            source_run="run-8",
        )
        assert merged and rec.title == EXCEL["title"] and rec.source_runs == ["run-1", "run-8"]
        other, merged = mem.add(
            "tool",
            "How to chart Excel data as a bar plot?",
            "Load a worksheet with pandas and draw a bar chart of one column with matplotlib.",
            ["visualising spreadsheet data"],
        )
        assert not merged and len(mem) == 5
    finally:
        ws.close()


def test_registry_similar_is_pure_cosine(ws, mem):
    """Registry.similar: the δ test behind retrieve (a text or an unregistered record as the query)."""
    for entry in (EXCEL, YOUTUBE, SHOPS, PDF):
        _add(mem, entry)
    hits = ws.experience.similar("parse the coloured cells of an excel file", k=4)
    assert len(hits) == 4 and hits[0][0].title == EXCEL["title"]
    search = {h.name: h.semantic for h in ws.experience.search("parse the coloured cells of an excel file", k=4)}
    for record, cosine in hits:  # the same cosine the hybrid search reports as its semantic part
        assert cosine == pytest.approx(search[record.name], abs=1e-5)
    assert all(c >= 0.5 for _, c in ws.experience.similar("parse the coloured cells of an excel file", 4, 0.5))
    assert [r.kind for r, _ in ws.experience.similar("anything", k=4, kind="failure")] == ["failure"]
    probe = ExperienceRecord(
        name="probe", kind="tool", title=EXCEL["title"], description=EXCEL["description"], use_cases=EXCEL["use_cases"]
    )
    (record, cosine), *_ = ws.experience.similar(probe, k=1)
    assert record.title == EXCEL["title"] and cosine == pytest.approx(1.0, abs=1e-5)  # same views, same vector
    assert ws.experience.similar("anything", k=0) == []
    with pytest.raises(TypeError, match=r"similar takes a text or a record \(ExperienceRecord\), not int"):
        ws.experience.similar(42)
    with pytest.raises(ValueError, match="non-empty query"):
        ws.experience.similar(" ")
