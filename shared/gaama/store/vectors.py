"""VectorIndex: KNN over node vectors with RedisVL (HNSW, cosine).

The index covers the node hashes the GraphStore writes (the vector is a field of the node), so a
node and its vector are stored by the same atomic write. Every query takes the tenant as a
required argument and the TAG filter on it is built here: callers cannot forget it.

Scopes are filtered on digests (``tenant_tag``, ``conversation_tag``, ``subject_tag``; see
:func:`gaama.ids.tag`), never on the caller's strings: a TAG field folds case and splits on
its separator, so ``T1`` matched ``t1`` and ``a`` matched ``a,b`` in the first layout. Indexes
of that layout are refused at start-up until ``gaama migrate index`` has rebuilt them.

On Redis Cluster the index is one per primary and a tenant's searches go to the tenant's primary
(:mod:`gaama.store.node_indexes`); what spans tenants (``count()`` of all) adds up every primary.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redisvl.index import AsyncSearchIndex
from redisvl.query.filter import FilterExpression, Tag

from gaama import ids
from gaama.errors import ConfigError, DimensionMismatch, StoreUnavailable
from gaama.model import NodeKind
from gaama.store import cluster, fulltext
from gaama.store.codecs import TAG_FIELDS, VECTOR_DTYPE, VECTOR_FIELD, as_text
from gaama.store.errors import store_errors
from gaama.store.index_layout import (
    LEXICAL_FIELD,
    documents,
    has_current_vectors,
    has_exact_tags,
    has_text_field,
    hybrid_policy,
    index_schema,
    vector_attribute,
)
from gaama.store.keys import Keys
from gaama.store.node_indexes import NodeIndexes


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    kind: NodeKind
    similarity: float  # cosine similarity in [-1, 1]
    fields: dict[str, str] = field(default_factory=dict)  # stored fields asked for


@dataclass(frozen=True, slots=True)
class LexicalHit:
    id: str
    kind: NodeKind
    score: float  # BM25 of the match over a full match's (store/fulltext.py); about 0-2
    fields: dict[str, str] = field(default_factory=dict)  # stored fields asked for
    vector: np.ndarray | None = None  # the stored vector as float32, when the node has one


_DIST = "dist"  # the KNN distance's name in a search reply
#: How long a tenant's size, read to choose its KNN's hybrid policy, is reused: sizes change
#: slowly and the choice tolerates an error of a factor of two.
SIZE_TTL_S = 30.0
_SIZES_MAX = 10_000  # tenants whose size is remembered at once


class VectorIndex:
    def __init__(
        self,
        redis: aioredis.Redis,
        name: str,
        dim: int,
        keys: Keys | None = None,
        ef_runtime: int = 100,
    ) -> None:
        self.keys = keys or Keys()
        self.dim = dim
        self.name = name
        self.ef_runtime = ef_runtime
        self.redis = redis
        schema = index_schema(name, self.keys, dim)
        self._index = AsyncSearchIndex(schema, redis_client=redis, owns_client=False)
        # On Redis Cluster: the index on every primary (None on a single server).
        self._nodes: NodeIndexes | None = None
        if cluster.is_cluster(redis):
            create = ["ON", "HASH", "PREFIX", 1, self.keys.node_prefix, "SCHEMA"]
            for f in schema.redis_fields:
                create += f.redis_args()
            self._nodes = NodeIndexes(redis, name, self.keys, create)
        self._sizes: dict[str, tuple[float, int, int]] = {}  # tenant: (until, nodes, keys)

    async def ensure(self) -> None:
        """Create the index when missing; check an existing index has our dimension and layout.

        Raises:
            ConfigError: the index predates exact tag matching (run ``gaama migrate index``).
            DimensionMismatch: the index holds vectors of another dimension.
        """
        try:
            if self._nodes is not None:
                for _, info in await self._nodes.each("FT.INFO", create=True):
                    self._check_info(info)
                return
            if not await self._index.exists():
                await self._index.create(overwrite=False)
                return
            info = await self.redis.execute_command("FT.INFO", self.name)  # type: ignore[no-untyped-call]
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        self._check_info(info)

    def _check_info(self, info: Any) -> None:
        if isinstance(info, ResponseError):
            raise info
        if not has_exact_tags(info):
            raise ConfigError(
                f"index {self.name!r} uses the old tag layout, which matches tenants, "
                f"conversations and subjects case-insensitively; stop the writers and run "
                f"'gaama migrate index' (docs/operations.md, 'Upgrades')"
            )
        vector = vector_attribute(info)
        if not has_current_vectors(info):
            raise ConfigError(
                f"index {self.name!r} indexes {vector.get('data_type', 'no')} vectors in "
                f"{vector.get('identifier', 'no field')!r}, not {VECTOR_DTYPE.__name__} in "
                f"{VECTOR_FIELD!r}; run 'gaama migrate vectors' (docs/operations.md, "
                f"'Index schema changes')"
            )
        if not has_text_field(info):
            raise ConfigError(
                f"index {self.name!r} has no full-text field {LEXICAL_FIELD!r} for the lexical "
                f"channel; run 'gaama migrate index' (docs/operations.md, 'Upgrades')"
            )
        found = int(vector["dim"]) if vector.get("dim", "").isdigit() else None
        if found is not None and found != self.dim:
            raise DimensionMismatch(
                f"index {self.name!r} holds {found}-d vectors but the embedder gives {self.dim}-d;"
                f" set GAAMA_INDEX_NAME to a new index or use the matching embedder"
            )

    async def ready(self) -> bool:
        """Whether the index exists (on a cluster: on every primary)."""
        try:
            if self._nodes is not None:
                return await self._nodes.ready()
            return bool(await self._index.exists())
        except (RedisConnectionError, RedisTimeoutError, OSError):
            return False

    async def knn(
        self,
        tenant: str,
        vector: Sequence[float] | np.ndarray,
        k: int,
        *,
        kinds: Sequence[NodeKind] | None = None,
        conversation: str | None = None,
        subject: str | None = None,
        fields: Sequence[str] = (),
    ) -> list[Hit]:
        """The ``k`` nodes of ``tenant`` nearest to ``vector``, best first, each with the
        stored ``fields`` asked for (read by the Query Engine in the same call)."""
        flt = _scope(tenant, kinds, conversation, subject)
        ef = max(self.ef_runtime, k)
        how = f"EF_RUNTIME {ef}"
        if not (kinds or conversation or subject):  # a narrower filter: the engine's own choice
            nodes, docs = await self._size(tenant)
            if hybrid_policy(nodes, docs, k, ef) == "ADHOC_BF":
                how = "HYBRID_POLICY ADHOC_BF"  # EF_RUNTIME is refused with it
            else:
                how = f"HYBRID_POLICY BATCHES {how}"
        knn = f"=>[KNN {k} @{VECTOR_FIELD} $vec {how} AS {_DIST}]"
        return await self._search(tenant, f"({flt}){knn}", vector, k, fields)

    async def _ft_search(self, tenant: str, tail: Sequence[Any]) -> list[Any]:
        """``FT.SEARCH <index> *tail`` where ``tenant``'s nodes are: one reply, or on a cluster
        two while the tenant's slot moves between primaries (the caller merges them)."""
        if self._nodes is not None:
            return await self._nodes.search(tenant, tail)
        return [await self.redis.execute_command("FT.SEARCH", self.name, *tail)]  # type: ignore[no-untyped-call]

    async def _size(self, tenant: str) -> tuple[int, int]:
        """The tenant's node count and an upper bound of the index's, reused for
        :data:`SIZE_TTL_S`. The tenant's count is its degree index's (the graph store keeps an
        entry per node with an edge; O(1) to read, where counting the tenant's tag in the index
        costs milliseconds per 100k nodes); the index cannot hold more documents than the
        database holds keys (``FT.INFO`` would count them exactly, at ~30 ms per 100k nodes of
        the server's time)."""
        now = time.monotonic()
        cached = self._sizes.get(tenant)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        with store_errors():
            nodes = int(await self.redis.hlen(self.keys.degrees(tenant)))
            docs = int(await self.redis.dbsize())
        if len(self._sizes) >= _SIZES_MAX:
            self._sizes.clear()
        self._sizes[tenant] = (now + SIZE_TTL_S, nodes, docs)
        return nodes, docs

    async def lexical(
        self,
        tenant: str,
        terms: Sequence[str],
        k: int,
        *,
        kinds: Sequence[NodeKind] | None = None,
        conversation: str | None = None,
        subject: str | None = None,
        fields: Sequence[str] = (),
    ) -> list[LexicalHit]:
        """The ``k`` nodes of ``tenant`` whose text best matches any of ``terms`` (BM25 on the
        scope's own statistics, :mod:`gaama.store.fulltext`; best first), each with the stored
        ``fields`` asked for and its vector (as float32).

        The tenant and scope filter is the one :meth:`knn` applies. Every character of a term
        other than a letter or digit is escaped (:func:`escape_term`), so no term is read as
        query syntax; no terms (or ``k == 0``) is no search at all.
        """
        words = [escape_term(t) for t in terms if t]
        if not words or k <= 0:
            return []
        flt = _scope(tenant, kinds, conversation, subject)

        async def run(tails: list[list[Any]]) -> list[list[Any]]:
            return await self._execute_all(tenant, tails)

        async def texts(keys: list[str]) -> list[str]:
            return [as_text(t or b"") for t in await self._hashes_field(keys, LEXICAL_FIELD)]

        best = await fulltext.search(run, texts, str(flt), words, k)
        names = ["kind", VECTOR_FIELD, *(f for f in fields if f not in ("kind", VECTOR_FIELD))]
        rows = await self._hashes_fields([key for key, _ in best], names)
        scored = [
            (key, {f: v for f, v in zip(names, row, strict=True) if v is not None}, score)
            for (key, score), row in zip(best, rows, strict=True)
        ]
        hits = []
        for key, row, score in scored:
            kind = as_text(row.pop("kind", b""))
            if not kind:
                continue
            blob = row.pop(VECTOR_FIELD, None)
            vec = None
            if isinstance(blob, bytes) and len(blob) == self.dim * VECTOR_DTYPE().itemsize:
                vec = np.frombuffer(blob, dtype=VECTOR_DTYPE).astype(np.float32)
            hits.append(
                LexicalHit(
                    id=self.keys.id_from_node_key(key),
                    kind=NodeKind(kind),
                    score=score,
                    fields={name: as_text(v) for name, v in row.items()},
                    vector=vec,
                )
            )
        return hits

    async def _hashes_fields(self, keys: Sequence[str], names: Sequence[str]) -> list[list[Any]]:
        """Fields ``names`` of each hash in ``keys`` (raw bytes, None where missing)."""
        if not keys:
            return []
        with store_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, list(names))
                return list(await pipe.execute())

    async def _hashes_field(self, keys: Sequence[str], name: str) -> list[Any]:
        """Field ``name`` of each hash in ``keys`` (raw bytes, None where missing)."""
        if not keys:
            return []
        with store_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hget(key, name)
                return list(await pipe.execute())

    async def _execute_all(self, tenant: str, tails: list[list[Any]]) -> list[list[Any]]:
        """:meth:`_execute` of each of ``tails``: on one server in one round trip."""
        if self._nodes is not None:
            return list(await asyncio.gather(*(self._execute(tenant, t) for t in tails)))
        try:
            with store_errors():
                async with self.redis.pipeline(transaction=False) as pipe:
                    for tail in tails:
                        pipe.execute_command("FT.SEARCH", self.name, *tail)
                    return [[reply] for reply in await pipe.execute()]
        except ResponseError as exc:
            if "no such index" in str(exc).lower():
                raise StoreUnavailable(f"vector index {self.name!r} missing: {exc}") from exc
            raise

    async def _execute(self, tenant: str, tail: list[Any]) -> list[Any]:
        """``FT.SEARCH`` where ``tenant``'s nodes are (:meth:`_ft_search`) through the store's
        error boundary: a missing index is an outage, like an unreachable server."""
        try:
            with store_errors():  # unreachable or transient: StoreUnavailable
                return await self._ft_search(tenant, tail)
        except ResponseError as exc:  # a permanent error: a missing index is an outage too
            if "no such index" in str(exc).lower():
                raise StoreUnavailable(f"vector index {self.name!r} missing: {exc}") from exc
            raise

    async def _search(
        self,
        tenant: str,
        query: str,
        vector: Sequence[float] | np.ndarray,
        limit: int,
        fields: Sequence[str],
    ) -> list[Hit]:
        # A raw command: on this hot path RedisVL's and redis-py's query and result objects
        # cost more than the search itself.
        returned = [_DIST, "kind", *(f for f in fields if f not in (_DIST, "kind"))]
        # On a cluster the Query Engine loads no field of a document outside its index name's
        # slot (measured: the row comes back empty): only the distance is asked for, and the
        # fields are read from the node hashes after (NodeIndexes.load).
        asked = [_DIST] if self._nodes is not None else returned
        args: list[Any] = [query, "RETURN", len(asked), *asked, "SORTBY", _DIST]
        args += ["PARAMS", 2, "vec", np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()]
        args += ["LIMIT", 0, limit, "DIALECT", 2]
        replies = await self._execute(tenant, args)
        docs = [d for reply in replies for d in documents(reply)]
        if len(replies) > 1:  # a tenant being moved between primaries: merge by distance
            docs = sorted(docs, key=lambda d: float(d[1].get(_DIST) or "inf"))[:limit]
        if self._nodes is not None:
            docs = await self._nodes.load(docs, returned[1:])
        hits = []
        for key, row in docs:
            kind = row.pop("kind", "")
            dist = row.pop(_DIST, "")
            if not kind or not dist:  # not a node of ours (no kind) or no vector
                continue
            hits.append(
                Hit(
                    id=self.keys.id_from_node_key(key),
                    kind=NodeKind(kind),
                    similarity=1.0 - float(dist),
                    fields=row,
                )
            )
        return hits

    async def scan(
        self,
        tenant: str,
        *,
        kinds: Sequence[NodeKind],
        conversation: str | None = None,
        subject: str | None = None,
        time_min: float | None = None,
        time_max: float | None = None,
        min_exclusive: bool = False,
        limit: int | None,
        fields: Sequence[str] = (),
    ) -> list[tuple[str, NodeKind, dict[str, str]]]:
        """Nodes of ``tenant`` matching the filters in time order (no vector involved): ``(id,
        kind, stored fields asked for)``. ``limit=None`` reads every match, a page at a time."""
        q = f"@{TAG_FIELDS['tenant']}:{{{ids.tag(tenant)}}}"
        q += " @kind:{" + "|".join(k.value for k in kinds) + "}"
        if conversation:
            q += f" @{TAG_FIELDS['conversation']}:{{{ids.tag(conversation)}}}"
        if subject:
            q += f" @{TAG_FIELDS['subject']}:{{{ids.tag(subject)}}}"
        if time_min is not None or time_max is not None:
            lo = "-inf" if time_min is None else f"{'(' if min_exclusive else ''}{time_min!r}"
            hi = "+inf" if time_max is None else repr(time_max)
            q += f" @time:[{lo} {hi}]"
        returned = ["kind", "time", *(f for f in fields if f not in ("kind", "time"))]
        out: list[tuple[str, NodeKind, dict[str, str]]] = []
        page = 1000 if limit is None else limit
        offset = 0
        if self._nodes is not None:
            return await self._scan_cluster(tenant, q, returned, limit)
        merged = False
        while True:
            args: list[Any] = [q, "RETURN", len(returned), *returned]
            args += ["SORTBY", "time", "ASC", "LIMIT", offset, page, "DIALECT", 2]
            with store_errors():
                replies = await self._ft_search(tenant, args)
            merged = merged or len(replies) > 1
            full = False
            for reply in replies:
                docs = documents(reply)
                full = full or len(docs) == page
                for key, row in docs:
                    kind = row.get("kind", "")
                    if kind:
                        out.append((self.keys.id_from_node_key(key), NodeKind(kind), row))
            if limit is not None or not full:
                if merged:  # a tenant being moved between primaries: both halves in time order
                    out.sort(key=lambda r: float(r[2].get("time") or 0))
                    out = out[:limit] if limit is not None else out
                return out
            offset += page

    async def _scan_cluster(
        self, tenant: str, query: str, returned: list[str], limit: int | None
    ) -> list[tuple[str, NodeKind, dict[str, str]]]:
        """:meth:`scan` on a cluster: the Query Engine can neither load nor sort by the fields
        of documents outside its index name's slot, so every match's key is listed, its fields
        read from the hashes, and the rows sorted by time here."""
        keys: list[str] = []
        offset, page = 0, 1000
        while True:
            with store_errors():
                replies = await self._ft_search(
                    tenant, [query, "NOCONTENT", "LIMIT", offset, page, "DIALECT", 2]
                )
            found = [[as_text(k) for k in reply[1:]] for reply in replies]
            for batch in found:
                keys += batch
            if all(len(batch) < page for batch in found):
                break
            offset += page
        assert self._nodes is not None
        with store_errors():
            docs = await self._nodes.load([(k, {}) for k in dict.fromkeys(keys)], returned)
        rows = [
            (self.keys.id_from_node_key(key), NodeKind(row["kind"]), row)
            for key, row in docs
            if row.get("kind")
        ]
        rows.sort(key=lambda r: (float(r[2].get("time") or 0), r[0]))
        return rows if limit is None else rows[:limit]

    async def latest_time(self, tenant: str, conversation: str | None = None) -> float | None:
        """The time of ``tenant``'s latest episode (of ``conversation`` when given), or None."""
        if self._nodes is not None:  # no SORTBY over a cluster index (see _scan_cluster)
            return await self._latest_time_from_chains(tenant, conversation)
        flt = _scope(tenant, [NodeKind.EPISODE], conversation, None)
        args: list[Any] = [str(flt), "RETURN", 1, "time"]
        args += ["SORTBY", "time", "DESC", "LIMIT", 0, 1, "DIALECT", 2]
        (reply,) = await self._execute(tenant, args)
        docs = documents(reply)
        return float(docs[0][1]["time"]) if docs and docs[0][1].get("time") else None

    async def _latest_time_from_chains(self, tenant: str, conversation: str | None) -> float | None:
        """:meth:`latest_time` on a cluster, from the conversations' NEXT chains (sorted sets
        in turn order, on the tenant's primary): the time of each chain's last episode, the
        latest of them. One round trip per conversation of the scope."""
        near = self.keys.degrees(tenant)
        with store_errors():
            if conversation is not None:
                chains = [self.keys.chain(tenant, conversation)]
            else:
                pattern = self.keys.chain(tenant, "*")
                chains = [
                    as_text(k) async for k in cluster.scan_keys(self.redis, pattern, near=near)
                ]
            latest: float | None = None
            for chain in chains:
                last = await self.redis.zrange(chain, -1, -1)
                if not last:
                    continue
                raw = await self.redis.hget(self.keys.node(tenant, as_text(last[0])), "time")
                if raw is not None:
                    t = float(as_text(raw))
                    latest = t if latest is None else max(latest, t)
        return latest

    async def count(self, tenant: str | None = None) -> dict[str, int]:
        """Indexed nodes by kind (of one tenant, or of all)."""
        out = {}
        for kind in NodeKind:
            q = f"@kind:{{{kind.value}}}"
            if tenant:
                q += f" @{TAG_FIELDS['tenant']}:{{{ids.tag(tenant)}}}"
            try:
                with store_errors():
                    replies = await self._count_replies(tenant, q)
            except ResponseError:  # no index yet: nothing indexed
                replies = [[0]]
            out[kind.value] = sum(
                int(r.get(b"total_results", 0) if isinstance(r, dict) else r[0]) for r in replies
            )
        return out

    async def _count_replies(self, tenant: str | None, query: str) -> list[Any]:
        tail = [query, "LIMIT", 0, 0]
        if self._nodes is None or tenant:
            return await self._ft_search(tenant or "", tail)
        # Every tenant: each primary's own count (a missing index counts nothing).
        replies = [r for _, r in await self._nodes.each("FT.SEARCH", *tail)]
        return [r for r in replies if not isinstance(r, ResponseError)]

    async def infos(self) -> list[Any]:
        """FT.INFO of the index (on a cluster: of each primary's)."""
        if self._nodes is not None:
            return [info for _, info in await self._nodes.each("FT.INFO")]
        return [await self.redis.execute_command("FT.INFO", self.name)]  # type: ignore[no-untyped-call]

    async def drop(self) -> None:
        """Remove the index definition (on a cluster: from every primary), keeping the nodes."""
        if self._nodes is not None:
            for name, reply in await self._nodes.each("FT.DROPINDEX"):
                if isinstance(reply, ResponseError):
                    raise reply
                self._nodes.forget(name)
            return
        await self._index.delete(drop=False)


def _scope(
    tenant: str,
    kinds: Sequence[NodeKind] | None,
    conversation: str | None,
    subject: str | None,
) -> FilterExpression:
    """The tenant (always) and scope filter of a search, on the scopes' digests."""
    flt: FilterExpression = Tag(TAG_FIELDS["tenant"]) == ids.tag(tenant)
    if kinds:
        flt = flt & (Tag("kind") == [k_.value for k_ in kinds])
    if conversation:
        flt = flt & (Tag(TAG_FIELDS["conversation"]) == ids.tag(conversation))
    if subject:
        flt = flt & (Tag(TAG_FIELDS["subject"]) == ids.tag(subject))
    return flt


def escape_term(term: str) -> str:
    """``term`` with every character other than a letter or digit backslash-escaped: the Query
    Engine then reads it as text, never as syntax (``-``, ``|``, ``@``, ``{``, ``*``, ``_``...)."""
    return "".join(c if c.isalnum() else "\\" + c for c in term)
