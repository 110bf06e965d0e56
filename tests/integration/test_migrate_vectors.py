"""Nodes written with the layout before float16 vectors (a float32 vector, indexed, and an int8
copy) are refused by the index check until ``gaama migrate vectors`` has converted them; then
they are found again, each tenant's only by that tenant. In place and to a new index name."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama.config import Settings
from gaama.embed import Embedder
from gaama.errors import ConfigError
from gaama.ids import concept_id, fact_id
from gaama.model import EDGE_TYPE_WEIGHTS, Edge, EdgeKind, Node, NodeKind
from gaama.retrieval.pack import RETURNED_KINDS
from gaama.store.codecs import (
    LEGACY_COMPACT_FIELD,
    LEGACY_VECTOR_FIELD,
    TAG_FIELDS,
    VECTOR_FIELD,
    node_mapping,
)
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.migrate import migrate_index
from gaama.store.subgraph import ReadAhead
from gaama.store.vectors import VectorIndex

pytestmark = pytest.mark.requires_stack

DIM = 384
TEXTS = {
    "acme": ["Alice moved to Lisbon in May", "Bob adopted a grey cat", "The roof leaks again"],
    "other": ["Carol runs a bakery", "Dan plays the cello"],
}


def _old_schema(name: str, keys: Keys) -> list[object]:
    """The index of the layout before float16: exact tags, a float32 vector in ``embedding``."""
    return [
        "FT.CREATE", name, "ON", "HASH", "PREFIX", 1, keys.node_prefix, "SCHEMA",
        *(x for f in TAG_FIELDS.values() for x in (f, "TAG", "CASESENSITIVE")),
        "kind", "TAG", "CASESENSITIVE", "time", "NUMERIC",
        LEGACY_VECTOR_FIELD, "VECTOR", "HNSW", 10, "TYPE", "FLOAT32", "DIM", DIM,
        "DISTANCE_METRIC", "COSINE", "M", 16, "EF_CONSTRUCTION", 200,
    ]  # fmt: skip


async def _write_old(
    redis: aioredis.Redis, keys: Keys, tenant: str, text: str, vector: np.ndarray
) -> str:
    """A fact as an old writer stored it: float32 vector and its int8 copy, no float16."""
    node = Node(id=fact_id(tenant, text), tenant=tenant, kind=NodeKind.FACT, text=text, time=1.0)
    mapping = node_mapping(node)
    v = np.asarray(vector, dtype=np.float32)
    mapping[LEGACY_VECTOR_FIELD] = v.tobytes()
    mapping[LEGACY_COMPACT_FIELD] = np.rint(v * (127 / np.abs(v).max())).astype(np.int8).tobytes()
    await redis.hset(keys.node(tenant, node.id), mapping=mapping)
    return node.id


async def _old_data(
    redis: aioredis.Redis, keys: Keys, embedder: Embedder
) -> dict[str, list[tuple[str, np.ndarray]]]:
    out: dict[str, list[tuple[str, np.ndarray]]] = {}
    for tenant, texts in TEXTS.items():
        vectors = await embedder.embed(texts)
        out[tenant] = [
            (await _write_old(redis, keys, tenant, t, v), v)
            for t, v in zip(texts, vectors, strict=True)
        ]
    return out


async def _assert_found(index: VectorIndex, data: dict[str, list[tuple[str, np.ndarray]]]) -> None:
    """Each node is its own nearest neighbour, within its tenant only."""
    for tenant, nodes in data.items():
        mine = {i for i, _ in nodes}
        for node_id, vector in nodes:
            hits = await index.knn(tenant, vector, 10)
            assert {h.id for h in hits} == mine
            assert hits[0].id == node_id and hits[0].similarity > 0.999


async def _fields(redis: aioredis.Redis, keys: Keys, tenant: str, node_id: str) -> set[str]:
    return {f.decode() for f in await redis.hkeys(keys.node(tenant, node_id))}


@pytest.mark.single_redis  # the float32 layout was never written on a cluster
async def test_old_vectors_are_refused_then_migrated_in_place(
    redis_client: aioredis.Redis, keys: Keys, settings: Settings, embedder: Embedder
) -> None:
    name = settings.index_name
    await redis_client.execute_command(*_old_schema(name, keys))
    data = await _old_data(redis_client, keys, embedder)
    index = VectorIndex(redis_client, name, DIM, keys)
    try:
        with pytest.raises(ConfigError, match=r"FLOAT32 vectors in 'embedding'.*migrate vectors"):
            await index.ensure()
        lines: list[str] = []
        report = await migrate_index(redis_client, index, progress=lines.append)
        total = sum(len(v) for v in data.values())
        assert report.dropped_old_index and report.vectors_converted == total
        assert report.old_vectors_removed == total and not report.old_vectors_kept_for
        assert report.indexed == total and lines
        await index.ensure()  # accepted now
        for tenant, nodes in data.items():
            for node_id, _ in nodes:
                fields = await _fields(redis_client, keys, tenant, node_id)
                assert VECTOR_FIELD in fields
                assert not fields & {LEGACY_VECTOR_FIELD, LEGACY_COMPACT_FIELD}
        await _assert_found(index, data)
        again = await migrate_index(redis_client, index)
        assert not again.dropped_old_index and again.nodes_updated == 0
        assert again.nodes_seen == total and again.indexed == total
        # the expansion's read-ahead reads the converted vectors (the facts linked to a concept)
        graph = GraphStore(redis_client, keys)
        facts = dict(data["acme"])
        topic = Node(
            id=concept_id("acme", "topic"),
            tenant="acme",
            kind=NodeKind.CONCEPT,
            text="topic",
        )
        links = [Edge(f, topic.id, EdgeKind.ABOUT_CONCEPT, 1.0) for f in facts]
        await graph.write("acme", [topic], links)
        ahead = ReadAhead(fields=["text"], dim=DIM, limit=9, kinds=RETURNED_KINDS, held=())
        sub = await graph.expand(
            "acme",
            [topic.id],
            hops=1,
            hub_degree=50,
            max_nodes=50,
            type_weights=EDGE_TYPE_WEIGHTS,
            read_ahead=ahead,
        )
        assert sorted(i for i, _ in sub.shown) == sorted(facts)
        want = np.stack([facts[i] for i, _ in sub.shown])
        assert np.abs(sub.vectors - want).max() < 1e-3
    finally:
        await index.drop()


@pytest.mark.single_redis  # the float32 layout was never written on a cluster
async def test_migration_to_a_new_name_keeps_the_old_index_serving(
    redis_client: aioredis.Redis, keys: Keys, settings: Settings, embedder: Embedder
) -> None:
    old_name, new_name = f"{settings.index_name}-v1", f"{settings.index_name}-v2"
    await redis_client.execute_command(*_old_schema(old_name, keys))
    data = await _old_data(redis_client, keys, embedder)
    total = sum(len(v) for v in data.values())
    new = VectorIndex(redis_client, new_name, DIM, keys)
    try:
        report = await migrate_index(redis_client, new)
        assert not report.dropped_old_index and report.vectors_converted == total
        assert report.old_vectors_kept_for == [old_name] and report.old_vectors_removed == 0
        await _assert_found(new, data)
        # the old index still finds every node by its float32 vector
        node_id, vector = data["acme"][0]
        reply = await redis_client.execute_command(
            "FT.SEARCH", old_name, f"*=>[KNN 1 @{LEGACY_VECTOR_FIELD} $v]",
            "PARAMS", 2, "v", np.asarray(vector, dtype=np.float32).tobytes(),
            "RETURN", 0, "DIALECT", 2,
        )  # fmt: skip
        assert reply[1].decode() == keys.node("acme", node_id)
        # an old writer adds a node meanwhile; running again converts it, and only it
        late = (await embedder.embed(["Erin learns Greek"]))[0]
        late_id = await _write_old(redis_client, keys, "acme", "Erin learns Greek", late)
        data["acme"].append((late_id, late))
        again = await migrate_index(redis_client, new)
        assert again.vectors_converted == 1 and again.nodes_updated == 1
        for _ in range(100):  # the new index picks up the converted node in the background
            if sum((await new.count("acme")).values()) == len(data["acme"]):
                break
            await asyncio.sleep(0.05)
        await _assert_found(new, data)
        # once the old index is gone, a last run frees the float32 vectors and int8 copies
        await redis_client.execute_command("FT.DROPINDEX", old_name)
        last = await migrate_index(redis_client, new)
        assert last.old_vectors_removed == total + 1 and last.vectors_converted == 0
        assert not await _fields(redis_client, keys, "acme", late_id) & {
            LEGACY_VECTOR_FIELD,
            LEGACY_COMPACT_FIELD,
        }
        await _assert_found(new, data)
        assert (await migrate_index(redis_client, new)).nodes_updated == 0
    finally:
        await new.drop()
        with contextlib.suppress(ResponseError):  # gone already unless the test failed early
            await redis_client.execute_command("FT.DROPINDEX", old_name)
