"""A call with bad arguments names EVERY bad argument in one observation (issue 10, finding 9).

The model may be hostile or merely careless: either way it must not need one step per field. Each
problem says which field (``order.items[2].name``), what was expected and what came; the whole
error stays bounded whatever the model sends.
"""

from __future__ import annotations

from typing import Literal, Optional

import pytest
from pydantic import BaseModel

from tea_notebook.models.offline import ScriptedModel, call, history_calls
from tea_notebook.protocol.schema import MAX_LISTED_PROBLEMS, MAX_MESSAGE
from tea_notebook.runtime.prompts import StepRecord

pytestmark = pytest.mark.usefixtures("warm_litellm")


class Guest(BaseModel):
    name: str
    age: int


class Address(BaseModel):
    city: str
    zip: str


@pytest.fixture
def booked(ws):
    """A ``book`` tool with typed, nested, optional and enum parameters; the list records real calls."""
    calls: list[tuple] = []

    @ws.tools.tool
    def book(
        room: str,
        nights: int,
        guests: list[Guest] = [],  # noqa: B006 - a schema default, never mutated
        plan: Literal["bed", "half", "full"] = "bed",
        note: Optional[str] = None,
    ) -> str:
        """Book a room.

        Args:
            room: the room number, as text
            nights: how many nights
            guests: who stays
            plan: the meal plan
            note: anything to tell the hotel
        """
        calls.append((room, nights, [g.name for g in guests], plan))
        return f"room {room} for {nights} nights"

    return calls


def fields(result) -> list[str]:
    return [p["field"] for p in result.error["errors"]]


def test_two_bad_arguments_are_both_reported_in_one_observation(ws, booked):
    res = ws.tools.invoke("book", {"room": 101})  # room has the wrong type, nights is missing
    assert not res.ok and res.error["type"] == "ValidationError" and booked == []
    assert fields(res) == ["room", "nights"] and res.error["count"] == 2
    room, nights = res.error["errors"]
    assert room == {
        "field": "room",
        "expected": "string",
        "got": "integer 101",
        "message": "argument 'room': expected string, got integer 101",
    }
    assert nights["expected"] == "a value (required)" and nights["got"] == "nothing"
    # the first problem stays at the top level for a quick look
    assert (res.error["field"], res.error["expected"], res.error["got"]) == ("room", "string", "integer 101")
    obs = res.to_observation()
    assert obs.startswith("Error (ValidationError): 2 problems with the arguments; fix all of them")
    assert "argument 'room': expected string, got integer 101" in obs
    assert "argument 'nights': missing; it is required" in obs
    assert "\n" not in res.error["message"]  # one paragraph


def test_nested_enum_unknown_and_optional_fields_read_clearly(ws, booked):
    args = {
        "room": "12",
        "nights": 2,
        "guests": [{"name": "Ada", "age": 36}, {"name": "Bob", "age": 7}, {"age": "old"}],
        "plan": "all-inclusive",
        "note": 5,
        "colour": "red",
    }
    res = ws.tools.invoke("book", args)
    assert not res.ok and booked == []
    by_field = {p["field"]: p for p in res.error["errors"]}
    # grouped by argument in the schema's order, unknown arguments last
    order = list(by_field)
    assert set(order[:2]) == {"guests[2].name", "guests[2].age"} and order[2:] == ["plan", "note", "colour"]
    assert by_field["guests[2].name"]["expected"] == "a value (required)"
    assert by_field["guests[2].age"]["got"] == 'string "old"'
    assert by_field["plan"]["expected"] == ["bed", "half", "full"]
    assert 'expected one of "bed", "half", "full", got string "all-inclusive"' in by_field["plan"]["message"]
    # Optional[str] is anyOf string | null: the alternatives are named, not "anyOf"
    assert by_field["note"]["expected"] == "string or null"
    assert by_field["colour"]["expected"] == "no such field"
    assert "accepted arguments here are: room, nights, guests, plan, note" in by_field["colour"]["message"]
    for name in by_field:
        assert f"argument '{name}'" in res.to_observation()


def test_an_optional_object_reports_the_fields_inside_it(ws):
    @ws.tools.tool
    def ship(to: Optional[Address], weight: float) -> str:
        """Ship a parcel."""
        return "shipped"

    res = ws.tools.invoke("ship", {"to": {"city": 3}, "weight": "heavy"})
    assert fields(res) == ["to.city", "to.zip", "weight"]
    res = ws.tools.invoke("ship", {"to": "Paris", "weight": 1.5})
    assert fields(res) == ["to"] and res.error["expected"] == "Address (object) or null"


def test_arguments_that_are_not_an_object_name_the_parameters(ws, booked):
    for bad, got in (([1, 2], "array [1, 2]"), ("room 5", 'string "room 5"'), (7, "integer 7")):
        res = ws.tools.invoke("book", bad)
        assert not res.ok and res.error["field"] == "(arguments)" and res.error["expected"] == "object"
        assert res.error["got"] == got and fields(res) == ["(arguments)"]
        assert "one JSON object with the named arguments room, nights, guests, plan, note" in res.error["message"]
    assert booked == []


def test_environment_actions_report_every_bad_argument(ws):
    class Runtime:
        def move(self, x, y):
            raise AssertionError("must not run")

    ws.envs.register(
        {
            "name": "board",
            "description": "A board",
            "actions": [
                {
                    "name": "move",
                    "description": "Move a piece",
                    "parameters": {
                        "type": "object",
                        "properties": {"x": {"type": "integer", "minimum": 0}, "y": {"type": "integer"}},
                        "required": ["x", "y"],
                        "additionalProperties": False,
                    },
                }
            ],
        },
        runtime=Runtime(),
    )
    res = ws.envs.invoke("board", "move", {"x": -1})
    assert [(p["field"], p["expected"]) for p in res.error["errors"]] == [
        ("x", "a number ≥ 0"),
        ("y", "a value (required)"),
    ]


def test_a_hostile_call_gets_a_bounded_error(ws, booked):
    flood = {f"k{i}": i for i in range(1000)}
    res = ws.tools.invoke("book", {"room": "x" * 1_000_000, "nights": "n" * 1_000_000, **flood})
    assert res.error["count"] == 1001  # nights + 1000 unknown keys, all counted
    assert len(res.error["errors"]) == MAX_LISTED_PROBLEMS
    assert res.error["errors"][0]["field"] == "nights" and len(res.error["errors"][0]["got"]) < 80
    assert len(res.error["message"]) <= MAX_MESSAGE and "… and at least 989 more" in res.error["message"]
    items = ws.tools.invoke("book", {"room": "1", "nights": 1, "guests": [{"name": 1, "age": 1}] * 5000})
    assert items.error["count"] >= 1000 and "at least" in items.error["message"]
    weird = ws.tools.invoke("book", {"room": "1", "nights": 1, "a.b\n" * 50: 1})
    [problem] = weird.error["errors"]
    assert problem["field"].startswith('["a.b\\n') and len(problem["field"]) <= 70 and "\n" not in problem["field"]


def test_the_history_shows_a_long_validation_error_whole():
    problems = "; ".join(f"({i}) argument 'field_{i}': expected integer, got string \"{'v' * 40}\"" for i in range(10))
    obs = f"Error (ValidationError): 10 problems with the arguments; fix all of them in the next call: {problems}."
    assert len(obs) > 600
    step = StepRecord(1, results=[("book", "{}", obs), ("other", "{}", "x" * 2000)])
    text = step.render()
    assert all(f"'field_{i}'" in text for i in range(10)) and "more characters" not in text.split("\n")[-3]
    assert "(1400 more characters)" in text  # other observations are still clipped at 600


def test_a_scripted_agent_sees_both_fields_and_fixes_them_in_one_step(ws, booked):
    prompts: list[str] = []

    def model(messages, tools):
        prompts.append(next(m["content"] for m in messages if m["role"] == "user"))
        seen = history_calls(messages)
        if not seen:
            return call("book", room=101, plan="half")  # wrong type AND a missing field
        if len(seen) == 1:
            obs = seen[0][2]
            fixes = {}
            if "'room'" in obs:
                fixes["room"] = "101"
            if "'nights'" in obs:
                fixes["nights"] = 2
            return call("book", plan="half", **fixes)
        return call("done", success=True, text=seen[-1][2])

    script = ScriptedModel(model)
    result = ws.agent("booker", model=script.name, tools=["book"]).run_sync("Book room 101 for two nights")
    assert result.success and result.answer == "room 101 for 2 nights"
    assert booked == [("101", 2, [], "half")] and result.steps == 3  # one failed step, not one per field
    history = prompts[1].split("<agent_history>", 1)[1].split("</agent_history>", 1)[0]
    assert "argument 'room': expected string, got integer 101" in history
    assert "argument 'nights': missing; it is required" in history
    actions = [a for s in ws.trajectory(result.run_id).steps for a in s.actions]
    assert actions[0]["error_type"] == "ValidationError" and "'nights'" in actions[0]["observation"]


def test_arguments_that_are_not_json_say_what_the_tool_takes(ws, booked):
    script = ScriptedModel(
        [
            {"content": None, "tool_calls": [{"name": "book", "arguments": "[101, 2]"}]},
            call("done", success=True, text="gave up"),
        ]
    )
    ws.agent("booker", model=script.name, tools=["book"]).run_sync("Book")
    history = script.calls[1][-1]["content"].split("<agent_history>", 1)[1]
    assert "arguments of book are not a JSON object" in history
    assert "named arguments room, nights, guests, plan, note; got array [101, 2]" in history
