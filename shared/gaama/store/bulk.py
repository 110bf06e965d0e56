"""Bulk access to a tenant's graph, for loaders and benchmarks that build or inspect whole graphs.

The services write one message at a time (:meth:`GraphStore.append_episode`,
:meth:`GraphStore.write`); a loader of a synthetic or imported graph writes batches of thousands
of nodes whose vectors and NEXT positions it already knows. :class:`BulkLoader` queues such a
batch — node hashes with their vectors, chain entries, adjacency both ways and the degree index —
into one MULTI/EXEC through :meth:`GraphStore.write`, and offers the whole-tenant reads and the
clean-up a loader needs, so that no caller outside the store builds a key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from gaama.errors import ValidationError
from gaama.model import Edge, Node
from gaama.store import cluster
from gaama.store.codecs import node_mapping, parse_adjacency, vector_fields
from gaama.store.errors import store_errors
from gaama.store.graph import GraphStore

_UNLINK_BATCH = 1000


class BulkLoader:
    """Batch writes and whole-tenant scans over a :class:`GraphStore` (its client and key layout).

    Args:
        graph: The store whose Redis client and :class:`~gaama.store.keys.Keys` are used.
    """

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph
        self.keys = graph.keys

    async def write_batch(
        self,
        tenant: str,
        nodes: Sequence[Node],
        vectors: Sequence[Sequence[float] | np.ndarray],
        edges: Iterable[Edge] = (),
        chain: Iterable[tuple[str, str, int]] = (),
    ) -> None:
        """Write a batch of ``tenant``'s graph in one MULTI/EXEC transaction.

        Each node hash is written with its vector in one HSET, so the vector index sees each
        document once. Edges go through :meth:`GraphStore.write` (its validation, adjacency
        format and degree index).

        Args:
            tenant: The tenant every node belongs to.
            nodes: The nodes; their own ``vector`` is ignored in favour of ``vectors``.
            vectors: One vector per node, in the same order.
            edges: Edges among these or already stored nodes.
            chain: ``(conversation, episode id, position)`` NEXT-chain entries. A conversation's
                entries must not be split across batches: the highest position of a batch is
                the chain's tail.

        Raises:
            ValidationError: A node of another tenant, a vector count not matching the nodes,
                or an edge whose endpoints do not fit its kind.
            StoreUnavailable: Redis unreachable or answering a transient error.
        """
        if len(nodes) != len(vectors):
            raise ValidationError(f"{len(nodes)} nodes but {len(vectors)} vectors")
        for n in nodes:
            if n.tenant != tenant:
                raise ValidationError(f"node {n.id} belongs to tenant {n.tenant!r}, not {tenant!r}")
        by_conv: dict[str, dict[str, int]] = {}
        for conv, episode_id, position in chain:
            by_conv.setdefault(conv, {})[episode_id] = position

        def queue(pipe: Any) -> None:
            for node, vector in zip(nodes, vectors, strict=True):
                mapping = node_mapping(node)
                mapping.update(vector_fields(vector))
                pipe.hset(self.keys.node(tenant, node.id), mapping=mapping)
            for conv, members in by_conv.items():
                pipe.zadd(self.keys.chain(tenant, conv), members)

        await self.graph.write(tenant, edges=edges, also=[queue])

    async def chain_lengths(self, conversations: Sequence[tuple[str, str]]) -> list[int]:
        """Episodes stored in each NEXT chain, in one round trip.

        Args:
            conversations: ``(tenant, conversation)`` pairs.

        Returns:
            The length of each chain, in the order asked (0 for a chain not stored).
        """
        pipe = self.graph.redis.pipeline(transaction=False)
        for tenant, conv in conversations:
            pipe.zcard(self.keys.chain(tenant, conv))
        with store_errors():
            replies = await pipe.execute()
        return [int(x) for x in replies]

    async def edge_counts(self, tenant: str) -> dict[str, int]:
        """``tenant``'s edges by kind (the kind's value), each counted once, at its source.

        Scans every adjacency hash of the tenant: for inspecting a finished load, not for a
        request path.
        """
        counts: dict[str, int] = {}
        redis = self.graph.redis
        with store_errors():
            async for key in cluster.scan_keys(
                redis, f"{self.keys.adj_prefix(tenant)}*", near=self.keys.degrees(tenant)
            ):
                for value in (await redis.hgetall(key)).values():
                    nb = parse_adjacency(value, "")
                    if nb.outgoing:
                        counts[nb.kind.value] = counts.get(nb.kind.value, 0) + 1
        return counts

    async def delete_namespace(self) -> int:
        """Remove every key under this store's key prefix, of every tenant; the number removed.

        Only for a prefix that a run owns alone (a benchmark's or a test's own namespace):
        on a shared prefix it erases everyone's data. The vector index is not touched; drop it
        first (:meth:`VectorIndex.drop`) so that the deletes do not update it one by one.
        """
        redis = self.graph.redis
        removed = 0
        batch: list[bytes] = []
        with store_errors():
            async for key in cluster.scan_keys(redis, f"{self.keys.prefix}:*"):  # every primary
                batch.append(key)
                if len(batch) >= _UNLINK_BATCH:
                    removed += await redis.unlink(*batch)
                    batch = []
            if batch:
                removed += await redis.unlink(*batch)
        return removed
