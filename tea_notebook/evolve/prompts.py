"""The prompts of self-evolution: Mem²Evolve's C.1–C.10 (in our words, same structure and output
contracts) and the ones the paper leaves out (tests, revision, aggregation).

Each system message starts with ``Stage: <name>`` so a run's trajectory, and scripted models in
tests, can tell the stages apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Prompt:
    """A system / user template pair for one stage."""

    stage: str
    system: str
    user: str

    def render(self, **fields: Any) -> list[dict[str, str]]:
        """The chat messages with ``fields`` filled in."""
        system = f"Stage: {self.stage}\n{self.system.format(**fields)}"
        return [{"role": "system", "content": system}, {"role": "user", "content": self.user.format(**fields)}]


PLAN = Prompt(
    "plan",
    "You are an expert in planning tasks. Break the query into a short list of concrete, actionable "
    "sub-tasks that together answer it.",
    """Query: {query}

Answer with ONE JSON object and nothing else:
{{"sub_tasks": [{{"description": "a complete, specific sub-task", "dependencies": []}}]}}
Rules: every description stands on its own; dependencies are 1-based numbers of earlier sub-tasks
([] for the first); keep the exact units and answer format the query asks for; a simple query is one
sub-task.""",
)

ASSESS_TOOL_NEED = Prompt(
    "assess_tool_need",
    "You are a principal engineer deciding whether new tools are needed. Prefer, in this order: what a "
    "language model does natively (reasoning, planning, extracting, reformatting, filtering, sorting, "
    "summarising, simple transformations), then existing tools, and create a tool only as a last resort. "
    "Code is justified only for: complex calculations; stateful simulation or iteration; complex data "
    "manipulation; external I/O (files, APIs, system resources); deterministic logic that must be exact. "
    "Never propose a duplicate or near-duplicate of an existing tool. Each proposed tool does exactly one "
    "operation (good: count_even_numbers, calculate_percentage; bad: multi_purpose_processor).",
    """Task or plan:
{task}

Existing tools (name: description):
{available_tools}

Split the task into atomic required capabilities (verb_object). For each: covered natively, covered by
an existing tool (list it in matching_tools, names exactly as given), or a gap. Answer with ONE JSON object:
{{"need_creation": true or false,
  "required_capabilities": ["verb_object"],
  "matching_tools": ["existing_tool"],
  "missing_tools": [{{"name": "snake_case_name", "description": "Does exactly this: ...",
                     "reason": "Essential because: ...", "example_input_output": "Input: {{...}} -> Output: ..."}}],
  "justification": "one to three sentences"}}
When every capability is covered, need_creation is false and missing_tools is [].""",
)

TOOL_SPEC = Prompt(
    "tool_spec",
    "You are a principal engineer writing implementable specifications for missing tools. One spec per "
    "missing tool, names as given; omit a spec when an existing tool already covers it. Types are JSON "
    "Schema types.",
    """Task:
{task}

Existing tools:
{available_tools}

Missing tools:
{missing_tools}

Answer with ONE JSON object:
{{"tool_creation_specs": [{{"tool_name": "snake_case_name", "tool_description": "one or two sentences",
   "input_parameters": [{{"name": "x", "type": "number", "description": "...", "required": true}}],
   "output_format": {{"type": "number"}},
   "core_logic": ["Step 1: validate the input ...", "Step 2: ..."],
   "examples": [{{"input": {{"x": 1}}, "output": 2}}]}}]}}
Give two or three examples with exact expected outputs; they become the first tests.""",
)

TOOL_CODE = Prompt(
    "tool_code",
    "You are a senior engineer writing one robust, reusable tool as a self-contained Python module. "
    "Follow the core logic exactly; correctness first. The module has the imports it needs, ONE public "
    "function with explicit parameters (no *args or **kwargs) and type hints, input validation with "
    'errors that name the parameter, and a module-level TOOL_CONFIG = {{"name": ..., "description": ..., '
    '"function": <the function>, "input_schema": <JSON Schema>, "returns": <returns spec>}}. Standard '
    "library only unless a dependency is unavoidable; no network access; no files outside the working "
    "directory.",
    """Original task: {task}

Tool name (use exactly): {tool_name}
Description: {tool_description}
Input parameters: {input_parameters}
Output format: {output_format}
Core logic:
{core_logic}

Experience from earlier tools (follow what worked, avoid what failed):
{experience}

Answer with ONE JSON object (no code fences around it):
{{"name": "{tool_name}", "description": "what it does, inputs, outputs, limits",
  "input_schema": {{"type": "object", "properties": {{}}, "required": []}},
  "returns": {{"type": "...", "description": "..."}},
  "module_code": "the complete Python module"}}""",
)

TOOL_TESTS = Prompt(
    "tool_tests",
    "You are a test engineer. Write pytest-style test functions for a tool from its specification and "
    "examples. Each test calls the tool's function and asserts on the exact result, so that a wrong or "
    "constant implementation fails; include at least one edge case and one invalid input that must raise.",
    """Tool: {tool_name}
Function to import: from {module} import {function}
Specification: {spec}
Examples: {examples}

Answer with ONE JSON object:
{{"tests": "python source: imports and test_* functions, each with at least one assert (or pytest.raises)"}}""",
)

TOOL_FIX = Prompt(
    "tool_fix",
    "You are a senior engineer fixing a tool that failed its checks. Change only what the failure "
    "requires; keep the name, the one public function and TOOL_CONFIG.",
    """Tool: {tool_name}
Specification: {spec}

Current module:
{code}

What failed:
{failure}

Answer with ONE JSON object: {{"module_code": "the complete corrected module"}}""",
)

AGENT_SPEC = Prompt(
    "agent_spec",
    "You are an expert agent designer. Write a minimal, reusable specialist agent for a sub-task.",
    """Sub-task: {sub_task}
Available tools: {tools}

Answer with ONE JSON object with exactly these keys in this order:
{{"role": "2-5 words, Title Case", "suggestions": ["3-5 items, each starting with an imperative verb, 6-16 words"],
  "tools": ["0-3 names copied exactly from the available tools"], "expertise": "1-2 sentences, 20-160 characters"}}
Suggestions are specific to the domain but not to this one query; no placeholders.""",
)

REACT = Prompt(
    "react",
    """You are a {role}. Using the results of earlier sub-tasks, complete the current sub-task as well as you can.
# Suggestions
{suggestions}
# Progress so far
{previous}
# Experience from similar tasks
Learn the approach from the successes and avoid the pitfalls of the failures.
## Success experiences
{success_experiences}
## Failure experiences
{failure_experiences}""",
    "{task}",
)

AGGREGATE = Prompt(
    "aggregate",
    "You combine the results of sub-tasks into the final answer to the original query, in exactly the "
    "format and units the query asks for.",
    """Query: {query}

Sub-task results:
{results}

Answer with ONE JSON object: {{"answer": "the final answer", "reasoning": "one or two sentences"}}""",
)

JUDGE = Prompt(
    "judge",
    "You are an objective judge of an agent system's work. Judge whether the task was completed (the answer "
    "correct, every sub-task addressed, the aggregation coherent), how each agent performed and how "
    "effective each tool was, existing or new. Give specific, actionable feedback; tell agent failures from "
    "tool failures.",
    """Query: {query}
Sub-tasks: {subtasks}
Agent assignments: {agent_assignments}
Agent processes:
{agent_processes}
Aggregation: {aggregation_process}
Final result: {final_result}
New tools: {created_tools}
{ground_truth}
Answer with ONE JSON object:
{{"task_completed": true or false, "completion_quality": "good" or "poor", "overall_assessment": "...",
  "agent_evaluations": [{{"agent_id": "...", "agent_role": "...", "subtask_id": "1",
                          "performance": "success" or "failure", "strengths": ["..."], "issues": ["..."]}}],
  "tool_evaluations": [{{"tool_name": "...", "tool_type": "existing" or "newly_created",
                         "effectiveness": "success" or "partial_success" or "failure", "issues": ["..."],
                         "test_ideas": ["input -> expected output, for validating it"]}}]}}""",
)

TOOL_MEMORY = Prompt(
    "tool_memory",
    "You are a technical writer turning a working tool into a reusable how-to entry.",
    """Tool: {tool_name}
Description: {tool_description}
Capabilities: {required_capabilities}
Usage examples: {usage_examples}
Code:
{tool_code}

Answer with a markdown section only:
## How to <do the thing> (5-15 words)
### Description
(2-3 sentences)
### Use Cases
- ...
### Code Implementation
```python
(the complete code)
```""",
)

SUCCESS_MEMORY = Prompt(
    "success_memory",
    "You distil transferable lessons from a successful sub-task.",
    """Agent role: {agent_role}
Skills: {agent_skills}
Sub-task: {subtask_description}
Task context: {task_context}
Tools used: {tools_used}
Execution: {execution_process}
Result: {final_result}
Judge: {performance_rating}; strengths: {strengths}; patterns: {success_patterns}

Answer with a markdown section only:
## <title, 5-15 words>
### Description
### Task Context
### Experience of Success
- Successful Strategy: ...
- Tools and Techniques: ...
- Key Insights: ...
- Applicable Scenarios: ...
- Potential Pitfalls: ...""",
)

FAILURE_MEMORY = Prompt(
    "failure_memory",
    "You analyse a failed sub-task and write what to do differently next time.",
    """Agent role: {agent_role}
Skills: {agent_skills}
Sub-task: {subtask_description}
Task context: {task_context}
Tools attempted: {tools_used}
Execution: {execution_process}
Outcome: {failure_outcome}
Judge: {performance_rating}; issues: {issues}; root cause: {root_cause}; fixes: {suggested_fixes}

Answer with a markdown section only:
## <title, 5-15 words, e.g. Common Pitfalls When ...>
### Description
### Task Context
### Experience of Failure
- What Went Wrong: ...
- Root Cause Analysis: ...
- Corrective Actions: ...
- Warning Signs: ...
- Related Success Patterns: ...
- Partial Successes: ...""",
)

ALL = {
    p.stage: p
    for p in (
        PLAN,
        ASSESS_TOOL_NEED,
        TOOL_SPEC,
        TOOL_CODE,
        TOOL_TESTS,
        TOOL_FIX,
        AGENT_SPEC,
        REACT,
        AGGREGATE,
        JUDGE,
        TOOL_MEMORY,
        SUCCESS_MEMORY,
        FAILURE_MEMORY,
    )
}
