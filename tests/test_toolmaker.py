"""The tool manager (issue 6): reuse / native / create → validate in the confined sandbox → register
or fix or discard, vacuous tests, bad generated code, name collisions, malformed model output,
approval mode, and the guarantee that generated code never runs in this process before it passed.

Every model is a ``ScriptedModel`` that answers by the stage of the prompt (``stage_of``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from vowel_tool_script import COUNT_AEIOU, NEED, SPEC, TESTS, code_answer, tool_manager_script, vowel_module

from tea_notebook.errors import EvolutionError, TeaError
from tea_notebook.evolve.llm import stage_of
from tea_notebook.evolve.stats import tool_stats
from tea_notebook.evolve.toolmaker import ToolMaker
from tea_notebook.models.offline import ScriptedModel

pytestmark = pytest.mark.usefixtures("warm_litellm")


# -- the scripted material (the module, tests, need and spec: vowel_tool_script) ----------------------
def module(body: str = COUNT_AEIOU, *, top: str = "") -> str:
    """A count_vowels module that imports os and runs ``top`` before the function."""
    return vowel_module(body, header=f"import os\n{top}\n\n")


GOOD = module()
BAD = module('return sum(1 for ch in text.lower() if ch in "aei")')  # 'queue' -> 2, not 4
WITH_Y = module('return sum(1 for ch in text.lower() if ch in "aeiouy")')  # a different behaviour, v2

TESTS_WITH_Y = TESTS.replace('count_vowels("sky") == 0', 'count_vowels("sky") == 1')
NO_ASSERT = """from count_vowels import count_vowels


def test_runs():
    count_vowels("banana")
"""
CONSTANT_ASSERT = """from count_vowels import count_vowels


def test_truth():
    count_vowels("banana")
    assert True
"""
CONSTANT_PASSES = """from count_vowels import count_vowels


def test_banana():
    assert count_vowels("banana") == 3
"""
SECOND_EXAMPLE_ONLY = CONSTANT_PASSES.replace('count_vowels("banana") == 3', 'count_vowels("queue") == 4')

SPEC_WITH_Y = {
    **SPEC,
    "tool_description": "Count the vowels (a, e, i, o, u and y) in a text.",
    "examples": [{"input": {"text": "sky"}, "output": 1}, {"input": {"text": "queue"}, "output": 4}],
}
TASK = "count the vowels in a word"


def code(src: str, name: str = "count_vowels") -> str:
    return json.dumps(code_answer(src, name))


def reply_tests(src: str) -> str:
    return json.dumps({"tests": src})


def fix(src: str) -> str:
    return json.dumps({"module_code": src})


def scripted(**replies: Any) -> ScriptedModel:
    """A model answering each stage from its own list; the last answer of a stage repeats."""
    return tool_manager_script(GOOD, **replies)


def prompts(model: ScriptedModel, stage: str) -> list[list[dict]]:
    """The message lists the model received for one stage, in order."""
    return [m for m in model.calls if stage_of(m) == stage]


def stages(model: ScriptedModel) -> list[str]:
    return [stage_of(m) for m in model.calls]


def events(ws, kind: str) -> list[dict]:
    ws.events.flush()
    return [json.loads(d) for _r, _k, _t, d in ws.db.events_of_type([kind])]


def actions(ws, run_id: str) -> list[tuple[str, bool]]:
    """(stage name, ok) of every step of a tool-manager run."""
    return [(s.actions[0]["name"], s.actions[0]["ok"]) for s in ws.trajectory(run_id).steps]


def vowels(ws, text: str) -> Any:
    result = ws.tools.invoke("count_vowels", {"text": text})
    assert result.ok, result.error
    return result.value


# -- reuse, native ----------------------------------------------------------------------------------
def test_reuse_instead_of_create(ws):
    @ws.tools.tool
    def count_vowels(text: str) -> int:
        """Count the vowels in a text."""
        return sum(ch in "aeiou" for ch in text)

    unknown = dict(NEED, need_creation=False, matching_tools=["vowel_counter"], missing_tools=[])
    reuse = dict(NEED, need_creation=False, matching_tools=["count_vowels"], missing_tools=[])
    m = scripted(assess_tool_need=[json.dumps(unknown), json.dumps(reuse)])
    creation = ws.tools.create(TASK, model=m.name)

    assert creation.status == "reused" and creation.reused == ["count_vowels"]
    assert creation.tool is None and creation.candidates == []
    assert stages(m) == ["assess_tool_need", "assess_tool_need"]  # nothing was specified or written
    first = prompts(m, "assess_tool_need")[0]
    assert "- count_vowels: Count the vowels in a text." in first[1]["content"]  # retrieval fed the prompt
    assert "unknown: ['vowel_counter']" in prompts(m, "assess_tool_need")[1][-1]["content"]  # a made-up name
    assert ws.tools.get("count_vowels").version == 1 and ws.tools.get("count_vowels").origin == "python"
    assert [e["tool"] for e in events(ws, "tool_reused")] == ["count_vowels"]
    assert events(ws, "tool_created") == []
    stats = tool_stats(ws)
    assert stats.reuse_decisions == 1 and stats.created == 0
    assert [a for a, _ in actions(ws, creation.run_id)] == ["retrieve_tools", "assess_tool_need"]


def test_native_needs_no_tool(ws):
    native = dict(NEED, need_creation=False, matching_tools=[], missing_tools=[])
    m = scripted(assess_tool_need=json.dumps(native))
    creation = ws.tools.create("summarise this paragraph in one sentence", model=m.name)
    assert creation.status == "native" and creation.reused == [] and creation.candidates == []
    assert len(ws.tools) == 0 and stages(m) == ["assess_tool_need"]
    assert events(ws, "tool_reused") == [] and tool_stats(ws).reuse_decisions == 0
    assert ws.db.run_row(creation.run_id)["status"] == "success"


# -- create → register, fix, discard ----------------------------------------------------------------
def test_create_pass_register(ws):
    m = scripted()
    creation = ws.tools.create(TASK, model=m.name)

    assert creation.status == "registered", creation.summary()
    cand = creation.candidates[0]
    assert cand.first_pass is True and cand.fix_iterations == 0
    assert "tool_fix" not in stages(m)
    tool = ws.tools.get("count_vowels")
    assert tool.origin == "generated" and tool.version == 1 and tool.source == GOOD
    assert tool.parameters["required"] == ["text"]
    prov = tool.metadata["provenance"]
    assert prov["run"] == creation.run_id and prov["model"] == m.name and prov["tests"] == TESTS
    assert prov["first_pass"] is True and prov["fix_iterations"] == 0 and prov["approved_by"] == "auto"
    assert "passed" in prov["test_output"] and "ok   test_counts" in prov["test_output"]
    assert "ok   test_rejects_non_text" in prov["test_output"]
    passed = ws.trajectory(creation.run_id).steps[prov["step"] - 1].actions[0]  # the step it passed at
    assert passed["name"] == "validate" and passed["ok"] and passed["observation"] == prov["test_output"]
    assert vowels(ws, "education") == 5 and vowels(ws, "rhythm") == 0
    assert not ws.tools.invoke("count_vowels", {"text": 3}).ok  # schema-checked
    [made] = events(ws, "tool_created")
    assert made == {**made, "tool": "count_vowels", "version": 1, "first_pass": True, "fix_iterations": 0}
    stats = tool_stats(ws)
    assert (stats.created, stats.discarded, stats.first_pass_validity, stats.mean_fix_iterations) == (1, 0, 1.0, 0.0)
    assert ws.db.run_row(creation.run_id)["status"] == "success"
    # the code prompt carried the specification
    code_prompt = prompts(m, "tool_code")[0][1]["content"]
    assert "Tool name (use exactly): count_vowels" in code_prompt and "Step 2: count a, e, i, o, u" in code_prompt


def test_code_prompt_is_grounded_on_tool_experience(ws):
    ws.experiences.add(
        kind="tool",
        title="How to count vowels in a text exactly",
        description="Count vowels case-insensitively; reject non-string input with ValueError.",
        use_cases=["counting vowels in words"],
        content="Lower-case the text first, then count the characters in 'aeiou'.",
        source_run="run-0",
        outcome="success",
    )
    m = scripted()
    assert ws.tools.create(TASK, model=m.name).status == "registered"
    prompt = prompts(m, "tool_code")[0][1]["content"]
    assert "How to count vowels in a text exactly" in prompt and "Lower-case the text first" in prompt


def test_create_fail_fix_pass(ws):
    m = scripted(tool_code=code(BAD), tool_fix=fix(GOOD))
    creation = ws.tools.create(TASK, model=m.name)

    assert creation.status == "registered", creation.summary()
    cand = creation.candidates[0]
    assert cand.first_pass is False and cand.fix_iterations == 1
    assert ws.tools.get("count_vowels").source == GOOD and vowels(ws, "queue") == 4
    prov = ws.tools.get("count_vowels").metadata["provenance"]
    assert prov["first_pass"] is False and prov["fix_iterations"] == 1
    [fix_prompt] = prompts(m, "tool_fix")
    assert "returned 2, expected 4" in fix_prompt[1]["content"] and BAD in fix_prompt[1]["content"]
    steps = actions(ws, creation.run_id)
    assert steps[-5:] == [
        ("write_tests", True),
        ("validate", False),
        ("fix_code", True),
        ("validate", True),
        ("register", True),
    ]
    assert [a for a, _ in steps[:5]] == [
        "retrieve_tools",
        "assess_tool_need",
        "tool_spec",
        "retrieve_experience",
        "write_code",
    ]
    text = ws.trajectory(creation.run_id).text()
    assert "count_vowels(**{'text': 'queue'}) returned 2, expected 4" in text
    stats = tool_stats(ws)
    assert stats.first_pass_validity == 0.0 and stats.mean_fix_iterations == 1.0


def test_create_fail_discard_after_bound(ws):
    m = scripted(tool_code=code(BAD), tool_fix=fix(BAD))
    creation = ToolMaker(ws, model=m.name, max_fixes=2).create(TASK)

    assert creation.status == "discarded" and creation.tool is None
    cand = creation.candidates[0]
    assert cand.fix_iterations == 2 and cand.first_pass is False
    assert cand.reason.startswith("still failing after 2 fixes") and "expected 4" in cand.reason
    assert len(prompts(m, "tool_fix")) == 2
    assert "count_vowels" not in ws.tools and len(ws.tools) == 0
    [gone] = events(ws, "tool_discarded")
    assert gone["tool"] == "count_vowels" and gone["reason"] == cand.reason and gone["fix_iterations"] == 2
    assert [a for a, ok in actions(ws, creation.run_id) if a in ("validate", "discard")] == [
        "validate",
        "validate",
        "validate",
        "discard",
    ]
    assert ws.db.run_row(creation.run_id)["status"] == "failed"
    stats = tool_stats(ws)
    assert (stats.created, stats.discarded, stats.mean_fix_iterations) == (0, 1, 2.0)


# -- vacuous tests ------------------------------------------------------------------------------------
def test_vacuous_tests_are_sent_back(ws):
    sequence = [NO_ASSERT, CONSTANT_ASSERT, CONSTANT_PASSES, SECOND_EXAMPLE_ONLY, TESTS]
    m = scripted(tool_tests=[reply_tests(t) for t in sequence])
    creation = ws.tools.create(TASK, model=m.name)

    assert creation.status == "registered", creation.summary()
    asked = prompts(m, "tool_tests")
    assert len(asked) == 5
    assert "test_runs asserts nothing" in asked[1][-1]["content"]
    assert "test_truth only asserts a constant" in asked[2][-1]["content"]
    # the third passes against a function that always returns the first example's output (3),
    # the fourth against one that always returns the second example's (4)
    assert "Your previous tests were rejected" not in asked[2][1]["content"]
    assert (
        "always returns 3" in asked[3][1]["content"] and "Your previous tests were rejected" in asked[3][1]["content"]
    )
    assert "always returns 4" in asked[4][1]["content"]
    assert creation.candidates[0].tests == TESTS
    assert ws.tools.get("count_vowels").metadata["provenance"]["tests"] == TESTS
    rejected = [(a, ok) for a, ok in actions(ws, creation.run_id) if a in ("reject_tests", "write_tests")]
    assert rejected == [("reject_tests", False), ("reject_tests", False), ("write_tests", True)]


def test_tests_vacuous_every_time_discard(ws):
    m = scripted(tool_tests=reply_tests(CONSTANT_PASSES))
    creation = ToolMaker(ws, model=m.name, retries=1).create(TASK)
    assert creation.status == "discarded" and "rejected as vacuous" in creation.candidates[0].reason
    assert len(ws.tools) == 0 and "tool_fix" not in stages(m)


# -- bad generated code, caught in the sandbox ---------------------------------------------------------
BAD_CODE = {
    "syntax": (
        module().replace("def count_vowels(text: str) -> int:", "def count_vowels(text: str) -> int"),
        "SyntaxError",
    ),
    "missing_import": (module(top="import tea_no_such_package_xyz"), "No module named 'tea_no_such_package_xyz'"),
    "infinite_loop": (module("while True:\n        pass"), "the tool did not answer within 2 s and was stopped"),
    "network": (
        module('import socket\n    socket.create_connection(("93.184.216.34", 80), timeout=1)\n    return 0'),
        "network access is not permitted",
    ),
    "file_outside": (module('return len(open("/etc/passwd").read())'), "reading /etc/passwd is not permitted"),
}


@pytest.mark.parametrize("kind", list(BAD_CODE))
def test_bad_code_caught_fed_to_fix_then_discarded(ws, kind):
    source, failure = BAD_CODE[kind]
    m = scripted(tool_code=code(source), tool_fix=fix(source))
    creation = ToolMaker(ws, model=m.name, timeout=2, max_fixes=1).create(TASK)

    assert creation.status == "discarded"
    cand = creation.candidates[0]
    assert cand.fix_iterations == 1 and cand.first_pass is False
    [fix_prompt] = prompts(m, "tool_fix")
    assert failure in fix_prompt[1]["content"]  # the sandbox's failure reached the model
    assert cand.reason.startswith("still failing after 1 fixes") and failure in cand.reason
    assert [e["reason"] for e in events(ws, "tool_discarded")] == [cand.reason]
    assert len(ws.tools) == 0


# -- collisions and rollback ----------------------------------------------------------------------------
def test_name_collision_new_version_and_rollback(ws):
    first = ws.tools.create(TASK, model=scripted().name)
    assert first.tool.version == 1 and vowels(ws, "sky") == 0  # v1 is loaded in this process now

    m = scripted(tool_code=code(WITH_Y), tool_tests=reply_tests(TESTS_WITH_Y))
    second = ws.tools.create(SPEC_WITH_Y, model=m.name)
    assert second.status == "registered" and second.tool.version == 2
    assert [v.version for v in ws.tools.versions("count_vowels")] == [1, 2]
    assert ws.tools.get("count_vowels", 1).source == GOOD  # the old one is kept
    assert "a new version" in ws.trajectory(second.run_id).text()
    assert vowels(ws, "sky") == 1  # the new behaviour, not the cached old one

    ws.tools.rollback("count_vowels", 1)
    assert ws.tools.get("count_vowels").version == 1 and vowels(ws, "sky") == 0
    ws.tools.rollback("count_vowels", 2)
    assert vowels(ws, "sky") == 1
    assert tool_stats(ws).created == 1 and tool_stats(ws).versions == 2


def test_generated_version_over_a_hand_written_tool_rolls_back(ws):
    @ws.tools.tool
    def count_vowels(text: str) -> int:
        """Count the vowels in a text (hand-written: -1 marks it)."""
        return -1

    assert vowels(ws, "sky") == -1
    m = scripted(tool_code=code(WITH_Y), tool_tests=reply_tests(TESTS_WITH_Y))
    creation = ws.tools.create(SPEC_WITH_Y, model=m.name)
    assert creation.tool.version == 2 and ws.tools.get("count_vowels").origin == "generated"
    assert vowels(ws, "sky") == 1
    ws.tools.rollback("count_vowels", 1)
    assert ws.tools.get("count_vowels").origin == "python" and vowels(ws, "sky") == -1


# -- malformed model output ------------------------------------------------------------------------------
def test_malformed_json_retried_with_the_problem(ws):
    m = scripted(tool_code=["```python\nprint('no json')\n```", code(GOOD, name="vowels"), code(GOOD)])
    creation = ws.tools.create(TASK, model=m.name)
    assert creation.status == "registered"
    asked = prompts(m, "tool_code")
    assert len(asked) == 3
    assert "the answer contains no JSON object" in asked[1][-1]["content"]
    assert "'name' must be exactly 'count_vowels'" in asked[2][-1]["content"]
    assert asked[2][-2] == {"role": "assistant", "content": code(GOOD, name="vowels")}
    problems = [e["message"] for e in events(ws, "error") if e.get("kind") == "model_output"]
    assert problems == ["the answer contains no JSON object", "'name' must be exactly 'count_vowels'"]


def test_malformed_spec_is_a_clear_failure(ws):
    m = scripted(tool_spec=['{"tool_creation_specs": [{"tool_name": }]}', "not json at all"])
    with pytest.raises(EvolutionError) as caught:
        ToolMaker(ws, model=m.name, retries=2).create(TASK)
    assert caught.value.stage == "tool_spec" and "after 3 attempts" in str(caught.value)
    asked = prompts(m, "tool_spec")
    assert len(asked) == 3 and "the JSON is not valid" in asked[1][-1]["content"]
    assert "contains no JSON object" in asked[2][-1]["content"]
    assert len(ws.tools) == 0 and "tool_code" not in stages(m)
    [row] = ws.db.runs()
    assert row["status"] == "error"


@pytest.mark.parametrize("stage", ["tool_code", "tool_tests", "tool_fix"])
def test_malformed_code_tests_fix_discarded_nothing_registered(ws, stage):
    replies = {stage: "{'module_code': 'single quotes are not JSON'}"}
    if stage == "tool_fix":
        replies["tool_code"] = code(BAD)
    m = scripted(**replies)
    creation = ToolMaker(ws, model=m.name, retries=1).create(TASK)

    assert creation.status == "discarded" and creation.tool is None
    cand = creation.candidates[0]
    assert cand.reason.startswith(f"{stage}: no usable answer after 2 attempts")
    asked = prompts(m, stage)
    assert len(asked) == 2 and "the JSON is not valid" in asked[1][-1]["content"]
    assert len(ws.tools) == 0 and [e["tool"] for e in events(ws, "tool_discarded")] == ["count_vowels"]


def test_bad_spec_dict_is_refused_before_anything_runs(ws):
    with pytest.raises(EvolutionError, match="tool_name"):
        ws.tools.create({"tool_description": "no name"}, model=scripted().name)
    with pytest.raises(EvolutionError, match="examples"):
        ws.tools.create({**SPEC, "examples": [{"output": 3}]}, model=scripted().name)
    assert ws.db.runs() == [] and len(ws.tools) == 0


# -- approval mode ----------------------------------------------------------------------------------------
def test_approval_accept(ws):
    m = scripted()
    creation = ToolMaker(ws, model=m.name, approval="manual").create(TASK)
    assert creation.status == "pending" and "count_vowels" not in ws.tools
    assert actions(ws, creation.run_id)[-1] == ("await_approval", True)
    cand = creation.candidates[0]
    record = cand.accept()
    assert record.version == 1 and creation.status == "registered" and cand.status == "registered"
    assert record.metadata["provenance"]["approved_by"] == "person"
    assert record.metadata["provenance"]["run"] == creation.run_id
    assert vowels(ws, "education") == 5
    with pytest.raises(TeaError, match="not waiting for approval"):
        cand.accept()


def test_approval_reject(ws):
    creation = ToolMaker(ws, model=scripted().name, approval="manual").create(TASK)
    cand = creation.candidates[0]
    cand.reject("counting y as a vowel is wanted")
    assert cand.status == "discarded" and cand.reason == "counting y as a vowel is wanted"
    assert creation.status == "discarded" and len(ws.tools) == 0
    [gone] = events(ws, "tool_discarded")
    assert gone["reason"] == "counting y as a vowel is wanted"
    with pytest.raises(TeaError):
        cand.accept()


def test_approval_edit_revalidates(ws):
    creation = ToolMaker(ws, model=scripted().name, approval="manual").create(TASK)
    cand = creation.candidates[0]
    with pytest.raises(EvolutionError, match="expected 4"):
        cand.edit(BAD)
    assert len(ws.tools) == 0 and cand.status == "pending"
    assert cand.code == GOOD  # the failed edit did not replace the validated code

    edited = GOOD.replace('"""Count the vowels in a text."""', '"""Count the vowels (edited)."""')
    assert cand.edit(edited) is cand and cand.status == "pending" and len(ws.tools) == 0
    record = cand.accept()
    assert record.source == edited and "(edited)" in record.source and vowels(ws, "queue") == 4
    assert "passed" in record.metadata["provenance"]["test_output"]


def test_failed_edit_then_accept_registers_the_validated_code(ws):
    creation = ToolMaker(ws, model=scripted().name, approval="manual").create(TASK)
    cand = creation.candidates[0]
    with pytest.raises(EvolutionError):
        cand.edit(module(top="import tea_no_such_package_xyz"))
    assert cand.accept().source == GOOD and vowels(ws, "queue") == 4


# -- generated code never runs here before it has passed ----------------------------------------------------
def test_top_level_side_effects_stay_in_the_sandbox(ws, tmp_path):
    import tea_notebook.envs.browser as browser

    marker = tmp_path / "marker.txt"  # absolute, outside the sandbox's folder
    launch_args = list(browser.LAUNCH_ARGS)
    os.environ.pop("TEA_TM_SIDE_EFFECT", None)

    # 1. a file written outside: refused by the sandbox, fed to the fix loop, discarded
    writes = module(top=f"open({str(marker)!r}, 'w').write('ran')")
    m = scripted(tool_code=code(writes), tool_fix=fix(writes))
    refused = ToolMaker(ws, model=m.name, max_fixes=1).create(TASK)
    assert refused.status == "discarded" and not marker.exists()
    assert f"writing {marker} is not permitted" in prompts(m, "tool_fix")[0][1]["content"]
    assert f"writing {marker} is not permitted" in refused.candidates[0].reason

    # 2. an environment variable, 3. a module-level list of a module this process has imported, and
    # 4. a file in its own folder: the code runs in a process of its own inside the sandbox, so the
    # tests (in the harness's process) see only the file; it passes and is registered, and this
    # process is untouched, because registering does not import it
    effects = module(
        top=(
            "os.environ['TEA_TM_SIDE_EFFECT'] = 'ran'\n"
            "import tea_notebook.envs.browser as _browser\n"
            "_browser.LAUNCH_ARGS.append('--tea-generated-was-here')\n"
            "open('imported.txt', 'w').write('ran')"
        )
    )
    seen_inside = (
        TESTS
        + """

def test_the_effects_stayed_in_the_tool_process():
    import os
    import tea_notebook.envs.browser as b
    assert os.environ.get("TEA_TM_SIDE_EFFECT") is None
    assert "--tea-generated-was-here" not in b.LAUNCH_ARGS
    assert open("imported.txt").read() == "ran"
"""
    )
    m = scripted(tool_code=code(effects), tool_tests=reply_tests(seen_inside))
    pending = ToolMaker(ws, model=m.name, approval="manual").create(TASK)
    assert pending.status == "pending", pending.summary()
    assert "ok   test_the_effects_stayed_in_the_tool_process" in pending.candidates[0].test_output
    assert "TEA_TM_SIDE_EFFECT" not in os.environ and browser.LAUNCH_ARGS == launch_args
    pending.candidates[0].accept()
    assert "TEA_TM_SIDE_EFFECT" not in os.environ and browser.LAUNCH_ARGS == launch_args
    assert "tea_tools.count_vowels" not in sys.modules and not marker.exists()


def test_failing_code_is_never_loaded_here(ws, tmp_path):
    """A module whose function is wrong and whose top level would leave traces here is discarded
    without any of its lines running in this process."""
    import tea_notebook.envs.browser as browser

    launch_args = list(browser.LAUNCH_ARGS)
    os.environ.pop("TEA_TM_SIDE_EFFECT", None)
    traced = module(
        'return sum(1 for ch in text.lower() if ch in "aei")',
        top=(
            "os.environ['TEA_TM_SIDE_EFFECT'] = 'ran'\n"
            "import tea_notebook.envs.browser as _browser\n"
            "_browser.LAUNCH_ARGS.append('--tea-generated-was-here')"
        ),
    )
    m = scripted(tool_code=code(traced), tool_fix=fix(traced))
    creation = ToolMaker(ws, model=m.name, max_fixes=1).create(TASK)
    assert creation.status == "discarded" and "expected 4" in creation.candidates[0].reason  # it did run, there
    assert "TEA_TM_SIDE_EFFECT" not in os.environ and browser.LAUNCH_ARGS == launch_args
    assert not ws.tools.invoke("count_vowels", {"text": "a"}).ok


# -- a ready spec --------------------------------------------------------------------------------------------
def test_ready_spec_skips_assessment(ws):
    m = scripted()
    creation = ws.tools.create(SPEC, model=m.name)
    assert creation.status == "registered" and creation.need == {}
    assert stages(m) == ["tool_code", "tool_tests"]
    assert [a for a, _ in actions(ws, creation.run_id)][:2] == ["retrieve_experience", "write_code"]
    assert ws.db.run_row(creation.run_id)["task"].startswith("count_vowels: Count the vowels")
    assert ws.tools.get("count_vowels").description == SPEC["tool_description"]
    assert vowels(ws, "queue") == 4


def test_no_model_configured_is_a_clear_error_before_anything_runs(ws, monkeypatch):
    from tea_notebook.errors import EvolutionError
    from tea_notebook.evolve.loop import Mem2Evolve

    monkeypatch.delenv("TEA_MODEL", raising=False)
    with pytest.raises(EvolutionError, match="tool manager: needs a model .*TEA_MODEL"):
        ws.tools.create("count the vowels in a word")
    with pytest.raises(EvolutionError, match="mem2evolve: needs a model"):
        Mem2Evolve(ws).run("How many vowels are in 'banana'?")
    assert ws.runs() == [] and "count_vowels" not in ws.tools
