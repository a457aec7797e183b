"""The notebook side of self-evolution (issue 6) in an in-process IPython shell: ``%tea create-tool``
(auto and manual approval through the returned object, the live view of the tool manager's stages,
rich and escaped display), ``%tea stats``, ``%tea memory`` with experience entries, ``%tea plot
evolution`` (asserted on the figure's data) and ``%tea evolve``.

Models are ``ScriptedModel`` functions answering by the prompt's stage (``stage_of``); workspaces use
the hashing embedder and live in tmp_path. Generated code is validated in the confined sandbox.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

pytest.importorskip("IPython")

from conftest import magics_workspace, tea  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from vowel_tool_script import code_answer, tool_manager_script, vowel_module  # noqa: E402

from tea_notebook.evolve.llm import stage_of  # noqa: E402
from tea_notebook.evolve.loop import EvolutionResult  # noqa: E402
from tea_notebook.evolve.stats import ToolStats  # noqa: E402
from tea_notebook.evolve.toolmaker import Creation  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call, history_calls  # noqa: E402
from tea_notebook.notebook.memory_view import MemoryExplorer  # noqa: E402

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytestmark = pytest.mark.usefixtures("warm_litellm")


# -- scripted tool manager (the module, tests, need and spec: vowel_tool_script) ------------------------
GOOD = vowel_module()
BAD = vowel_module('return sum(1 for ch in text.lower() if ch in "aei")')  # 'queue' -> 2, not 4
EVIL = vowel_module(doc="Count vowels. <script>alert('pwned')</script> <b>bold</b>")
REUSE = {
    "need_creation": False,
    "required_capabilities": ["count_vowels"],
    "matching_tools": ["count_vowels"],
    "missing_tools": [],
    "justification": "count_vowels already does this.",
}
REQUEST = "count the vowels in a word"


def scripted(**replies: Any) -> ScriptedModel:
    """A model answering each tool-manager stage from its own list; a stage's last answer repeats."""
    return tool_manager_script(GOOD, **replies)


# -- the shell ------------------------------------------------------------------------------------------
@pytest.fixture
def ws(ip, magics, tmp_path, monkeypatch):
    """A fresh workspace (hashing embedder) made current through %tea workspace; no model configured.
    The live view refreshes on every event (``update_interval = 0``): while a run goes it shows only its
    last steps, so with the usual 0.25 s throttle a fast stage could be over between two refreshes."""
    switched = magics_workspace(ip, tmp_path, monkeypatch, tool_approval="auto", live=True, update_interval=0.0)
    yield switched


# -- %tea create-tool ------------------------------------------------------------------------------------
def test_create_tool_registers_and_displays_code_tests_and_output(ip, ws, shown):
    model = scripted(tool_code=[code_answer(BAD)])  # fails its examples once, then the fix passes
    creation = tea(ip, f'create-tool --model {model.name} "{REQUEST}"')
    assert isinstance(creation, Creation) and creation.status == "registered"
    assert [t.name for t in creation.tools] == ["count_vowels"]
    assert ws.tools.invoke("count_vowels", {"text": "education"}).value == 5
    cand = creation.candidates[0]
    assert cand.fix_iterations == 1 and cand.first_pass is False and cand.code == GOOD

    data, _ = ip.display_formatter.format(creation)
    page = data["text/html"]
    assert "registered" in page and "count_vowels" in page and "passed after 1 fix" in page
    assert "scripted, not an LLM" in page and creation.run_id in page
    assert "return sum(1 for ch in text.lower() if ch in &quot;aeiou&quot;)" in page  # the code, escaped
    assert "def test_counts():" in page and "ok   test_rejects_non_text" in page  # tests and their output
    assert "Waiting for your approval" not in page
    text = data["text/plain"]
    assert text.startswith(f"tool manager ({creation.run_id}): registered") and "scripted, not an LLM" in text

    # the live view showed the tool manager's stages as actions, with the code and the test results
    live = "".join(shown)
    for stage in ("retrieve_tools", "assess_tool_need", "tool_spec", "write_code", "write_tests", "validate"):
        assert f"<code>{stage}(" in live, stage
    assert "fix_code(" in live and "register(" in live and "tool_manager" in live
    assert "passed: imports, TOOL_CONFIG, examples and tests" in live
    assert "failed at examples" in live  # the first validation, before the fix


def test_manual_approval_accept_through_the_returned_object(ip, ws, shown):
    model = scripted()
    creation = tea(ip, f'create-tool --manual --model {model.name} "{REQUEST}"')
    assert creation.status == "pending" and "count_vowels" not in ws.tools
    data, _ = ip.display_formatter.format(creation)
    assert "Waiting for your approval" in data["text/html"]
    for hint in (
        "creation.candidates[0].accept()",
        "creation.candidates[0].edit(code)",
        "creation.candidates[0].reject(",
    ):
        assert hint in data["text/html"] and hint in data["text/plain"], hint

    record = creation.candidates[0].accept()
    assert record.name == "count_vowels" and "count_vowels" in ws.tools
    assert record.metadata["provenance"]["approved_by"] == "person"
    assert creation.status == "registered"
    after, _ = ip.display_formatter.format(creation)
    assert "Waiting for your approval" not in after["text/html"] and "registered" in after["text/html"]
    assert ws.tools.invoke("count_vowels", {"text": "queue"}).value == 4


def test_manual_approval_by_setting_reject_and_edit(ip, ws, magics, shown):
    ip.run_line_magic("config", "TeaMagics.tool_approval = 'manual'")
    assert magics.tool_approval == "manual"
    model = scripted()
    rejected = tea(ip, f'create-tool --model {model.name} "{REQUEST}"')
    assert rejected.status == "pending"
    rejected.candidates[0].reject("I want y counted as a vowel")
    assert rejected.status == "discarded" and "count_vowels" not in ws.tools
    page = ip.display_formatter.format(rejected)[0]["text/html"]
    assert "reason: I want y counted as a vowel" in page and "Waiting for your approval" not in page

    edited = tea(ip, f'create-tool --model {model.name} "{REQUEST}"')
    edited.candidates[0].edit(GOOD.replace('"""Count the vowels in a text."""', '"""Count the vowels (edited)."""'))
    assert edited.status == "pending" and "(edited)" in ip.display_formatter.format(edited)[0]["text/html"]
    edited.candidates[0].accept()
    assert "(edited)" in ws.tools.get("count_vowels").source

    forced = tea(ip, f'create-tool --auto --model {model.name} "count vowels again"')  # --auto overrides
    assert forced.status == "registered" and ws.tools.get("count_vowels").version == 2
    from traitlets import TraitError

    with pytest.raises(TraitError, match="tool_approval"):
        magics.tool_approval = "sometimes"
    ip.run_line_magic("config", "TeaMagics.tool_approval = 'sometimes'")  # %config logs the error
    assert magics.tool_approval == "manual"


def test_generated_script_is_escaped_in_every_view(ip, ws, shown):
    model = scripted(tool_code=[code_answer(EVIL)])
    creation = tea(ip, f'create-tool --model {model.name} "{REQUEST}"')
    assert creation.status == "registered"
    page = ip.display_formatter.format(creation)[0]["text/html"]
    assert "<script" not in page.lower() and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    live = "".join(shown)
    assert "<script" not in live.lower() and "&lt;script&gt;" in live
    explorer = tea(ip, "tools")
    assert "<script" not in explorer.detail_html("count_vowels").lower()


def test_reuse_and_discard_display(ip, ws, shown):
    model = scripted()
    assert tea(ip, f'create-tool --model {model.name} --quiet "{REQUEST}"').status == "registered"
    again = tea(ip, f'create-tool --model {scripted(assess_tool_need=[REUSE]).name} --quiet "vowels in a text"')
    assert again.status == "reused" and again.reused == ["count_vowels"]
    page = ip.display_formatter.format(again)[0]["text/html"]
    assert "reused existing tools" in page and "<code>count_vowels</code>" in page

    failing = scripted(tool_code=[code_answer(BAD)], tool_fix=[{"module_code": BAD}])
    dropped = tea(ip, f'create-tool --model {failing.name} --max-fixes 1 --quiet "count vowels, new version"')
    assert dropped.status == "discarded"
    page = ip.display_formatter.format(dropped)[0]["text/html"]
    assert "discarded after 1 fix" in page and "reason: still failing after 1 fixes" in page


def test_create_tool_input_errors_are_short_usage_errors(ip, ws):
    with pytest.raises(UsageError, match="needs a model"):
        tea(ip, f'create-tool "{REQUEST}"')  # the offline demo cannot write tools
    model = scripted()
    with pytest.raises(UsageError, match="usage: %tea create-tool"):
        tea(ip, f"create-tool --model {model.name}")
    with pytest.raises(UsageError, match="--max-fixes"):
        tea(ip, f'create-tool --model {model.name} --max-fixes -1 "x"')
    with pytest.raises(UsageError):
        tea(ip, f'create-tool --manual --auto --model {model.name} "x"')
    broken = scripted(assess_tool_need=["not json"])
    with pytest.raises(UsageError, match=r"^%tea create-tool: assess_tool_need: no usable answer") as info:
        tea(ip, f'create-tool --model {broken.name} --quiet "{REQUEST}"')
    assert len(str(info.value)) < 400 and "count_vowels" not in ws.tools
    # an apostrophe (unbalanced quote) is just text
    native = {**REUSE, "matching_tools": [], "justification": "The model can do this itself."}
    plain = tea(ip, f"create-tool --model {scripted(assess_tool_need=[native]).name} --quiet Bob's vowels")
    assert plain.request == "Bob's vowels" and plain.status == "native"
    assert "no tool needed" in ip.display_formatter.format(plain)[0]["text/html"]


def test_default_model_setting_is_used(ip, ws):
    model = scripted()
    ip.run_line_magic("config", f"TeaMagics.default_model = {model.name!r}")
    creation = tea(ip, f'create-tool --quiet "{REQUEST}"')
    assert creation.status == "registered" and model.calls


# -- %tea stats, %tea memory, %tea plot evolution ------------------------------------------------------
def _two_tasks(ip, ws) -> tuple[Creation, Any]:
    """Task 1 creates count_vowels (one fix); task 2, an agent, calls it; then experiences are written."""
    created = tea(ip, f'create-tool --model {scripted(tool_code=[code_answer(BAD)]).name} --quiet "{REQUEST}"')
    script = ScriptedModel(
        [call("count_vowels", text="education"), call("done", success=True, text="5 vowels")], name=None
    )
    result = ip.run_cell_magic("agent", f"--model {script.name} --tools count_vowels --quiet", "Vowels in 'education'?")
    assert result.success
    memory = ws.experiences
    tool_entry, _ = memory.add(
        "tool",
        "How to count vowels with count_vowels",
        "Call count_vowels(text=...) instead of counting letters yourself.",
        ["counting vowels in words"],
        "Use the tool; it rejects non-text input.",
        source_run=created.run_id,
        outcome="success",
        tool_name="count_vowels",
    )
    failure, _ = memory.add(
        "failure",
        "Counting letters by hand goes wrong",
        "Models miscount letters in long words <script>x()</script>.",
        ["letter counting"],
        "Always use a counting tool.",
        source_run=result.run_id,
        outcome="failed",
    )
    memory.retrieve("count vowels in a word", kind="tool")
    memory.record_outcome([tool_entry.name], success=True)
    memory.retrieve("count vowels in a word", kind="tool")
    memory.record_outcome([tool_entry.name], success=False)
    return created, result


def test_stats_numbers(ip, ws):
    empty = tea(ip, "stats")
    assert isinstance(empty, ToolStats) and empty.created == 0
    assert "tools created" in ip.display_formatter.format(empty)[0]["text/html"]
    _two_tasks(ip, ws)
    second = scripted(assess_tool_need=[REUSE])
    assert tea(ip, f'create-tool --model {second.name} --quiet "vowels again"').status == "reused"
    failing = scripted(tool_code=[code_answer(BAD)], tool_fix=[{"module_code": BAD}])
    tea(ip, f'create-tool --model {failing.name} --max-fixes 2 --quiet "count vowels v2"')
    stats = tea(ip, "stats")
    assert (stats.created, stats.versions, stats.discarded, stats.reuse_decisions) == (1, 1, 1, 1)
    assert stats.reused_tools == 1 and stats.reuse_rate == 1.0
    assert stats.first_pass_validity == 0.0 and stats.mean_fix_iterations == 1.5  # (1 + 2) / 2
    data, _ = ip.display_formatter.format(stats)
    assert "first-pass validity" in data["text/html"] and "<td>1.50</td>" in data["text/html"]
    assert "reuse rate" in data["text/plain"] and "100% (1 of 1 created tools used again)" in data["text/plain"]


def test_memory_lists_experience_entries_with_their_counts(ip, ws):
    ws.memory_store.save("r0", "boil water", "Filled the kettle and boiled the water.", ["A kettle needs water first."])
    _two_tasks(ip, ws)
    explorer = tea(ip, "memory")
    assert isinstance(explorer, MemoryExplorer)
    kinds = [r["kind"] for r in explorer.rows]
    assert kinds[:2] == ["summary", "insight"] and sorted(kinds[2:]) == ["failure", "tool"]
    tool_row = next(r for r in explorer.rows if r["kind"] == "tool")
    assert tool_row["title"] == "How to count vowels with count_vowels"
    assert (tool_row["retrieved"], tool_row["succeeded"], tool_row["failed"]) == (2, 1, 1)
    failure_row = next(r for r in explorer.experience_rows if r["kind"] == "failure")
    assert (failure_row["retrieved"], failure_row["succeeded"], failure_row["failed"]) == (0, 0, 0)
    assert explorer.choices() == ["failure", "insight", "summary", "tool"]
    assert [r["kind"] for r in explorer.filter(kind="tool").rows] == ["tool"]

    page = explorer._repr_html_()
    assert "<th>retrieved</th>" in page and "<th>succeeded</th>" in page and "<th>failed</th>" in page
    assert "<script" not in page.lower() and "&lt;script&gt;" in page
    assert "[tool] How to count vowels with count_vowels: Call count_vowels" in explorer.text()
    assert "retrieved 2, 1 succeeded, 1 failed" in explorer.text()

    found = tea(ip, "memory count vowels tool")
    assert found.rows and found.rows[0]["kind"] == "tool" and "score" in found.rows[0]
    detail = explorer.detail(tool_row["name"])
    assert detail["stats"] == {"retrieved": 2, "succeeded": 1, "failed": 1} and detail["kind"] == "experience"
    pane = explorer.detail_html(tool_row["name"])
    assert "<b>tool</b> experience" in pane and "counting vowels in words" in pane
    assert "retrieved 2 times" in pane and "Use the tool; it rejects non-text input." in pane
    assert "<script" not in explorer.detail_html(failure_row["name"]).lower()

    ws.experiences.disable(failure_row["name"])
    assert "(disabled)" in tea(ip, "memory").text()
    only_memory = MemoryExplorer(ws.memory, experience=False)
    assert [r["kind"] for r in only_memory.rows] == ["summary", "insight"] and only_memory.experience_rows == []


def test_plot_evolution_data(ip, ws):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    empty = tea(ip, "plot evolution")
    assert isinstance(empty, Figure) and empty.evolution["tasks"] == [] and empty.evolution["experience"] == [0]

    created, result = _two_tasks(ip, ws)
    failing = scripted(tool_code=[code_answer(BAD)], tool_fix=[{"module_code": BAD}])
    tea(ip, f'create-tool --model {failing.name} --max-fixes 2 --quiet "count vowels v2"')
    fig = tea(ip, "plot evolution")
    data = fig.evolution
    assert [t["run"] for t in data["tasks"]][:2] == [created.run_id, result.run_id] and len(data["tasks"]) == 3
    memory_ax, reuse_ax, fixes_ax = fig.axes[:3]

    experience_line, tools_line = memory_ax.get_lines()
    assert list(experience_line.get_xdata()) == [0, 1, 2, 3]
    assert list(experience_line.get_ydata()) == [0, 0, 2, 2]  # written after task 2, before task 3
    assert list(tools_line.get_ydata()) == [0, 1, 1, 1]
    assert experience_line.get_label() == "experience entries" and tools_line.get_label() == "tools created"

    created_bars, reused_bars = reuse_ax.containers[:2]
    assert [b.get_height() for b in created_bars] == [1, 0, 0]
    assert [b.get_height() for b in reused_bars] == [0, 1, 0]  # task 2 called the tool task 1 made

    bars = fixes_ax.containers[0]
    assert [b.get_height() for b in bars] == [1, 2]
    assert [t.get_text() for t in fixes_ax.get_xticklabels()] == ["count_vowels", "count_vowels"]
    assert [t.get_text() for t in fixes_ax.texts] == ["1 fix", "discarded after 2 fixes"]  # bar labels
    assert [t.get_text() for t in fixes_ax.get_legend().get_texts()] == ["first pass", "after fixes", "discarded"]
    from matplotlib.colors import to_rgba

    assert [b.get_facecolor() for b in bars] == [to_rgba("#d4a72c"), to_rgba("#cf222e")]  # after fixes, discarded
    assert fixes_ax.get_title() == "first-pass validity 0% · mean fixes 1.50"
    assert data["candidates"] == [
        {"tool": "count_vowels", "fix_iterations": 1, "outcome": "after fixes"},
        {"tool": "count_vowels", "fix_iterations": 2, "outcome": "discarded"},
    ]
    stats = tea(ip, "stats")
    assert stats.first_pass_validity == data["first_pass_validity"]
    assert stats.mean_fix_iterations == data["mean_fix_iterations"]


# -- %tea evolve -----------------------------------------------------------------------------------------
# The stream of the tutorial: task 1 creates count_vowels (one fix) but the agent counts by eye and the
# judge (with the ground truth) fails it; task 2 reuses the tool, and the failure entry in its prompt
# makes the agent call it.
PITFALL = "Never count vowels by eye: call count_vowels on the word and report its result."


def vowels_module(vowels: str) -> str:
    return f'''def count_vowels(text: str) -> int:
    """Count the vowels (a, e, i, o, u) in a text, upper or lower case."""
    if not isinstance(text, str):
        raise ValueError("text must be a string")
    return sum(1 for ch in text.lower() if ch in "{vowels}")


TOOL_CONFIG = {{
    "name": "count_vowels",
    "description": "Count the vowels in a text.",
    "function": count_vowels,
    "input_schema": {{"type": "object", "properties": {{"text": {{"type": "string"}}}}, "required": ["text"]}},
    "returns": {{"type": "integer"}},
}}
'''


PALINDROME = '''def is_palindrome(word: str) -> bool:
    """True when the word reads the same backwards, ignoring case."""
    if not isinstance(word, str):
        raise ValueError("word must be a string")
    folded = word.lower()
    return folded == folded[::-1]


TOOL_CONFIG = {
    "name": "is_palindrome",
    "description": "Whether a word is a palindrome.",
    "function": is_palindrome,
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    "returns": {"type": "boolean"},
}
'''

WORLD_TESTS = {
    "count_vowels": """from tea_check import raises
from count_vowels import count_vowels


def test_counts_each_vowel():
    assert count_vowels("banana") == 3
    assert count_vowels("queue") == 4
    assert count_vowels("rhythm") == 0


def test_rejects_non_text():
    with raises(ValueError):
        count_vowels(42)
""",
    "is_palindrome": """from tea_check import raises
from is_palindrome import is_palindrome


def test_palindromes():
    assert is_palindrome("kayak") is True
    assert is_palindrome("Level") is True
    assert is_palindrome("banana") is False


def test_rejects_non_text():
    with raises(ValueError):
        is_palindrome(3)
""",
}
CRITIQUE_TESTS = """from count_vowels import count_vowels


def test_upper_case_word():
    assert count_vowels("ONOMATOPOEIA") == 8
    assert count_vowels("Encyclopedia") == 5
"""
SPECS = {
    "count_vowels": {
        "tool_name": "count_vowels",
        "tool_description": "Count the vowels (a, e, i, o, u) in a word or text, upper or lower case.",
        "input_parameters": [{"name": "text", "type": "string", "description": "the word or text", "required": True}],
        "output_format": {"type": "integer"},
        "core_logic": ["Step 1: check that text is a string", "Step 2: count a, e, i, o, u case-insensitively"],
        "examples": [{"input": {"text": "banana"}, "output": 3}, {"input": {"text": "queue"}, "output": 4}],
    },
    "is_palindrome": {
        "tool_name": "is_palindrome",
        "tool_description": "Whether a word reads the same backwards as forwards, ignoring case.",
        "input_parameters": [{"name": "word", "type": "string", "description": "the word", "required": True}],
        "output_format": {"type": "boolean"},
        "core_logic": ["Step 1: check that word is a string", "Step 2: compare the lower-cased word with its reverse"],
        "examples": [{"input": {"word": "kayak"}, "output": True}, {"input": {"word": "banana"}, "output": False}],
    },
}


def line_after(text: str, label: str) -> str:
    found = re.search(re.escape(label) + r"\s*(.*)", text)
    return found.group(1).strip() if found else ""


def world(messages: list[dict], tools: list[dict]) -> Any:
    """A scripted model for every stage of the loop (the notebook tutorial's, in short)."""
    stage, user = stage_of(messages), messages[-1]["content"]
    if stage == "plan":
        return json.dumps({"sub_tasks": [{"description": line_after(user, "Query:"), "dependencies": []}]})
    if stage == "assess_tool_need":
        task, listing = user.split("Existing tools", 1)
        tool = "is_palindrome" if "palindrome" in task else "count_vowels" if "vowel" in task else None
        if tool is None or f"- {tool}:" in listing:
            found = [tool] if tool else []
            why = f"{tool} already does this." if tool else "The model can do this itself."
            return json.dumps(
                {
                    "need_creation": False,
                    "required_capabilities": [],
                    "matching_tools": found,
                    "missing_tools": [],
                    "justification": why,
                }
            )
        missing = {
            "name": tool,
            "description": "Does exactly this: " + SPECS[tool]["tool_description"],
            "reason": "Essential because: the result must be exact",
            "example_input_output": "see the spec",
        }
        return json.dumps(
            {
                "need_creation": True,
                "required_capabilities": [tool],
                "matching_tools": [],
                "missing_tools": [missing],
                "justification": "count_letters counts one letter at a time; no tool covers this exactly.",
            }
        )
    if stage == "tool_spec":
        tool = "is_palindrome" if "palindrome" in user else "count_vowels"
        return json.dumps({"tool_creation_specs": [SPECS[tool]]})
    if stage == "tool_code":
        tool = line_after(user, "Tool name (use exactly):")
        code = PALINDROME if tool == "is_palindrome" else vowels_module("aeio")  # forgets the u
        return json.dumps(
            {
                "name": tool,
                "description": SPECS[tool]["tool_description"],
                "input_schema": {},
                "returns": {},
                "module_code": code,
            }
        )
    if stage == "tool_tests":
        tool = line_after(user, "Tool:")
        return json.dumps({"tests": CRITIQUE_TESTS if "judge_critique" in user else WORLD_TESTS[tool]})
    if stage == "tool_fix":
        return json.dumps({"module_code": vowels_module("aeiou")})
    if stage == "agent_spec":
        offered = re.findall(r"^- (\w+):", user, re.M)
        return json.dumps(
            {
                "role": "Word Analysis Specialist",
                "suggestions": [
                    "Count the letters and vowels of each word exactly.",
                    "Check the spelling of the word before counting anything.",
                    "Report the count as a plain number without extra words.",
                ],
                "tools": [t for t in offered if t == "count_vowels"],
                "expertise": "Analyses single words: their letters, vowels and spelling.",
            }
        )
    if stage == "react":
        word = re.findall(r"'([^']+)'", user)[-1]
        done = [result for name, _, result in history_calls(messages) if name != "done"]
        if done:
            return call("done", success=True, text=done[-1])
        if PITFALL in messages[0]["content"] and any(t["function"]["name"] == "count_vowels" for t in tools):
            return call("count_vowels", text=word)  # what the failure entry taught it
        return call("done", success=True, text="7")  # counted by eye
    if stage == "aggregate":
        last = user.split("Sub-task results:", 1)[1].split("Answer with ONE JSON")[0].strip().splitlines()[-1]
        return json.dumps({"answer": last.strip(), "reasoning": "The only sub-task answers the query."})
    if stage == "judge":
        final, truth = line_after(user, "Final result:"), line_after(user, "judge the final result against it):")
        ok = final == truth if truth else True
        new = re.findall(r"^- (\w+) \(v\d+\):", user.split("New tools:", 1)[1], re.M)
        return json.dumps(
            {
                "task_completed": ok,
                "completion_quality": "good" if ok else "poor",
                "overall_assessment": (
                    "The count is right and was computed with count_vowels."
                    if ok
                    else "The agent counted the vowels by eye and got 7, not 8; count_vowels was offered "
                    "but never called."
                ),
                "agent_evaluations": [
                    {
                        "agent_id": "word_analysis_specialist",
                        "agent_role": "Word Analysis Specialist",
                        "subtask_id": "1",
                        "performance": "success" if ok else "failure",
                        "strengths": ["used the tool"] if ok else [],
                        "issues": [] if ok else ["counted by eye instead of calling count_vowels"],
                    }
                ],
                "tool_evaluations": [
                    {
                        "tool_name": n,
                        "tool_type": "newly_created",
                        "effectiveness": "success",
                        "issues": ["not used by the agent"],
                        "test_ideas": ["count_vowels('ONOMATOPOEIA') -> 8"],
                    }
                    for n in new
                ],
            }
        )
    if stage == "tool_memory":
        return (
            "## How to count the vowels in a word exactly\n### Description\nCall count_vowels(text=...) "
            "with the word; it counts a, e, i, o and u in any case.\n### Use Cases\n"
            "- counting the vowels in a word\n- checking a vowel count before answering\n"
            f"### Code Implementation\n```python\n{vowels_module('aeiou')}```"
        )
    if stage == "success_memory":
        return (
            "## Counting the vowels of a word with count_vowels\n### Description\nCalling count_vowels "
            "on the word gave the right count at once.\n### Task Context\n- counting the vowels in a word\n"
            "### Experience of Success\n- Successful Strategy: call the tool, report its number"
        )
    if stage == "failure_memory":
        return (
            "## Common pitfalls when counting the vowels in a word\n### Description\nCounting by eye "
            f"gave 7 instead of 8. {PITFALL}\n### Task Context\n- counting the vowels in a word\n"
            "### Experience of Failure\n- What Went Wrong: the vowels were counted by eye\n"
            "- Corrective Actions: call count_vowels"
        )
    raise ValueError(f"no scripted answer for stage {stage!r}")


VOWELS_1 = "How many vowels are in the word 'onomatopoeia'?"
VOWELS_2 = "How many vowels are in the word 'encyclopedia'?"


def test_evolve_two_task_stream_with_the_live_view(ip, ws, shown, monkeypatch):
    # every stage's own update, whatever the byte budget would hold back (test_live_increments tests the budget)
    monkeypatch.setattr("tea_notebook.notebook.live.LIVE_BASE_BYTES", 10**9)
    model = ScriptedModel(world)
    first = tea(ip, f'evolve --model {model.name} --ground-truth 8 "{VOWELS_1}"')
    assert isinstance(first, EvolutionResult) and not first.success and first.answer == "7"
    assert first.created_tools == ["count_vowels"] and [v.status for v in first.validations] == ["passed"]
    assert sorted(e.kind for e in first.experiences) == ["failure", "tool"]
    live = "".join(shown)
    for stage in ("plan(", "retrieve_tools(", "tool_manager(", "create_agent(", "judge(", "write_experience("):
        assert f"<code>{stage}" in live, stage
    assert "sub-agent <b>tool_manager</b>" in live and "sub-agent <b>word_analysis_specialist</b>" in live
    assert "write_code(" in live and "fix_code(" in live  # the nested tool manager's stages, as actions

    page = ip.display_formatter.format(first)[0]["text/html"]
    assert "failure" in page and "ground truth:</span> 8" in page and "scripted, not an LLM" in page
    assert "<code>count_vowels</code>" in page and "counted the vowels by eye" in page
    assert "validated <code>count_vowels</code> v1: <b>passed</b>" in page
    assert "Common pitfalls when counting the vowels in a word" in page
    text = ip.display_formatter.format(first)[0]["text/plain"]
    assert text.startswith(f"Mem²Evolve run {first.run_id}: FAILURE (with ground truth)")

    second = tea(ip, f'evolve --model {model.name} --ground-truth 5 --quiet "{VOWELS_2}"')
    assert second.success and second.answer == "5"
    assert second.created_tools == [] and "count_vowels" in second.reused_tools and second.new_agents == []
    [sub] = second.subtasks
    [failure] = [e for e in first.experiences if e.kind == "failure"]
    assert sub.experiences == [failure.name] and PITFALL in failure.description
    assert sub.tools_used == ["count_vowels"]  # the failure entry in the prompt changed the approach

    row = next(r for r in tea(ip, "memory").experience_rows if r["name"] == failure.name)
    assert (row["retrieved"], row["succeeded"], row["failed"]) == (1, 1, 0)
    stats = tea(ip, "stats")
    assert (stats.created, stats.reuse_decisions, stats.reused_tools) == (1, 1, 1)
    data = tea(ip, "plot evolution").evolution
    assert data["experience"] == [0, 2, 3] and data["created"] == [1, 0] and data["reused"] == [0, 1]


def test_evolve_manual_approval_and_errors(ip, ws, shown):
    model = ScriptedModel(world)
    held = tea(ip, f'evolve --manual --model {model.name} --quiet "{VOWELS_1}"')
    assert held.created_tools == [] and "count_vowels" not in ws.tools
    page = ip.display_formatter.format(held)[0]["text/html"]
    assert "Waiting for your approval" in page
    assert "result.subtasks[0].recruit.creation.candidates[0].accept()" in page
    held.subtasks[0].recruit.creation.candidates[0].accept()
    assert "count_vowels" in ws.tools

    with pytest.raises(UsageError, match="needs a model"):
        tea(ip, f'evolve "{VOWELS_1}"')
    with pytest.raises(UsageError, match="usage: %tea evolve"):
        tea(ip, f"evolve --model {model.name}")
    broken = ScriptedModel(lambda messages, tools: "no JSON here")
    with pytest.raises(UsageError, match=r"^%tea evolve: plan: no usable answer"):
        tea(ip, f'evolve --model {broken.name} --quiet "{VOWELS_1}"')


# -- the live view plumbing ---------------------------------------------------------------------------
def test_staged_steps_show_their_action_in_the_live_view():
    from tea_notebook.notebook.live import LiveView
    from tea_notebook.runtime.events import Event

    view = LiveView(display=False)
    view(Event("e1", "r1", "run_started", 0.0, {"root_run": "r1", "process": True, "agent": "tool_manager"}))
    view(
        Event(
            "e2",
            "r1",
            "step",
            1.0,
            {"root_run": "r1", "results": [["validate", '{"tool": "t"}', "Error: <b>failed</b>"]]},
            step=1,
        )
    )
    actions = view.runs["r1"].steps[1].actions
    assert actions == [
        {
            "id": "e2:0",
            "name": "validate",
            "arguments": '{"tool": "t"}',
            "observation": "Error: <b>failed</b>",
            "ok": False,
        }
    ]
    page = view.html()
    assert "validate" in page and "&lt;b&gt;failed&lt;/b&gt;" in page and "<b>failed</b>" not in page
    # an agent run's steps keep the actions its tool events built
    view(Event("e3", "r2", "run_started", 0.0, {"root_run": "r1", "agent": "agent"}, parent_id="r1"))
    view(Event("e4", "r2", "tool_call", 1.0, {"id": "c1", "name": "add", "arguments": {}}, step=1, parent_id="r1"))
    view(Event("e5", "r2", "step", 1.0, {"results": [["add", "{}", "3"]]}, step=1, parent_id="r1"))
    assert [a["id"] for a in view.runs["r2"].steps[1].actions] == ["c1"]


def test_help_lists_the_new_subcommands(ip):
    text = str(tea(ip, "help"))
    for sub in ("create-tool", "evolve", "stats", "plot evolution"):
        assert sub in text


def test_formatters_need_no_evolve_import():
    import subprocess
    import sys

    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\nip.run_line_magic('load_ext', 'tea_notebook')\n"
        "print(any(m.startswith('tea_notebook.evolve') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")
