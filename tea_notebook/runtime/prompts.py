"""Prompt assembly for the tool-calling agent, following AgentOrchestra's App. I template.

Each step's prompt is rebuilt from state (not an ever-growing chat): the system prompt, then one
user message with ``<agent_state>`` (step info, task, history, todo), ``<environment_state>`` and
``<tool_state>``. Older steps are folded into summaries, so the prompt stays bounded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tea_notebook.runtime.steps import StepRecord

SYSTEM_PROMPT = """You are an AI agent that operates in iterative steps and uses registered tools to accomplish the user's task. Your goals are to solve the task accurately, safely, and efficiently.

<intro>
You excel at: 1. Selecting the right tool for each subtask 2. Executing multi-step plans reliably 3. Managing files and data within the provided working directory 4. Avoiding unnecessary actions and minimizing cost/latency 5. Providing clear, helpful final answers.
</intro>
<language_settings>Default working language: English. Always respond in the same language as the user request.</language_settings>
<inputs>At every step you receive <agent_state> (step_info, task, agent_history, todo_contents), <environment_state> and <tool_state> (available_actions).</inputs>
<task_rules>
The TASK always remains visible and has the highest priority.
You must call the 'done' action when you have fully completed the TASK, when you reach the final allowed step (max_steps) even if the task is incomplete, or if it is ABSOLUTELY IMPOSSIBLE to continue.
Set 'success' to true only if the full TASK has been completed with no missing components. Put ALL the relevant information you found in the 'text' field; list files for the user in 'files_to_display'.
You are ONLY ALLOWED to call 'done' as a single action.
</task_rules>
<agent_history_rules>History is a list of <step_N> blocks with Evaluation of Previous Step, Memory, Next Goal and Action Results, followed by <summaries> and <insights> of older steps.</agent_history_rules>
<todo_rules>For complex or multi-step tasks use the 'todo' tool to keep a plan in todo.md and mark items as you complete them. Simple tasks may skip it.</todo_rules>
<environment_state_rules>Each bound environment contributes <state>, <vision> (when a screenshot exists) and <interaction> rules.
{environments_rules}</environment_state_rules>
<action_rules>You MUST use only the actions in <available_actions>; do not invent actions. Use at most {max_actions} actions per step; they run in order.</action_rules>
<efficiency_guidelines>Combine related actions in one step; use a single action only when the next depends on its result.</efficiency_guidelines>
<reasoning_rules>Reason over the history: judge the last action as success, failure or uncertain; notice when you are stuck repeating actions and try something else; decide what to keep in memory; always compare the trajectory with the user request.</reasoning_rules>
{output_rules}"""

NATIVE_OUTPUT = """<output>Call tools for your actions. In the message text, give a JSON object (no code fences):
{"thinking": "...", "evaluation_previous_goal": "one sentence: success, failure, or uncertain", "memory": "1-3 sentences", "next_goal": "..."}</output>"""

JSON_OUTPUT = """<output>Respond with ONLY this JSON object, no code fences:
{"thinking": "...", "evaluation_previous_goal": "one sentence: success, failure, or uncertain", "memory": "1-3 sentences", "next_goal": "...",
 "action": [{"name": "action_name", "args": {...}}]}
The action list must NEVER be empty.</output>"""

DONE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "success": {"type": "boolean", "description": "True only if the whole task is complete."},
        "text": {"type": "string", "description": "The final answer with everything relevant."},
        "files_to_display": {"type": "array", "items": {"type": "string"}, "default": []},
    },
    "required": ["success", "text"],
    "additionalProperties": False,
}
DONE_TOOL = {
    "type": "function",
    "function": {"name": "done", "description": "Finish the task and report the result.", "parameters": DONE_SCHEMA},
}


def tool_line(tool: dict[str, Any]) -> str:
    """One available action, as the model reads it in JSON mode."""
    fn = tool["function"]
    return json.dumps(
        {"name": fn["name"], "description": fn.get("description", ""), "parameters": fn.get("parameters", {})}
    )


@dataclass(frozen=True)
class Prompt:
    """One step's prompt: the ``messages`` sent, and the user message's text as ``pieces`` whose
    concatenation it is: the step info, the task, the history's heading, each block (the same text
    object step after step: :meth:`StepRecord.render` caches it) and the new lines between them, the
    memory folds, and the rest. The pieces start and end where
    :func:`~tea_notebook.runtime.contexts.split_text` cuts, so what is done to each piece once (the
    stored context's parts, the hash's JSON) is not done again every step: only the first piece (the
    step info) and the last one change from one step to the next, unless the memory is folded."""

    messages: list[dict[str, Any]]
    pieces: tuple[str, ...]


def joins_to(pieces: tuple[str, ...], text: str) -> bool:
    """Whether ``text`` is ``"".join(pieces)`` (a prompt's text and the pieces it was built of)."""
    last = _JOINED[0]  # one pair, replaced whole (a run in another thread may ask at the same time)
    if last[0] is pieces and last[1] is text:  # both immutable: checked already (the stored context asks first)
        return True
    if len(text) != sum(map(len, pieces)) or "".join(pieces) != text:
        return False
    _JOINED[0] = (pieces, text)
    return True


#: the pieces and text :func:`joins_to` found joined last (the stored context and the input hash ask in turn)
_JOINED: list[tuple[tuple[str, ...], str]] = [((), "")]


def build_messages(**kwargs: Any) -> list[dict[str, Any]]:
    """System + user messages for one step (:func:`build_prompt`'s messages)."""
    return build_prompt(**kwargs).messages


@lru_cache(maxsize=64)
def system_text(template: str, environments_rules: str, max_actions: int, native: bool) -> str:
    """The system prompt from its template (made once for a run, then the same text object: what is
    kept of it by its text, the stored context's part and the hash's JSON, is found at once)."""
    return template.format(
        environments_rules=environments_rules,
        max_actions=max_actions,
        output_rules=NATIVE_OUTPUT if native else JSON_OUTPUT,
    )


def build_prompt(
    *,
    task: str,
    files: list[str],
    step: int,
    max_steps: int,
    steps: list[StepRecord],
    summaries: list[str],
    insights: list[str],
    todo: str,
    environments: list[dict[str, str]],
    tools: list[dict[str, Any]],
    max_actions: int,
    native: bool,
    system_prompt: str | None = None,
    final_tool: str = "done",
) -> Prompt:
    """System + user messages for one step, and the user text's pieces (see :class:`Prompt`);
    environment screenshots (``image`` data URLs) are attached to the user message as image parts.
    ``final_tool``: what the last allowed step must call ("" when the agent has no such tool)."""
    env_rules = "\n".join(
        f'<environment name="{e["name"]}"><interaction>{e.get("rules", "")}</interaction></environment>'
        for e in environments
    )
    system = system_text(system_prompt or SYSTEM_PROMPT, env_rules, max_actions, native)
    step_info = f"Step {step} of {max_steps} max possible steps"
    if step >= max_steps:
        step_info += ". This is the FINAL allowed step" + (f": call '{final_tool}' now." if final_tool else ".")
    env_state = "\n".join(
        f'<environment name="{e["name"]}"><state>{e.get("state", "")}</state>'
        + (f"<vision>{e['vision']}</vision>" if e.get("vision") else "")
        + "</environment>"
        for e in environments
    )
    task_text = task + (("\nAttached files (absolute paths): " + ", ".join(files)) if files else "")
    actions = "(offered as callable tools)" if native else "\n".join(tool_line(t) for t in tools)
    # each piece starts at a cut of split_text (and ends with a closing tag, or before a block)
    pieces = [f"<agent_state><step_info>{step_info}</step_info>", f"<task>{task_text}</task>"]
    if steps:
        pieces.append("\n<agent_history>\n")
        blocks = ["\n"] * (2 * len(steps) - 1)  # the blocks, a new line between two
        blocks[::2] = [s.render() for s in steps]
        pieces += blocks
    else:
        pieces.append("\n<agent_history>\n(no steps yet)")
    if summaries:
        pieces.append("\n<summaries>\n" + "\n".join(f"- {s}" for s in summaries) + "\n</summaries>")
    if insights:
        pieces.append("\n<insights>\n" + "\n".join(f"- {s}" for s in insights) + "\n</insights>")
    pieces.append(
        f"\n</agent_history>\n<todo_contents>{todo or '(empty)'}</todo_contents></agent_state>\n"
        f"<environment_state>{env_state or '(none bound)'}</environment_state>\n"
        f"<tool_state><available_actions>{actions}</available_actions></tool_state>"
    )
    user = "".join(pieces)
    system_message = {"role": "system", "content": system}
    images = [e["image"] for e in environments if e.get("image")]
    if images:
        parts = [{"type": "text", "text": user}] + [{"type": "image_url", "image_url": {"url": u}} for u in images]
        return Prompt([system_message, {"role": "user", "content": parts}], tuple(pieces))
    return Prompt([system_message, {"role": "user", "content": user}], tuple(pieces))
