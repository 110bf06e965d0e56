"""VectorIndex: KNN over node vectors with RedisVL (HNSW, cosine).

The index covers the node hashes the GraphStore writes (the vector is a field of the node), so a
node and its vector are stored by the same atomic write. Every query takes the tenant as a
required argument and the TAG filter on it is built by the store
(:func:`~gaama.store.index_layout.scope_filter`): callers cannot forget it.

Scopes are filtered on digests (``tenant_tag``, ``conversation_tag``, ``subject_tag``; see
:func:`gaama.ids.tag`), never on the caller's strings: a TAG field folds case and splits on
its separator, so ``T1`` matched ``t1`` and ``a`` matched ``a,b`` in the first layout. Indexes
of that layout are refused at start-up until ``gaama migrate index`` has rebuilt them.

On Redis Cluster the index is one per primary and a tenant's searches go to the tenant's primary
(:mod:`gaama.store.node_indexes`); what spans tenants (``count()`` of all) adds up every primary.

Scans in time order and the routing of every ``FT.SEARCH`` are the base class's
(:mod:`gaama.store.index_reads`); the layout, the scope filter and the reply parsing are
:mod:`gaama.store.index_layout`'s.
"""

from __future__ import annotations

import logging
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

from gaama import ids
from gaama.errors import StoreUnavailable
from gaama.model import NodeKind
from gaama.store import cluster, fulltext
from gaama.store.codecs import TAG_FIELDS, VECTOR_DTYPE, VECTOR_FIELD, as_text
from gaama.store.errors import store_errors
from gaama.store.index_layout import (
    LEXICAL_FIELD,
    check_info,
    create_args,
    documents,
    has_index_options,
    hybrid_policy,
    index_schema,
    scope_filter,
)
from gaama.store.index_reads import IndexReads
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


log = logging.getLogger(__name__)

_DIST = "dist"  # the KNN distance's name in a search reply
#: How long a tenant's size, read to choose its KNN's hybrid policy, is reused: sizes change
#: slowly and the choice tolerates an error of a factor of two.
SIZE_TTL_S = 30.0
_SIZES_MAX = 10_000  # tenants whose size is remembered at once


class VectorIndex(IndexReads):
    """KNN and full-text search of one tenant's nodes, and the index's lifecycle (create and
    check, readiness, counts, drop); scans in time order are :class:`IndexReads`'."""

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
        # Our own FT.CREATE: RedisVL passes no index options (index_layout.INDEX_OPTIONS).
        self._create = create_args(schema)
        # On Redis Cluster: the index on every primary (None on a single server).
        self._nodes: NodeIndexes | None = None
        if cluster.is_cluster(redis):
            self._nodes = NodeIndexes(redis, name, self.keys, self._create)
        self._sizes: dict[str, tuple[float, int, int]] = {}  # tenant: (until, nodes, keys)
        self._counts = fulltext.Counts()

    async def ensure(self) -> None:
        """Create the index when missing; check an existing index has our dimension and layout.

        An index without the current :data:`~gaama.store.index_layout.INDEX_OPTIONS` (made
        by an earlier version) serves as it is, its term offsets costing memory only; a warning
        names ``gaama migrate index``, which rebuilds it without them.

        Raises:
            ConfigError: the index predates exact tag matching (run ``gaama migrate index``).
            DimensionMismatch: the index holds vectors of another dimension.
        """
        try:
            if self._nodes is not None:
                infos = [info for _, info in await self._nodes.each("FT.INFO", create=True)]
            else:
                if not await self._index.exists():
                    try:
                        await self.redis.execute_command("FT.CREATE", self.name, *self._create)  # type: ignore[no-untyped-call]
                        return
                    except ResponseError as exc:
                        # Services start together on a new Redis: another one created the index
                        # between the check and the create. Check the one it made.
                        if "already exists" not in str(exc).lower():
                            raise
                infos = [await self.redis.execute_command("FT.INFO", self.name)]  # type: ignore[no-untyped-call]
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        for info in infos:
            check_info(info, self.name, self.dim)
        if not all(has_index_options(info) for info in infos):
            log.warning(
                "index %r keeps term offsets that no search reads; 'gaama migrate index' "
                "rebuilds it without them (docs/operations.md, 'Index schema changes')",
                self.name,
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
        flt = scope_filter(tenant, kinds, conversation, subject)
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

    async def _size(self, tenant: str) -> tuple[int, int]:
        """The tenant's node count and an upper bound of the index's, reused for
        :data:`SIZE_TTL_S`. The tenant's count is its degree index's (the graph store keeps an
        entry per node with an edge; O(1) to read, where counting the tenant's tag in the index
        takes time in proportion to its nodes); the index cannot hold more documents than the
        database holds keys (``FT.INFO`` would count them exactly, but its cost to the server
        grows with the index)."""
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
        flt = scope_filter(tenant, kinds, conversation, subject)

        async def run(tails: list[list[Any]]) -> list[list[Any]]:
            return await self._execute_all(tenant, tails)

        async def texts(keys: list[str]) -> list[str]:
            return [as_text(t or b"") for t in await self._hashes_field(keys, LEXICAL_FIELD)]

        best = await fulltext.search(
            run, texts, str(flt), words, k, self._counts, await self._text_version(tenant)
        )
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

    async def _text_version(self, tenant: str) -> tuple[str, str] | None:
        """The version of ``tenant``'s documents (:mod:`gaama.store.fulltext`): the token its
        writes of nodes replace and its ingest counter (appended episodes), or None before its
        first such write (or after its keys were removed), when no count is kept."""
        with store_errors():
            token, ingested = await self.redis.mget(
                [self.keys.text_version(tenant), self.keys.state(tenant, "iseq")]
            )
        if token is None:
            return None
        return as_text(token), as_text(ingested)

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
        # slot (the row comes back empty): only the distance is asked for, and the
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


def escape_term(term: str) -> str:
    """``term`` with every character other than a letter or digit backslash-escaped: the Query
    Engine then reads it as text, never as syntax (``-``, ``|``, ``@``, ``{``, ``*``, ``_``...)."""
    return "".join(c if c.isalnum() else "\\" + c for c in term)
