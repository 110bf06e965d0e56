"""VectorIndex: KNN over node vectors with RedisVL (HNSW, cosine).

The index covers the node hashes the GraphStore writes (the vector is a field of the node), so a
node and its vector are stored by the same atomic write. Every query takes the tenant as a
required argument and the TAG filter on it is built here: callers cannot forget it.

Scopes are filtered on digests (``tenant_tag``, ``conversation_tag``, ``subject_tag``; see
:func:`gaama.ids.tag`), never on the caller's strings: a TAG field folds case and splits on
its separator, so ``T1`` matched ``t1`` and ``a`` matched ``a,b`` in the first layout. Indexes
of that layout are refused at start-up until ``gaama migrate index`` has rebuilt them.
"""

from __future__ import annotations

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
from redisvl.schema import IndexSchema

from gaama import ids
from gaama.errors import ConfigError, DimensionMismatch, StoreUnavailable
from gaama.model import NodeKind
from gaama.store.codecs import COMPACT_VECTOR_FIELD, TAG_FIELDS, VECTOR_FIELD, as_text
from gaama.store.errors import store_errors
from gaama.store.keys import Keys


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
    score: float  # BM25 score of the full-text match (higher is better; unbounded)
    fields: dict[str, str] = field(default_factory=dict)  # stored fields asked for
    vector: np.ndarray | None = None  # the int8 copy as float32, when the node has one


_DIST = "dist"  # the KNN distance's name in a search reply
#: The node field indexed for full text (the lexical channel of retrieval).
LEXICAL_FIELD = "text"


def index_schema(name: str, keys: Keys, dim: int) -> IndexSchema:
    return IndexSchema.from_dict(
        {
            "index": {
                "name": name,
                "prefix": keys.node_prefix,
                "storage_type": "hash",
                "key_separator": ":",
            },
            "fields": [
                *(
                    {"name": f, "type": "tag", "attrs": {"case_sensitive": True}}
                    for f in TAG_FIELDS.values()
                ),
                {"name": "kind", "type": "tag", "attrs": {"case_sensitive": True}},
                {"name": "time", "type": "numeric"},
                {"name": LEXICAL_FIELD, "type": "text"},
                {
                    "name": VECTOR_FIELD,
                    "type": "vector",
                    "attrs": {
                        "algorithm": "hnsw",
                        "dims": dim,
                        "distance_metric": "cosine",
                        "datatype": "float32",
                        "m": 16,
                        "ef_construction": 200,
                    },
                },
            ],
        }
    )


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
        self._index = AsyncSearchIndex(
            index_schema(name, self.keys, dim), redis_client=redis, owns_client=False
        )

    async def ensure(self) -> None:
        """Create the index when missing; check an existing index has our dimension and layout.

        Raises:
            ConfigError: the index predates exact tag matching (run ``gaama migrate index``).
            DimensionMismatch: the index holds vectors of another dimension.
        """
        try:
            if not await self._index.exists():
                await self._index.create(overwrite=False)
                return
            info = await self.redis.execute_command("FT.INFO", self.name)  # type: ignore[no-untyped-call]
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        if not has_exact_tags(info):
            raise ConfigError(
                f"index {self.name!r} uses the old tag layout, which matches tenants, "
                f"conversations and subjects case-insensitively; stop the writers and run "
                f"'gaama migrate index' (docs/operations.md, 'Upgrades')"
            )
        if not has_text_field(info):
            raise ConfigError(
                f"index {self.name!r} has no full-text field {LEXICAL_FIELD!r} for the lexical "
                f"channel; run 'gaama migrate index' (docs/operations.md, 'Upgrades')"
            )
        found = _dim_from_info(info)
        if found is not None and found != self.dim:
            raise DimensionMismatch(
                f"index {self.name!r} holds {found}-d vectors but the embedder gives {self.dim}-d;"
                f" set GAAMA_INDEX_NAME to a new index or use the matching embedder"
            )

    async def ready(self) -> bool:
        try:
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
        knn = f"=>[KNN {k} @{VECTOR_FIELD} $vec EF_RUNTIME {ef} AS {_DIST}]"
        return await self._search(f"({flt}){knn}", vector, k, fields)

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
        """The ``k`` nodes of ``tenant`` whose text best matches any of ``terms`` (BM25, best
        first), each with the stored ``fields`` asked for and its int8 vector copy.

        The tenant and scope filter is the one :meth:`knn` applies. Every character of a term
        other than a letter or digit is escaped (:func:`escape_term`), so no term is read as
        query syntax; no terms (or ``k == 0``) is no search at all.
        """
        words = [escape_term(t) for t in terms if t]
        if not words or k <= 0:
            return []
        flt = _scope(tenant, kinds, conversation, subject)
        query = f"({flt}) @{LEXICAL_FIELD}:({'|'.join(words)})"
        returned = ["kind", COMPACT_VECTOR_FIELD, *(f for f in fields if f != "kind")]
        args: list[Any] = ["FT.SEARCH", self.name, query, "WITHSCORES", "SCORER", "BM25STD"]
        args += ["RETURN", len(returned), *returned, "LIMIT", 0, k, "DIALECT", 2]
        reply = await self._execute(args)
        hits = []
        for key, row, score in _scored_documents(reply):
            kind = as_text(row.pop("kind", b""))
            if not kind:
                continue
            raw = row.pop(COMPACT_VECTOR_FIELD, None)
            vec = None
            if isinstance(raw, bytes) and len(raw) == self.dim:
                vec = np.frombuffer(raw, dtype=np.int8).astype(np.float32)
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

    async def _execute(self, args: list[Any]) -> Any:
        try:
            with store_errors():  # unreachable or transient: StoreUnavailable
                return await self.redis.execute_command(*args)  # type: ignore[no-untyped-call]
        except ResponseError as exc:  # a permanent error: a missing index is an outage too
            if "no such index" in str(exc).lower():
                raise StoreUnavailable(f"vector index {self.name!r} missing: {exc}") from exc
            raise

    async def _search(
        self, query: str, vector: Sequence[float] | np.ndarray, limit: int, fields: Sequence[str]
    ) -> list[Hit]:
        # A raw command: on this hot path RedisVL's and redis-py's query and result objects
        # cost more than the search itself.
        returned = [_DIST, "kind", *(f for f in fields if f not in (_DIST, "kind"))]
        args: list[Any] = ["FT.SEARCH", self.name, query]
        args += ["RETURN", len(returned), *returned, "SORTBY", _DIST]
        args += ["PARAMS", 2, "vec", np.asarray(vector, dtype=np.float32).tobytes()]
        args += ["LIMIT", 0, limit, "DIALECT", 2]
        reply = await self._execute(args)
        hits = []
        for key, row in _documents(reply):
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
        while True:
            args: list[Any] = ["FT.SEARCH", self.name, q, "RETURN", len(returned), *returned]
            args += ["SORTBY", "time", "ASC", "LIMIT", offset, page, "DIALECT", 2]
            with store_errors():
                reply = await self.redis.execute_command(*args)  # type: ignore[no-untyped-call]
            docs = _documents(reply)
            for key, row in docs:
                kind = row.get("kind", "")
                if kind:
                    out.append((self.keys.id_from_node_key(key), NodeKind(kind), row))
            if limit is not None or len(docs) < page:
                return out
            offset += page

    async def latest_time(self, tenant: str, conversation: str | None = None) -> float | None:
        """The time of ``tenant``'s latest episode (of ``conversation`` when given), or None."""
        flt = _scope(tenant, [NodeKind.EPISODE], conversation, None)
        args: list[Any] = ["FT.SEARCH", self.name, str(flt), "RETURN", 1, "time"]
        args += ["SORTBY", "time", "DESC", "LIMIT", 0, 1, "DIALECT", 2]
        docs = _documents(await self._execute(args))
        return float(docs[0][1]["time"]) if docs and docs[0][1].get("time") else None

    async def count(self, tenant: str | None = None) -> dict[str, int]:
        """Indexed nodes by kind (of one tenant, or of all)."""
        out = {}
        for kind in NodeKind:
            q = f"@kind:{{{kind.value}}}"
            if tenant:
                q += f" @{TAG_FIELDS['tenant']}:{{{ids.tag(tenant)}}}"
            try:
                with store_errors():
                    res = await self.redis.execute_command(  # type: ignore[no-untyped-call]
                        "FT.SEARCH", self.name, q, "LIMIT", 0, 0
                    )
            except ResponseError:  # no index yet: nothing indexed
                res = [0]
            total = res.get(b"total_results", 0) if isinstance(res, dict) else res[0]
            out[kind.value] = int(total)
        return out

    async def drop(self) -> None:
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


def has_text_field(info: Any) -> bool:
    """Whether an FT.INFO reply shows the full-text field of the lexical channel."""

    def is_text_attr(x: Any) -> bool:
        flat = [as_text(v) for v in x if isinstance(v, bytes | str)]
        pairs = dict(zip(flat[::2], flat[1::2], strict=False))
        return pairs.get("identifier") == LEXICAL_FIELD and pairs.get("type") == "TEXT"

    def walk(x: Any) -> bool:
        if isinstance(x, dict):
            x = [v for kv in x.items() for v in kv]
        if isinstance(x, list | tuple):
            return is_text_attr(x) or any(walk(item) for item in x)
        return False

    return walk(info)


def has_exact_tags(info: Any) -> bool:
    """Whether an FT.INFO reply shows the digest tag fields of the current layout."""
    wanted = {f.encode() for f in TAG_FIELDS.values()} | set(TAG_FIELDS.values())
    found: set[Any] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            x = [v for kv in x.items() for v in kv]
        if isinstance(x, list | tuple):
            for item in x:
                if isinstance(item, bytes | str) and item in wanted:
                    found.add(item if isinstance(item, str) else item.decode())
                else:
                    walk(item)

    walk(info)
    return found >= set(TAG_FIELDS.values())


def _dim_from_info(info: Any) -> int | None:
    """Find DIM in FT.INFO's nested reply without caring about RESP details."""

    def walk(x: Any) -> int | None:
        if isinstance(x, list | tuple):
            for i, item in enumerate(x):
                if (
                    isinstance(item, bytes | str)
                    and str(item.decode() if isinstance(item, bytes) else item).lower() == "dim"
                ):
                    try:
                        return int(x[i + 1])
                    except (IndexError, ValueError, TypeError):
                        return None
                found = walk(item)
                if found is not None:
                    return found
        if isinstance(x, dict):
            return walk([v for kv in x.items() for v in kv])
        return None

    return walk(info)


def _scored_documents(reply: Any) -> list[tuple[str, dict[str, Any], float]]:
    """(key, raw fields, score) of each document of an FT.SEARCH ... WITHSCORES reply, in
    either protocol (RESP2: ``[total, key, score, [field, value, ...], ...]``)."""
    out = []
    if isinstance(reply, dict):
        for row in reply.get(b"results") or reply.get("results") or []:
            row = {as_text(k): v for k, v in row.items()}
            attrs = row.get("extra_attributes") or {}
            fields = {as_text(k): v for k, v in attrs.items()}
            out.append((as_text(row["id"]), fields, float(row.get("score") or 0.0)))
        return out
    for i in range(1, len(reply) - 2, 3):
        flat = reply[i + 2]
        fields = {as_text(flat[j]): flat[j + 1] for j in range(0, len(flat) - 1, 2)}
        out.append((as_text(reply[i]), fields, float(reply[i + 1])))
    return out


def _documents(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """(key, fields) of each document of an FT.SEARCH reply, in either protocol: RESP3 gives a
    map, RESP2 ``[total, key, [field, value, ...], ...]``."""
    if isinstance(reply, dict):
        rows: list[dict[Any, Any]] = reply.get(b"results") or reply.get("results") or []
        out = []
        for row in rows:
            row = {as_text(k): v for k, v in row.items()}
            attrs = row.get("extra_attributes") or {}
            out.append((as_text(row["id"]), {as_text(k): as_text(v) for k, v in attrs.items()}))
        return out
    return [(as_text(reply[i]), _pairs(reply[i + 1])) for i in range(1, len(reply) - 1, 2)]


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {as_text(flat[j]): as_text(flat[j + 1]) for j in range(0, len(flat) - 1, 2)}
