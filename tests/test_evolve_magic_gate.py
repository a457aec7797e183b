"""``%tea evolve --held-out TASKS`` (issue 30): the loop started from the magic makes its new tools
candidates and runs the promotion gate on them with the held-out tasks; the gate's flags without a
held-out set, or a held-out file that cannot be read, are refused before anything runs.

An in-process IPython shell, a real SQLite workspace, the real loop, tool manager, sandbox and gate;
the models are scripted (the tutorial's stream: ``world``; the gate's solver: ``uses_the_tool``).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("IPython")

from conftest import magics_workspace, tea  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from test_evolution_notebook import VOWELS_1, world  # noqa: E402
from test_promotion_gate import held_out, uses_the_tool  # noqa: E402

from tea_notebook.evolve.gate import decisions  # noqa: E402
from tea_notebook.models.offline import ScriptedModel  # noqa: E402

pytestmark = pytest.mark.usefixtures("warm_litellm")


@pytest.fixture
def ws(ip, magics, tmp_path, monkeypatch):
    return magics_workspace(ip, tmp_path, monkeypatch, tool_approval="auto")


def test_evolve_with_a_held_out_set_promotes_the_new_tool_on_its_measured_gain(ip, ws, tmp_path):
    tasks = tmp_path / "held_out.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in held_out()))
    ws.agent("solver", model=ScriptedModel(uses_the_tool).name, tools=[])
    model = ScriptedModel(world)
    result = tea(
        ip,
        f"evolve --model {model.name} --ground-truth 8 --held-out {tasks} --gate-agent solver --level 0.9 "
        f'--quiet "{VOWELS_1}"',
    )
    assert result.created_tools == ["count_vowels"]
    (decision,) = decisions(ws, "count_vowels")
    assert decision.status == "promoted" and decision.n == 6 and decision.level == 0.9
    assert decision.cohort["agent"] == "solver" and decision.cohort["scorer"] == "exact"
    current = ws.tools.get("count_vowels")
    assert current.version == decision.promoted_version and current.metadata["evolution"]["status"] == "promoted"
    actions = [a for s in ws.trajectory(result.run_id).steps for a in s.actions if a["name"] == "promotion_gate"]
    assert any(a.get("arguments", {}).get("tool") == "count_vowels" for a in actions), actions


def test_the_gate_flags_need_a_held_out_set_and_a_readable_one(ip, ws, tmp_path):
    model = ScriptedModel(world)
    runs = len(ws.db.runs(1000))
    with pytest.raises(UsageError, match=r"--level, --gate-epochs configure the promotion gate: add --held-out"):
        tea(ip, f'evolve --model {model.name} --level 0.9 --gate-epochs 2 --quiet "{VOWELS_1}"')
    with pytest.raises(UsageError, match=r"^%tea evolve: .*nowhere\.jsonl"):
        tea(ip, f'evolve --model {model.name} --held-out {tmp_path / "nowhere.jsonl"} --quiet "{VOWELS_1}"')
    assert len(ws.db.runs(1000)) == runs and "count_vowels" not in ws.tools
    assert "--held-out TASKS" in tea(ip, "help")
