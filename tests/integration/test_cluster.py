"""Redis Cluster only (GAAMA_TEST_REDIS_CLUSTER=3, `make test-cluster`): a tenant's slot moved
to another primary while its turns are being written."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time

import numpy as np
import pytest

from gaama import devstack
from gaama.errors import StoreUnavailable
from gaama.model import NodeKind
from gaama.store import cluster
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from services.runtime.readiness import IndexKeeper, redis_state
from tests.integration.test_graph_store import episode

pytestmark = pytest.mark.requires_stack

log = logging.getLogger(__name__)
TURNS = 300
SEARCH_DEADLINE_S = 10.0


@pytest.fixture(autouse=True)
def _cluster_only(settings) -> None:
    if not settings.redis_cluster:
        pytest.skip("needs Redis Cluster (GAAMA_TEST_REDIS_CLUSTER=3)")


def _vector(i: int) -> list[float]:
    v = np.random.default_rng(i).standard_normal(384).astype(np.float32)
    return (v / np.linalg.norm(v)).tolist()


async def _write_all(graph: GraphStore, tenant: str) -> int:
    """Append TURNS episodes in order, retrying each on an outage as the runtime does."""
    retries = 0
    for i in range(TURNS):
        node = episode(tenant, "c", str(i), f"turn {i}", _vector(i))
        while True:
            try:
                await graph.append_episode(node)
                break
            except StoreUnavailable:  # the slot moving: TRYAGAIN / MOVED, read the map again
                retries += 1
                await asyncio.sleep(0.01)
    return retries


async def _search_while(
    index: VectorIndex, tenant: str, want: str, done: asyncio.Event
) -> dict[str, int]:
    """Search the tenant for the node ``want`` until ``done``: how many searches found it first,
    found something else, or met an outage."""
    seen = {"right": 0, "wrong": 0, "unavailable": 0}
    while not done.is_set():
        try:
            hits = await index.knn(tenant, _vector(7), 5)
            seen["right" if hits and hits[0].id == want else "wrong"] += 1
        except StoreUnavailable:
            seen["unavailable"] += 1
        await asyncio.sleep(0.005)
    return seen


async def test_a_tenant_moved_between_primaries_while_turns_flow(
    graph: GraphStore, index: VectorIndex, keys: Keys, redis_client
):
    """The slot of a tenant is migrated (SETSLOT + MIGRATE) to another primary while its turns
    are appended and searched: every turn is stored once, in order; every search during the move
    finds the right node (the keys already moved are searched on the importing primary); after
    it, the new primary's index holds every node (it indexes the migrated keys itself)."""
    tenant = "moving"
    await cluster.initialized(redis_client)
    source = cluster.owner(redis_client, keys.node(tenant, ""))
    target = next(n for n in cluster.primaries(redis_client) if n.name != source.name)
    slot = cluster.slot_of(keys.node(tenant, ""))
    want = episode(tenant, "c", "7", "", _vector(7)).id

    writer = asyncio.create_task(_write_all(graph, tenant))
    while len(await graph.chain(tenant, "c")) < TURNS // 3:
        await asyncio.sleep(0.01)
    done = asyncio.Event()
    searcher = asyncio.create_task(_search_while(index, tenant, want, done))
    before = len(await graph.chain(tenant, "c"))
    moved = await asyncio.to_thread(devstack.move_slot, source.port, slot, target.port)
    moved_at = time.monotonic()
    # Right after the move: what was written before it is found on the new primary.
    while True:
        hits = await index.knn(tenant, _vector(7), 5)
        counts = await index.count(tenant)
        if hits and hits[0].id == want and counts[NodeKind.EPISODE.value] >= before:
            settled = time.monotonic() - moved_at
            break
        assert time.monotonic() - moved_at < SEARCH_DEADLINE_S, (hits[:1], counts, before)
        await asyncio.sleep(0.01)
    retries = await writer
    done.set()
    searches = await searcher

    assert moved > 0
    assert cluster.owner(redis_client, keys.node(tenant, "")).name == target.name
    chain = await graph.chain(tenant, "c")
    assert chain == [episode(tenant, "c", str(i), "", _vector(i)).id for i in range(TURNS)]
    assert (await index.count(tenant))[NodeKind.EPISODE.value] == TURNS
    scanned = await index.scan(tenant, kinds=[NodeKind.EPISODE], limit=None)
    assert sorted(node_id for node_id, _, _ in scanned) == sorted(chain)
    assert searches["wrong"] == 0 and searches["right"] > 0, searches
    log.info(
        "slot %d: %d keys moved (%d turns before the move); %d write retries; searches during "
        "the turns: %s; right on the new primary %.3f s after the move",
        slot,
        moved,
        before,
        retries,
        searches,
        settled,
    )


async def test_a_half_moved_tenant_is_searched_and_written_on_both_primaries(
    graph: GraphStore, index: VectorIndex, keys: Keys, redis_client
):
    """Halfway through a slot's migration (some of the tenant's keys on each primary), the
    tenant's searches see every node (both primaries searched and merged, by distance and by
    time), and a new turn is stored (an outage while its keys straddle the two, retried)."""
    tenant = "halfway"
    for i in range(40):
        await graph.append_episode(episode(tenant, "c", str(i), f"turn {i}", _vector(i)))
    await cluster.initialized(redis_client)
    source = cluster.owner(redis_client, keys.node(tenant, ""))
    target = next(n for n in cluster.primaries(redis_client) if n.name != source.name)
    slot = cluster.slot_of(keys.node(tenant, ""))
    ids_ = [episode(tenant, "c", str(i), "", _vector(i)).id for i in range(40)]

    await asyncio.to_thread(devstack.begin_slot_move, source.port, slot, target.port)
    try:
        assert await asyncio.to_thread(
            devstack.migrate_slot_keys, source.port, slot, target.port, 40
        )
        for i in (3, 31):
            hits = await index.knn(tenant, _vector(i), 3)
            assert hits[0].id == ids_[i]
        assert (await index.count(tenant))[NodeKind.EPISODE.value] == 40
        scanned = await index.scan(tenant, kinds=[NodeKind.EPISODE], limit=None)
        assert sorted(n for n, _, _ in scanned) == sorted(ids_)
        assert len(await index.scan(tenant, kinds=[NodeKind.EPISODE], limit=7)) == 7
        # A new turn's keys straddle the two primaries: refused (TRYAGAIN) until the slot is
        # handed over, retried as an outage meanwhile.
        writer = asyncio.create_task(_write_all_from(graph, tenant, 40, 45))
        await asyncio.sleep(0.5)
        assert not writer.done()
    finally:
        await asyncio.to_thread(devstack.move_slot, source.port, slot, target.port)
    retries = await writer
    assert retries[0] > 0
    assert await graph.chain(tenant, "c") == [
        episode(tenant, "c", str(i), "", _vector(i)).id for i in range(45)
    ]
    assert (await index.count(tenant))[NodeKind.EPISODE.value] == 45


async def _write_all_from(graph: GraphStore, tenant: str, first: int, end: int) -> list[int]:
    """Append turns ``first``..``end``-1, each retried on an outage; the retries of each."""
    out = []
    for i in range(first, end):
        node, retries = episode(tenant, "c", str(i), f"turn {i}", _vector(i)), 0
        deadline = time.monotonic() + SEARCH_DEADLINE_S * 3
        while True:
            try:
                await graph.append_episode(node)
                break
            except StoreUnavailable:
                retries += 1
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
        out.append(retries)
    return out


async def test_a_primary_that_joins_gets_the_index_from_the_keeper(
    graph: GraphStore, index: VectorIndex, keys: Keys, redis_client, tmp_path
):
    """A primary added to the cluster and given a tenant's slot has no vector index: the index
    is not ready, the health check reports it missing without creating it, the index keeper
    creates it there, and the tenant's searches then find its nodes (indexed when they were
    migrated in, or when the index was created)."""
    tenant = "joiner"
    for i in range(10):
        await graph.append_episode(episode(tenant, "c", str(i), f"turn {i}", _vector(i)))
    await cluster.initialized(redis_client)
    source = cluster.owner(redis_client, keys.node(tenant, ""))
    slot = cluster.slot_of(keys.node(tenant, ""))
    port = devstack.free_port()
    pid = await asyncio.to_thread(devstack.add_primary, tmp_path, port, source.port)
    moved = False
    try:
        await asyncio.to_thread(devstack.move_slot, source.port, slot, port)
        moved = True
        assert not await index.ready()
        assert "missing" in (await redis_state(redis_client, index) or "")
        assert not await index.ready(), "the health check created the index"
        assert await IndexKeeper(index).tick()
        assert await index.ready()
        want = episode(tenant, "c", "4", "", _vector(4)).id
        deadline = time.monotonic() + SEARCH_DEADLINE_S
        while True:
            hits = await index.knn(tenant, _vector(4), 3)
            if hits and hits[0].id == want:
                break
            assert time.monotonic() < deadline, hits[:1]
            await asyncio.sleep(0.05)
        assert cluster.owner(redis_client, keys.node(tenant, "")).port == port
    finally:
        try:
            if moved:
                await asyncio.to_thread(devstack.move_slot, port, slot, source.port)
            await asyncio.to_thread(devstack.remove_primary, port, pid, source.port)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(
                    pid, signal.SIGKILL
                )  # whatever failed above: the server does not outlive us
        await cluster.refresh(redis_client)
    assert (await index.count(tenant))[NodeKind.EPISODE.value] == 10
