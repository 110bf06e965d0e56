"""Redis Cluster only (GAAMA_TEST_REDIS_CLUSTER=3, `make test-cluster`): a tenant's slot moved
to another primary while its turns are being written."""

from __future__ import annotations

import asyncio
import logging
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


async def test_a_tenant_moved_between_primaries_while_turns_flow(
    graph: GraphStore, index: VectorIndex, keys: Keys, redis_client
):
    """The slot of a tenant is migrated (SETSLOT + MIGRATE) to another primary while its turns
    are appended: every turn is stored once, in order, and the tenant's searches return its
    nodes from the new primary (the Query Engine there indexes the migrated keys)."""
    tenant = "moving"
    await cluster.initialized(redis_client)
    source = cluster.owner(redis_client, keys.node(tenant, ""))
    target = next(n for n in cluster.primaries(redis_client) if n.name != source.name)
    slot = cluster.slot_of(keys.node(tenant, ""))

    writer = asyncio.create_task(_write_all(graph, tenant))
    while len(await graph.chain(tenant, "c")) < TURNS // 3:
        await asyncio.sleep(0.01)
    moved = await asyncio.to_thread(devstack.move_slot, source.port, slot, target.port)
    moved_at = time.monotonic()
    retries = await writer

    assert moved > 0
    assert cluster.owner(redis_client, keys.node(tenant, "")).name == target.name
    chain = await graph.chain(tenant, "c")
    assert chain == [episode(tenant, "c", str(i), "", _vector(i)).id for i in range(TURNS)]
    # Searches find the tenant's nodes on the new primary within a bounded time.
    while True:
        hits = await index.knn(tenant, _vector(7), 5)
        counts = await index.count(tenant)
        if hits and hits[0].id == chain[7] and counts[NodeKind.EPISODE.value] == TURNS:
            log.info(
                "slot %d: %d keys moved; %d write retries; searches right %.3f s after the move",
                slot,
                moved,
                retries,
                time.monotonic() - moved_at,
            )
            break
        assert time.monotonic() - moved_at < SEARCH_DEADLINE_S, (hits[:1], counts)
        await asyncio.sleep(0.05)
    scanned = await index.scan(tenant, kinds=[NodeKind.EPISODE], limit=None)
    assert sorted(node_id for node_id, _, _ in scanned) == sorted(chain)
