"""Routing with a query keeps the query's fused ranking while the registry is unchanged and only
applies the usage prior again, prunes until ``k`` are chosen, and attaches usage to what it
returns. These tests check it picks exactly what the plain algorithm picks — score every
candidate with the prior, one stable sort, prune each candidate against everything chosen before
it — on a realistic registry with relations, score ties and usage that moves between steps, and
after the registry changes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import tea_notebook
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import Relation, ToolRecord
from tea_notebook.protocol.retrieval import Ranking

DATA = json.loads((Path(__file__).parent / "data" / "retrieval_tools.json").read_text())


def _registry_tools() -> list[ToolRecord]:
    """The 60 real tools, five variants of each (identical descriptions: exact score ties), and
    relations of every kind the router prunes by, some pointing at tools that do not exist."""
    rng = random.Random(7)
    names = [d["name"] for d in DATA]
    out = []
    for copy in range(6):
        for d in DATA:
            name = d["name"] if copy == 0 else f"{d['name']}_v{copy}"
            relations = []
            roll = rng.random()
            if roll < 0.10:
                relations.append(Relation(type="conflicts_with", target=rng.choice(names)))
            elif roll < 0.15:
                relations.append(Relation(type="depends_on", target="ghost_tool"))
            elif roll < 0.22:
                relations.append(Relation(type="depends_on", target=rng.choice(names)))
            elif roll < 0.30:
                relations.append(Relation(type="precondition", target=rng.choice(names)))
            if name == d["name"] and relations and relations[0].target == name:
                relations = []
            out.append(
                ToolRecord(
                    name=name,
                    description=d["description"],
                    category=d["category"],
                    parameters={
                        "type": "object",
                        "properties": {p: {"type": "string", "description": t} for p, t in d["parameters"].items()},
                    },
                    relations=relations,
                )
            )
    return out


def _plain_route(reg, query: str, context: Context | None, k: int) -> list[ToolRecord]:
    """The router without any caching or early stop, written out in full."""
    reg._sync()
    n = max(k * 3, 20)
    pool = max(4 * n, 40)
    ids, scores = reg._keyword.search(query, pool)
    keyword = dict(zip(ids.tolist(), scores.tolist()))
    ids, scores = reg._sync_vectors().search(reg._query_vector(query), pool)
    semantic = dict(zip(ids.tolist(), scores.tolist()))
    prior = reg._usage_prior()
    floor = min(semantic.values(), default=0.0)
    scored = []
    for i in set(semantic) | set(keyword):
        score = (1 - 0.2) * semantic.get(i, floor) + 0.2 * keyword.get(i, 0.0)
        if prior:
            score += prior.get(i, 0.0)
        scored.append((i, score))
    scored.sort(key=lambda t: -t[1])
    candidates = [reg.get(reg._names[i]) for i, _ in scored[:n]]
    bound = context.bound(reg.kind) if context is not None else []
    if bound:
        candidates = [c for c in candidates if c.name in bound]
    chosen: list[ToolRecord] = []
    for cand in candidates:
        ok = all(dep in reg for dep in cand.related("depends_on"))
        taken = {c.name for c in chosen} | set(bound)
        taken.discard(cand.name)
        ok = ok and not set(cand.related("conflicts_with")) & taken
        ok = ok and not any(cand.name in c.related("conflicts_with") for c in chosen)
        if context is not None:
            ok = ok and all(context.has_succeeded(p) for p in cand.related("precondition"))
        if ok:
            chosen.append(cand)
    return chosen[:k]


@pytest.fixture
def big(tmp_path):
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    ws.tools.register_many(_registry_tools())
    yield ws
    ws.close()


def test_routing_the_same_task_step_after_step_picks_what_the_plain_router_picks(big):
    reg = big.tools
    rng = random.Random(3)
    queries = [q for d in DATA[::6] for q in d["queries"]]
    names = reg.names()
    ctx = Context()
    for step in range(8):
        # usage moves between steps, as an agent's calls do: successes, failures, new tools
        rows = [(name, rng.randint(1, 40), 0, 1, 0.01, 1.0) for name in rng.sample(names, 15)]
        rows = [(n, c, rng.randint(0, c), t, lat, last) for n, c, _, t, lat, last in rows]
        big.db.record_uses(reg.kind, rows)
        if step % 3 == 2:  # preconditions begin to hold
            ctx.record_call(reg.kind, rng.choice(names), True)
        for query in queries:
            for k in (5, 20):
                for context in (None, ctx):
                    expected = _plain_route(reg, query, context, k)
                    got = reg.route(query, context, k=k)
                    assert [r.name for r in got] == [r.name for r in expected], (step, query, k)
                    assert got == expected  # usage statistics attached alike


def test_a_registry_change_is_seen_by_the_next_route(big):
    reg = big.tools
    query = DATA[0]["queries"][0]
    before = reg.route(query, k=10)
    assert [r.name for r in before] == [r.name for r in _plain_route(reg, query, None, 10)]
    reg.register(ToolRecord(name="sourdough_rescuer", description=query, parameters={"type": "object"}))
    after = reg.route(query, k=10)
    assert after[0].name == "sourdough_rescuer"
    assert [r.name for r in after] == [r.name for r in _plain_route(reg, query, None, 10)]
    reg.unregister("sourdough_rescuer")
    assert [r.name for r in reg.route(query, k=10)] == [r.name for r in before]


def test_bound_tools_and_conflicts_with_them(big):
    reg = big.tools
    query = DATA[3]["queries"][1]
    ctx = Context()
    for name in reg.names()[::4]:
        reg.bind(name, ctx)
    assert [r.name for r in reg.route(query, ctx, k=8)] == [r.name for r in _plain_route(reg, query, ctx, 8)]


def test_ranking_top_equals_one_stable_sort_with_ties_and_priors():
    rng = random.Random(11)
    for _ in range(200):
        ids = rng.sample(range(500), rng.randint(0, 60))
        levels = [rng.choice([0.1, 0.2, 0.35, 0.5]) for _ in ids]  # few distinct values: many ties
        semantic = {i: v for i, v in zip(ids, levels) if rng.random() < 0.7}
        keyword = {i: rng.choice([0.0, 0.5, 1.0]) for i in ids if rng.random() < 0.5}
        prior = {i: rng.choice([-0.03, 0.0, 0.015, 0.03]) for i in rng.sample(range(500), rng.randint(0, 30))}
        floor = min(semantic.values(), default=0.0)
        plain = []
        for i in set(semantic) | set(keyword):
            sem, kw = semantic.get(i, floor), keyword.get(i, 0.0)
            score = (1 - 0.2) * sem + 0.2 * kw
            if prior:
                score += prior.get(i, 0.0)
            plain.append((i, score, sem, kw))
        plain.sort(key=lambda t: -t[1])
        ranking = Ranking(semantic, keyword, 0.2)
        for k in (None, 0, 1, 5, 20, 100):
            assert ranking.top(k, prior) == (plain if k is None else plain[:k])
