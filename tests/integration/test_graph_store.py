"""GraphStore and VectorIndex against the real Redis with the Query Engine."""

from __future__ import annotations

import pytest

from gaama import ids
from gaama.errors import DimensionMismatch, ValidationError
from gaama.model import Edge, EdgeKind, Node, NodeKind
from gaama.store.graph import GraphStore
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
    assert (await graph.degrees("acme", [nodes[0].id]))[nodes[0].id] == 1


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
    assert (await graph.degrees(t, [concept.id]))[concept.id] == 2
    assert (await index.count(t))["fact"] == 1
    with pytest.raises(ValidationError, match="DERIVED_FROM edge must go fact→episode"):
        await graph.write(t, [], [Edge(ep.id, fact.id, EdgeKind.DERIVED_FROM)])
    with pytest.raises(ValidationError, match="belongs to tenant"):
        await graph.write("other", [fact])


async def test_index_dimension_is_checked(redis_client, keys, index: VectorIndex):
    wrong = VectorIndex(redis_client, index.name, 128, keys)
    with pytest.raises(DimensionMismatch, match="384-d"):
        await wrong.ensure()


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
