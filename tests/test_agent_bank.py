"""The agent bank (Mem²Evolve §1.1.1, prompt C.5): spec validation, storage in ACP, top-1 retrieval over δ."""

from __future__ import annotations

import copy

import pytest

import tea_notebook
from tea_notebook.errors import NotFoundError
from tea_notebook.evolve.agent_bank import AgentBank, AgentBankError, ExpertSpec, check_spec, role_name
from tea_notebook.protocol.records import AgentRecord

TOOLS = ["simulate_ping_pong_game", "web_search", "parse_excel_with_styles", "read_pdf"]

# The paper's Figure 5 example.
SIMULATION = {
    "role": "Probability Simulation Analyst",
    "suggestions": [
        "Execute multiple simulation runs to ensure statistical significance of the results.",
        "Aggregate ejection data to calculate the specific probability for each ball.",
        "Identify the ball with the maximum ejection frequency from the dataset.",
    ],
    "tools": ["simulate_ping_pong_game"],
    "expertise": "Specializes in stochastic modeling and quantitative analysis to derive probabilities "
    "from complex mechanical simulations.",
}
RESEARCH = {
    "role": "Web Research Specialist",
    "suggestions": [
        "Search several independent sources before settling on any answer.",
        "Compare the facts found across sources and note every disagreement.",
        "Cite the page each fact in the final answer was taken from.",
    ],
    "tools": ["web_search"],
    "expertise": "Finds, evaluates and synthesises information from several web pages into precise answers.",
}
SPREADSHEET = {
    "role": "Spreadsheet Data Analyst",
    "suggestions": [
        "Inspect the workbook structure and sheet names before reading data.",
        "Preserve cell formatting such as colours when it carries meaning.",
        "Aggregate the relevant rows and verify totals against the source.",
    ],
    "tools": ["parse_excel_with_styles"],
    "expertise": "Reads spreadsheets including their formatting and analyses tabular data to answer questions.",
}


def spec_with(**changes) -> dict:
    spec = copy.deepcopy(SIMULATION)
    for key, value in changes.items():
        if value is ...:
            del spec[key]
        else:
            spec[key] = value
    return spec


# -- check_spec -----------------------------------------------------------------------------------
def test_valid_specs_pass():
    for spec in (SIMULATION, RESEARCH, SPREADSHEET):
        assert check_spec(spec, TOOLS) is None
    assert check_spec(spec_with(tools=[]), TOOLS) is None
    assert check_spec(ExpertSpec.from_dict(SIMULATION), TOOLS) is None
    assert check_spec(spec_with(tools=["made_up"]), None) is None  # membership unchecked without a list


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"role": "Analyst"}, "role 'Analyst' has 1 words; it needs 2-5"),
        ({"role": "One Two Three Four Five Six"}, "has 6 words; it needs 2-5"),
        ({"role": 7}, "role must be a string"),
        ({"suggestions": SIMULATION["suggestions"][:2]}, "there are 2 suggestions; give 3-5"),
        ({"suggestions": SIMULATION["suggestions"] * 2}, "there are 6 suggestions; give 3-5"),
        ({"suggestions": "Execute runs"}, "suggestions must be a list of strings"),
        (
            {"suggestions": ["Run five short simulations.", *SIMULATION["suggestions"][1:]]},
            "suggestion 1 ('Run five short simulations.') has 4 words; it needs 6-16",
        ),
        (
            {"suggestions": [" ".join(["Check"] + ["word"] * 16), *SIMULATION["suggestions"][1:]]},
            "has 17 words; it needs 6-16",
        ),
        (
            {
                "suggestions": [
                    "The results should be aggregated across all of the runs.",
                    *SIMULATION["suggestions"][1:],
                ]
            },
            "must start with an imperative verb, not 'The'",
        ),
        (
            {
                "suggestions": [
                    "Using many runs gives statistically significant ejection results.",
                    *SIMULATION["suggestions"][1:],
                ]
            },
            "not 'Using'",
        ),
        (
            {
                "suggestions": [
                    "Always run many simulations to get significant results.",
                    *SIMULATION["suggestions"][1:],
                ]
            },
            "not 'Always'",
        ),
        (
            {
                "suggestions": [
                    "You should run many simulations for significant results.",
                    *SIMULATION["suggestions"][1:],
                ]
            },
            "not 'You'",
        ),
        ({"suggestions": ["", *SIMULATION["suggestions"][1:]]}, "suggestion 1 must be a non-empty string"),
        ({"tools": TOOLS}, "there are 4 tools; choose at most 3"),
        ({"tools": ["web_search", "web_search"]}, "duplicate tool(s): web_search"),
        (
            {"tools": ["Web_Search"]},
            "unknown tool(s) Web_Search: use names verbatim from the available tools: simulate_ping_pong_game, web_search",
        ),
        ({"tools": "web_search"}, "tools must be a list of tool names"),
        ({"tools": [1]}, "tools must be a list of tool names"),
        ({"expertise": "Too short to say."}, "expertise has 17 characters; it needs 20-160"),
        ({"expertise": "x" * 161}, "expertise has 161 characters; it needs 20-160"),
        ({"expertise": None}, "expertise must be a string"),
        ({"role": ...}, "missing key(s): role"),
        ({"extra": "x"}, "unexpected key(s): extra (only role, suggestions, tools, expertise are allowed)"),
    ],
)
def test_each_constraint_is_enforced(changes, message):
    problem = check_spec(spec_with(**changes), TOOLS)
    assert problem is not None and message in problem


def test_boundaries_are_inclusive():
    six = "Check the six word suggestion here."
    sixteen = " ".join(["Check"] + ["word"] * 15)
    assert check_spec(spec_with(suggestions=[six, sixteen, SIMULATION["suggestions"][0]]), TOOLS) is None
    assert check_spec(spec_with(suggestions=SIMULATION["suggestions"] + [six, sixteen]), TOOLS) is None  # 5
    assert check_spec(spec_with(expertise="x" * 20), TOOLS) is None
    assert check_spec(spec_with(expertise="x" * 160), TOOLS) is None
    assert check_spec(spec_with(role="Analyst Pair"), TOOLS) is None
    assert check_spec(spec_with(role="Senior Data Quality Assurance Lead Engineer"), TOOLS) is not None  # 6 words
    assert check_spec(spec_with(role="Data Quality Assurance Lead Analyst"), TOOLS) is None  # 5 words
    assert check_spec(spec_with(tools=TOOLS[:3]), TOOLS) is None
    apply = "Apply the chosen model to every simulation run."
    assert check_spec(spec_with(suggestions=[apply, *SIMULATION["suggestions"][1:]]), TOOLS) is None


def test_every_problem_is_named_and_non_objects_rejected():
    problem = check_spec({"role": "X", "suggestions": [], "tools": ["nope"], "expertise": "short"}, TOOLS)
    for part in ("role 'X'", "0 suggestions", "unknown tool(s) nope", "expertise has 5 characters"):
        assert part in problem
    assert "expected a JSON object" in check_spec(["role"], TOOLS)
    assert "unknown tool(s) web_search" in check_spec(spec_with(tools=["web_search"]), [])
    # records are accepted as the available tools
    record = tea_notebook.ToolRecord(name="web_search", description="Search the web.")
    assert check_spec(spec_with(tools=["web_search"]), [record]) is None


def test_expert_spec_round_trip():
    spec = ExpertSpec.from_dict(SIMULATION, TOOLS)
    assert list(spec.to_dict()) == ["role", "suggestions", "tools", "expertise"]
    assert spec.to_dict() == SIMULATION
    assert spec.key_text().startswith("Probability Simulation Analyst Specializes in stochastic")
    with pytest.raises(AgentBankError, match="invalid expert spec: .*choose at most 3"):
        ExpertSpec.from_dict(spec_with(tools=TOOLS), TOOLS)
    assert role_name("Probability Simulation Analyst") == "probability_simulation_analyst"
    assert role_name("3D Modelling Expert") == "expert_3d_modelling_expert"
    with pytest.raises(AgentBankError, match="no letters or digits"):
        role_name("!!")


# -- the bank -------------------------------------------------------------------------------------
@pytest.fixture
def bank(ws) -> AgentBank:
    # the hashing embedder is lexical: unrelated texts reach cosines of ~0.35 with it, so δ is raised
    # here (the MiniLM default is checked in test_find_with_minilm)
    ws.agent_bank.threshold = 0.5
    return ws.agent_bank


def test_add_stores_an_acp_card(ws, bank):
    rec = bank.add(SIMULATION, source_run="run-1", available_tools=TOOLS)
    assert isinstance(rec, AgentRecord) and rec.version == 1
    assert rec.name == "probability_simulation_analyst"
    assert rec.role == SIMULATION["role"] and rec.description == SIMULATION["expertise"]
    assert rec.competencies == SIMULATION["suggestions"] and rec.tools == ["simulate_ping_pong_game"]
    assert rec.origin == "evolved" and rec.category == "expert"
    assert rec.metadata["expert"] == SIMULATION and rec.metadata["source_run"] == "run-1"
    assert ws.agents.get(rec.name) == rec
    assert bank.spec(rec.name) == ExpertSpec.from_dict(SIMULATION)
    assert [a.name for a in bank.list()] == [rec.name]
    assert ws.agent_bank is bank
    assert AgentBank(ws).threshold == 0.2


def test_find_above_and_below_threshold(ws, bank):
    for spec in (SIMULATION, RESEARCH, SPREADSHEET):
        bank.add(spec)
    hit = bank.find("Aggregate the ejection data of many simulation runs to find the probability of each ball")
    assert hit is not None
    record, cosine = hit
    assert record.name == "probability_simulation_analyst" and cosine > bank.threshold
    assert bank.find("the weather in Paris tomorrow") is None
    assert bank.find("Aggregate the ejection data of many simulation runs", threshold=cosine) is None  # strict >
    bank.threshold = 0.99
    assert bank.find("Aggregate the ejection data of many simulation runs to find the probability of each ball") is None


def test_find_only_considers_evolved_agents(ws, bank):
    ws.agents.register(
        AgentRecord(
            name="simulation_helper",
            description=SIMULATION["expertise"],
            role=SIMULATION["role"],
            competencies=SIMULATION["suggestions"],
        )
    )
    assert bank.find("Aggregate ejection data to calculate the probability for each ball") is None
    assert bank.list() == []
    bank.add(SIMULATION)
    record, _ = bank.find("Aggregate ejection data to calculate the probability for each ball")
    assert record.name == "probability_simulation_analyst"


def test_same_role_becomes_a_new_version(ws, bank):
    first = bank.add(SIMULATION, source_run="run-1")
    again = bank.add(SIMULATION, source_run="run-2")  # identical spec: nothing new
    assert again.version == 1 and len(ws.agents.versions(first.name)) == 1
    revised = dict(SIMULATION, expertise="Models random mechanical processes and estimates event probabilities.")
    second = bank.add(revised, source_run="run-3")
    assert second.name == first.name and second.version == 2
    assert second.description == revised["expertise"]
    assert second.metadata["source_runs"] == ["run-1", "run-3"]
    assert [v.version for v in ws.agents.versions(first.name)] == [1, 2]
    assert "revised expert spec from run run-3" in ws.agents.versions(first.name)[-1].note
    assert ws.agents.rollback(first.name, 1).description == SIMULATION["expertise"]
    assert len(bank.list()) == 1


def test_name_of_another_agent_is_never_overwritten(ws, bank):
    mine = ws.agents.register(AgentRecord(name="web_research_specialist", description="A person's own agent."))
    rec = bank.add(RESEARCH)
    assert rec.name == "web_research_specialist_2"
    assert ws.agents.get("web_research_specialist") == mine
    assert bank.add(dict(RESEARCH, tools=[])).name == "web_research_specialist_2"  # its own lineage
    ws.agents.unregister("web_research_specialist")  # a removed foreign agent still owns its history
    assert bank.add(RESEARCH).name == "web_research_specialist_2"


def test_bad_input_to_the_bank(ws, bank):
    with pytest.raises(AgentBankError, match="there are 2 suggestions"):
        bank.add(spec_with(suggestions=SIMULATION["suggestions"][:2]))
    with pytest.raises(AgentBankError, match="unknown tool.*simulate_ping_pong_game"):
        bank.add(SIMULATION, available_tools=["web_search"])
    with pytest.raises(AgentBankError, match="role 'Analyst'"):
        bank.add(ExpertSpec("Analyst", SIMULATION["expertise"], SIMULATION["suggestions"], []))
    with pytest.raises(AgentBankError, match="add takes an ExpertSpec or a C.5 dict"):
        bank.add("an analyst")
    with pytest.raises(AgentBankError, match="non-empty sub-task"):
        bank.find("  ")
    with pytest.raises(NotFoundError, match="no agent named 'missing'"):
        bank.spec("missing")
    ws.agents.register(AgentRecord(name="plain", description="A plain agent."))
    with pytest.raises(NotFoundError, match="not an evolved expert"):
        bank.spec("plain")
    assert bank.list() == []
    assert bank.find("anything") is None  # an empty bank finds nothing


@pytest.mark.slow
def test_find_with_minilm(tmp_path):
    """The real embedder: sub-tasks find their expert above δ, unrelated ones find none."""
    ws = tea_notebook.Workspace(tmp_path / "ws")
    try:
        bank = ws.agent_bank
        for spec in (SIMULATION, RESEARCH, SPREADSHEET):
            bank.add(spec)
        cases = {
            "Simulate the piston game 100000 times and find which ball is most likely ejected": (
                "probability_simulation_analyst"
            ),
            "Which plots in the green cells of the xlsx file belong to Earl Smith?": "spreadsheet_data_analyst",
            "Search several websites and reconcile what they say about the founding date": "web_research_specialist",
        }
        for task, expected in cases.items():
            hit = bank.find(task)
            assert hit is not None and hit[0].name == expected, (task, hit)
        assert bank.find("Write a haiku about autumn leaves") is None
        assert bank.find("Translate this sentence into French") is None
    finally:
        ws.close()
