"""GraphStore and VectorIndex against the real Redis with the Query Engine."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gaama import ids
from gaama.errors import DimensionMismatch, StoreUnavailable, ValidationError
from gaama.model import EDGE_TYPE_WEIGHTS, Edge, EdgeKind, Node, NodeKind, is_hub, walk_weight
from gaama.retrieval.pack import RETURNED_KINDS
from gaama.retrieval.scoring import cosine
from gaama.store.codecs import VECTOR_FIELD, stored_vectors, vector_fields
from gaama.store.graph import GraphStore
from gaama.store.subgraph import ReadAhead
from gaama.store.vectors import VectorIndex

pytestmark = pytest.mark.requires_stack


def episode(tenant: str, conv: str, turn: str, text: str, vec: list[float]) -> Node:
    return Node(
        id=ids.episode_id(tenant, conv, turn),
        tenant=tenant,
        kind=NodeKind.EPISODE,
        text=text,
        conversation=conv,
        turn_id=turn,
        vector=vec,
    )


async def test_append_episode_builds_next_chain_and_is_idempotent(graph: GraphStore, embedder):
    vecs = await embedder.embed(["a", "b", "c"])
    nodes = [
        episode("acme", "c1", str(i), t, v.tolist())
        for i, (t, v) in enumerate(zip("abc", vecs, strict=True))
    ]
    assert [await graph.append_episode(n) for n in nodes] == [True, True, True]
    # redelivery of every turn changes nothing
    assert [await graph.append_episode(n) for n in nodes] == [False, False, False]
    assert await graph.chain("acme", "c1") == [n.id for n in nodes]
    adj = await graph.neighbours("acme", [nodes[1].id])
    got = {(nb.node, nb.kind, nb.outgoing) for nb in adj[nodes[1].id]}
    assert got == {(nodes[0].id, EdgeKind.NEXT, False), (nodes[2].id, EdgeKind.NEXT, True)}
    assert (await _degrees(graph, "acme", [nodes[0].id]))[nodes[0].id] == 1


async def test_append_episodes_keeps_each_conversations_order_and_is_idempotent(
    graph: GraphStore, embedder
):
    """A batch's appends, one transaction per tenant: the same chains as one call per turn, the
    turns already stored reported and left alone."""
    texts = [f"turn {i}" for i in range(8)]
    vecs = await embedder.embed(texts)
    # two tenants, two conversations each, interleaved as a batch from four partitions
    nodes = [
        episode(f"t{i % 2}", f"c{i // 2 % 2}", str(i), texts[i], vecs[i].tolist()) for i in range(8)
    ]
    assert await graph.append_episode(nodes[0])  # stored by an earlier, redelivered batch
    assert await graph.append_episodes(nodes) == [False, *[True] * 7]
    assert await graph.append_episodes(nodes) == [False] * 8  # redelivery changes nothing
    for tenant in ("t0", "t1"):
        for conv in ("c0", "c1"):
            want = [n.id for n in nodes if (n.tenant, n.conversation) == (tenant, conv)]
            assert await graph.chain(tenant, conv) == want
    first, second = nodes[0], nodes[4]  # t0/c0's first two turns
    adj = await graph.neighbours("t0", [second.id])
    assert {(nb.node, nb.kind, nb.outgoing) for nb in adj[second.id]} == {
        (first.id, EdgeKind.NEXT, False)
    }


@pytest.mark.single_redis  # maxmemory is set on one server; a cluster spreads tenants over three
async def test_a_refused_append_transaction_writes_none_of_its_turns(
    graph: GraphStore, embedder, redis_client
):
    """A refused transaction writes none of its appends: a later turn is never stored without
    an earlier one."""
    texts = [f"turn {i}" for i in range(3)]
    vecs = await embedder.embed(texts)
    more = [episode("t0", "c9", str(i), texts[i], vecs[i].tolist()) for i in range(3)]
    await redis_client.config_set("maxmemory-policy", "noeviction")
    await redis_client.config_set("maxmemory", 1)
    try:
        with pytest.raises(StoreUnavailable, match="maxmemory"):
            await graph.append_episodes(more)
    finally:
        await redis_client.config_set("maxmemory", 0)
    assert await graph.chain("t0", "c9") == []
    assert await graph.append_episodes(more) == [True] * 3


async def test_expand_weights_and_hubs_follow_the_python_definition(graph: GraphStore):
    """The production expansion script, on a small graph with every edge kind and odd stored
    weights, gives each edge :func:`walk_weight` (with the type weights passed in) and stops at
    exactly the nodes :func:`is_hub` names."""
    t = "acme"
    ep = [_node(t, NodeKind.EPISODE, f"e{i}", "c1") for i in range(3)]
    fa = [_node(t, NodeKind.FACT, f"f{i}", "c1") for i in range(3)]
    co = _node(t, NodeKind.CONCEPT, "c")
    re_ = _node(t, NodeKind.REFLECTION, "r", "c1")
    edges = [
        Edge(ep[0].id, ep[1].id, EdgeKind.NEXT, 0.37),
        Edge(fa[0].id, ep[0].id, EdgeKind.DERIVED_FROM, 0.91),
        Edge(re_.id, fa[0].id, EdgeKind.DERIVED_FROM_FACT, 0.73),
        Edge(ep[0].id, co.id, EdgeKind.HAS_CONCEPT, 0.55),
        Edge(fa[1].id, co.id, EdgeKind.ABOUT_CONCEPT, 0.123457),
        Edge(fa[2].id, ep[2].id, EdgeKind.DERIVED_FROM, 1.0),
        Edge(fa[2].id, co.id, EdgeKind.ABOUT_CONCEPT, 0.6),
    ]
    await graph.write(t, [*ep, *fa, co, re_], edges)
    kind_of_pair = {frozenset((e.src, e.dst)): e for e in edges}
    type_weights = {k: 0.1 + 0.13 * i for i, k in enumerate(EdgeKind)}
    hub_degree = 3  # the concept has degree 3 (not a hub), e0 has 3, f2 2
    sub = await graph.expand(
        t, [ep[0].id], hops=3, hub_degree=hub_degree, max_nodes=100, type_weights=type_weights
    )
    assert len(sub.edges)
    for i, j, w in sub.edges.tolist():
        e = kind_of_pair[frozenset((sub.nodes[int(i)], sub.nodes[int(j)]))]
        assert w == pytest.approx(walk_weight(e.kind, e.weight, type_weights), abs=2**-30)
    # one less and the concept is a hub: reached, its edges to reached nodes kept, not expanded
    degrees = dict(zip(sub.nodes, sub.degrees.tolist(), strict=True))
    assert degrees[co.id] == 3 and not is_hub(degrees[co.id], hub_degree)
    assert fa[1].id in sub.nodes  # reached through the concept
    hubbed = await graph.expand(
        t, [ep[0].id], hops=3, hub_degree=2, max_nodes=100, type_weights=type_weights
    )
    assert is_hub(degrees[co.id], 2) and is_hub(degrees[ep[0].id], 2)
    assert hubbed.nodes == [ep[0].id]  # the seed itself is a hub: nothing is expanded


async def _degrees(graph: GraphStore, t: str, ids_: list[str]) -> dict[str, int]:
    """Each node's full store degree: the size of its adjacency hash."""
    return {i: int(await graph.redis.hlen(graph.keys.adj(t, i))) for i in ids_}


async def test_tenants_with_same_conversation_stay_apart(
    graph: GraphStore, index: VectorIndex, embedder
):
    [v] = await embedder.embed(["I adopted a puppy named Rex"])
    for tenant in ("t-a", "t-b"):
        await graph.append_episode(episode(tenant, "same", "1", "I adopted a puppy", v.tolist()))
    a_id, b_id = ids.episode_id("t-a", "same", "1"), ids.episode_id("t-b", "same", "1")
    assert a_id != b_id
    hits = await index.knn("t-a", v, 10)
    assert [h.id for h in hits] == [a_id]
    assert await graph.get_nodes("t-a", [b_id]) == {}
    assert await graph.chain("t-b", "same") == [b_id]


async def test_write_nodes_and_edges_atomically(graph: GraphStore, index: VectorIndex, embedder):
    t = "acme"
    [ve, vf, vc] = await embedder.embed(["Ann: I love pottery", "Ann loves pottery", "pottery"])
    ep = episode(t, "c", "1", "Ann: I love pottery", ve.tolist())
    await graph.append_episode(ep)
    fact = Node(
        id=ids.fact_id(t, "Ann loves pottery"),
        tenant=t,
        kind=NodeKind.FACT,
        text="Ann loves pottery",
        vector=vf.tolist(),
        extra={"sources": ep.id},
    )
    concept = Node(
        id=ids.concept_id(t, "pottery"),
        tenant=t,
        kind=NodeKind.CONCEPT,
        text="pottery",
        vector=vc.tolist(),
    )
    edges = [
        Edge(fact.id, ep.id, EdgeKind.DERIVED_FROM),
        Edge(ep.id, concept.id, EdgeKind.HAS_CONCEPT),
        Edge(fact.id, concept.id, EdgeKind.ABOUT_CONCEPT),
    ]
    for _ in range(2):  # a repeated write is harmless
        await graph.write(t, [fact, concept], edges)
    assert (await _degrees(graph, t, [concept.id]))[concept.id] == 2
    assert (await index.count(t))["fact"] == 1
    with pytest.raises(ValidationError, match="DERIVED_FROM edge must go fact→episode"):
        await graph.write(t, [], [Edge(ep.id, fact.id, EdgeKind.DERIVED_FROM)])
    with pytest.raises(ValidationError, match="belongs to tenant"):
        await graph.write("other", [fact])


async def test_index_dimension_is_checked(redis_client, keys, index: VectorIndex):
    wrong = VectorIndex(redis_client, index.name, 128, keys)
    with pytest.raises(DimensionMismatch, match="384-d"):
        await wrong.ensure()


async def test_services_starting_together_all_get_the_index(redis_client, keys, settings):
    """Every service ensures the index at start; on a new Redis they race between the check and
    the create, and the losers must accept the index the winner made (a chaos run saw reflect
    exit at start with "Index already exists")."""
    name = f"{settings.index_name}-race"
    racers = [VectorIndex(redis_client, name, settings.embed_dim, keys) for _ in range(6)]
    try:
        results = await asyncio.gather(*(r.ensure() for r in racers), return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        await racers[0].ensure()  # and the index made is one the checks accept
    finally:
        await racers[0].drop()


async def test_delete_tenant(graph: GraphStore, embedder):
    [v] = await embedder.embed(["x"])
    await graph.append_episode(episode("gone", "c", "1", "x", v.tolist()))
    await graph.append_episode(episode("gone", "c", "2", "y", v.tolist()))
    await graph.append_episode(episode("kept", "c", "1", "x", v.tolist()))
    assert await graph.delete_tenant("gone") >= 3
    assert await graph.chain("gone", "c") == []
    assert len(await graph.chain("kept", "c")) == 1


async def test_out_of_memory_is_transient_not_poison(graph: GraphStore, redis_client, embedder):
    """Under noeviction a full Redis refuses writes; that must stall (retry), not dead-letter."""
    from gaama.errors import StoreUnavailable

    [v] = await embedder.embed(["x"])
    await redis_client.config_set("maxmemory-policy", "noeviction")
    await redis_client.config_set("maxmemory", 1)
    try:
        with pytest.raises(StoreUnavailable, match="maxmemory"):
            await graph.append_episode(episode("oom", "c", "1", "x", v.tolist()))
        with pytest.raises(StoreUnavailable, match="maxmemory"):
            await graph.write("oom", [episode("oom", "c", "2", "y", v.tolist())])
    finally:
        await redis_client.config_set("maxmemory", 0)
    assert await graph.append_episode(episode("oom", "c", "1", "x", v.tolist()))


def _node(tenant: str, kind: NodeKind, name: str, conv: str = "", **extra: str) -> Node:
    return Node(
        id=ids.node_id(tenant, kind, name),
        tenant=tenant,
        kind=kind,
        text=f"text of {name}",
        conversation=conv,
        turn_id=f"turn-{name}" if kind is NodeKind.EPISODE else "",
        extra=dict(extra),
    )


async def _star_and_chain(graph: GraphStore, t: str) -> dict[str, Node]:
    """f0 → e1 (DERIVED_FROM, w 1.0), f0 → c (ABOUT_CONCEPT, w 0.9), f0 → hub (ABOUT_CONCEPT,
    w 0.5); e1 → e2 (NEXT); f2 (conversation c1, w 1.0) and f3 (c2, w 0.9) → c; 60 more facts →
    hub."""
    n = {name: _node(t, NodeKind.FACT, name, "c1") for name in ("f0", "f2")}
    n["f3"] = _node(t, NodeKind.FACT, "f3", "c2")
    n |= {name: _node(t, NodeKind.EPISODE, name, "c1") for name in ("e1", "e2")}
    n |= {name: _node(t, NodeKind.CONCEPT, name) for name in ("c", "hub")}
    spokes = [_node(t, NodeKind.FACT, f"s{i}", "c1") for i in range(60)]
    edges = [
        Edge(n["f0"].id, n["e1"].id, EdgeKind.DERIVED_FROM, 1.0),
        Edge(n["f0"].id, n["c"].id, EdgeKind.ABOUT_CONCEPT, 0.9),
        Edge(n["f0"].id, n["hub"].id, EdgeKind.ABOUT_CONCEPT, 0.5),
        Edge(n["e1"].id, n["e2"].id, EdgeKind.NEXT, 1.0),
        Edge(n["f2"].id, n["c"].id, EdgeKind.ABOUT_CONCEPT, 1.0),
        Edge(n["f3"].id, n["c"].id, EdgeKind.ABOUT_CONCEPT, 0.9),
        *(Edge(s.id, n["hub"].id, EdgeKind.ABOUT_CONCEPT, 1.0) for s in spokes),
    ]
    await graph.write(t, [*n.values(), *spokes], edges)
    return n


async def test_expand_reads_two_rings_without_going_through_hubs(graph: GraphStore):
    t = "acme"
    n = await _star_and_chain(graph, t)
    name = {node.id: k for k, node in n.items()}
    common = {"hops": 2, "hub_degree": 50, "type_weights": EDGE_TYPE_WEIGHTS}
    sub = await graph.expand(t, [n["f0"].id], max_nodes=500, **common)
    got = [name.get(i, "spoke") for i in sub.nodes]
    # seed first; the first ring heaviest walk weight first; the hub is reached, not expanded
    assert got == ["f0", "e1", "c", "hub", "e2", "f2", "f3"]
    assert dict(zip(got, sub.degrees.tolist(), strict=True))["hub"] == 61
    pairs = {frozenset((got[int(i)], got[int(j)])): round(w, 6) for i, j, w in sub.edges.tolist()}
    assert len(pairs) == len(sub.edges)  # each edge once, though f0–e1 is read from both ends
    assert pairs == {
        frozenset(("f0", "e1")): 0.8,  # type weight 0.8 × stored 1.0²
        frozenset(("f0", "c")): round(0.8 * 0.81, 6),
        frozenset(("f0", "hub")): round(0.8 * 0.25, 6),
        frozenset(("e1", "e2")): 0.8,
        frozenset(("c", "f2")): 0.8,
        frozenset(("c", "f3")): round(0.8 * 0.81, 6),
    }
    # the cap admits nodes in that order
    capped = await graph.expand(t, [n["f0"].id], max_nodes=3, **common)
    assert [name[i] for i in capped.nodes] == ["f0", "e1", "c"]
    # a scope drops facts and episodes outside it; concepts stay as bridges
    scoped = await graph.expand(t, [n["f0"].id], max_nodes=500, conversation="c1", **common)
    assert [name[i] for i in scoped.nodes] == ["f0", "e1", "c", "hub", "e2", "f2"]
    # one hop
    one = await graph.expand(t, [n["f0"].id], max_nodes=500, **{**common, "hops": 1})
    assert [name[i] for i in one.nodes] == ["f0", "e1", "c", "hub"]
    # another tenant's seed id reaches nothing of this tenant's
    other = await graph.expand("other", [n["f0"].id], max_nodes=500, **common)
    assert other.nodes == [n["f0"].id] and other.edges.size == 0


async def _true_degrees(graph: GraphStore, redis_client, keys, t: str) -> dict[str, int]:
    """Every node of ``t`` with an adjacency, and its size (HLEN)."""
    prefix = keys.adj_prefix(t)
    ids_ = [k.decode()[len(prefix) :] async for k in redis_client.scan_iter(match=f"{prefix}*")]
    return await _degrees(graph, t, ids_)


async def test_the_degree_index_follows_every_adjacency_write(
    graph: GraphStore, redis_client, keys, embedder
):
    """Each node's entry in the degree index is its adjacency size, after episode appends, edge
    writes and redeliveries of both; the expansion reads it, and a node the index lacks (data
    written before it existed) falls back to its adjacency size."""
    t = "acme"
    [v] = await embedder.embed(["x"])
    eps = [episode(t, "c", str(i), f"turn {i}", v.tolist()) for i in range(3)]
    for e in [*eps, eps[1]]:  # a redelivered append changes nothing
        await graph.append_episode(e)
    n = await _star_and_chain(graph, t)
    fact = _node(t, NodeKind.FACT, "about turn 0", "c")
    edges = [
        Edge(fact.id, eps[0].id, EdgeKind.DERIVED_FROM),
        Edge(fact.id, n["c"].id, EdgeKind.ABOUT_CONCEPT),
    ]
    await graph.write(t, [fact], edges)
    await graph.write(t, [fact], edges)  # redelivered
    index = {k.decode(): int(d) for k, d in (await redis_client.hgetall(keys.degrees(t))).items()}
    truth = await _true_degrees(graph, redis_client, keys, t)
    assert index == truth
    assert truth[eps[0].id] == 2 and truth[n["hub"].id] == 61 and truth[n["c"].id] == 4
    # the expansion's degrees are the index's, and the same without it
    seeds = [n["f0"].id, eps[0].id]
    common = {"hops": 2, "hub_degree": 50, "type_weights": EDGE_TYPE_WEIGHTS, "max_nodes": 500}
    sub = await graph.expand(t, seeds, **common)
    assert dict(zip(sub.nodes, sub.degrees.tolist(), strict=True)) == {
        node: truth[node] for node in sub.nodes
    }
    await redis_client.hset(keys.degrees(t), n["hub"].id, 7)  # the expansion does read it
    assert 7 in (await graph.expand(t, seeds, **common)).degrees.tolist()
    await redis_client.delete(keys.degrees(t))
    without = await graph.expand(t, seeds, **common)
    assert without.nodes == sub.nodes
    assert without.degrees.tolist() == sub.degrees.tolist()
    # the index is the tenant's: deleting the tenant deletes it
    await graph.write(t, [fact], edges)
    assert await redis_client.exists(keys.degrees(t))
    await graph.delete_tenant(t)
    assert not await redis_client.exists(keys.degrees(t))


def _ahead(dim: int, limit: int = 10, held: tuple[str, ...] = (), fields=None) -> ReadAhead:
    fields = ("text", "turn_id", VECTOR_FIELD) if fields is None else fields
    return ReadAhead(fields=fields, dim=dim, limit=limit, kinds=RETURNED_KINDS, held=held)


async def test_expansion_reads_ahead_the_first_admitted_nodes_with_a_vector(
    graph: GraphStore, redis_client, keys
):
    """The expansion's read-ahead returns, in admission order, the stored fields and vector of
    the first ``limit`` admitted nodes past the seeds that are of a returned kind, not held
    already and have a vector of the index's dimension; nothing of another tenant."""
    t, dim = "acme", 8
    n = await _star_and_chain(graph, t)  # admits f0 (seed), e1, c, hub, e2, f2, f3
    name = {node.id: k for k, node in n.items()}
    rng = np.random.default_rng(7)
    vectors = {
        k: rng.standard_normal(dim).astype(np.float32) for k in ("f0", "e1", "e2", "f3", "c")
    }
    for k, vector in vectors.items():
        await redis_client.hset(keys.node(t, n[k].id), mapping=vector_fields(vector))
    common = {"hops": 2, "hub_degree": 50, "max_nodes": 500, "type_weights": EDGE_TYPE_WEIGHTS}
    seed = [n["f0"].id]
    sub = await graph.expand(t, seed, read_ahead=_ahead(dim), **common)
    # the seed f0 is passed over, f2 has no vector, concepts are never returned
    assert [name[i] for i, _ in sub.shown] == ["e1", "e2", "f3"]
    assert sub.shown[0][1] == {"text": "text of e1", "turn_id": "turn-e1"}
    assert sub.shown[2][1] == {"text": "text of f3"}  # an absent field is left out
    assert sub.vectors.shape == (3, dim) and sub.vectors.dtype == np.float32
    for (node, _), vector in zip(sub.shown, sub.vectors, strict=True):  # each float16 vector
        stored = vectors[name[node]]
        assert np.array_equal(vector, stored_vectors([vector_fields(stored)[VECTOR_FIELD]], dim)[0])
        assert cosine(vector[None, :], stored)[0] > 0.9999
    # the read-ahead changes nothing of the expansion itself
    plain = await graph.expand(t, seed, **common)
    assert plain.nodes == sub.nodes and np.array_equal(plain.edges, sub.edges)
    assert plain.shown == [] and plain.vectors.size == 0
    # the first N only; candidates already held are passed over
    two = await graph.expand(t, seed, read_ahead=_ahead(dim, limit=2), **common)
    assert [name[i] for i, _ in two.shown] == ["e1", "e2"] and two.vectors.shape == (2, dim)
    held = await graph.expand(t, seed, read_ahead=_ahead(dim, held=(n["e1"].id,)), **common)
    assert [name[i] for i, _ in held.shown] == ["e2", "f3"]
    # a vector of another dimension is not this index's: passed over
    other_dim = await graph.expand(t, seed, read_ahead=_ahead(dim + 1), **common)
    assert other_dim.shown == [] and other_dim.vectors.shape == (0, dim + 1)
    # another tenant's seed reaches nothing, so reads nothing
    other = await graph.expand("other", seed, read_ahead=_ahead(dim), **common)
    assert other.shown == [] and other.vectors.shape == (0, dim)
    # the scripts flushed (a Redis restart): the call sends the script's source instead
    await redis_client.script_flush()
    again = await graph.expand(t, seed, read_ahead=_ahead(dim), **common)
    assert again.shown == sub.shown and np.array_equal(again.vectors, sub.vectors)


async def test_the_read_ahead_passes_over_a_vector_of_another_form(
    graph: GraphStore, redis_client, keys
):
    """A node holding only the old float32 vector (not yet migrated) or a vector of the wrong
    size is passed over, as the index passes over it; the others are read."""
    t, dim = "acme", 8
    n = await _star_and_chain(graph, t)
    rng = np.random.default_rng(3)
    for k in ("e1", "e2", "f3"):
        vector = rng.standard_normal(dim).astype(np.float32)
        await redis_client.hset(keys.node(t, n[k].id), mapping=vector_fields(vector))
    await redis_client.hdel(keys.node(t, n["e1"].id), VECTOR_FIELD)
    f32 = rng.standard_normal(dim).astype(np.float32).tobytes()
    await redis_client.hset(keys.node(t, n["e1"].id), "embedding", f32)
    await redis_client.hset(keys.node(t, n["e2"].id), VECTOR_FIELD, b"\x01\x02")
    sub = await graph.expand(
        t,
        [n["f0"].id],
        hops=2,
        hub_degree=50,
        max_nodes=500,
        type_weights=EDGE_TYPE_WEIGHTS,
        read_ahead=_ahead(dim, fields=["text"]),
    )
    assert [i for i, _ in sub.shown] == [n["f3"].id] and sub.vectors.shape == (1, dim)


async def test_provenance_is_resolved_in_one_read(graph: GraphStore, embedder):
    t = "acme"
    vecs = await embedder.embed(["one", "two"])
    e1 = episode(t, "c", "t1", "Ann: one", vecs[0].tolist())
    e2 = episode(t, "c", "t2", "Bob: two", vecs[1].tolist())
    for e in (e1, e2):
        await graph.append_episode(e)
    with_field = _node(t, NodeKind.FACT, "fa", "c", sources=f"{e1.id},{e2.id}")
    bare = _node(t, NodeKind.FACT, "fb", "c")  # no sources field: its edges say
    refl = _node(t, NodeKind.REFLECTION, "r", "c")
    await graph.write(
        t,
        [with_field, bare, refl],
        [
            Edge(with_field.id, e1.id, EdgeKind.DERIVED_FROM),
            Edge(with_field.id, e2.id, EdgeKind.DERIVED_FROM),
            Edge(bare.id, e2.id, EdgeKind.DERIVED_FROM),
            Edge(refl.id, with_field.id, EdgeKind.DERIVED_FROM_FACT),
            Edge(refl.id, bare.id, EdgeKind.DERIVED_FROM_FACT),
        ],
    )
    ids_ = [e1.id, with_field.id, bare.id, refl.id, "fa_missing"]
    prov = await graph.provenance(t, ids_)
    assert prov[e1.id] == [(e1.id, "t1")]
    assert prov[with_field.id] == [(e1.id, "t1"), (e2.id, "t2")]
    assert prov[bare.id] == [(e2.id, "t2")]
    # a reflection's turns are its facts' sources, each once
    assert sorted(prov[refl.id]) == sorted([(e1.id, "t1"), (e2.id, "t2")])
    assert prov["fa_missing"] == []
    # another tenant sees none of it
    assert all(not v for v in (await graph.provenance("other", ids_)).values())


async def test_read_ahead_similarity_equals_the_index_similarity(
    graph: GraphStore, index: VectorIndex, embedder
):
    """Expanded nodes' similarity is computed in the service from the vectors read ahead while
    PPR runs; it must be the vector index's own cosine similarity, so pool and expanded candidates
    are scored on one scale."""
    texts = ["I love pottery", "We went camping", "My dog is called Rex"]
    vecs = await embedder.embed(texts)
    pairs = enumerate(zip(texts, vecs, strict=True))
    eps = [episode("acme", "c", str(i), t, v.tolist()) for i, (t, v) in pairs]
    theirs = episode("other", "c", "0", texts[0], vecs[0].tolist())
    for e in [*eps, theirs]:
        await graph.append_episode(e)
    [q] = await embedder.embed(["pottery class"])
    sub = await graph.expand(
        "acme",
        [eps[0].id],
        hops=2,
        hub_degree=50,
        max_nodes=500,
        type_weights=EDGE_TYPE_WEIGHTS,
        read_ahead=_ahead(len(q)),
    )
    # the NEXT chain reaches the other two turns of this tenant, never the other tenant's
    assert sub.nodes == [e.id for e in eps]
    shown, vectors = sub.shown, sub.vectors
    assert [f for _, f in shown] == [{"text": e.text, "turn_id": e.turn_id} for e in eps[1:]]
    hits = {h.id: h.similarity for h in await index.knn("acme", q, 3)}
    assert set(hits) == {e.id for e in eps}
    ours = cosine(vectors, np.asarray(q, dtype=np.float32))
    for (node, _), similarity in zip(shown, ours.tolist(), strict=True):
        assert abs(similarity - hits[node]) < 1e-3  # both from the same float16 vector
    # the KNN carries the stored fields asked for
    [best] = await index.knn("acme", q, 1, fields=["text"])
    assert best.id == eps[0].id and best.fields == {"text": texts[0]}


async def test_a_missing_index_is_unavailable_not_a_crash(redis_client, keys):
    gone = VectorIndex(redis_client, "no-such-gaama-index", 384, keys)
    with pytest.raises(StoreUnavailable, match="vector index 'no-such-gaama-index' missing"):
        await gone.knn("acme", np.zeros(384, dtype=np.float32), 5)


async def test_a_node_with_its_vector_is_stored_as_a_listpack(
    graph: GraphStore, redis_client, keys, embedder
):
    """The embedded stack runs Redis with hash-max-listpack-value 4096 (docs/operations.md): a
    node's hash, vector included, is one compact listpack, not a hash table."""
    [v] = await embedder.embed(["x"])
    e = episode("acme", "c", "1", "a turn of ordinary length " * 8, v.tolist())
    await graph.append_episode(e)
    assert await redis_client.object("encoding", keys.node("acme", e.id)) == b"listpack"


async def test_a_conversation_of_a_thousand_turns_keeps_a_listpack_chain(
    graph: GraphStore, redis_client, keys
):
    """The embedded stack runs Redis with zset-max-listpack-entries 1024 (docs/operations.md): a
    conversation's NEXT chain of 1,000 episodes is a listpack, not a skiplist."""
    nodes = [episode("acme", "c", str(i), f"turn {i}", [1.0] * 384) for i in range(1000)]
    for i in range(0, len(nodes), 100):
        await graph.append_episodes(nodes[i : i + 100])
    assert await redis_client.zcard(keys.chain("acme", "c")) == 1000
    assert await redis_client.object("encoding", keys.chain("acme", "c")) == b"listpack"
