"""GraphStore: nodes, typed adjacency in both directions, and NEXT chains, on Redis.

Every write is idempotent (ids are deterministic, adjacency is a hash keyed by neighbour) and
atomic per message (one MULTI/EXEC or one Lua script), so at-least-once delivery changes nothing on
redelivery. A node hash is also the vector index's document: the node and its vector appear
together or not at all. How nodes and edges are encoded: :mod:`gaama.store.codecs`; the reads of
a search: :mod:`gaama.store.subgraph`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gaama.errors import NodesGone, ValidationError
from gaama.ids import kind_of
from gaama.model import EDGE_ENDPOINTS, Edge, EdgeKind, Neighbour, Node, NodeKind
from gaama.store import cluster, scripts
from gaama.store.codecs import (
    NEXT_VALUES,
    VECTOR_DTYPE,
    VECTOR_FIELD,
    adjacency_code,
    adjacency_values,
    node_from_hash,
    node_mapping,
    parse_adjacency,
    stored_vectors,
)
from gaama.store.errors import store_errors
from gaama.store.forget import AUDIT_MAX
from gaama.store.keys import Keys
from gaama.store.subgraph import SubgraphReads
from gaama.store.validity import REDACTED_TEXT, Ending

_BATCH = 1000  # keys per script call: bounds the time one call holds the server
_APPENDS = 256  # episode appends per transaction: bounds the time one transaction holds it


class GraphStore(SubgraphReads):
    """Async access to the graph of every tenant; each call is scoped to one tenant."""

    def __init__(self, redis: aioredis.Redis, keys: Keys | None = None) -> None:
        super().__init__(redis, keys or Keys())
        self._append = scripts.register(redis, "append_episode.lua")
        self._refresh_degrees = scripts.register(redis, "refresh_degrees.lua")
        # HGETALL, HMGET and EXISTS over a batch: one script call, because redis-py's cost per
        # command dominates a pipeline of single commands
        # (docs/decisions/0007-batched-reads-script-or-pipeline.md).
        self._batched = scripts.register(redis, "batched_read.lua")
        self._of_kind = scripts.register(redis, "neighbours_of_kind.lua")
        self._supersede = scripts.register(redis, "supersede.lua")
        self._redact = scripts.register(redis, "redact.lua")

    async def _many(self, command: str, keys: list[str], args: Sequence[Any] = ()) -> list[Any]:
        out: list[Any] = []
        with store_errors():
            for i in range(0, len(keys), _BATCH):
                out += await self._batched(keys=keys[i : i + _BATCH], args=[command, *args])
        return out

    # --- writes ----------------------------------------------------------------------------
    async def append_episode(self, node: Node) -> bool:
        """Store an episode at the end of its conversation's NEXT chain, atomically.

        Returns False, changing nothing, when the episode exists already (a redelivery).
        """
        keys, args = self._append_call(node)
        with store_errors():
            created = await self._append(keys=keys, args=args)
        return bool(created)

    async def append_episodes(self, nodes: Sequence[Node]) -> list[bool]:
        """:meth:`append_episode` for each of ``nodes``, in order, in one MULTI/EXEC per tenant
        (and per :data:`_APPENDS` episodes): one round trip where there were as many as
        episodes. A transaction applies all of its appends or none, so a failure never leaves
        a later turn of a conversation stored without an earlier one; a retry skips what an
        earlier transaction stored.

        Returns, per node, whether it was appended (False: it existed already).
        """
        calls = [self._append_call(n) for n in nodes]
        by_tenant: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            by_tenant.setdefault(n.tenant, []).append(i)
        created = [False] * len(nodes)
        for rows in by_tenant.values():
            for s in range(0, len(rows), _APPENDS):
                part = rows[s : s + _APPENDS]
                pipe = self.redis.pipeline(transaction=True)
                with store_errors():  # queued, no I/O until the transaction runs
                    for i in part:
                        keys, args = calls[i]
                        await self._append(keys=keys, args=args, client=pipe)
                for i, done in zip(part, await self._run(pipe), strict=True):
                    created[i] = bool(done)
        return created

    def _append_call(self, node: Node) -> tuple[list[str], list[Any]]:
        """The keys and arguments of ``append_episode.lua`` for ``node``."""
        if node.kind is not NodeKind.EPISODE or not node.conversation:
            raise ValidationError("append_episode takes an episode with a conversation")
        t, conv = node.tenant, node.conversation
        args: list[Any] = [node.id, self.keys.adj_prefix(t), *NEXT_VALUES]
        for k, v in node_mapping(node).items():
            args += [k, v]
        keys = [
            self.keys.node(t, node.id),
            self.keys.chain(t, conv),
            self.keys.adj(t, node.id),
            self.keys.degrees(t),
            self.keys.state(t, "iseq"),
        ]
        return keys, args

    async def write(
        self,
        tenant: str,
        nodes: Iterable[Node] = (),
        edges: Iterable[Edge] = (),
        *,
        set_state: Mapping[str, str | bytes] | None = None,
        delete_state: Iterable[str] = (),
        node_fields: Mapping[str, Mapping[str, str]] | None = None,
        also: Iterable[Callable[[Any], None]] = (),
        require: Sequence[str] = (),
    ) -> None:
        """Upsert nodes and edges, and change pipeline state, in one MULTI/EXEC transaction.

        ``node_fields`` sets fields on existing nodes; ``also`` are callbacks queuing further
        commands of the same tenant (e.g. :meth:`ChunkStore.close_ops`) into the transaction.
        ``require`` names nodes that must still exist: they are WATCHed, and the write happens
        only if none was deleted (by a forget) before it committed.

        Raises:
            NodesGone: a required node does not exist (nothing was written).
        """
        if not require:
            pipe = self.redis.pipeline(transaction=True)
            await self._queue_write(
                tenant, pipe, nodes, edges, set_state, delete_state, node_fields, also
            )
            with store_errors():
                await pipe.execute()
            return
        keys = [self.keys.node(tenant, n) for n in require]
        nodes, edges, also = list(nodes), list(edges), list(also)
        with store_errors():
            async with self.redis.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(*keys)
                        # one round trip when all are there (EXISTS counts each key named)
                        missing: list[str] = []
                        if await pipe.exists(*keys) != len(keys):
                            present = [await pipe.exists(k) for k in keys]
                            missing = [n for n, ok in zip(require, present, strict=True) if not ok]
                        if missing:
                            await pipe.reset()  # type: ignore[no-untyped-call]
                            raise NodesGone(missing)
                        pipe.multi()  # type: ignore[no-untyped-call]
                        await self._queue_write(
                            tenant, pipe, nodes, edges, set_state, delete_state, node_fields, also
                        )
                        await pipe.execute()
                        return
                    except WatchError:
                        continue  # a required node changed: check again

    async def _queue_write(
        self,
        tenant: str,
        pipe: Any,
        nodes: Iterable[Node],
        edges: Iterable[Edge],
        set_state: Mapping[str, str | bytes] | None,
        delete_state: Iterable[str],
        node_fields: Mapping[str, Mapping[str, str]] | None,
        also: Iterable[Callable[[Any], None]],
    ) -> None:
        wrote = False
        for n in nodes:
            if n.tenant != tenant:
                raise ValidationError(f"node {n.id} belongs to tenant {n.tenant!r}, not {tenant!r}")
            pipe.hset(self.keys.node(tenant, n.id), mapping=node_mapping(n))
            wrote = True
        if wrote or node_fields or also:  # nodes may change: counts cached by search are stale
            pipe.set(self.keys.text_version(tenant), secrets.token_hex(8))
        touched: dict[str, None] = {}
        for e in edges:
            self._check_edge(e)
            at_src, at_dst = adjacency_values(e)
            pipe.hset(self.keys.adj(tenant, e.src), e.dst, at_src)
            pipe.hset(self.keys.adj(tenant, e.dst), e.src, at_dst)
            touched[e.src] = touched[e.dst] = None
        if touched:  # the degree index changes with the adjacency, in the same transaction
            with store_errors():  # queued, no I/O; inside the boundary all the same
                await self._refresh_degrees(  # queued: a pipeline's command returns at once
                    keys=[self.keys.degrees(tenant)],
                    args=[self.keys.adj_prefix(tenant), *touched],
                    client=pipe,
                )
        for name, value in (set_state or {}).items():
            pipe.set(self.keys.state(tenant, name), value)
        for name in delete_state:
            pipe.delete(self.keys.state(tenant, name))
        for node_id, fields in (node_fields or {}).items():
            if fields:
                pipe.hset(self.keys.node(tenant, node_id), mapping=dict(fields))
        for queue in also:
            queue(pipe)

    def supersede_ops(
        self, tenant: str, endings: Sequence[Ending], now: float
    ) -> Callable[[Any], None]:
        """Queue, into :meth:`write`'s transaction (its ``also``), each ending: the old fact's
        ``valid_to``, ``superseded_by`` and ``superseded_reason`` (the earliest ending wins,
        whatever the order they arrive in; ``retired_at`` is when it first ended) and the
        ``valid_to`` of its source episodes whose facts have all ended (``supersede.lua``).
        The ``SUPERSEDES`` edges go in the same write's ``edges``."""

        def queue(pipe: Any) -> None:
            if not endings:
                return
            pipe.scripts.add(self._supersede)
            prefixes = [self.keys.node(tenant, ""), self.keys.adj_prefix(tenant)]
            for e in endings:
                args = [*prefixes, repr(float(e.valid_to)), e.new, e.reason, repr(float(now))]
                pipe.evalsha(self._supersede.sha, 1, self.keys.node(tenant, e.old), *args)

        return queue

    def redact_ops(
        self, tenant: str, node_ids: Sequence[str], request: str, now: float
    ) -> Callable[[Any], None]:
        """Queue, into :meth:`write`'s transaction (its ``also``), the redaction of ``node_ids``
        (a request to forget, the episode ``request``): each text gives way to
        :data:`~gaama.store.validity.REDACTED_TEXT`, its raw words and vector go, and the audit
        log keeps the digests (``redact.lua``). Nodes already redacted or gone are left."""

        def queue(pipe: Any) -> None:
            if not node_ids:
                return
            pipe.scripts.add(self._redact)
            keys = [
                self.keys.state(tenant, "audit"),
                *(self.keys.node(tenant, n) for n in node_ids),
            ]
            args = [REDACTED_TEXT, VECTOR_FIELD, repr(float(now)), request, "retracted"]
            args += [str(AUDIT_MAX), *node_ids]
            pipe.evalsha(self._redact.sha, len(keys), *keys, *args)

        return queue

    @staticmethod
    def _check_edge(e: Edge) -> None:
        want = EDGE_ENDPOINTS[e.kind]
        got = (kind_of(e.src), kind_of(e.dst))
        if got != want:
            raise ValidationError(
                f"{e.kind.value} edge must go {want[0]}→{want[1]}, "
                f"got {got[0]}→{got[1]} ({e.src}→{e.dst})"
            )

    # --- reads -----------------------------------------------------------------------------
    async def get_nodes(self, tenant: str, ids: Sequence[str]) -> dict[str, Node]:
        """Nodes of ``tenant`` by id (vectors not loaded); ids of other tenants are absent."""
        if not ids:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(self.keys.node(tenant, i))
        rows = await self._run(pipe)
        return {i: node_from_hash(tenant, i, h) for i, h in zip(ids, rows, strict=True) if h}

    async def get_fields(
        self, tenant: str, ids: Sequence[str], fields: Sequence[str]
    ) -> dict[str, list[bytes | None]]:
        """Selected fields of nodes of ``tenant``; nodes with none of them are absent."""
        if not ids:
            return {}
        rows = await self._many("HMGET", [self.keys.node(tenant, i) for i in ids], fields)
        return {i: r for i, r in zip(ids, rows, strict=True) if any(x is not None for x in r)}

    async def vectors(self, tenant: str, ids: Sequence[str], dim: int) -> np.ndarray:
        """A (len(ids), dim) float32 matrix; rows of nodes without a vector are zero."""
        pipe = self.redis.pipeline(transaction=False)
        for i in ids:
            pipe.hget(self.keys.node(tenant, i), VECTOR_FIELD)
        rows = await self._run(pipe) if ids else []
        zero = bytes(dim * VECTOR_DTYPE().itemsize)
        return stored_vectors([v if v and len(v) == len(zero) else zero for v in rows], dim)

    async def neighbours(self, tenant: str, ids: Sequence[str]) -> dict[str, list[Neighbour]]:
        """Adjacency of every node in ``ids``, in one round trip (per 1000 nodes)."""
        if not ids:
            return {}
        rows = await self._many("HGETALL", [self.keys.adj(tenant, i) for i in ids])
        return {
            i: [parse_adjacency(flat[j + 1], flat[j].decode()) for j in range(0, len(flat), 2)]
            for i, flat in zip(ids, rows, strict=True)
        }

    async def neighbours_of_kind(
        self,
        tenant: str,
        ids: Sequence[str],
        kind: EdgeKind,
        *,
        outgoing: bool,
        limit: int,
        scan_cap: int | None = None,
    ) -> dict[str, list[str]]:
        """Up to ``limit`` neighbours of each node along ``kind`` edges in one direction, in
        one round trip (per 1000 nodes), at a cost bounded by ``limit`` and not by the degree.

        A node of at most a hundred or so edges gives the same neighbours, in the same order,
        as :meth:`neighbours`; a hub gives the first ``limit`` in hash-scan order, having
        examined at most ``scan_cap`` (default ``20 × limit``) of its entries.
        """
        if not ids or limit <= 0:
            return {i: [] for i in ids}
        code = adjacency_code(kind, outgoing=outgoing)
        legacy = f"{kind.value}|{'o' if outgoing else 'i'}|"  # values written before the letters
        cap = scan_cap if scan_cap is not None else 20 * limit
        rows: list[Any] = []
        keys = [self.keys.adj(tenant, i) for i in ids]
        args: list[str | int] = [code, limit, cap, legacy]
        with store_errors():
            for i in range(0, len(keys), _BATCH):
                rows += await self._of_kind(keys=keys[i : i + _BATCH], args=args)
        return {
            i: [n.decode() if isinstance(n, bytes) else str(n) for n in row]
            for i, row in zip(ids, rows, strict=True)
        }

    async def existing(self, tenant: str, ids: Sequence[str]) -> set[str]:
        """The subset of ``ids`` stored for ``tenant`` (one round trip)."""
        if not ids:
            return set()
        rows = await self._many("EXISTS", [self.keys.node(tenant, i) for i in ids])
        return {i for i, e in zip(ids, rows, strict=True) if e}

    async def exists(self, tenant: str, node_id: str) -> bool:
        with store_errors():
            return bool(await self.redis.exists(self.keys.node(tenant, node_id)))

    async def chain(self, tenant: str, conversation: str) -> list[str]:
        """Episode ids of a conversation in NEXT order."""
        with store_errors():
            ids = await self.redis.zrange(self.keys.chain(tenant, conversation), 0, -1)
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]

    async def get_state(self, tenant: str, name: str) -> bytes | None:
        with store_errors():
            value = await self.redis.get(self.keys.state(tenant, name))
        return value.encode() if isinstance(value, str) else value

    async def delete_tenant(self, tenant: str) -> int:
        """Remove every key of ``tenant`` (right to erasure; tests and benchmarks)."""
        n = 0
        with store_errors():
            for pattern in self.keys.tenant_patterns(tenant):
                batch: list[bytes] = []
                near = self.keys.degrees(tenant)  # on a cluster: the tenant's primary only
                async for key in cluster.scan_keys(self.redis, pattern, near=near):
                    batch.append(key)
                    if len(batch) >= 1000:
                        n += await self.redis.unlink(*batch)
                        batch = []
                if batch:
                    n += await self.redis.unlink(*batch)
        return n

    async def _run(self, pipe: Any) -> list[Any]:
        with store_errors():
            result: list[Any] = await pipe.execute()
        return result
