"""GraphStore: nodes, typed adjacency in both directions, and NEXT chains, on Redis.

Every write is idempotent (ids are deterministic, adjacency is a hash keyed by neighbour) and
atomic per message (one MULTI/EXEC or one Lua script), so at-least-once delivery changes nothing on
redelivery. A node hash is also the vector index's document: the node and its vector appear
together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gaama import ids
from gaama.errors import NodesGone, ValidationError
from gaama.ids import kind_of, kind_prefix
from gaama.model import EDGE_ENDPOINTS, Edge, EdgeKind, Neighbour, Node, NodeKind

# Re-exported: vectors.py and older callers import the boundary from here.
from gaama.store.errors import store_errors as store_errors
from gaama.store.errors import transient_reply as transient_reply
from gaama.store.keys import Keys

T = TypeVar("T")
VECTOR_FIELD = "embedding"
#: A compact copy of the vector for retrieval's read-ahead: int8, scaled so the largest component
#: is ±127. Cosine similarity ignores the scale; with MiniLM vectors it stays within 1.5e-3 of
#: the float32 value. Redis hands the read-ahead script a quarter of the bytes per node, which
#: cut that script's time by about 30% (see GraphStore.read_vectors and docs/benchmarks.md).
COMPACT_VECTOR_FIELD = "embedding_i8"
#: Stored weight of a NEXT edge (its type weight, 0.8, is applied at retrieval).
NEXT_STORED_WEIGHT = "1"
#: Index TAG fields: the exact-match digest (:func:`gaama.ids.tag`) of each scope a search
#: filters on. The readable values stay in their own fields; only the digests are indexed.
TAG_FIELDS = {"tenant": "tenant_tag", "conversation": "conversation_tag", "subject": "subject_tag"}
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

# KEYS: node, chain, adj(new), degree index, the tenant's ingest counter; ARGV: id, adj-key
# prefix, weight, then field/value pairs. Returns 1 when the episode was appended, 0 when it
# already existed (a redelivery). ``seq`` is the position in the chain (one past the last, so it
# stays increasing after a forget removed turns); ``iseq`` the tenant-wide ingest order, which a
# forget request compares with its cut (see gaama.store.forget).
_APPEND_EPISODE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local id = ARGV[1]
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local pos = 0
if last[2] then pos = tonumber(last[2]) + 1 end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'seq'
fields[#fields + 1] = tostring(pos)
fields[#fields + 1] = 'iseq'
fields[#fields + 1] = tostring(redis.call('INCR', KEYS[5]))
redis.call('HSET', KEYS[1], unpack(fields))
-- the tail of the chain is its highest-scored member: no separate tail key to keep in step
local prev = redis.call('ZRANGE', KEYS[2], -1, -1)[1]
if prev then
  redis.call('HSET', ARGV[2] .. prev, id, 'NEXT|o|' .. ARGV[3])
  redis.call('HSET', KEYS[3], prev, 'NEXT|i|' .. ARGV[3])
  redis.call('HSET', KEYS[4], prev, redis.call('HLEN', ARGV[2] .. prev))
end
redis.call('HSET', KEYS[4], id, redis.call('HLEN', KEYS[3]))
redis.call('ZADD', KEYS[2], pos, id)
return 1
"""


# The degree index (Keys.degrees): each node's adjacency size, rewritten from HLEN (so a
# redelivery or a repeated edge changes nothing) inside the transaction that wrote its adjacency.
# The expansion reads the degrees of a whole ring in one HMGET instead of one HLEN per node: on a
# large keyspace each key lookup is a few cache misses. KEYS: the degree index; ARGV: the adj-key
# prefix, then the node ids.
_REFRESH_DEGREES = """
for i = 2, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], redis.call('HLEN', ARGV[1] .. ARGV[i]))
end
return #ARGV - 1
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
# The whole 2-hop expansion of a search in one call (see GraphStore.expand): breadth-first from
# the seeds, edges followed both ways; hubs (degree > ARGV[4]) are not expanded through; a node's
# neighbours are admitted heaviest walk weight first (ties by id); nodes outside the scope are
# dropped (concepts are bridges and always kept); at most ARGV[5] nodes, and once that many are in,
# no further adjacency is read.
# Degrees come from the degree index (HLEN for a node it lacks).
# KEYS: an adjacency key of the tenant (routes the call), the tenant's degree index.
# ARGV: adj prefix, node prefix, hops, hub degree, max nodes, conversation ('' = any),
#       subject ('' = any), concept id prefix, type weights "KIND=w;...", then the seeds.
# Reply: {node ids, full degrees, edges i, j, w, i, j, w, ...}: each edge once, as indexes into
# the ids and its walk weight in units of 2⁻³⁰ (integers cross the Lua boundary exactly and parse
# without string handling).
# Keys are built from the prefixes: every key of a tenant shares its hash slot.
_WEIGHT_UNITS = float(2**30)  # the expansion script's fixed-point walk weights
_EXPAND = """
local find, sub, call, num = string.find, string.sub, redis.call, tonumber
local adjp, nodep = ARGV[1], ARGV[2]
local hops, hub, cap = num(ARGV[3]), num(ARGV[4]), num(ARGV[5])
local conv, subj, concept = ARGV[6], ARGV[7], ARGV[8]
local tw = {}
for kind, w in string.gmatch(ARGV[9], '([^=;]+)=([^;]+)') do tw[kind] = num(w) end
local degk = KEYS[2]
local degree = {}
-- Full store degree of each id not known yet: the degree index in one HMGET per 500 ids, HLEN
-- for a node it does not hold (data written before the index existed).
local function load_degrees(ids)
  local todo = {}
  for _, v in ipairs(ids) do
    if degree[v] == nil then todo[#todo + 1] = v end
  end
  for i = 1, #todo, 500 do
    local part = {unpack(todo, i, math.min(i + 499, #todo))}
    local got = call('HMGET', degk, unpack(part))
    for j, v in ipairs(part) do
      degree[v] = num(got[j]) or call('HLEN', adjp .. v)
    end
  end
end
local weights = {}  -- walk weight by stored value 'KIND|o|w' (values repeat: parse each once)
local function walk(val)
  local ww = weights[val]
  if ww == nil then
    local bar = find(val, '|', 1, true)
    if bar then
      local w = num(sub(val, bar + 3)) or 0
      ww = (tw[sub(val, 1, bar - 1)] or 0) * w * w
    else
      ww = 0  -- not an adjacency value of ours: no walk weight
    end
    weights[val] = ww
  end
  return ww
end
local scoped = conv ~= '' or subj ~= ''
local verdict = {}
local function in_scope(v)
  if not scoped or sub(v, 1, #concept) == concept then return true end
  local ok = verdict[v]
  if ok == nil then
    local f = call('HMGET', nodep .. v, 'conversation', 'subject')
    ok = (conv == '' or f[1] == conv) and (subj == '' or f[2] == subj)
    verdict[v] = ok
  end
  return ok
end
local nw = {}  -- walk weight of each neighbour of the node being read
local function heavier(a, b)
  local x, y = nw[a], nw[b]
  if x ~= y then return x > y end
  return a < b
end
local nodes, index = {}, {}
local count = 0
for i = 10, #ARGV do
  local s = ARGV[i]
  if not index[s] then count = count + 1; nodes[count] = s; index[s] = count end
end
local frontier = {}
for i = 1, count do frontier[i] = nodes[i] end
-- every edge read: from, to, stored value (weights are parsed only for edges that are kept)
local eu, ev, ex, read = {}, {}, {}, {}
local ne = 0
for hop = 1, hops do
  if #frontier == 0 or count >= cap then break end
  local ring = {}
  load_degrees(frontier)
  for _, u in ipairs(frontier) do
    if count >= cap then break end  -- full: no more reads (see GraphStore.expand)
    local key = adjp .. u
    if degree[u] <= hub then
      read[u] = true
      local flat = call('HGETALL', key)
      local nbs, nn = {}, 0
      for j = 1, #flat, 2 do
        local v, val = flat[j], flat[j + 1]
        ne = ne + 1
        eu[ne] = u; ev[ne] = v; ex[ne] = val
        if not index[v] then nn = nn + 1; nbs[nn] = v; nw[v] = walk(val) end
      end
      if nn > 1 then table.sort(nbs, heavier) end
      for i = 1, nn do
        if count >= cap then break end
        local v = nbs[i]
        if not index[v] and in_scope(v) then
          count = count + 1; nodes[count] = v; index[v] = count; ring[#ring + 1] = v
        end
      end
    end
  end
  frontier = ring
end
load_degrees(nodes)
local degrees, out = {}, {}
for i = 1, count do degrees[i] = degree[nodes[i]] end
local no = 0
for i = 1, ne do
  local j, v = index[ev[i]], ev[i]
  -- an edge read from both ends is kept once, from its lower-indexed end
  if j and (not read[v] or index[eu[i]] < j) then
    out[no + 1] = index[eu[i]] - 1
    out[no + 2] = j - 1
    out[no + 3] = math.floor(walk(ex[i]) * 1073741824 + 0.5)
    no = no + 3
  end
end
return {nodes, degrees, out}
"""
# The read-ahead of a search (see GraphStore.read_vectors): stored fields and vector of the first
# ARGV[4] nodes, in the order given, that have a vector of ARGV[3] dimensions — the int8 copy, or
# the float32 vector for a node written before the copy existed.
# ARGV: node prefix, fields (comma-separated: the shown fields, the int8 field, the float32 field),
# dimensions, how many, the ids (comma-separated). Reply: {id, {shown values..., vector}} per node.
_READ_VECTORS = """
local nodep, dim, want = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local fields = {}
for f in string.gmatch(ARGV[2], '[^,]+') do fields[#fields + 1] = f end
local full = table.remove(fields)
local nf = #fields
local out, n = {}, 0
for v in string.gmatch(ARGV[5], '[^,]+') do
  if n >= want then break end
  local key = nodep .. v
  local row = redis.call('HMGET', key, unpack(fields))
  local vec = row[nf]
  if not (vec and #vec == dim) then
    vec = redis.call('HGET', key, full)
    if not (vec and #vec == dim * 4) then vec = false end
    row[nf] = vec
  end
  if vec then
    n = n + 1
    out[n] = {v, row}
  end
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
# Provenance of nodes, in one call: the source episodes, with their external turn ids, of each
# id. An episode is its own source; a fact's sources are its ``sources`` field (or, if it has
# none, its outgoing DERIVED_FROM edges); a reflection's are the sources of its
# DERIVED_FROM_FACT facts. Episodes without a turn id and repeats are left out.
# ARGV: node prefix, adj prefix, then the ids. Reply: per id {episode, turn id, ...}.
_PROVENANCE = """
local call, sub, gmatch = redis.call, string.sub, string.gmatch
local nodep, adjp = ARGV[1], ARGV[2]
local turns = {}
local function turn(e)
  local t = turns[e]
  if t == nil then
    t = call('HGET', nodep .. e, 'turn_id') or false
    turns[e] = t
  end
  return t
end
local function targets(node, kind)
  local flat = call('HGETALL', adjp .. node)
  local want = kind .. '|o|'
  local n, out = #want, {}
  for j = 1, #flat, 2 do
    if sub(flat[j + 1], 1, n) == want then out[#out + 1] = flat[j] end
  end
  return out
end
local function sources(fact, field)
  if not field or field == '' then return targets(fact, 'DERIVED_FROM') end
  local out = {}
  for e in gmatch(field, '[^,]+') do out[#out + 1] = e end
  return out
end
local rows = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local f = call('HMGET', nodep .. id, 'kind', 'sources')
  local eps = {}
  if f[1] == 'episode' then
    eps = {id}
  elseif f[1] == 'fact' then
    eps = sources(id, f[2])
  elseif f[1] == 'reflection' then
    for _, fact in ipairs(targets(id, 'DERIVED_FROM_FACT')) do
      for _, e in ipairs(sources(fact, call('HGET', nodep .. fact, 'sources'))) do
        eps[#eps + 1] = e
      end
    end
  end
  local prov, seen = {}, {}
  for _, e in ipairs(eps) do
    if not seen[e] then
      seen[e] = true
      local t = turn(e)
      if t then
        prov[#prov + 1] = e
        prov[#prov + 1] = t
      end
    end
  end
  rows[i - 2] = prov
end
return rows
"""
_BATCH = 1000  # keys per script call: bounds the time one call holds the server


def vector_fields(vector: Sequence[float] | np.ndarray) -> dict[str, bytes]:
    """The stored forms of a vector: float32 (indexed) and its int8 copy (read-ahead)."""
    v = np.asarray(vector, dtype=np.float32).ravel()
    top = float(np.abs(v).max()) if v.size else 0.0
    usable = top > 0 and np.isfinite(top)  # a zero or non-finite vector has no direction to keep
    compact = np.rint(v * (127.0 / top)) if usable else np.zeros(v.shape)
    return {VECTOR_FIELD: v.tobytes(), COMPACT_VECTOR_FIELD: compact.astype(np.int8).tobytes()}


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
        TAG_FIELDS["tenant"]: ids.tag(node.tenant),
        TAG_FIELDS["conversation"]: ids.tag(node.conversation),
        TAG_FIELDS["subject"]: ids.tag(node.subject),
    }
    for k, v in node.extra.items():
        m[k] = v
    if node.vector is not None:
        m.update(vector_fields(node.vector))
    return m


_NOT_EXTRA = frozenset(
    {*_TEXT_FIELDS, *TAG_FIELDS.values(), "time", "belief", VECTOR_FIELD, COMPACT_VECTOR_FIELD}
)


def _node_from_hash(tenant: str, node_id: str, h: Mapping[bytes, bytes]) -> Node:
    def get(f: str) -> str:
        return h.get(f.encode(), b"").decode("utf-8", "replace")

    extra = {
        k.decode(): v.decode("utf-8", "replace")
        for k, v in h.items()
        if k.decode() not in _NOT_EXTRA
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


def as_text(raw: object) -> str:
    """A Redis reply value as text: ``None`` is empty, bytes are UTF-8 (invalid bytes replaced,
    never fatal)."""
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


async def _script_reply(conn: Any, script: Any, keys: list[str], args: list[str | int]) -> Any:
    """The reply to an EVALSHA of ``script`` just sent on ``conn``; if Redis no longer holds the
    script (a restart, SCRIPT FLUSH), its source is sent instead."""
    try:
        return await conn.read_response()
    except NoScriptError:
        await conn.send_command("EVAL", script.script, len(keys), *keys, *args)
        return await conn.read_response()


@dataclass(frozen=True, slots=True)
class Expansion:
    """A subgraph read by :meth:`GraphStore.expand`: ids in admission order (seeds first), each
    node's full store degree, and ``(i, j, walk weight)`` rows indexing into ``nodes``, one per
    undirected edge."""

    nodes: list[str]
    degrees: np.ndarray
    edges: np.ndarray


class GraphStore:
    """Async access to the graph of every tenant; each call is scoped to one tenant."""

    def __init__(self, redis: aioredis.Redis, keys: Keys | None = None) -> None:
        self.redis = redis
        self.keys = keys or Keys()
        self._append = redis.register_script(_APPEND_EPISODE)
        self._hlen = redis.register_script(_MANY_HLEN)
        self._hgetall = redis.register_script(_MANY_HGETALL)
        self._expand = redis.register_script(_EXPAND)
        self._provenance = redis.register_script(_PROVENANCE)
        self._hmget = redis.register_script(_MANY_HMGET)
        self._exists = redis.register_script(_MANY_EXISTS)
        self._vectors = redis.register_script(_MANY_VECTORS)
        self._read_vectors = redis.register_script(_READ_VECTORS)
        self._refresh_degrees = redis.register_script(_REFRESH_DEGREES)

    async def _many(self, script: Any, keys: list[str], args: Sequence[Any] = ()) -> list[Any]:
        out: list[Any] = []
        with store_errors():
            for i in range(0, len(keys), _BATCH):
                out += await script(keys=keys[i : i + _BATCH], args=list(args))
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
            self.keys.degrees(t),
            self.keys.state(t, "iseq"),
        ]
        with store_errors():
            created = await self._append(keys=keys, args=args)
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
        for n in nodes:
            if n.tenant != tenant:
                raise ValidationError(f"node {n.id} belongs to tenant {n.tenant!r}, not {tenant!r}")
            pipe.hset(self.keys.node(tenant, n.id), mapping=node_mapping(n))
        touched: dict[str, None] = {}
        for e in edges:
            self._check_edge(e)
            w = f"{e.weight:.6g}"
            pipe.hset(self.keys.adj(tenant, e.src), e.dst, f"{e.kind.value}|o|{w}")
            pipe.hset(self.keys.adj(tenant, e.dst), e.src, f"{e.kind.value}|i|{w}")
            touched[e.src] = touched[e.dst] = None
        if touched:  # the degree index changes with the adjacency, in the same transaction
            with store_errors():  # queued, no I/O today; inside the boundary all the same
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
        with store_errors():
            for i in range(0, len(keys), _BATCH):
                chunks.append(
                    await self._vectors(keys=keys[i : i + _BATCH], args=[VECTOR_FIELD, dim * 4])
                )
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

    async def expand(
        self,
        tenant: str,
        seeds: Sequence[str],
        *,
        hops: int,
        hub_degree: int,
        max_nodes: int,
        type_weights: Mapping[EdgeKind, float],
        conversation: str | None = None,
        subject: str | None = None,
    ) -> Expansion:
        """The subgraph around ``seeds``, computed inside Redis in one round trip.

        Breadth-first for ``hops`` rings, edges followed both ways. Nodes of degree above
        ``hub_degree`` are not expanded through (their edges to nodes reached from elsewhere
        stay). A node's neighbours are admitted heaviest walk weight first (``type_weights[kind]
        · stored²``, ties by id) until ``max_nodes``; with a scope, non-concept nodes outside it
        are dropped. Once the subgraph is full no further adjacency is read, so the work is
        bounded by ``max_nodes`` whatever the graph. Edges: every edge read on the way whose
        both ends are in the subgraph (an edge between two nodes whose adjacency was not read —
        the outermost ring, and nodes reached after the subgraph filled — is not seen). Every
        key read is under the tenant's prefix: another tenant's node cannot be reached.
        """
        if not seeds:
            return Expansion([], np.zeros(0, dtype=np.int64), np.zeros((0, 3)))
        weights = ";".join(f"{k.value}={w!r}" for k, w in type_weights.items())
        args: list[Any] = [
            self.keys.adj_prefix(tenant),
            self.keys.node(tenant, ""),
            hops,
            hub_degree,
            max_nodes,
            conversation or "",
            subject or "",
            f"{kind_prefix(NodeKind.CONCEPT)}_",
            weights,
            *seeds,
        ]
        # One declared key routes the call to the tenant's shard; the rest share its hash slot.
        with store_errors():
            ids, degrees, edges = await self._expand(
                keys=[self.keys.adj(tenant, seeds[0]), self.keys.degrees(tenant)], args=args
            )
        rows = np.asarray(edges, dtype=np.float64).reshape(-1, 3)
        rows[:, 2] /= _WEIGHT_UNITS
        return Expansion([i.decode() for i in ids], np.asarray(degrees, dtype=np.int64), rows)

    async def read_vectors(
        self, tenant: str, ids: Sequence[str], *, fields: Sequence[str], dim: int, limit: int
    ) -> tuple[list[tuple[str, dict[str, str]]], np.ndarray]:
        """Stored ``fields`` and vector of the first ``limit`` of ``ids``, in the order given, that
        have a ``dim``-dimensional vector (others are passed over, as the vector index would), in
        one round trip: ``([(id, {field: value})], (n, dim) float32 rows)``, a field absent
        from a node left out. Every key read is under the tenant's prefix.

        Each row is the node's int8 copy (:data:`COMPACT_VECTOR_FIELD`) as float32 — the vector's
        direction at another scale, for cosine similarity only — or, for a node stored before the
        copy existed, its float32 vector.

        Retrieval's read-ahead (see :mod:`gaama.retrieval.search`); ids are GAAMA node ids,
        which never hold a comma (the script takes them as one comma-separated argument).
        """
        shown, vectors, _ = await self._read_ahead(tenant, ids, fields, dim, limit, None)
        return shown, vectors

    async def read_vectors_during(
        self,
        tenant: str,
        ids: Sequence[str],
        *,
        fields: Sequence[str],
        dim: int,
        limit: int,
        work: Callable[[], T],
    ) -> tuple[list[tuple[str, dict[str, str]]], np.ndarray, T]:
        """:meth:`read_vectors`, running ``work()`` (CPU, in this thread) while Redis executes
        the read: the request is on the wire before ``work`` starts and the reply is read after
        it returns. Returns the read and ``work``'s result."""
        shown, vectors, done = await self._read_ahead(tenant, ids, fields, dim, limit, work)
        return shown, vectors, cast(T, done)

    async def _read_ahead(
        self,
        tenant: str,
        ids: Sequence[str],
        fields: Sequence[str],
        dim: int,
        limit: int,
        work: Callable[[], T] | None,
    ) -> tuple[list[tuple[str, dict[str, str]]], np.ndarray, T | None]:
        if not ids or limit <= 0:
            return [], np.zeros((0, dim), dtype=np.float32), work() if work else None
        wanted = [f for f in fields if f not in (VECTOR_FIELD, COMPACT_VECTOR_FIELD)]
        keys = [self.keys.node(tenant, ids[0])]  # routes the call to the tenant's shard
        args: list[str | int] = [
            self.keys.node(tenant, ""),
            ",".join([*wanted, COMPACT_VECTOR_FIELD, VECTOR_FIELD]),
            dim,
            limit,
            ",".join(ids),
        ]
        done: T | None = None
        with store_errors():
            if work is None:
                rows = await self._read_vectors(keys=keys, args=args)
            else:
                rows, done = await self._call_during(self._read_vectors, keys, args, work)
        shown = [
            (node.decode(), {f: as_text(v) for f, v in zip(wanted, row, strict=False) if v})
            for node, row in rows
        ]
        raw = [row[-1] for _, row in rows]
        if all(len(v) == dim for v in raw):  # every node has its int8 copy: one conversion
            vectors = np.frombuffer(b"".join(raw), dtype=np.int8).reshape(-1, dim)
            return shown, vectors.astype(np.float32), done
        out = np.zeros((len(raw), dim), dtype=np.float32)
        for i, v in enumerate(raw):
            out[i] = np.frombuffer(v, dtype=np.int8 if len(v) == dim else np.float32)
        return shown, out, done

    async def _call_during(
        self, script: Any, keys: list[str], args: list[str | int], work: Callable[[], T]
    ) -> tuple[Any, T]:
        """Send one call of a read-only script, run ``work`` while Redis executes it, then read
        its reply.

        On a connection taken from the client's pool for the call: the request is written before
        ``work`` starts. (A task that awaits the client's own call, started beside ``work``,
        needs two turns of the event loop before it writes, so ``work`` would run first.)
        """
        pool = self.redis.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        ran = False
        try:
            try:
                await conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
                done, ran = work(), True
                reply = await _script_reply(conn, script, keys, args)
            except (RedisConnectionError, RedisTimeoutError):
                # A pooled connection Redis has dropped (a restart, an idle timeout) fails here,
                # at the first write or read. The script only reads: reconnect and run it again
                # once, as the client's own calls do.
                await conn.disconnect()
                if not ran:
                    done, ran = work(), True
                await conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
                reply = await _script_reply(conn, script, keys, args)
            return reply, done
        except BaseException:
            # A reply may still be on its way (work failed, the task was cancelled): this
            # connection cannot serve another call.
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    async def provenance(self, tenant: str, ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Source turns of each node of ``tenant`` in ``ids`` as ``(episode id, external turn
        id)``, in order and without repeats, resolved inside Redis in one round trip (see
        _PROVENANCE). Missing nodes and concepts have none."""
        if not ids:
            return {}
        args = [self.keys.node(tenant, ""), self.keys.adj_prefix(tenant), *ids]
        with store_errors():  # one declared key routes the call to the tenant's shard
            rows = await self._provenance(keys=[self.keys.node(tenant, ids[0])], args=args)
        return {
            i: [(as_text(r[j]), as_text(r[j + 1])) for j in range(0, len(r) - 1, 2)]
            for i, r in zip(ids, rows, strict=True)
        }

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
                async for key in self.redis.scan_iter(match=pattern, count=1000):
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
