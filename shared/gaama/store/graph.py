"""GraphStore: nodes, typed adjacency in both directions, and NEXT chains, on Redis.

Every write is idempotent (ids are deterministic, adjacency is a hash keyed by neighbour) and
atomic per message (one MULTI/EXEC or one Lua script), so at-least-once delivery changes nothing on
redelivery. A node hash is also the vector index's document: the node and its vector appear
together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError, TryAgainError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gaama.errors import StoreUnavailable, ValidationError
from gaama.ids import kind_of
from gaama.model import EDGE_ENDPOINTS, Edge, EdgeKind, Neighbour, Node, NodeKind
from gaama.store.keys import Keys

VECTOR_FIELD = "embedding"
#: Stored weight of a NEXT edge (its type weight, 0.8, is applied at retrieval).
NEXT_STORED_WEIGHT = "1"
_TEXT_FIELDS = (
    "kind",
    "tenant",
    "text",
    "conversation",
    "subject",
    "turn_id",
    "speaker",
    "sources",
)

# KEYS: node, chain, adj(new); ARGV: id, adj-key prefix, weight, then field/value pairs.
# Returns 1 when the episode was appended, 0 when it already existed (a redelivery).
_APPEND_EPISODE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local id = ARGV[1]
local pos = redis.call('ZCARD', KEYS[2])
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'seq'
fields[#fields + 1] = tostring(pos)
redis.call('HSET', KEYS[1], unpack(fields))
-- the tail of the chain is its highest-scored member: no separate tail key to keep in step
local prev = redis.call('ZRANGE', KEYS[2], -1, -1)[1]
if prev then
  redis.call('HSET', ARGV[2] .. prev, id, 'NEXT|o|' .. ARGV[3])
  redis.call('HSET', KEYS[3], prev, 'NEXT|i|' .. ARGV[3])
end
redis.call('ZADD', KEYS[2], pos, id)
return 1
"""


# Batched reads: one script call per batch of keys instead of one command per node. On the hot
# path of a search (a thousand nodes per stage) redis-py spends far more time encoding and
# dispatching single commands than Redis spends answering them. All keys are declared and share
# the tenant's hash slot, so the scripts are cluster-safe.
_MANY_HLEN = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HLEN', KEYS[i]) end
return out
"""
_MANY_HGETALL = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
"""
# ARGV[1]: max degree. Per key: {degree, adjacency (flat) or {} when the degree is above it}.
_MANY_ADJ_BELOW = """
local out = {}
local limit = tonumber(ARGV[1])
for i = 1, #KEYS do
  local n = redis.call('HLEN', KEYS[i])
  if n <= limit then out[i] = {n, redis.call('HGETALL', KEYS[i])} else out[i] = {n, {}} end
end
return out
"""
_MANY_HMGET = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HMGET', KEYS[i], unpack(ARGV)) end
return out
"""
_MANY_EXISTS = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('EXISTS', KEYS[i]) end
return out
"""
# ARGV: field, byte length of a vector. One reply: the vectors concatenated, zeros where absent.
_MANY_VECTORS = """
local n = tonumber(ARGV[2])
local zero = string.rep('\\0', n)
local parts = {}
for i = 1, #KEYS do
  local v = redis.call('HGET', KEYS[i], ARGV[1])
  if (not v) or #v ~= n then v = zero end
  parts[i] = v
end
return table.concat(parts)
"""
_BATCH = 1000  # keys per script call: bounds the time one call holds the server


#: Server replies that mean "not now" rather than "never": out of memory under noeviction, a
#: replica that is read-only during a failover, a dataset still loading, a busy script.
_TRANSIENT_REPLIES = ("OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN")


def transient_reply(exc: ResponseError) -> bool:
    # redis-py turns some replies into classes and drops the reply's first word.
    if isinstance(exc, OutOfMemoryError | ReadOnlyError | TryAgainError):
        return True
    return str(exc).split(" ", 1)[0] in _TRANSIENT_REPLIES


def _vector_bytes(vector: Sequence[float] | np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def node_mapping(node: Node) -> dict[str, Any]:
    """The hash fields of a node, vector included when it has one."""
    m: dict[str, Any] = {
        "kind": node.kind.value,
        "tenant": node.tenant,
        "text": node.text,
        "conversation": node.conversation,
        "subject": node.subject,
        "turn_id": node.turn_id,
        "speaker": node.speaker,
        "time": repr(float(node.time)),
        "belief": repr(node.belief),
    }
    for k, v in node.extra.items():
        m[k] = v
    if node.vector is not None:
        m[VECTOR_FIELD] = _vector_bytes(node.vector)
    return m


def _node_from_hash(tenant: str, node_id: str, h: Mapping[bytes, bytes]) -> Node:
    def get(f: str) -> str:
        return h.get(f.encode(), b"").decode("utf-8", "replace")

    extra = {
        k.decode(): v.decode("utf-8", "replace")
        for k, v in h.items()
        if k.decode() not in {*_TEXT_FIELDS, "time", "belief", VECTOR_FIELD}
    }
    if sources := get("sources"):
        extra["sources"] = sources
    return Node(
        id=node_id,
        tenant=tenant,
        kind=NodeKind(get("kind")),
        text=get("text"),
        time=float(get("time") or 0),
        conversation=get("conversation"),
        subject=get("subject"),
        turn_id=get("turn_id"),
        speaker=get("speaker"),
        belief=float(get("belief") or 1),
        extra=extra,
    )


_EDGE_KINDS = {k.value.encode(): k for k in EdgeKind}


def _parse_adj(value: bytes, node: str) -> Neighbour:
    kind, direction, weight = value.split(b"|")
    return Neighbour(
        node=node, kind=_EDGE_KINDS[kind], outgoing=direction == b"o", weight=float(weight)
    )


class GraphStore:
    """Async access to the graph of every tenant; each call is scoped to one tenant."""

    def __init__(self, redis: aioredis.Redis, keys: Keys | None = None) -> None:
        self.redis = redis
        self.keys = keys or Keys()
        self._append = redis.register_script(_APPEND_EPISODE)
        self._hlen = redis.register_script(_MANY_HLEN)
        self._hgetall = redis.register_script(_MANY_HGETALL)
        self._adj_below = redis.register_script(_MANY_ADJ_BELOW)
        self._hmget = redis.register_script(_MANY_HMGET)
        self._exists = redis.register_script(_MANY_EXISTS)
        self._vectors = redis.register_script(_MANY_VECTORS)

    async def _many(self, script: Any, keys: list[str], args: Sequence[Any] = ()) -> list[Any]:
        out: list[Any] = []
        try:
            for i in range(0, len(keys), _BATCH):
                out += await script(keys=keys[i : i + _BATCH], args=list(args))
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not transient_reply(exc):
                raise
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        return out

    # --- writes ----------------------------------------------------------------------------
    async def append_episode(self, node: Node) -> bool:
        """Store an episode at the end of its conversation's NEXT chain, atomically.

        Returns False, changing nothing, when the episode exists already (a redelivery).
        """
        if node.kind is not NodeKind.EPISODE or not node.conversation:
            raise ValidationError("append_episode takes an episode with a conversation")
        t, conv = node.tenant, node.conversation
        args: list[Any] = [node.id, self.keys.adj_prefix(t), NEXT_STORED_WEIGHT]
        for k, v in node_mapping(node).items():
            args += [k, v]
        keys = [
            self.keys.node(t, node.id),
            self.keys.chain(t, conv),
            self.keys.adj(t, node.id),
        ]
        try:
            created = await self._append(keys=keys, args=args)
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not transient_reply(exc):
                raise
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        return bool(created)

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
    ) -> None:
        """Upsert nodes and edges, and change pipeline state, in one MULTI/EXEC transaction.

        ``node_fields`` sets fields on existing nodes; ``also`` are callbacks queuing further
        commands of the same tenant (e.g. :meth:`ChunkStore.close_ops`) into the transaction.
        """
        pipe = self.redis.pipeline(transaction=True)
        for n in nodes:
            if n.tenant != tenant:
                raise ValidationError(f"node {n.id} belongs to tenant {n.tenant!r}, not {tenant!r}")
            pipe.hset(self.keys.node(tenant, n.id), mapping=node_mapping(n))  # type: ignore[arg-type]
        for e in edges:
            self._check_edge(e)
            w = f"{e.weight:.6g}"
            pipe.hset(self.keys.adj(tenant, e.src), e.dst, f"{e.kind.value}|o|{w}")
            pipe.hset(self.keys.adj(tenant, e.dst), e.src, f"{e.kind.value}|i|{w}")
        for name, value in (set_state or {}).items():
            pipe.set(self.keys.state(tenant, name), value)
        for name in delete_state:
            pipe.delete(self.keys.state(tenant, name))
        for node_id, fields in (node_fields or {}).items():
            if fields:
                pipe.hset(self.keys.node(tenant, node_id), mapping=dict(fields))  # type: ignore[arg-type]
        for queue in also:
            queue(pipe)
        try:
            await pipe.execute()
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not transient_reply(exc):
                raise
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc

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
        return {i: _node_from_hash(tenant, i, h) for i, h in zip(ids, rows, strict=True) if h}

    async def get_fields(
        self, tenant: str, ids: Sequence[str], fields: Sequence[str]
    ) -> dict[str, list[bytes | None]]:
        """Selected fields of nodes of ``tenant``; nodes with none of them are absent."""
        if not ids:
            return {}
        rows = await self._many(self._hmget, [self.keys.node(tenant, i) for i in ids], fields)
        return {i: r for i, r in zip(ids, rows, strict=True) if any(x is not None for x in r)}

    async def vectors(self, tenant: str, ids: Sequence[str], dim: int) -> np.ndarray:
        """A (len(ids), dim) float32 matrix; rows of nodes without a vector are zero."""
        if not ids:
            return np.zeros((0, dim), dtype=np.float32)
        keys = [self.keys.node(tenant, i) for i in ids]
        chunks = []
        try:
            for i in range(0, len(keys), _BATCH):
                chunks.append(
                    await self._vectors(keys=keys[i : i + _BATCH], args=[VECTOR_FIELD, dim * 4])
                )
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not transient_reply(exc):
                raise
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        raw = b"".join(chunks)
        return np.frombuffer(raw, dtype=np.float32).reshape(len(ids), dim).copy()

    async def neighbours(self, tenant: str, ids: Sequence[str]) -> dict[str, list[Neighbour]]:
        """Adjacency of every node in ``ids``, in one round trip (per 1000 nodes)."""
        if not ids:
            return {}
        rows = await self._many(self._hgetall, [self.keys.adj(tenant, i) for i in ids])
        return {
            i: [_parse_adj(flat[j + 1], flat[j].decode()) for j in range(0, len(flat), 2)]
            for i, flat in zip(ids, rows, strict=True)
        }

    async def neighbours_below(
        self, tenant: str, ids: Sequence[str], max_degree: int
    ) -> tuple[dict[str, int], dict[str, list[Neighbour]]]:
        """Degrees of ``ids``, and the adjacency of those of degree ≤ ``max_degree``, in one
        round trip (a search expands around non-hub nodes only)."""
        if not ids:
            return {}, {}
        rows = await self._many(
            self._adj_below, [self.keys.adj(tenant, i) for i in ids], [max_degree]
        )
        degrees: dict[str, int] = {}
        adjacency: dict[str, list[Neighbour]] = {}
        for i, (n, flat) in zip(ids, rows, strict=True):
            degrees[i] = int(n)
            if int(n) <= max_degree:
                adjacency[i] = [
                    _parse_adj(flat[j + 1], flat[j].decode()) for j in range(0, len(flat), 2)
                ]
        return degrees, adjacency

    async def degrees(self, tenant: str, ids: Sequence[str]) -> dict[str, int]:
        """Full store degree (adjacency size) of each node."""
        if not ids:
            return {}
        rows = await self._many(self._hlen, [self.keys.adj(tenant, i) for i in ids])
        return {i: int(d) for i, d in zip(ids, rows, strict=True)}

    async def existing(self, tenant: str, ids: Sequence[str]) -> set[str]:
        """The subset of ``ids`` stored for ``tenant`` (one round trip)."""
        if not ids:
            return set()
        rows = await self._many(self._exists, [self.keys.node(tenant, i) for i in ids])
        return {i for i, e in zip(ids, rows, strict=True) if e}

    async def exists(self, tenant: str, node_id: str) -> bool:
        return bool(await self.redis.exists(self.keys.node(tenant, node_id)))

    async def chain(self, tenant: str, conversation: str) -> list[str]:
        """Episode ids of a conversation in NEXT order."""
        ids = await self.redis.zrange(self.keys.chain(tenant, conversation), 0, -1)
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]

    async def get_state(self, tenant: str, name: str) -> bytes | None:
        value = await self.redis.get(self.keys.state(tenant, name))
        return value.encode() if isinstance(value, str) else value

    async def delete_tenant(self, tenant: str) -> int:
        """Remove every key of ``tenant`` (right to erasure; tests and benchmarks)."""
        n = 0
        for pattern in self.keys.tenant_patterns(tenant):
            batch: list[bytes] = []
            async for key in self.redis.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    n += await self.redis.unlink(*batch)
                    batch = []
            if batch:
                n += await self.redis.unlink(*batch)
        return n

    async def _run(self, pipe: Any) -> list[Any]:
        try:
            result: list[Any] = await pipe.execute()
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not transient_reply(exc):
                raise
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        return result
