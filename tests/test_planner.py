"""The planning agent: the todo tool and its two-way todo.md, sub-agents offered as tools (A2T),
concurrent delegation, nested runs, per-agent models. Models are scripted (no LLM, no network)."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import json  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
from prompt_parts import section, user_text  # noqa: E402

from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402

TASK = "Compare the caffeine content of green and black tea"


def note_todo_path(ws, box: dict) -> None:
    """Keep the first run's todo.md path in ``box["todo"]``, from its run_started event."""
    ws.events.subscribe(
        lambda e: box.setdefault("todo", ws.path / "runs" / e.run_id / "todo.md") if e.type == "run_started" else None
    )


def observations(result) -> list[str]:
    """The observation of each step's first action, in step order."""
    return [s.actions[0].get("observation", "") if s.actions else "" for s in result.trajectory.steps]


pytestmark = pytest.mark.usefixtures("warm_litellm")  # timings measure the runtime, not litellm's first import.


@pytest.fixture
def lookups(ws):
    """A slow tool for the sub-agents; records (query, start, end) of every call."""
    seen: list[tuple[str, float, float]] = []

    @ws.tools.tool
    def slow_lookup(query: str) -> str:
        """Look a fact up in the tea database (slow)."""
        start = time.monotonic()
        time.sleep(0.5)
        seen.append((query, start, time.monotonic()))
        return f"facts about {query}"

    return seen


def team(ws, researcher_script, analyst_script, **analyst_options):
    ws.agent(
        "researcher",
        description="Finds facts and sources.",
        model=researcher_script.name,
        tools=["slow_lookup"],
    )
    ws.agent(
        "analyst",
        description="Analyses numbers and compares them.",
        model=analyst_script.name,
        tools=["slow_lookup"],
        **analyst_options,
    )


def todo_md(ws, run_id) -> str:
    return (ws.path / "runs" / run_id / "todo.md").read_text()


# -- the todo tool --------------------------------------------------------------------------
def test_todo_operations_and_todo_md(ws, lookups):
    team(ws, ScriptedModel([]), ScriptedModel([]))
    steps = [
        call(
            "todo",
            action="add",
            steps=[
                {"description": "collect sources", "priority": "low"},
                {"description": "compare caffeine", "priority": "high"},
                {"description": "write summary", "priority": "medium", "category": "writing"},
            ],
        ),
        call("todo", action="complete", step_id=1, result="found 3 sources"),
        call("todo", action="complete", step_id=3, status="failed", result="no data yet"),
        call("todo", action="update", step_id=2, description="compare caffeine per cup", priority="medium"),
        call("todo", action="list"),
        call("todo", action="show"),
        call("todo", action="export"),
        call("todo", action="clear"),
        call("done", success=True, text="planned"),
    ]
    planner_model = ScriptedModel(steps)
    planner = ws.planner(["researcher", "analyst"], model=planner_model.name)
    result = planner.run_sync(TASK)
    assert result.success and result.steps == 9
    assert lookups == []  # no sub-agent was called
    obs = observations(result)

    after_add = "\n".join(
        [
            "# Todo",
            "",
            "- [ ] 2. compare caffeine (priority: high)",
            "- [ ] 3. write summary (priority: medium, category: writing)",
            "- [ ] 1. collect sources (priority: low)",
            "",
        ]
    )
    assert obs[0] == "added 3 step(s)\n" + after_add
    # the plan is in the next prompt
    assert section(user_text(planner_model.calls[1]), "todo_contents") == after_add

    after_failed = "\n".join(
        [
            "# Todo",
            "",
            "- [ ] 2. compare caffeine (priority: high)",
            "- [!] 3. write summary (priority: medium, category: writing) — result: no data yet",
            "- [x] 1. collect sources (priority: low) — result: found 3 sources",
            "",
        ]
    )
    assert obs[2] == after_failed
    after_update = after_failed.replace(
        "- [ ] 2. compare caffeine (priority: high)", "- [ ] 2. compare caffeine per cup (priority: medium)"
    )
    assert obs[3] == after_update
    assert obs[4] == after_update and obs[5] == after_update
    export = ws.path / "runs" / result.run_id / "todo-export.md"
    assert obs[6] == f"exported to {export}"
    assert export.read_text() == after_update
    assert obs[7].startswith("removed 2 finished step(s)\n")
    final = "# Todo\n\n- [ ] 2. compare caffeine per cup (priority: medium)\n"
    assert todo_md(ws, result.run_id) == final
    assert obs[7].endswith(final)


def test_todo_errors_are_observations(ws):
    team(ws, ScriptedModel([]), ScriptedModel([]))
    planner_model = ScriptedModel(
        [
            call("todo", action="add", steps=[{"description": "a", "priority": "urgent"}]),
            call("todo", action="complete", step_id=7),
            call("todo", action="add", steps=[{"description": "a"}]),
            call("todo", action="complete", step_id=7),
            call("done", success=True, text="ok"),
        ]
    )
    result = ws.planner(["researcher", "analyst"], model=planner_model.name).run_sync(TASK)
    assert result.success
    obs = observations(result)
    assert obs[0] == "Error (todo): priority must be one of high, medium, low, not 'urgent'"
    assert obs[1] == "Error (todo): no todo step 7 (steps: none)"
    assert obs[3] == "Error (todo): no todo step 7 (steps: 1)"
    assert "Error (todo): no todo step 7 (steps: 1)" in user_text(planner_model.calls[4])
    assert todo_md(ws, result.run_id) == "# Todo\n\n- [ ] 1. a (priority: medium)\n"


def test_todo_md_edits_on_disk_are_read_back(ws):
    team(ws, ScriptedModel([]), ScriptedModel([]))
    seen_todo: list[str] = []
    path_box: dict = {}

    def planner_brain(messages, tools):
        n = len(seen_todo)
        seen_todo.append(section(user_text(messages), "todo_contents"))
        if n == 0:
            return call(
                "todo",
                action="add",
                steps=[{"description": "find sources", "priority": "medium"}, {"description": "compare"}],
            )
        if n == 1:
            # a person edits todo.md between steps: ticks step 1 and adds a step of their own
            path = path_box["todo"]
            text = path.read_text()
            text = text.replace("- [ ] 1. find sources", "- [x] 1. find sources")
            text += "- [ ] 3. double-check the numbers (priority: high)\n"
            path.write_text(text)
            return call("todo", action="complete", step_id=3, result="checked by hand")
        if n == 2:
            return call("todo", action="list")
        return call("done", success=True, text="ok")

    planner_model = ScriptedModel(planner_brain)
    planner = ws.planner(["researcher", "analyst"], model=planner_model.name)
    note_todo_path(ws, path_box)
    result = planner.run_sync(TASK)
    assert result.success
    expected = "\n".join(
        [
            "# Todo",
            "",
            "- [ ] 2. compare (priority: medium)",
            "- [x] 3. double-check the numbers (priority: high) — result: checked by hand",
            "- [x] 1. find sources (priority: medium)",
            "",
        ]
    )
    obs = observations(result)
    assert obs[1] == expected  # the complete of the hand-added step worked
    assert seen_todo[2] == expected  # and the next prompt shows the merged plan
    assert obs[2] == expected
    assert todo_md(ws, result.run_id) == expected


def test_a_hand_added_step_without_a_number_is_kept(ws):
    team(ws, ScriptedModel([]), ScriptedModel([]))
    path_box: dict = {}

    def planner_brain(messages, tools):
        n = len(planner_model.calls)
        if n == 1:
            return call("todo", action="add", steps=[{"description": "find sources"}])
        if n == 2:
            path_box["todo"].write_text(path_box["todo"].read_text() + "- [ ] call the tea board\n")
            return call("todo", action="complete", step_id=1)
        return call("done", success=True, text="ok")

    planner_model = ScriptedModel(planner_brain)
    planner = ws.planner(["researcher", "analyst"], model=planner_model.name)
    note_todo_path(ws, path_box)
    result = planner.run_sync(TASK)
    assert result.success
    assert "call the tea board" in todo_md(ws, result.run_id)


# -- sub-agents as tools (A2T) --------------------------------------------------------------
def test_planner_delegates_concurrently_to_nested_sub_agents(ws, lookups, tmp_path):
    data = tmp_path / "cups.csv"
    data.write_text("tea,mg\ngreen,30\nblack,47\n")
    researcher_model = ScriptedModel(
        [call("slow_lookup", query="green tea"), call("done", success=True, text="green: 30 mg")]
    )
    analyst_model = ScriptedModel(
        [call("slow_lookup", query="black tea"), call("done", success=True, text="black: 47 mg")]
    )
    team(ws, researcher_model, analyst_model)
    offered: list[list[dict]] = []

    def planner_brain(messages, tools):
        offered.append(tools)
        if len(offered) == 1:
            return [
                call("researcher_agent", task=TASK, files=[str(data)]),
                call("analyst_agent", task=TASK, files=[str(data)]),
            ]
        return call("done", success=True, text="black tea has more caffeine")

    planner_model = ScriptedModel(planner_brain)
    planner = ws.planner(["researcher", "analyst"], model=planner_model.name)
    result = planner.run_sync(TASK, files=[str(data)])
    assert result.success and result.answer == "black tea has more caffeine"

    # the sub-agents are offered as tools taking the task and absolute file paths
    by_name = {t["function"]["name"]: t["function"] for t in offered[0]}
    assert set(by_name) == {"researcher_agent", "analyst_agent", "todo", "done"}
    assert set(by_name["researcher_agent"]["parameters"]["properties"]) == {"task", "files"}
    assert "Finds facts and sources." in by_name["researcher_agent"]["description"]
    planner_system = planner_model.calls[0][0]["content"]
    assert "pass the ORIGINAL TASK unmodified" in planner_system

    # each sub-agent got the original task unmodified plus the absolute file path
    for sub in (researcher_model, analyst_model):
        task_block = section(user_text(sub.calls[0]), "task")
        assert task_block == f"{TASK}\nAttached files (absolute paths): {data}"

    # the two sub-agent calls ran concurrently
    step2 = [e for e in ws.events.events(result.run_id, nested=False) if e.step == 1]
    calls = [e for e in step2 if e.type == "tool_call"]
    results = [e for e in step2 if e.type == "tool_result"]
    assert [e.data["name"] for e in calls] == ["researcher_agent", "analyst_agent"]
    assert len(results) == 2 and all(e.data["ok"] for e in results)
    wall = max(e.time for e in results) - min(e.time for e in calls)
    assert 0.5 <= wall < 0.9
    assert len(lookups) == 2
    (_, s1, e1), (_, s2, e2) = lookups
    assert max(s1, s2) < min(e1, e2)  # the two sleeps overlapped
    assert {e.data["observation"] for e in results} == {"green: 30 mg", "black: 47 mg"}
    nxt = user_text(planner_model.calls[1])
    assert "-> green: 30 mg" in nxt and "-> black: 47 mg" in nxt

    # sub-agent runs are nested under the planner's run
    children = ws.db.runs(parent_id=result.run_id)
    assert sorted(r["agent"] for r in children) == ["analyst", "researcher"]
    assert all(r["task"] == TASK and r["status"] == "success" for r in children)
    assert [r["id"] for r in ws.runs()] == [result.run_id]  # only the planner is a top-level run
    traj = result.trajectory
    assert sorted(c.agent for c in traj.children) == ["analyst", "researcher"]
    assert all(c.parent_id == result.run_id and len(c.steps) == 2 for c in traj.children)
    nested = ws.events.events(result.run_id)
    child_ids = {r["id"] for r in children}
    assert {e.run_id for e in nested} == {result.run_id} | child_ids
    assert all(e.parent_id == result.run_id for e in nested if e.run_id in child_ids)
    assert all(e.data["root_run"] == result.run_id for e in nested)  # one run tree
    text = traj.text()
    assert "    run " in text and "researcher" in text and "analyst" in text


def test_sub_agent_step_limits_and_failures_come_back_as_observations(ws, lookups):
    researcher_model = ScriptedModel([call("slow_lookup", query="green tea")])  # never calls done
    analyst_model = ScriptedModel([call("no_such_tool")])
    ws.agent(
        "researcher",
        description="Finds facts and sources.",
        model=researcher_model.name,
        tools=["slow_lookup"],
        max_steps=1,
    )
    ws.agent(
        "analyst",
        description="Analyses numbers.",
        model=analyst_model.name,
        tools=["slow_lookup"],
        max_consecutive_errors=1,
    )
    planner_model = ScriptedModel(
        [
            call("researcher_agent", task=TASK),
            call("analyst_agent", task=TASK),
            call("done", success=False, text="the team could not finish"),
        ]
    )
    planner = ws.planner(["researcher", "analyst"], model=planner_model.name, max_steps=5)
    result = planner.run_sync(TASK)
    assert result.status == "failed" and result.steps == 3  # the planner went on after both

    children = {r["agent"]: r for r in ws.db.runs(parent_id=result.run_id)}
    assert children["researcher"]["status"] == "max_steps"
    assert children["analyst"]["status"] == "error"
    assert len(lookups) == 1  # the researcher's single allowed step

    obs = observations(result)
    assert obs[0].startswith("(sub-agent researcher did not succeed: max_steps)")
    assert obs[1].startswith("Error (RuntimeError): sub-agent analyst ended with status error")
    assert "unknown action(s) no_such_tool" in obs[1]
    assert "sub-agent analyst ended with status error" in user_text(planner_model.calls[2])
    step_results = [e for e in ws.events.events(result.run_id, nested=False) if e.type == "tool_result"]
    assert [e.data["ok"] for e in step_results] == [True, False]
    assert step_results[1].data["error_type"] == "RuntimeError"


def test_per_agent_models_in_the_ledger(ws, lookups):
    researcher_model = ScriptedModel([call("slow_lookup", query="a"), call("done", success=True, text="r")])
    analyst_model = ScriptedModel([call("done", success=True, text="a")])
    team(ws, researcher_model, analyst_model)
    planner_model = ScriptedModel(
        [
            call("researcher_agent", task=TASK),
            call("analyst_agent", task=TASK),
            call("done", success=True, text="done"),
        ]
    )
    planner = ws.planner(["researcher", "analyst"], model=planner_model.name)
    assert planner.resolved_model() == (planner_model.name, "agent")
    result = planner.run_sync(TASK)
    assert result.success and result.model == planner_model.name

    models = {r["agent"]: r["model"] for r in ws.db.runs(parent_id=None)}
    assert models == {
        "planner": planner_model.name,
        "researcher": researcher_model.name,
        "analyst": analyst_model.name,
    }
    ledger = result.trajectory.ledger()
    by_model = ledger["by_model"]
    assert set(by_model) == {planner_model.name, researcher_model.name, analyst_model.name}
    assert by_model[planner_model.name]["calls"] == 3
    assert by_model[researcher_model.name]["calls"] == 2
    assert by_model[analyst_model.name]["calls"] == 1
    assert all(slot["prompt_tokens"] > 0 and slot["completion_tokens"] > 0 for slot in by_model.values())
    own = [e for e in ws.events.events(result.run_id, nested=False) if e.type == "model_response"]
    assert by_model[planner_model.name]["prompt_tokens"] == sum(e.data["prompt_tokens"] for e in own)
    # the run's totals are what the whole task cost: the planner plus its sub-agents
    assert result.prompt_tokens == sum(slot["prompt_tokens"] for slot in by_model.values())
    assert result.completion_tokens == sum(slot["completion_tokens"] for slot in by_model.values())
    assert set(ledger["by_agent"]) == {"planner", "researcher", "analyst"}
    total = sum(slot["prompt_tokens"] for slot in by_model.values())
    assert total == result.trajectory.prompt_tokens


def test_planner_needs_registered_sub_agents(ws):
    with pytest.raises(ValueError, match="not registered in ACP: ghost"):
        ws.planner(["ghost"], model="tea/test")


def test_planner_record_and_delegation_graph(ws):
    team(ws, ScriptedModel([]), ScriptedModel([]))
    planner = ws.planner(["researcher", "analyst"], model="tea/test")
    rec = ws.agents.get("planner")
    assert rec.role == "planner" and planner.todo is True and planner.tools == []
    assert sorted(rec.related("delegates_to")) == ["analyst", "researcher"]
    assert ws.agents.hierarchy()["planner"] == ["analyst", "researcher"]
    assert json.dumps(rec.model_dump(mode="json"))  # the card is plain data


def test_sub_agents_always_get_the_original_task_and_absolute_paths(ws, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen: list[str] = []

    def researcher(messages, tools):
        seen.append(section(user_text(messages), "task"))
        return call("done", success=True, text="ok")

    ws.agent("researcher", description="Finds facts.", tools=[], model=ScriptedModel(researcher).name)
    original = "How many rows does data.csv have?"
    plan = ScriptedModel(
        [
            call("researcher_agent", task=original, files=["data.csv"]),
            call("researcher_agent", task="count the rows", files=[]),
            call("done", success=True, text="done"),
        ]
    )
    result = ws.planner(["researcher"], model=plan.name).run_sync(original)
    assert result.success
    # unmodified task: passed through as is, relative path made absolute
    assert seen[0].startswith(original)
    assert str(tmp_path / "data.csv") in seen[0]
    # a rewritten task: the original still comes first, the planner's wording is kept as an instruction
    assert seen[1].startswith(original) and "Instruction from planner: count the rows" in seen[1]
