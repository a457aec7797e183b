"""Every Python example of the documentation site runs: per page, in order, in one fresh kernel, offline.

Blocks that cannot run offline carry ``<!-- skip: reason -->`` (tests/docs_examples.py); the checks below run
after a page's examples in the same kernel and assert what the page says they do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_examples import python_blocks, run_page

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_run" not in p.parts and python_blocks(p.read_text()))

# what each page's examples made, checked in the same kernel after the page (the pages show no asserts)
CHECKS: dict[str, list[str]] = {
    "getting-started.md": [
        """
assert ws.tools.search("how hot is 30 degrees in fahrenheit", k=1)[0].name == "convert_temperature"
assert ws.tools.invoke("convert_temperature", {"value": 30}).value == 86.0
err = ws.tools.invoke("convert_temperature", {"value": "hot"}).error
assert (err["field"], err["expected"]) == ("value", "number"), err
assert convert_temperature.to_openai()["function"]["name"] == "convert_temperature"
assert result.status == "unverified" and result.answer.startswith("86.0") and "not an LLM" in result.answer
""",
    ],
    "guide/magics.md": [
        """
assert result.status == "unverified" and result.answer.startswith("86.0")
assert [row["name"] for row in tools.rows] == ["convert_temperature"]
""",
    ],
    "guide/background-runs.md": [
        """
assert finished.status == "unverified" and finished.answer.startswith("86.0")
assert job.status == "unverified" and not ws.jobs.running()
assert sorted(h.result().answer.split()[0] for h in handles) == ["212.0", "32.0"]
""",
    ],
    "guide/tools.md": [
        """
assert (first.value, second.value, [t.name for t in routed]) == (2, 5, ["bump"])
assert "bump" not in ws.tools and len(ws.tools.versions("bump")) >= 2  # unregistered, history kept
assert ws.envs.invoke("notes", "read", {"line": 0}).value == "TEA stands for Tool, Environment, Agent."
assert {"notes_open", "notes_read"} <= set(ws.tools.names())  # E2T lifted the actions
assert tx.action_set(ws.envs.get("notes")) == tx.action_set(ws.envs.get("notes2"))
assert "convert_temperature" in report.unchanged, report
assert ws.agents.search("who can look things up online?", k=1)[0].name == "fact_finder"
""",
    ],
    "guide/environments.md": [
        """
assert result.status == "success", result.answer
assert "[2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47]" in result.trajectory.steps[0].actions[0]["observation"]
assert ws.envs.sessions() == []  # the example ends with release()
assert ws.envs.invoke("python", "run_python", {"code": "x = 6 * 7\\nx"}).value == "value: 42"
assert ws.envs.invoke("thermostat", "set_temperature", {"celsius": 21}).value == "set to 21 °C"
assert ws.envs.state("thermostat") == "21 °C"
assert [a.name for a in ws.envs.get("thermostat").actions] == ["set_temperature"]
ws.envs.release()
""",
    ],
    "guide/security.md": [
        """
assert box.boundary is not None and box.pid is None  # killed at the end of the example
if box.boundary.mechanism == "bubblewrap":
    assert box.boundary.describe().startswith("bubblewrap: uid 65534 in its own user/pid/")
""",
    ],
    "guide/agents.md": [
        """
assert result.trajectory.ledger() is not None
last = [r for r in ws.runs(10) if r["agent"] == "calc"]
assert any(r["status"] == "success" and r["answer"] == "86 °F" for r in last), last
assert "[clipped:" in text and len(ws.events.full_text(text)) == len("Let me think. " * 10_000)
""",
    ],
    "guide/specialists.md": [
        """
assert corpus.search("which reactor design did Aurora choose", k=1)[0].url.endswith("aurora.md")
assert "| north | 0.31 |" in markdown
""",
    ],
    "guide/mcp.md": [
        """
assert other.tools.invoke("weather_convert_temperature", {"value": 30}).value == 86.0
assert report.toolkit.name == "weather"
nb_ws = get_ipython().magics_manager.registry["TeaMagics"].workspace
assert nb_ws.tools.invoke("convert_temperature", {"value": 30}).value == 86.0
other.close()
""",
    ],
    "guide/evolution.md": [
        """
assert decision.status == "promoted" and decision.n == 6 and decision.ci_low > 0, decision
assert [(n.version, n.status) for n in lineage.nodes["count_vowels"]] == [(1, "registered"), (2, "promoted")]
assert lineage.unused == ["count_vowels"] and plan.applied and ws.tools.get("count_vowels").version == 1
assert len(ws.tools.versions("count_vowels")) == 3
assert run.status == "success" and kept.metadata["evolution"]["status"] == "candidate", run.answer
assert kept_decision.status == "promoted" and kept_decision.kind == "agent", kept_decision
(kept_node,) = ws.lineage("vowel_stage", kind="agent").nodes["vowel_stage"]
assert (kept_node.status, kept_node.made_by) == ("promoted", [run.run_id])
""",
    ],
    "guide/time-travel.md": [
        """
assert (result.answer, result.steps) == ("28 tins", 4)
assert forked.answer == "73 tins" and forked.trajectory.edit["before"] == "5 tins of oolong tea"
assert [s.replayed for s in forked.trajectory.steps] == [True, True, True, False]
assert "50 tins of oolong" in forked.context(4).text() and "5 tins of oolong" not in json.dumps(forked.context(4).messages)
assert (detour.answer, detour.trajectory.steps[2].note) == ("28 tins", "actions edited")
assert hinted.answer == "38 tins" and hinted.context(4).messages == messages
assert recounted.answer == "31 tins" and [s.note for s in recounted.trajectory.steps][1:3] == ["re-executed live"] * 2
assert recount.answer == "Stock report: 19 tins" and recount.trajectory.edit["kind"] == "sub_agent"
assert [c.agent for c in recount.trajectory.children] == ["stocktaker"]
assert (answer.answer, asked_again.answer) == ("14 tins of green tea", "5 tins of oolong tea")
assert asked_again.trajectory.messages[0]["content"] == "How many tins of oolong tea are in stock?"
assert [s["sub_goal"] for s in first.trajectory.stages] == ["count the green tins", "count the oolong tins"]
assert other.answer == "9 tins of black tea" and other.trajectory.stages[0]["sub_goal"] == "count the black tins"
assert (failed.status, resumed.status) == ("error", "success")
assert ORDER_BOOK == [("black", 20), ("oolong", 20)]  # the resume placed no order twice
assert ws.branches(failed.run_id).get(resumed.run_id).how == "resumed"
assert found.trajectory.steps[1].actions[0]["observation"] == "green 14"  # the fork at step 1 found the sheet
assert shredded.trajectory.steps[1].actions[0]["observation"] == "shredded" and "already resumed" in refusal
assert comparison.diverges_at == 3 and comparison.summary()["answer"] == ("28 tins", "73 tins")
assert forked.trajectory.divergence.text() == "step 4: different model input"
assert hinted.trajectory.divergence.text() == "step 4: different arguments"
assert recounted.trajectory.divergence.replay == "stock → 12 tins of black tea"
assert ws.branches(result.run_id).get(recounted.run_id).departs == "step 2: different observation"
assert comparison.departure.how == "observation"
assert {b.run_id for b in family} >= {result.run_id, forked.run_id, detour.run_id, hinted.run_id}
assert len(ws.runs(1000)) == runs_before  # the refused forks wrote nothing
assert effect.k == 16 and len(set(effect.with_runs + effect.without_runs)) == 32
assert abs(effect.difference - (effect.with_mean - effect.without_mean)) < 1e-12 and effect.mcnemar is not None
assert effect.interval.low < effect.difference < effect.interval.high and effect.interval.df == 15
assert all(ws.trajectory(r).edit["after"] == "the label says: oolong, 5 tins" for r in effect.with_runs)
""",
    ],
    "guide/evaluation.md": [
        """
headline = results.headline()
assert headline.startswith("evaluation sample-demo: 5/5 done") and "0 of 5 scored samples correct · 0 errors (scored wrong)" in headline, headline
assert headline.endswith("model tea/demo (scripted, not an LLM)"), headline
assert (more.skipped, len(more)) == (5, 8)
assert list(table.index)[:2] == ["sample-01", "sample-02"]
assert four.interval().df == 3 and round(four.interval().low, 3) == 0.111 and round(four.interval().high, 3) == 1.139
assert round(paired_t_test(new, old).p_value, 3) == 0.011 and round(mcnemar(new, old).p_value, 3) == 0.062
assert plan.tasks_needed(epochs=3) == 1026 and plan.pilot_epochs == 3
assert more.reliability().clustered is None and "not estimable" in str(more.reliability())
ws.close()
""",
    ],
}


def test_every_page_with_examples_is_tested_and_skips_are_rare():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert set(CHECKS) <= names, set(CHECKS) - names
    blocks = [b for p in PAGES for b in python_blocks(p.read_text())]
    skipped = [b for b in blocks if b.skip]
    assert len(blocks) >= 30 and len(skipped) * 4 <= len(blocks), (len(blocks), [b.skip for b in skipped])


def test_a_skip_mark_needs_a_reason():
    with pytest.raises(AssertionError, match="needs a reason"):
        python_blocks("<!-- skip: -->\n```python\nx = 1\n```\n")
    (block,) = python_blocks("<!-- skip: needs a key -->\n```python\nx = 1\n```\n")
    assert block.skip == "needs a key" and block.code == "x = 1\n"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page_examples_run_in_order_in_a_fresh_kernel(page, tmp_path, monkeypatch):
    monkeypatch.delenv("TEA_MODEL", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    run_page(page, tmp_path, checks=CHECKS.get(page.relative_to(DOCS).as_posix(), []))
