"""Supersession in the offline extraction path: a later fact ends an earlier one of its subject
(a SUPERSEDES edge and the old fact's ``valid_to``), nothing is deleted, and the same chunks in
every order, and replayed, give one graph. Real Redis, offline extractor."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from gaama.model import EdgeKind, NodeKind
from tests.component.test_extraction_pipeline import pipelines, store_turns

pytestmark = pytest.mark.requires_stack

START = datetime(2024, 3, 1, 9, tzinfo=UTC)
#: One conversation each, days apart: the same person's residence changes twice.
CHUNKS = [
    ("c1", 0, [("Dana", "I live in Porto."), ("Sam", "Nice city!")]),
    ("c2", 10, [("Dana", "I moved to Lisbon last week."), ("Sam", "Congrats!")]),
    ("c3", 20, [("Dana", "I moved to Berlin."), ("Sam", "Wow, again?")]),
]


async def _stored(graph, embedder, tenant):
    out = {}
    for conv, day, turns in CHUNKS:
        out[conv] = await store_turns(
            graph, embedder, tenant, conv, turns, START + timedelta(days=day)
        )
    return out


async def _snapshot(graph, tenant):
    """Every fact and episode's validity and the SUPERSEDES edges, by text (ids name tenants)."""
    keys = [k async for k in graph.redis.scan_iter(match=graph.keys.node(tenant, "*"))]
    ids = [graph.keys.id_from_node_key(k.decode()) for k in keys]
    nodes = await graph.get_nodes(tenant, ids)
    text = {i: n.text for i, n in nodes.items()}
    facts = {
        n.text: (
            n.extra.get("valid_from"),
            n.extra.get("valid_to"),
            text.get(n.extra.get("superseded_by", ""), ""),
            n.extra.get("superseded_reason"),
        )
        for n in nodes.values()
        if n.kind is NodeKind.FACT
    }
    episodes = {
        n.text: n.extra.get("valid_to") for n in nodes.values() if n.kind is NodeKind.EPISODE
    }
    adjacency = await graph.neighbours(tenant, ids)
    edges = {
        (text[i], text[nb.node])
        for i, row in adjacency.items()
        for nb in row
        if nb.kind is EdgeKind.SUPERSEDES and nb.outgoing
    }
    return facts, episodes, edges


async def test_later_fact_supersedes_and_every_order_gives_one_graph(
    settings, graph, index, embedder
):
    extract, _, _ = pipelines(settings, graph, index, embedder)
    graphs = []
    for n, order in enumerate(itertools.permutations(range(len(CHUNKS)))):
        tenant = f"sup{n}"
        events = await _stored(graph, embedder, tenant)
        for i in order:
            for ev in events[CHUNKS[i][0]]:
                await extract.on_episode(ev)
        snap = await _snapshot(graph, tenant)
        for evs in events.values():  # a replay of every episode changes nothing
            for ev in evs:
                assert await extract.on_episode(ev) == []
        assert await _snapshot(graph, tenant) == snap
        graphs.append(snap)
    facts, episodes, edges = graphs[0]
    by_place = {p: t for p in ("Porto", "Lisbon", "Berlin") for t in facts if p in t}
    assert set(by_place) == {"Porto", "Lisbon", "Berlin"}, facts
    porto, lisbon, berlin = (facts[by_place[p]] for p in ("Porto", "Lisbon", "Berlin"))
    # Porto ended when Lisbon began (the earliest fact that ends it), Lisbon when Berlin began
    assert porto[1] == lisbon[0] and porto[2] == by_place["Lisbon"]
    assert lisbon[1] == berlin[0] and lisbon[2] == by_place["Berlin"]
    assert berlin[1] is None and berlin[2] == ""
    assert {porto[3], lisbon[3]} <= {"update", "correction"}
    assert (by_place["Lisbon"], by_place["Porto"]) in edges
    assert (by_place["Berlin"], by_place["Lisbon"]) in edges
    # the turn that said Porto says only what no longer holds; the one saying Berlin holds
    assert float(next(v for t, v in episodes.items() if "Porto" in t)) == float(porto[1])
    assert next(v for t, v in episodes.items() if "Berlin" in t) is None
    for other in graphs[1:]:
        assert other == graphs[0]


async def test_unrelated_facts_and_other_people_stay_current(settings, graph, index, embedder):
    extract, _, _ = pipelines(settings, graph, index, embedder)
    turns = [
        ("Dana", "I live in Porto."),
        ("Sam", "I live in Madrid."),
    ]
    later = [("Dana", "I love hiking in the mountains."), ("Sam", "My sister moved to Rome.")]
    for conv, day, t in (("a", 0, turns), ("b", 5, later)):
        for ev in await store_turns(graph, embedder, "keep", conv, t, START + timedelta(days=day)):
            await extract.on_episode(ev)
    facts, _, edges = await _snapshot(graph, "keep")
    assert facts and all(v[1] is None for v in facts.values()), facts
    assert edges == set()
