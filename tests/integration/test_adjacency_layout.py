"""Adjacency values as one letter per edge kind (and the weight when not 1), and the layout
before them (``KIND|o|w``): every reader of adjacency — the expansion, provenance, neighbour
reads, the forget cascade — gives the same answers over either, and over a mix of both; ``gaama
migrate graph`` rewrites the older values and chains."""

from __future__ import annotations

import pytest

from gaama import ids
from gaama.model import Edge, EdgeKind, Node, NodeKind
from gaama.store import scripts
from gaama.store.codecs import EDGE_CODES
from gaama.store.forget import ForgetStore
from gaama.store.graph import GraphStore
from gaama.store.migrate_graph import migrate_graph

pytestmark = pytest.mark.requires_stack

T = "acme"


def _node(kind: NodeKind, name: str, **extra: str) -> Node:
    return Node(
        id=ids.node_id(T, kind, name),
        tenant=T,
        kind=kind,
        text=f"text of {name}",
        conversation="c1" if kind is not NodeKind.CONCEPT else "",
        turn_id=f"turn-{name}" if kind is NodeKind.EPISODE else "",
        extra=dict(extra),
    )


async def _graph(graph: GraphStore) -> dict[str, Node]:
    """Three chained episodes, two facts (one without a sources field), a reflection and a
    concept: every edge kind, weights of 1 and below."""
    ep = [_node(NodeKind.EPISODE, f"e{i}") for i in range(3)]
    for e in ep:
        await graph.append_episode(e)
    n = {e.id: e for e in ep}
    fa = _node(NodeKind.FACT, "fa", sources=f"{ep[0].id},{ep[1].id}")
    fb = _node(NodeKind.FACT, "fb")
    re_ = _node(NodeKind.REFLECTION, "r")
    co = _node(NodeKind.CONCEPT, "c")
    edges = [
        Edge(fa.id, ep[0].id, EdgeKind.DERIVED_FROM),
        Edge(fa.id, ep[1].id, EdgeKind.DERIVED_FROM, 0.91),
        Edge(fb.id, ep[2].id, EdgeKind.DERIVED_FROM),
        Edge(re_.id, fa.id, EdgeKind.DERIVED_FROM_FACT, 0.73),
        Edge(re_.id, fb.id, EdgeKind.DERIVED_FROM_FACT),
        Edge(ep[1].id, co.id, EdgeKind.HAS_CONCEPT, 0.55),
        Edge(fa.id, co.id, EdgeKind.ABOUT_CONCEPT),
        Edge(fb.id, co.id, EdgeKind.ABOUT_CONCEPT, 0.123457),
    ]
    await graph.write(T, [fa, fb, re_, co], edges)
    return n | {x.id: x for x in (fa, fb, re_, co)}


async def _to_legacy(graph: GraphStore, nodes: list[str]) -> int:
    """Rewrite the adjacency of ``nodes`` in the layout before the letters; entries rewritten."""
    kinds = {c: k for k, c in EDGE_CODES.items()}
    n = 0
    for node in nodes:
        key = graph.keys.adj(T, node)
        for nb, val in (await graph.redis.hgetall(key)).items():
            text = val.decode()
            kind, weight = kinds[text[0].upper()], text[1:] or "1"
            legacy = f"{kind.value}|{'o' if text[0].isupper() else 'i'}|{weight}"
            await graph.redis.hset(key, nb, legacy)
            n += 1
    return n


async def _reads(graph: GraphStore, n: dict[str, Node]) -> dict[str, object]:
    ids_ = list(n)
    by_name = {x.text.removeprefix("text of "): x.id for x in n.values()}
    weights = {k: 0.1 + 0.13 * i for i, k in enumerate(EdgeKind)}
    sub = await graph.expand(
        T, [by_name["e0"]], hops=3, hub_degree=50, max_nodes=100, type_weights=weights
    )
    adj = await graph.neighbours(T, ids_)
    return {
        "expand": (sub.nodes, sub.degrees.tolist(), sub.edges.tolist()),
        "provenance": await graph.provenance(T, ids_),
        "neighbours": {i: sorted(map(repr, v)) for i, v in adj.items()},
        "of_kind": [
            await graph.neighbours_of_kind(T, ids_, kind, outgoing=out, limit=10)
            for kind in EdgeKind
            for out in (True, False)
        ],
    }


async def test_values_are_letters_and_weights_below_one(graph: GraphStore):
    n = await _graph(graph)
    by_name = {x.text.removeprefix("text of "): x.id for x in n.values()}
    e0, e1, fa = by_name["e0"], by_name["e1"], by_name["fa"]
    at_e1 = await graph.redis.hgetall(graph.keys.adj(T, e1))
    assert at_e1[e0.encode()] == b"n"  # NEXT, incoming, weight 1
    assert at_e1[fa.encode()] == b"d0.91"  # DERIVED_FROM, incoming
    at_fa = await graph.redis.hgetall(graph.keys.adj(T, fa))
    assert at_fa[e0.encode()] == b"D"
    assert at_fa[by_name["r"].encode()] == b"f0.73"


@pytest.mark.parametrize("rewritten", ["all", "half"])
async def test_the_layout_before_the_letters_reads_the_same(graph: GraphStore, rewritten: str):
    n = await _graph(graph)
    new = await _reads(graph, n)
    nodes = list(n) if rewritten == "all" else list(n)[::2]
    assert await _to_legacy(graph, nodes) > 0
    assert await _reads(graph, n) == new
    assert new["provenance"] and all(new["of_kind"])  # the reads found something to compare


async def test_forget_bridges_the_chain_over_either_layout(graph: GraphStore):
    """The cascade removes an episode whose NEXT entries were written before the letters and
    bridges its neighbours with letters; the fact citing only it goes, the concept stays."""
    n = await _graph(graph)
    by_name = {x.text.removeprefix("text of "): x.id for x in n.values()}
    e0, e1, e2 = by_name["e0"], by_name["e1"], by_name["e2"]
    await _to_legacy(graph, list(n))
    await ForgetStore(graph.redis, graph.keys).remove_episodes(T, [e2, e1])
    assert await graph.chain(T, "c1") == [e0]
    await ForgetStore(graph.redis, graph.keys).remove_episodes(T, [e0])
    assert await graph.chain(T, "c1") == []
    # with three episodes, forgetting the middle one bridges the other two
    await graph.delete_tenant(T)
    n = await _graph(graph)
    by_name = {x.text.removeprefix("text of "): x.id for x in n.values()}
    e0, e1, e2 = by_name["e0"], by_name["e1"], by_name["e2"]
    await _to_legacy(graph, list(n))
    removed = await ForgetStore(graph.redis, graph.keys).remove_episodes(T, [e1])
    assert removed["episode"] == 1
    assert await graph.redis.hget(graph.keys.adj(T, e0), e2) == b"N"
    assert await graph.redis.hget(graph.keys.adj(T, e2), e0) == b"n"
    nbs = await graph.neighbours(T, [e0])
    got = {(x.node, x.kind, x.outgoing, x.weight) for x in nbs[e0]}
    assert got == {
        (e2, EdgeKind.NEXT, True, 1.0),
        (by_name["fa"], EdgeKind.DERIVED_FROM, False, 1.0),
    }
    kept = await graph.existing(T, list(n))
    assert {by_name[x] for x in ("fa", "fb", "c")} <= kept  # each still has a source or an edge


async def test_migrate_graph_rewrites_older_values_once(graph: GraphStore):
    """``gaama migrate graph``: every value of the older layout rewritten with letters, the reads
    unchanged; a second run does nothing."""
    n = await _graph(graph)
    before = await _reads(graph, n)
    rewritten = await _to_legacy(graph, list(n))
    report = await migrate_graph(graph.redis, graph.keys)
    assert report.values_rewritten == rewritten
    assert report.adjacency_keys == len(n)
    for node in n:
        values = (await graph.redis.hgetall(graph.keys.adj(T, node))).values()
        assert not any(b"|" in v for v in values)
    assert await _reads(graph, n) == before
    assert (await migrate_graph(graph.redis, graph.keys)).values_rewritten == 0


@pytest.mark.single_redis  # sets a server setting for a moment; a cluster has three servers
async def test_migrate_graph_rewrites_a_skiplist_chain_as_a_listpack(graph: GraphStore):
    redis = graph.redis
    await _graph(graph)
    chain = graph.keys.chain(T, "c1")
    members = await redis.zrange(chain, 0, -1, withscores=True)
    setting = (await redis.config_get("zset-max-listpack-entries"))["zset-max-listpack-entries"]
    await redis.config_set("zset-max-listpack-entries", 2)  # as if made under a lower setting
    try:
        await redis.delete(chain)
        await redis.zadd(chain, dict(members))
        assert await redis.object("encoding", chain) == b"skiplist"
    finally:
        await redis.config_set("zset-max-listpack-entries", setting)
    assert (await migrate_graph(redis, graph.keys)).chains_rewritten == 1
    assert await redis.object("encoding", chain) == b"listpack"
    assert await redis.zrange(chain, 0, -1, withscores=True) == members
    assert (await migrate_graph(redis, graph.keys)).chains_rewritten == 0


async def test_a_value_changed_since_it_was_read_is_left_alone(graph: GraphStore):
    """The migration replaces a value only if it is still the one it read: a concurrent write
    or forget wins."""
    key = graph.keys.adj(T, "ep_x")
    await graph.redis.hset(key, mapping={"ep_y": "NEXT|o|1", "ep_z": "N"})
    replace = scripts.register(graph.redis, "replace_if.lua")
    args = ["ep_y", "NEXT|o|1", "N", "ep_z", "NEXT|o|1", "N0.5", "ep_gone", "NEXT|i|1", "n"]
    assert await replace(keys=[key], args=args) == 1
    assert await graph.redis.hgetall(key) == {b"ep_y": b"N", b"ep_z": b"N"}
