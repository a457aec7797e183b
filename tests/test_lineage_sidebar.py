"""The sidebar's Evolution section over the comm (issue 30): a page of the lineage as compact nodes,
a node's gate evidence and runs on expand, and a rollback that is only a plan until a second,
explicit confirm — refused when the asset changed in between, and nothing written when refused.

A real SQLite workspace, the real tool manager, gate and evaluations; the models are scripted.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_extension_python import FakeComm
from test_lineage import TESTS_WITH_Y, THIRD, WITH_Y, make
from test_promotion_gate import held_out, uses_the_tool
from vowel_tool_script import vowel_module

from tea_notebook.evolve.lineage import ROLLBACK_KIND
from tea_notebook.models.offline import ScriptedModel
from tea_notebook.notebook import sidebar_lineage
from tea_notebook.notebook.sidebar_comm import SidebarComms

pytestmark = pytest.mark.usefixtures("warm_litellm")


def ask(comm: FakeComm, **data: Any) -> dict[str, Any]:
    comm.handler({"content": {"data": data}})
    return comm.sent[-1]


@pytest.fixture
def evolved(ws):
    """count_vowels: v1 a candidate promoted as v2 by the gate, then v3 and v4 made without it;
    vowel_share depends on it. Returns the run ids that made v1 and used v3."""
    first = make(ws, vowel_module(), candidate=True)
    solver = ws.agent("solver", model=ScriptedModel(uses_the_tool).name, tools=[])
    decision = ws.promotion_gate(held_out(), agent=solver, scorer="exact").check("count_vowels")
    make(ws, WITH_Y, TESTS_WITH_Y)
    user = ws.agent("user", model=ScriptedModel(uses_the_tool).name, tools=["count_vowels"])
    used = user.run_sync("How many vowels are in 'sky'?")
    make(ws, THIRD)

    @ws.tools.tool
    def vowel_share(text: str) -> float:
        """The share of a text's letters that are vowels."""
        return 0.0

    ws.tools.relate("vowel_share", "depends_on", "count_vowels")
    return {"made": first.run_id, "used": used.run_id, "decision": decision}


def open_comm(ws) -> tuple[SidebarComms, FakeComm]:
    comms, comm = SidebarComms(lambda: ws), FakeComm()
    comms.open(comm, {"content": {"data": {"request": "state"}}})
    return comms, comm


def test_a_page_of_the_lineage_is_compact_and_pages(ws, evolved, monkeypatch):
    _, comm = open_comm(ws)
    page = ask(comm, request="lineage", kind="tool")
    assert (page["type"], page["total"], page["offset"]) == ("lineage", 2, 0)
    assert [a["name"] for a in page["assets"]] == ["count_vowels", "vowel_share"]
    vowels = page["assets"][0]
    assert vowels["nodes"] == [
        {"v": 1, "parent": None, "status": "promoted", "as": 2, "made": 1, "used": 6, "gate": "promoted"},
        {"v": 3, "parent": 1, "status": "unmeasured", "made": 1, "used": 1},
        {"v": 4, "parent": 3, "status": "unmeasured", "current": True, "made": 1},
    ]
    assert page["assets"][1]["nodes"][-1] == {"v": 2, "parent": 1, "status": "registered", "current": True}
    # filtered by name, and paged
    assert [a["name"] for a in ask(comm, request="lineage", query="SHARE")["assets"]] == ["vowel_share"]
    second = ask(comm, request="lineage", offset=1, limit=1)
    assert (second["total"], [a["name"] for a in second["assets"]]) == (2, ["vowel_share"])
    # an asset with many versions sends its newest and counts the rest
    monkeypatch.setattr(sidebar_lineage, "NODE_LIMIT", 2)
    cut = ask(comm, request="lineage")["assets"][0]
    assert [n["v"] for n in cut["nodes"]] == [3, 4] and cut["older"] == 1


def test_a_node_shows_the_gates_evidence_and_its_runs_which_open(ws, evolved):
    _, comm = open_comm(ws)
    reply = ask(comm, request="lineage_node", kind="tool", name="count_vowels", version=2)  # the promoted version
    assert reply["type"] == "lineage_node" and reply["version"] == 1
    node, decision = reply["node"], evolved["decision"]
    assert node["key"] == "count_vowels@v1" and node["made_by"] == [evolved["made"]]
    [gate] = node["gate"]
    assert gate["status"] == "promoted" and gate["message"] == decision.message
    assert gate["ci"] == [decision.ci_low, decision.ci_high] and gate["n"] == decision.n == len(held_out())
    assert gate["gain"] == decision.gain and gate["underpowered"] is decision.underpowered
    assert node["used_total"] == 6 and all(u["correct"] is True for u in node["used_by"])
    v3 = ask(comm, request="lineage_node", name="count_vowels", version=3)["node"]
    assert v3["used_by"] == [{"run": evolved["used"], "status": "success", "correct": None}] and v3["gate"] == []
    opened = ask(comm, request="trajectory", run=evolved["used"])  # what clicking the run does
    assert opened["type"] == "trajectory" and opened["data"]["agent"] == "user"


def test_a_rollback_is_a_plan_until_confirmed(ws, evolved):
    _, comm = open_comm(ws)
    plan = ask(comm, request="rollback", kind="tool", name="count_vowels", version=3)
    assert plan["type"] == "rollback" and not plan["applied"] and plan["needs_confirm"]
    assert (plan["nodes"], plan["head_before"], plan["head_after"]) == (["count_vowels@v3", "count_vowels@v4"], 4, 2)
    assert plan["dependents"] == ["vowel_share"] and "v4 → v2" in "\n".join(plan["lines"])
    assert ws.tools.get("count_vowels").version == 4 and ws.db.heads(ROLLBACK_KIND) == []
    # a confirm made against another current version is refused, and nothing is written
    stale = ask(comm, request="rollback", name="count_vowels", version=3, confirm=True, head_before=3)
    assert stale["type"] == "error" and stale["request"] == "rollback"
    assert (
        "count_vowels changed since the plan was shown (current version v4, the plan was made at v3)"
        in (stale["message"])
    )
    assert ws.tools.get("count_vowels").version == 4 and ws.db.heads(ROLLBACK_KIND) == []
    done = comm.sent.__len__()
    applied = ask(comm, request="rollback", name="count_vowels", version=3, confirm=True, head_before=4)
    assert comm.sent[done]["applied"] is True and comm.sent[done]["lines"][-1] == "applied"
    assert applied["type"] == "state"  # the tools changed: the state follows the reply
    assert ws.tools.get("count_vowels").version == 2 and len(ws.tools.versions("count_vowels")) == 4
    nodes = ask(comm, request="lineage")["assets"][0]["nodes"]
    assert [(n["v"], n["status"], n.get("current", False)) for n in nodes] == [
        (1, "promoted", True),
        (3, "rolled back", False),
        (4, "rolled back", False),
    ]


def test_a_lone_version_is_previewed_too(ws, evolved):
    _, comm = open_comm(ws)
    plan = ask(comm, request="rollback", name="vowel_share", version=2)  # lineage.rollback would apply at once
    assert not plan["applied"] and not plan["needs_confirm"] and "preview" in plan["lines"][-1]
    assert "vowel_share" in ws.tools.names()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"request": "lineage", "kind": "skill"}, "the lineage has kinds tool, experience, agent, not 'skill'"),
        ({"request": "lineage", "limit": 0}, "the limit is a whole number 1…200, not 0"),
        ({"request": "lineage", "offset": -1}, "the offset is a whole number ≥ 0, not -1"),
        ({"request": "lineage_node", "name": "count_vowels", "version": "3"}, "the version is a whole number"),
        ({"request": "lineage_node", "name": "count_vowels", "version": 9}, "no lineage node count_vowels@v9"),
        ({"request": "lineage_node", "name": "nothing", "version": 1}, "no tool named 'nothing'"),
        ({"request": "rollback", "name": "count_vowels", "version": 9, "confirm": True}, "no lineage node"),
    ],
)
def test_bad_requests_say_what_is_wrong_and_write_nothing(ws, evolved, data, message):
    _, comm = open_comm(ws)
    reply = ask(comm, **data)
    assert reply["type"] == "error" and reply["request"] == data["request"] and message in reply["message"]
    assert ws.tools.get("count_vowels").version == 4 and ws.db.heads(ROLLBACK_KIND) == []


def test_without_a_workspace_the_section_says_so():
    comms, comm = SidebarComms(lambda: None), FakeComm()
    comms.open(comm, {"content": {"data": {"request": "lineage"}}})
    assert comm.sent[-1] == {"type": "error", "request": "lineage", "message": "no workspace is open in this kernel"}


def test_experiences_and_agents_have_a_page_too(ws, evolved):
    _, comm = open_comm(ws)
    for kind in ("experience", "agent"):
        page = ask(comm, request="lineage", kind=kind)
        assert page["type"] == "lineage" and page["kind"] == kind


def test_the_cell_view_is_a_tree_whose_runs_open(ws, evolved, monkeypatch):
    from tea_notebook.evolve import lineage as lineage_module

    ws.lineage().rollback("count_vowels", 3, confirm=True)
    html = ws.lineage()._repr_html_()
    assert "<b>promoted</b>: the gate measured a gain" in html  # the statuses are explained
    first, third, fourth = (html.index(f"<code>{label}</code>") for label in ("v1", "└ v3 ← v1", "└ v4 ← v3"))
    assert first < third < fourth and "padding-left:2.4em'><code>└ v4 ← v3" in html  # a grandchild, indented twice
    assert "promoted as v2</b> <b>current</b>" in html and html.count("#cf222e'>rolled back</b>") == 2
    assert f"data-run='{evolved['made']}'" in html and f"data-run='{evolved['used']}'" in html
    assert "current v2 · 3 version(s)" in html
    # many assets: the first are shown (the first of those open), the rest counted
    monkeypatch.setattr(lineage_module, "HTML_ASSETS", 1)
    monkeypatch.setattr(lineage_module, "HTML_OPEN", 0)
    cut = ws.lineage()._repr_html_()
    assert "vowel_share" not in cut and "… and 1 more" in cut and "<details open>" not in cut
