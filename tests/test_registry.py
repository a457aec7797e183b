"""The generic Registry behind TCP / ECP / ACP, exercised through ws.tools, ws.toolkits, ws.envs, ws.agents."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import tea_notebook
from tea_notebook.errors import EmbeddingError, NotFoundError, RegistryError
from tea_notebook.protocol.records import (
    AgentRecord,
    EnvironmentRecord,
    ToolkitRecord,
    ToolRecord,
)
from tea_notebook.protocol.retrieval import SearchHit

KINDS = ["tools", "toolkits", "envs", "agents"]

RECORD_CLS = {
    "tools": ToolRecord,
    "toolkits": ToolkitRecord,
    "envs": EnvironmentRecord,
    "agents": AgentRecord,
}

KIND_EXTRA = {
    "tools": {
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        }
    },
    "toolkits": {"tools": ["lookup", "convert"], "rules": "use lookup before convert"},
    "envs": {
        "rules": "one file at a time",
        "actions": [
            {
                "name": "open_file",
                "description": "Open a file for reading",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
    },
    "agents": {"role": "planner", "competencies": ["planning", "budgeting"]},
}

# What describe() must mention for each kind, beyond name / version / description.
DESCRIBE_MARKERS = {
    "tools": ["parameters:", "city: string", "City name"],
    "toolkits": ["tools: lookup, convert", "rules: use lookup before convert"],
    "envs": ["action open_file", "Open a file for reading", "rules: one file at a time"],
    "agents": ["role: planner", "competencies: planning, budgeting"],
}

# One valid relation type per kind.
RELATION = {
    "tools": "depends_on",
    "toolkits": "conflicts_with",
    "envs": "contains",
    "agents": "delegates_to",
}


def rec(kind: str, name: str, description: str, **fields) -> dict:
    """A dict record of ``kind`` with the kind-specific fields filled in."""
    return {"name": name, "description": description, **KIND_EXTRA[kind], **fields}


def reg(ws, kind):
    return getattr(ws, kind)


# ---------------------------------------------------------------------------------------------
# register / get / list / in / len / names / describe
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_register_dict_and_record_then_get(ws, kind):
    r = reg(ws, kind)
    stored_a = r.register(rec(kind, "alpha", "Alpha does the first thing"))
    stored_b = r.register(RECORD_CLS[kind](**rec(kind, "beta", "Beta does the second thing")))

    assert isinstance(stored_a, RECORD_CLS[kind]) and isinstance(stored_b, RECORD_CLS[kind])
    assert (stored_a.version, stored_b.version) == (1, 1)
    got = r.get("alpha")
    assert got.name == "alpha"
    assert got.description == "Alpha does the first thing"
    assert got.version == 1
    assert r.get("beta").description == "Beta does the second thing"
    # kind-specific content survives the round trip
    for key, value in KIND_EXTRA[kind].items():
        dumped = r.get("alpha").model_dump(mode="json")[key]
        assert dumped == value or (key == "actions" and dumped[0]["name"] == value[0]["name"])


@pytest.mark.parametrize("kind", KINDS)
def test_list_filters_contains_len_names(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "web_one", "First web record", category="web"))
    r.register(rec(kind, "web_two", "Second web record", category="web"))
    r.register(rec(kind, "math_one", "A math record", category="math"))

    assert len(r) == 3
    assert r.names() == ["math_one", "web_one", "web_two"]
    assert [x.name for x in r.list()] == ["math_one", "web_one", "web_two"]
    assert [x.name for x in r.list(category="web")] == ["web_one", "web_two"]
    assert [x.name for x in r.list(category="math")] == ["math_one"]
    assert r.list(category="nothing") == []
    assert [x.name for x in r.list(category="web", name="web_two")] == ["web_two"]
    assert "web_one" in r
    assert "absent" not in r
    assert 42 not in r


@pytest.mark.parametrize("kind", KINDS)
def test_describe_mentions_interface(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "gamma", "Gamma explains things clearly", category="docs"))
    r.register(rec(kind, "gamma", "Gamma explains things very clearly", category="docs"))
    text = r.describe("gamma")
    assert "gamma" in text
    assert "v2" in text
    assert "Gamma explains things very clearly" in text
    assert "docs" in text
    assert "versions: 2" in text
    for marker in DESCRIBE_MARKERS[kind]:
        assert marker in text, (marker, text)


@pytest.mark.parametrize("kind", KINDS)
def test_describe_lists_relations(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "other", "Some other record"))
    r.register(rec(kind, "holder", "Holds a relation", relations=[{"type": RELATION[kind], "target": "other"}]))
    assert f"{RELATION[kind]} → other" in r.describe("holder")


# ---------------------------------------------------------------------------------------------
# versioning
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_identical_content_creates_no_version(ws, kind):
    r = reg(ws, kind)
    first = r.register(rec(kind, "delta", "Delta description"))
    again = r.register(rec(kind, "delta", "Delta description"), note="same again")
    also_record = r.register(RECORD_CLS[kind](**rec(kind, "delta", "Delta description")))
    assert first.version == again.version == also_record.version == 1
    assert [v.version for v in r.versions("delta")] == [1]


@pytest.mark.parametrize("kind", KINDS)
def test_versions_get_old_rollback_and_register_after(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "eps", "Original description"))
    v2 = r.register(rec(kind, "eps", "Changed description"))
    assert v2.version == 2

    history = r.versions("eps")
    assert [v.version for v in history] == [1, 2]
    assert [v.current for v in history] == [False, True]
    assert history[0].hash != history[1].hash
    assert r.get("eps").description == "Changed description"
    old = r.get("eps", version=1)
    assert old.version == 1 and old.description == "Original description"

    rolled = r.rollback("eps", 1)
    assert rolled.version == 1 and rolled.description == "Original description"
    assert r.get("eps").description == "Original description"
    history = r.versions("eps")
    assert [v.version for v in history] == [1, 2]
    assert [v.current for v in history] == [True, False]
    assert r.get("eps", version=2).description == "Changed description"
    assert [x.description for x in r.list() if x.name == "eps"] == ["Original description"]

    v3 = r.register(rec(kind, "eps", "Third description"))
    assert v3.version == 3
    assert [(v.version, v.current) for v in r.versions("eps")] == [(1, False), (2, False), (3, True)]


@pytest.mark.parametrize("kind", KINDS)
def test_register_v2_content_after_rollback_is_new_version(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "zeta", "One"))
    r.register(rec(kind, "zeta", "Two"))
    r.rollback("zeta", 1)
    again = r.register(rec(kind, "zeta", "Two"))
    assert again.version == 3
    assert r.get("zeta").description == "Two"


@pytest.mark.parametrize("kind", KINDS)
def test_unregister_keeps_history(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "keep", "Stays around"))
    r.register(rec(kind, "gone", "Will be removed unicorn"))
    r.register(rec(kind, "gone", "Will be removed unicorn, v2"))
    assert r.search("unicorn", mode="keyword")[0].name == "gone"

    r.unregister("gone")
    assert "gone" not in r
    assert r.names() == ["keep"]
    assert len(r) == 1
    assert [x.name for x in r.list()] == ["keep"]
    assert r.search("unicorn", mode="keyword") == []
    assert [v.version for v in r.versions("gone")] == [1, 2]
    assert not any(v.current for v in r.versions("gone"))
    with pytest.raises(NotFoundError, match="gone"):
        r.get("gone")
    # the old versions are still readable
    assert r.get("gone", version=1).description == "Will be removed unicorn"

    back = r.register(rec(kind, "gone", "Back again unicorn"))
    assert back.version == 3
    assert "gone" in r


@pytest.mark.parametrize("kind", KINDS)
def test_not_found_messages_name_the_record(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "present", "Here"))
    with pytest.raises(NotFoundError) as exc:
        r.get("missing_thing")
    assert "missing_thing" in str(exc.value)
    with pytest.raises(NotFoundError) as exc:
        r.get("present", version=7)
    assert "present" in str(exc.value) and "7" in str(exc.value)
    with pytest.raises(NotFoundError) as exc:
        r.rollback("present", 9)
    assert "present" in str(exc.value) and "9" in str(exc.value)
    assert r.get("present").version == 1  # a failed rollback changed nothing
    with pytest.raises(NotFoundError, match="missing_thing"):
        r.versions("missing_thing")
    with pytest.raises(NotFoundError, match="missing_thing"):
        r.rollback("missing_thing", 1)
    with pytest.raises(NotFoundError, match="missing_thing"):
        r.unregister("missing_thing")
    with pytest.raises(NotFoundError, match="missing_thing"):
        r.describe("missing_thing")


def test_not_found_suggests_close_names(ws):
    ws.tools.register(rec("tools", "weather_lookup", "Weather"))
    with pytest.raises(NotFoundError) as exc:
        ws.tools.get("weather")
    assert "'weather'" in str(exc.value)
    assert "weather_lookup" in str(exc.value)


def test_not_found_is_a_key_error_with_plain_message(ws):
    with pytest.raises(KeyError) as exc:
        ws.tools.get("nope")
    # KeyError's str() would wrap the message in quotes; NotFoundError keeps it plain
    assert str(exc.value).startswith("no tool named 'nope'")


# ---------------------------------------------------------------------------------------------
# bad records
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_invalid_name_is_registry_error_naming_field(ws, kind):
    with pytest.raises(RegistryError) as exc:
        reg(ws, kind).register(rec(kind, "bad name!", "Fine description"))
    assert "'name'" in str(exc.value)
    assert "bad name!" in str(exc.value)
    assert len(reg(ws, kind)) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_empty_description_is_registry_error_naming_field(ws, kind):
    with pytest.raises(RegistryError) as exc:
        reg(ws, kind).register(rec(kind, "okname", "   "))
    assert "'description'" in str(exc.value)
    assert "okname" in str(exc.value)
    assert "okname" not in reg(ws, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_field_is_registry_error(ws, kind):
    with pytest.raises(RegistryError) as exc:
        reg(ws, kind).register(rec(kind, "okname", "Fine", colour="blue"))
    assert "colour" in str(exc.value)


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_relation_type_rejected(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "target", "A target"))
    with pytest.raises(RegistryError) as exc:
        r.register(rec(kind, "src", "Source", relations=[{"type": "likes", "target": "target"}]))
    assert "likes" in str(exc.value)
    assert "relation type" in str(exc.value)
    assert RELATION[kind] in str(exc.value)  # lists the allowed types
    assert "src" not in r


@pytest.mark.parametrize("kind", KINDS)
def test_self_relation_rejected(ws, kind):
    r = reg(ws, kind)
    with pytest.raises(RegistryError) as exc:
        r.register(rec(kind, "selfish", "Me", relations=[{"type": RELATION[kind], "target": "selfish"}]))
    assert "selfish" in str(exc.value) and "itself" in str(exc.value)
    assert "selfish" not in r


@pytest.mark.parametrize("kind", KINDS)
def test_register_wrong_type_is_registry_error(ws, kind):
    with pytest.raises(RegistryError) as exc:
        reg(ws, kind).register(42)
    assert "int" in str(exc.value)
    assert RECORD_CLS[kind].__name__ in str(exc.value)


def test_record_object_bypassing_validation_is_rejected(ws):
    bad = ToolRecord(name="fine", description="ok").model_copy(update={"name": "bad name!"})
    with pytest.raises(RegistryError):
        ws.tools.register(bad)
    assert ws.tools.names() == []


@pytest.mark.parametrize("kind", KINDS)
def test_register_many_is_all_or_nothing(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "existing", "Existing record"))
    good = [rec(kind, "one", "First"), rec(kind, "two", "Second")]
    with pytest.raises(RegistryError):
        r.register_many([*good, rec(kind, "bad name", "Broken")])
    with pytest.raises(RegistryError):
        r.register_many([*good, rec(kind, "three", "Self", relations=[{"type": RELATION[kind], "target": "three"}])])
    with pytest.raises(RegistryError):
        r.register_many([rec(kind, "existing", "Existing record, v2"), rec(kind, "x", "")])
    assert r.names() == ["existing"]
    assert [v.version for v in r.versions("existing")] == [1]
    with pytest.raises(NotFoundError):
        r.versions("one")

    stored = r.register_many(good)
    assert [(s.name, s.version) for s in stored] == [("one", 1), ("two", 1)]
    assert r.names() == ["existing", "one", "two"]


# ---------------------------------------------------------------------------------------------
# relations
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_graph_and_relate(ws, kind):
    r = reg(ws, kind)
    t = RELATION[kind]
    r.register(rec(kind, "a", "Record a", relations=[{"type": t, "target": "b"}]))
    r.register(rec(kind, "b", "Record b"))
    r.register(rec(kind, "c", "Record c"))
    assert r.graph() == [("a", t, "b")]
    assert r.graph(t) == [("a", t, "b")]
    assert r.graph("nonexistent_type") == []

    updated = r.relate("b", t, "c", note="b to c")
    assert updated.version == 2
    assert r.get("b").related(t) == ["c"]
    assert r.get("b", version=1).relations == []
    assert sorted(r.graph()) == [("a", t, "b"), ("b", t, "c")]
    # relating again is a no-op
    assert r.relate("b", t, "c").version == 2
    assert [v.version for v in r.versions("b")] == [1, 2]
    # a bad relation type via relate is refused and changes nothing
    with pytest.raises(RegistryError, match="bogus"):
        r.relate("c", "bogus", "a")
    with pytest.raises(RegistryError, match="itself"):
        r.relate("c", t, "c")
    assert r.get("c").version == 1
    with pytest.raises(NotFoundError, match="nobody"):
        r.relate("nobody", t, "a")


def test_graph_type_filter_among_several_types(ws):
    ws.tools.register(rec("tools", "x", "X", relations=[
        {"type": "depends_on", "target": "y"},
        {"type": "conflicts_with", "target": "z"},
    ]))  # fmt: skip
    ws.tools.register(rec("tools", "y", "Y"))
    assert ws.tools.graph("conflicts_with") == [("x", "conflicts_with", "z")]
    assert ws.tools.graph("depends_on") == [("x", "depends_on", "y")]


# ---------------------------------------------------------------------------------------------
# bind / unbind / route
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_route_with_context_returns_only_bound(ws, kind):
    r = reg(ws, kind)
    for n in ("r1", "r2", "r3", "r4"):
        r.register(rec(kind, n, f"Record {n}"))
    assert [x.name for x in r.route()] == ["r1", "r2", "r3", "r4"]
    with ws.context() as ctx:
        r.bind("r2", ctx)
        r.bind("r4", ctx)
        r.bind("r4", ctx)  # idempotent
        assert ctx.bound(r.kind) == ["r2", "r4"]
        assert [x.name for x in r.route(context=ctx)] == ["r2", "r4"]
        r.unbind("r2", ctx)
        assert [x.name for x in r.route(context=ctx)] == ["r4"]
        with pytest.raises(NotFoundError) as exc:
            r.unbind("r1", ctx)
        assert "r1" in str(exc.value) and ctx.id in str(exc.value)
        with pytest.raises(NotFoundError, match="ghost"):
            r.bind("ghost", ctx)
        assert ctx.bound(r.kind) == ["r4"]
    assert ctx.closed and ctx.bound(r.kind) == []


@pytest.mark.parametrize("kind", KINDS)
def test_route_with_query_and_context(ws, kind):
    r = reg(ws, kind)
    r.register(rec(kind, "apples", "Handles apples and pears"))
    r.register(rec(kind, "apples_too", "Also handles apples"))
    r.register(rec(kind, "oranges", "Handles oranges"))
    ctx = ws.context("q")
    r.bind("apples_too", ctx)
    r.bind("oranges", ctx)
    routed = [x.name for x in r.route("apples", ctx)]
    assert "apples" not in routed
    assert set(routed) == {"apples_too", "oranges"}
    assert routed[0] == "apples_too"


def test_route_k_limits(ws):
    for i in range(6):
        ws.tools.register(rec("tools", f"t{i}", f"Tool number {i}"))
    assert len(ws.tools.route(k=3)) == 3
    assert len(ws.tools.route("tool number", k=2)) == 2


def test_bind_toolkit_binds_member_tools(ws):
    ws.toolkits.register({"name": "web", "description": "Web browsing kit", "tools": ["fetch_page"]})
    ws.tools.register(rec("tools", "fetch_page", "Fetch a web page"))
    ws.tools.register(rec("tools", "click_link", "Click a link", toolkit="web"))
    ws.tools.register(rec("tools", "solve_math", "Solve an equation"))
    assert ws.tools.members("web") == ["fetch_page", "click_link"]
    ctx = ws.context()
    ws.tools.bind("web", ctx)
    assert sorted(ctx.bound("tool")) == ["click_link", "fetch_page"]
    assert ctx.bound("toolkit") == ["web"]
    assert [r.name for r in ws.tools.route(context=ctx)] == ["click_link", "fetch_page"]
    # invoking an unbound tool in a context with bindings is refused
    res = ws.tools.invoke("solve_math", {"city": "x"}, ctx)
    assert not res.ok and res.error["type"] == "NotBoundError" and "solve_math" in res.error["message"]
    ws.tools.unbind("web", ctx)
    assert ctx.bound("tool") == [] and ctx.bound("toolkit") == []


def test_route_prunes_missing_dependency(ws):
    ws.tools.register(rec("tools", "needs_ghost", "Needs ghost", relations=[{"type": "depends_on", "target": "ghost"}]))
    ws.tools.register(rec("tools", "plain", "Plain tool"))
    assert [r.name for r in ws.tools.route()] == ["plain"]
    ctx = ws.context()
    ws.tools.bind("needs_ghost", ctx)
    assert ws.tools.route(context=ctx) == []
    ws.tools.register(rec("tools", "ghost", "Now it exists"))
    assert [r.name for r in ws.tools.route(context=ctx)] == ["needs_ghost"]
    ws.tools.unregister("ghost")
    assert ws.tools.route(context=ctx) == []


def test_route_prunes_conflict_with_bound_tool(ws):
    ws.tools.register(
        rec("tools", "aaa_writer", "Writes", relations=[{"type": "conflicts_with", "target": "zzz_locker"}])
    )
    ws.tools.register(rec("tools", "zzz_locker", "Locks"))
    ws.tools.register(rec("tools", "mmm_reader", "Reads"))
    # without bindings, the conflicting pair is not both offered
    names = [r.name for r in ws.tools.route()]
    assert not {"aaa_writer", "zzz_locker"} <= set(names)
    ctx = ws.context()
    for n in ("aaa_writer", "zzz_locker", "mmm_reader"):
        ws.tools.bind(n, ctx)
    assert [r.name for r in ws.tools.route(context=ctx)] == ["mmm_reader", "zzz_locker"]
    ws.tools.unbind("zzz_locker", ctx)
    assert [r.name for r in ws.tools.route(context=ctx)] == ["aaa_writer", "mmm_reader"]


def test_route_precondition_until_success(ws):
    def login(user: str) -> str:
        """Log in as a user."""
        return f"hello {user}"

    def fetch_inbox() -> list:
        """Fetch the inbox."""
        return ["mail"]

    ws.tools.register(login)
    ws.tools.register(tea_notebook.tool(fetch_inbox, relations=[("precondition", "login")]))
    with ws.context() as ctx:
        ws.tools.bind("login", ctx)
        ws.tools.bind("fetch_inbox", ctx)
        assert [r.name for r in ws.tools.route(context=ctx)] == ["login"]
        # a failed call (bad arguments) does not satisfy the precondition
        bad = ws.tools.invoke("login", {"user": 5}, ctx)
        assert not bad.ok and bad.error["type"] == "ValidationError" and bad.error["field"] == "user"
        assert [r.name for r in ws.tools.route(context=ctx)] == ["login"]
        good = ws.tools.invoke("login", {"user": "ada"}, ctx)
        assert good.ok and good.value == "hello ada"
        assert [r.name for r in ws.tools.route(context=ctx)] == ["fetch_inbox", "login"]
    # a fresh context starts over
    other = ws.context()
    ws.tools.bind("fetch_inbox", other)
    assert ws.tools.route(context=other) == []


# ---------------------------------------------------------------------------------------------
# search
# ---------------------------------------------------------------------------------------------
def _search_fixture(r, kind):
    r.register(rec(kind, "zebra_finder", "Finds zebra herds on the savanna", category="animals"))
    r.register(rec(kind, "tax_helper", "Computes income tax returns", category="finance"))
    r.register(rec(kind, "zebra_painter", "Paints stripes for a zebra costume", category="art"))
    r.register(rec(kind, "weather_now", "Reports current weather conditions", category="weather"))


@pytest.mark.parametrize("kind", KINDS)
def test_keyword_search_finds_exact_words(ws, kind):
    r = reg(ws, kind)
    _search_fixture(r, kind)
    hits = r.search("income tax", mode="keyword")
    assert [h.name for h in hits] == ["tax_helper"]
    assert hits[0].keyword > 0 and hits[0].record.name == "tax_helper"
    zebra = {h.name for h in r.search("zebra", mode="keyword")}
    assert zebra == {"zebra_finder", "zebra_painter"}
    assert r.search("xylophone", mode="keyword") == []


@pytest.mark.parametrize("kind", KINDS)
def test_hybrid_search_returns_search_hits(ws, kind):
    r = reg(ws, kind)
    _search_fixture(r, kind)
    hits = r.search("zebra herds savanna", k=3)
    assert 1 <= len(hits) <= 3
    assert all(isinstance(h, SearchHit) for h in hits)
    top = hits[0]
    assert top.name == "zebra_finder"
    assert isinstance(top.record, RECORD_CLS[kind]) and top.record.name == "zebra_finder"
    assert 0 < top.keyword <= 1.0  # BM25 over what a document matching the whole query scores
    assert 0 < top.semantic <= 1.0001
    assert top.score == pytest.approx(0.8 * top.semantic + 0.2 * top.keyword, abs=1e-4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    sem = r.search("zebra herds savanna", mode="semantic", k=2)
    assert sem[0].name == "zebra_finder" and sem[0].score == pytest.approx(sem[0].semantic, abs=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_search_filters_and_k(ws, kind):
    r = reg(ws, kind)
    _search_fixture(r, kind)
    hits = r.search("zebra", category="art")
    assert [h.name for h in hits] == ["zebra_painter"]
    assert r.search("zebra", category="nowhere") == []
    assert len(r.search("zebra", k=1)) == 1
    assert len(r.search("records of things", k=2)) <= 2
    assert len(r.search("zebra", k=10)) <= 4


@pytest.mark.parametrize("kind", KINDS)
def test_search_bad_arguments(ws, kind):
    r = reg(ws, kind)
    _search_fixture(r, kind)
    with pytest.raises(ValueError, match="non-empty"):
        r.search("")
    with pytest.raises(ValueError, match="non-empty"):
        r.search("   ")
    with pytest.raises(ValueError, match="fuzzy"):
        r.search("zebra", mode="fuzzy")


@pytest.mark.parametrize("kind", KINDS)
def test_search_after_unregister(ws, kind):
    r = reg(ws, kind)
    _search_fixture(r, kind)
    # build the vector index first so that its incremental update is exercised
    assert "zebra_finder" in {h.name for h in r.search("zebra", k=4)}
    r.unregister("zebra_finder")
    for mode in ("hybrid", "semantic", "keyword"):
        names = {h.name for h in r.search("zebra herds savanna", k=10, mode=mode)}
        assert "zebra_finder" not in names, mode
    assert {h.name for h in r.search("zebra", mode="keyword")} == {"zebra_painter"}


@pytest.mark.parametrize("kind", KINDS)
def test_search_after_rollback(ws, kind):
    r = reg(ws, kind)
    _search_fixture(r, kind)
    r.register(rec(kind, "tax_helper", "Computes giraffe heights", category="finance"))
    assert [h.name for h in r.search("giraffe", mode="keyword")] == ["tax_helper"]
    assert r.search("income", mode="keyword") == []
    r.search("giraffe", k=4)  # vector index at v2

    r.rollback("tax_helper", 1)
    assert r.search("giraffe", mode="keyword") == []
    hits = r.search("income tax", mode="keyword")
    assert [h.name for h in hits] == ["tax_helper"]
    assert hits[0].record.version == 1
    hybrid = r.search("income tax returns", k=4)
    assert hybrid[0].name == "tax_helper"
    assert hybrid[0].record.description == "Computes income tax returns"
    semantic = r.search("income tax returns", mode="semantic", k=1)
    assert semantic[0].name == "tax_helper"


class _BrokenEmbedder:
    id = "broken-test-embedder"

    def embed(self, texts):
        raise RuntimeError("embedding service unreachable")


class _BadShapeEmbedder:
    id = "bad-shape-embedder"

    def embed(self, texts):
        return np.full((len(texts), 8), np.nan, dtype=np.float32)


@pytest.mark.parametrize("kind", KINDS)
def test_failing_embedder_raises_embedding_error(tmp_path, kind):
    with tea_notebook.Workspace(tmp_path / "broken", embedder=_BrokenEmbedder()) as ws:
        r = reg(ws, kind)
        _search_fixture(r, kind)  # registering does not embed
        for mode in ("hybrid", "semantic"):
            with pytest.raises(EmbeddingError) as exc:
                r.search("zebra", mode=mode)
            assert "broken-test-embedder" in str(exc.value)
            assert "unreachable" in str(exc.value)
        with pytest.raises(EmbeddingError):
            r.route("zebra")
        with pytest.raises(EmbeddingError):
            r.index()
        hits = r.search("zebra", mode="keyword")
        assert {h.name for h in hits} == {"zebra_finder", "zebra_painter"}


def test_non_finite_embeddings_raise_embedding_error(tmp_path):
    with tea_notebook.Workspace(tmp_path / "nan", embedder=_BadShapeEmbedder()) as ws:
        ws.tools.register(rec("tools", "one", "One tool"))
        with pytest.raises(EmbeddingError, match="bad-shape-embedder"):
            ws.tools.search("one")


def test_index_counts_records(ws):
    _search_fixture(ws.tools, "tools")
    assert ws.tools.index() == 4
    ws.tools.unregister("weather_now")
    assert ws.tools.index() == 3


# ---------------------------------------------------------------------------------------------
# tree / hierarchical routing
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def hier_ws(ws):
    tools = [
        ("open_url", "Open a web page url in the browser", "web", "browser"),
        ("click_button", "Click a button on the web page in the browser", "web", "browser"),
        ("web_search", "Search the internet web for pages", "web", None),
        ("add_numbers", "Add numbers with the calculator arithmetic", "math", "calculator"),
        ("multiply_numbers", "Multiply numbers with the calculator arithmetic", "math", "calculator"),
        ("read_file", "Read a text file from the disk folder", "files", None),
        ("delete_file", "Delete a file from the disk folder", "files", None),
    ]
    for name, desc, cat, kit in tools:
        ws.tools.register(rec("tools", name, desc, category=cat, toolkit=kit))
    ws.toolkits.register({"name": "browser", "description": "Browser control", "category": "web",
                          "tools": ["open_url", "click_button"]})  # fmt: skip
    ws.toolkits.register({"name": "calculator", "description": "Arithmetic", "category": "math",
                          "tools": ["add_numbers", "multiply_numbers"]})  # fmt: skip
    return ws


def test_tree(hier_ws):
    assert hier_ws.tools.tree() == {
        "files": {"": ["delete_file", "read_file"]},
        "math": {"calculator": ["add_numbers", "multiply_numbers"]},
        "web": {"": ["web_search"], "browser": ["click_button", "open_url"]},
    }


@pytest.mark.parametrize(
    "query, category, toolkit, first",
    [
        ("click the button on the web page in the browser", "web", "browser", "click_button"),
        ("multiply numbers with the calculator", "math", "calculator", "multiply_numbers"),
        ("delete a file from the disk folder", "files", None, "delete_file"),
    ],
)
def test_route_hierarchical_picks_branch(hier_ws, query, category, toolkit, first):
    narrow = hier_ws.tools.route_hierarchical(query, k=5, branches=1)
    assert narrow, query
    assert narrow[0].name == first
    assert all(r.category == category and r.toolkit == toolkit for r in narrow), [
        (r.name, r.category, r.toolkit) for r in narrow
    ]
    wide = hier_ws.tools.route_hierarchical(query, k=5)
    assert wide[0].name == first
    assert len(wide) <= 5
    assert len({r.category for r in wide}) <= 2


def test_route_hierarchical_respects_context(hier_ws):
    ctx = hier_ws.context()
    hier_ws.tools.bind("calculator", ctx)
    routed = hier_ws.tools.route_hierarchical("click the button on the web page", ctx)
    assert all(r.name in ("add_numbers", "multiply_numbers") for r in routed)


# ---------------------------------------------------------------------------------------------
# ACP: agents
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def team(ws):
    A = lambda name, desc, rels=(): ws.agents.register(  # noqa: E731
        {"name": name, "description": desc, "role": name, "relations": [{"type": t, "target": x} for t, x in rels]}
    )
    A("planner", "Plans the work and splits tasks", [("delegates_to", "coder"), ("collaborates_with", "reviewer")])
    A("coder", "Writes python code for tasks", [("reports_to", "planner")])
    A("reviewer", "Reviews python code changes")
    A("tester", "Writes and runs python code tests", [("reports_to", "reviewer")])
    A("outsider", "Writes python code poems")
    return ws


def test_agent_route_from_agent(team):
    assert {a.name for a in team.agents.route(k=10)} == {"planner", "coder", "reviewer", "tester", "outsider"}
    assert {a.name for a in team.agents.route(from_agent="planner")} == {"coder", "reviewer"}
    routed = team.agents.route("python code", from_agent="planner", k=5)
    assert {a.name for a in routed} == {"coder", "reviewer"}
    assert [a.name for a in team.agents.route("python code", from_agent="planner", k=1)] in (["coder"], ["reviewer"])
    assert team.agents.route("python code", from_agent="coder") == []
    with pytest.raises(NotFoundError, match="nobody"):
        team.agents.route(from_agent="nobody")


def test_agent_hierarchy(team):
    assert team.agents.hierarchy() == {"planner": ["coder"], "reviewer": ["tester"]}
    team.agents.relate("planner", "delegates_to", "tester")
    assert team.agents.hierarchy() == {"planner": ["coder", "tester"], "reviewer": ["tester"]}


def test_agent_invoke_with_sync_runner(ws):
    seen = []

    def runner(task, files):
        seen.append((task, files))
        return f"done: {task}"

    ws.agents.register({"name": "helper", "description": "Helps"}, runtime=runner)
    res = ws.agents.invoke("helper", "summarise  THIS\n exactly", files=["/tmp/a.txt"])
    assert res.ok and res.value == "done: summarise  THIS\n exactly"
    assert res.version == 1
    assert seen == [("summarise  THIS\n exactly", ["/tmp/a.txt"])]
    res2 = ws.agents.invoke("helper", "again")
    assert res2.ok and seen[-1] == ("again", [])
    assert ws.agents.get("helper").usage.calls == 2


def test_agent_invoke_with_async_runner(ws):
    async def runner(task, files):
        await asyncio.sleep(0)
        return {"task": task, "n_files": len(files)}

    ws.agents.register(AgentRecord(name="async_helper", description="Helps asynchronously"), runtime=runner)
    res = ws.agents.invoke("async_helper", "go", ["/x", "/y"])
    assert res.ok and res.value == {"task": "go", "n_files": 2}

    async def inside_loop():
        return await ws.agents.ainvoke("async_helper", "from loop")

    res = asyncio.run(inside_loop())
    assert res.ok and res.value["task"] == "from loop"


def test_agent_invoke_errors(ws):
    ws.agents.register({"name": "idle", "description": "Has no runner"})
    res = ws.agents.invoke("idle", "do it")
    assert res.ok is False
    assert "idle" in res.error["message"] and "no runner" in res.error["message"]
    assert "no runner" in res.to_observation()

    def failing(task, files):
        raise ValueError("cannot do " + task)

    ws.agents.register({"name": "failer", "description": "Fails"}, runtime=failing)
    res = ws.agents.invoke("failer", "math")
    assert not res.ok and res.error == {"type": "ValueError", "message": "cannot do math"}
    assert ws.agents.get("failer").usage.failures == 1

    res = ws.agents.invoke("absent_agent", "x")
    assert not res.ok and res.error["type"] == "NotFoundError" and "absent_agent" in res.error["message"]
    with pytest.raises(Exception, match="absent_agent"):
        res.unwrap()


# ---------------------------------------------------------------------------------------------
# ECP: environments
# ---------------------------------------------------------------------------------------------
class FileRuntime:
    def __init__(self):
        self.opened: str | None = None
        self.log: list[str] = []

    def open_file(self, path):
        self.opened = path
        self.log.append(f"open {path}")
        return f"opened {path}"

    async def read(self, lines=1):
        self.log.append(f"read {lines}")
        return [f"line {i}" for i in range(lines)]

    def state(self):
        return f"open={self.opened}"


ENV = {
    "name": "files_env",
    "description": "A tiny file system",
    "rules": "open before read",
    "state": "stored state text",
    "actions": [
        {
            "name": "open_file",
            "description": "Open a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
                "additionalProperties": False,
            },
        },
        {
            "name": "read",
            "description": "Read lines",
            "parameters": {"type": "object", "properties": {"lines": {"type": "integer", "minimum": 1}}},
            "preconditions": ["open_file"],
        },
    ],
}


def test_env_invoke_with_runtime(ws):
    runtime = FileRuntime()
    ws.envs.register(ENV, runtime=runtime)
    assert ws.envs.runtime("files_env") is runtime
    ctx = ws.context()
    res = ws.envs.invoke("files_env", "open_file", {"path": "/data/a.txt"}, ctx)
    assert res.ok and res.value == "opened /data/a.txt" and res.name == "files_env.open_file"
    res = ws.envs.invoke("files_env", "read", {"lines": 2}, ctx)
    assert res.ok and res.value == ["line 0", "line 1"]
    assert runtime.log == ["open /data/a.txt", "read 2"]
    assert ws.envs.state("files_env") == "open=/data/a.txt"


def test_env_schema_validation(ws):
    runtime = FileRuntime()
    ws.envs.register(ENV, runtime=runtime)
    res = ws.envs.invoke("files_env", "open_file", {"path": 3})
    assert not res.ok and res.error["type"] == "ValidationError" and res.error["field"] == "path"
    res = ws.envs.invoke("files_env", "open_file", {})
    assert not res.ok and res.error["field"] == "path" and res.error["expected"] == "a value (required)"
    res = ws.envs.invoke("files_env", "open_file", {"path": "x", "mode": "w"})
    assert not res.ok and res.error["field"] == "mode"
    res = ws.envs.invoke("files_env", "open_file", ["x"])
    assert not res.ok and res.error["expected"] == "object"
    assert runtime.log == []  # nothing reached the runtime


def test_env_precondition_enforced(ws):
    runtime = FileRuntime()
    ws.envs.register(ENV, runtime=runtime)
    ctx = ws.context()
    res = ws.envs.invoke("files_env", "read", {"lines": 1}, ctx)
    assert not res.ok and "open_file" in res.error["message"]
    assert runtime.log == []


def test_env_preconditions_carry_between_interactive_calls(ws):
    """``ws.envs.invoke`` without a context uses the workspace's one interactive context, so a
    precondition met by an earlier call holds for the next (as within a run); failures do not count,
    other contexts see nothing of it, and stopping the interactive sessions forgets it."""
    runtime = FileRuntime()
    ws.envs.register(ENV, runtime=runtime)
    refused = ws.envs.invoke("files_env", "read", {"lines": 1})
    assert not refused.ok and "needs open_file to have succeeded first" in refused.error["message"]
    assert not ws.envs.invoke("files_env", "open_file", {"path": 3}).ok  # invalid: does not count
    assert not ws.envs.invoke("files_env", "read", {"lines": 1}).ok
    assert ws.envs.invoke("files_env", "open_file", {"path": "/data/a.txt"}).ok
    res = ws.envs.invoke("files_env", "read", {"lines": 2})
    assert res.ok and res.value == ["line 0", "line 1"]
    assert ws.envs.invoke("files_env", "read", {"lines": 1}).ok  # and again
    assert not ws.envs.invoke("files_env", "read", {"lines": 1}, ws.context()).ok  # a run's context: its own
    ws.envs.release(environment="files_env")
    again = ws.envs.invoke("files_env", "read", {"lines": 1})
    assert not again.ok and "open_file" in again.error["message"]
    assert runtime.log == ["open /data/a.txt", "read 2", "read 1"]


def test_env_unknown_action_names_available(ws):
    ws.envs.register(ENV, runtime=FileRuntime())
    res = ws.envs.invoke("files_env", "fly", {})
    assert res.ok is False
    assert res.error["type"] == "NotFoundError"
    msg = res.error["message"]
    assert "fly" in msg and "open_file" in msg and "read" in msg
    res = ws.envs.invoke("no_env", "open_file", {"path": "x"})
    assert not res.ok and res.error["type"] == "NotFoundError" and "no_env" in res.error["message"]


def test_env_state_without_runtime_and_missing_runtime(ws):
    ws.envs.register(ENV)
    assert ws.envs.state("files_env") == "stored state text"
    assert ws.envs.runtime("files_env") is None
    res = ws.envs.invoke("files_env", "open_file", {"path": "x"})
    assert not res.ok and "no runtime" in res.error["message"]


def test_env_runtime_exception_is_structured(ws):
    class Exploding(FileRuntime):
        def open_file(self, path):
            raise PermissionError(f"denied: {path}")

    ws.envs.register(ENV, runtime=Exploding())
    res = ws.envs.invoke("files_env", "open_file", {"path": "/root"})
    assert res.error == {"type": "PermissionError", "message": "denied: /root"}
    assert ws.envs.describe("files_env").count("action ") == 2


def test_blank_toolkit_name_on_tool_rejected(ws):
    with pytest.raises(RegistryError, match="toolkit"):
        ws.tools.register(rec("tools", "kitless", "No kit", toolkit="  "))
    assert "kitless" not in ws.tools


def test_unbind_toolkit_not_bound_raises(ws):
    ws.toolkits.register({"name": "web", "description": "Web kit", "tools": ["fetch_page"]})
    ws.tools.register(rec("tools", "fetch_page", "Fetch a page"))
    ctx = ws.context()
    with pytest.raises(NotFoundError, match="web"):
        ws.tools.unbind("web", ctx)


def test_get_missing_version_of_unregistered_record_names_version(ws):
    ws.tools.register(rec("tools", "gone", "Gone soon"))
    ws.tools.unregister("gone")
    with pytest.raises(NotFoundError) as exc:
        ws.tools.get("gone", version=7)
    assert "7" in str(exc.value)
