"""The scripted material of a tool-manager run that creates ``count_vowels``, shared by the tool-manager
tests and the notebook's ``%tea create-tool`` tests: the module the model writes (under the C.4
contract), the tests it writes, the need and the specification it answers, and ``stage_script``, a
``ScriptedModel`` answering each tool-manager stage from its own list.
"""

from __future__ import annotations

import json
from typing import Any

from tea_notebook.evolve.llm import stage_of
from tea_notebook.models.offline import ScriptedModel

COUNT_AEIOU = 'return sum(1 for ch in text.lower() if ch in "aeiou")'


def vowel_module(body: str = COUNT_AEIOU, *, doc: str = "Count the vowels in a text.", header: str = "") -> str:
    """A count_vowels module under the C.4 contract; ``body`` is the function's last line, ``doc`` its
    docstring and ``header`` the module's lines before the function."""
    return f'''{header}def count_vowels(text: str) -> int:
    """{doc}"""
    if not isinstance(text, str):
        raise ValueError("text must be a string")
    {body}


TOOL_CONFIG = {{"name": "count_vowels", "description": "Count vowels.", "function": count_vowels,
               "input_schema": {{"type": "object", "properties": {{"text": {{"type": "string"}}}},
                                "required": ["text"]}},
               "returns": {{"type": "integer"}}}}
'''


# what the model answers at each stage: the tests it writes, its assessment of the need, the specification
TESTS = """from tea_check import raises
from count_vowels import count_vowels


def test_counts():
    assert count_vowels("banana") == 3
    assert count_vowels("sky") == 0
    assert count_vowels("AEIOU") == 5


def test_rejects_non_text():
    with raises(ValueError):
        count_vowels(3)
"""
NEED = {
    "need_creation": True,
    "required_capabilities": ["count_vowels"],
    "matching_tools": [],
    "missing_tools": [
        {
            "name": "count_vowels",
            "description": "Does exactly this: counts vowels",
            "reason": "Essential because: exact counting",
            "example_input_output": 'Input: {"text": "banana"} -> Output: 3',
        }
    ],
    "justification": "Counting must be exact.",
}
SPEC = {
    "tool_name": "count_vowels",
    "tool_description": "Count the vowels (a, e, i, o, u) in a text.",
    "input_parameters": [{"name": "text", "type": "string", "description": "the text", "required": True}],
    "output_format": {"type": "integer"},
    "core_logic": ["Step 1: validate the text", "Step 2: count a, e, i, o, u case-insensitively"],
    "examples": [{"input": {"text": "banana"}, "output": 3}, {"input": {"text": "queue"}, "output": 4}],
}


def code_answer(src: str, name: str = "count_vowels") -> dict[str, Any]:
    """The ``tool_code`` stage's answer carrying the module ``src``."""
    return {"name": name, "description": "d", "input_schema": {}, "returns": {}, "module_code": src}


def stage_script(defaults: dict[str, Any], replies: dict[str, Any]) -> ScriptedModel:
    """A model answering each stage (``stage_of`` the prompt) from its own list, ``replies`` before
    ``defaults``; a stage's last answer repeats. A list is a stage's answers in order, anything else
    its one answer; an answer that is not text is sent as JSON."""
    queues = {
        stage: list(items) if isinstance(items, list) else [items] for stage, items in {**defaults, **replies}.items()
    }

    def answer(messages: list[dict], _tools: Any) -> str:
        queue = queues[stage_of(messages)]
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        return item if isinstance(item, str) else json.dumps(item)

    return ScriptedModel(answer)


def tool_manager_script(good: str, **replies: Any) -> ScriptedModel:
    """A tool manager's model: it needs count_vowels, specifies it, writes ``good`` and ``TESTS``, and
    fixes to ``good``; ``replies`` replace a stage's answers (see ``stage_script``)."""
    defaults = {
        "assess_tool_need": NEED,
        "tool_spec": {"tool_creation_specs": [SPEC]},
        "tool_code": code_answer(good),
        "tool_tests": {"tests": TESTS},
        "tool_fix": {"module_code": good},
    }
    return stage_script(defaults, replies)
