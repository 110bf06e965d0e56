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
from redisvl.schema import IndexSchema

from gaama import ids
from gaama.errors import ConfigError, DimensionMismatch, StoreUnavailable
from gaama.model import NodeKind
from gaama.store.codecs import TAG_FIELDS, VECTOR_DTYPE, VECTOR_FIELD, as_text
from gaama.store.errors import store_errors
from gaama.store.keys import Keys


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    kind: NodeKind
    similarity: float  # cosine similarity in [-1, 1]
    fields: dict[str, str] = field(default_factory=dict)  # stored fields asked for


_DIST = "dist"  # the KNN distance's name in a search reply
#: HNSW links per node (a node of the bottom layer has twice as many).
HNSW_M = 16
#: What examining one HNSW candidate costs, in brute-force comparisons of one vector: about 2.5-3.4
#: measured with float16 vectors (FT.PROFILE, docs/benchmarks.md "KNN policy"), rounded up.
HNSW_CANDIDATE_COST = 4
#: HNSW's answer is approximate and brute force's exact, so HNSW runs only when it at least halves
#: the cost: at LoCoMo's tenants of ~1.9k nodes, where it would save a tenth, it lost up to 0.012
#: of R@1000w in a category.
HNSW_MIN_SAVING = 2
#: How long a tenant's size, read to choose its KNN's hybrid policy, is reused: sizes change
#: slowly and the choice tolerates an error of a factor of two.
SIZE_TTL_S = 30.0
_SIZES_MAX = 10_000  # tenants whose size is remembered at once


def hybrid_policy(tenant_nodes: int, index_docs: int, k: int, ef: int) -> str:
    """How a KNN over one tenant's nodes of a shared index runs: ``"BATCHES"`` (walk the HNSW
    graph, keeping the tenant's nodes, until k are found) or ``"ADHOC_BF"`` (compare the query
    with every node of the tenant; exact).

    Brute force makes ``tenant_nodes`` comparisons. An HNSW search examines about ``ef``
    candidates to start with, plus k ÷ (the tenant's share of the ``index_docs``, or of an upper
    bound of them) to collect k of the tenant's nodes, each costing :data:`HNSW_CANDIDATE_COST`
    comparisons. HNSW runs when it costs at most 1 / :data:`HNSW_MIN_SAVING` of brute force:
    small tenants (and any tenant that is a sliver of a large index) are brute-forced, large ones
    walk HNSW. Left to itself the Query Engine brute-forced a tenant of 100k nodes in an index of
    110k (18 ms against 2 ms through HNSW): its rule weighs the share and the index's size, not
    what brute force over the tenant costs.
    """
    candidates = ef + k * index_docs / max(tenant_nodes, 1)
    hnsw = HNSW_CANDIDATE_COST * candidates
    return "BATCHES" if HNSW_MIN_SAVING * hnsw <= tenant_nodes else "ADHOC_BF"


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
                {
                    "name": VECTOR_FIELD,
                    "type": "vector",
                    "attrs": {
                        "algorithm": "hnsw",
                        "dims": dim,
                        "distance_metric": "cosine",
                        "datatype": VECTOR_DTYPE.__name__,
                        "m": HNSW_M,
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
        self._sizes: dict[str, tuple[float, int, int]] = {}  # tenant: (until, nodes, keys)

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
        vector = vector_attribute(info)
        if not has_current_vectors(info):
            raise ConfigError(
                f"index {self.name!r} indexes {vector.get('data_type', 'no')} vectors in "
                f"{vector.get('identifier', 'no field')!r}, not {VECTOR_DTYPE.__name__} in "
                f"{VECTOR_FIELD!r}; run 'gaama migrate vectors' (docs/operations.md, "
                f"'Index schema changes')"
            )
        found = int(vector["dim"]) if vector.get("dim", "").isdigit() else None
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
        flt: FilterExpression = Tag(TAG_FIELDS["tenant"]) == ids.tag(tenant)
        if kinds:
            flt = flt & (Tag("kind") == [k_.value for k_ in kinds])
        if conversation:
            flt = flt & (Tag(TAG_FIELDS["conversation"]) == ids.tag(conversation))
        if subject:
            flt = flt & (Tag(TAG_FIELDS["subject"]) == ids.tag(subject))
        ef = max(self.ef_runtime, k)
        how = f"EF_RUNTIME {ef}"
        if not (kinds or conversation or subject):  # a narrower filter: the engine's own choice
            nodes, docs = await self._size(tenant)
            if hybrid_policy(nodes, docs, k, ef) == "ADHOC_BF":
                how = "HYBRID_POLICY ADHOC_BF"  # EF_RUNTIME is refused with it
            else:
                how = f"HYBRID_POLICY BATCHES {how}"
        knn = f"=>[KNN {k} @{VECTOR_FIELD} $vec {how} AS {_DIST}]"
        return await self._search(f"({flt}){knn}", vector, k, fields)

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

    async def _search(
        self, query: str, vector: Sequence[float] | np.ndarray, limit: int, fields: Sequence[str]
    ) -> list[Hit]:
        # A raw command: on this hot path RedisVL's and redis-py's query and result objects
        # cost more than the search itself.
        returned = [_DIST, "kind", *(f for f in fields if f not in (_DIST, "kind"))]
        args: list[Any] = ["FT.SEARCH", self.name, query]
        args += ["RETURN", len(returned), *returned, "SORTBY", _DIST]
        args += ["PARAMS", 2, "vec", np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()]
        args += ["LIMIT", 0, limit, "DIALECT", 2]
        try:
            with store_errors():  # unreachable or transient: StoreUnavailable
                reply = await self.redis.execute_command(*args)  # type: ignore[no-untyped-call]
        except ResponseError as exc:  # a permanent error: a missing index is an outage too
            if "no such index" in str(exc).lower():
                raise StoreUnavailable(f"vector index {self.name!r} missing: {exc}") from exc
            raise
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


def vector_attribute(info: Any) -> dict[str, str]:
    """The vector field's attributes in an FT.INFO reply (``identifier``, ``data_type``, ``dim``,
    ..., names in lower case), whichever protocol; empty if the index has no vector field."""
    found: dict[str, str] = {}

    def walk(x: Any) -> None:
        if found:
            return
        if isinstance(x, dict):
            x = [v for kv in x.items() for v in kv]
        if not isinstance(x, list | tuple):
            return
        pairs = [(x[i], x[i + 1]) for i in range(0, len(x) - 1, 2)]
        if len(x) % 2 == 0 and all(isinstance(k, bytes | str) for k, _ in pairs):
            attrs = {
                as_text(k).lower(): as_text(v)
                for k, v in pairs
                if not isinstance(v, list | tuple | dict)
            }
            if attrs.get("type", "").upper() == "VECTOR":
                found.update(attrs)
                return
        for item in x:
            walk(item)

    walk(info)
    return found


def has_current_vectors(info: Any) -> bool:
    """Whether an FT.INFO reply shows this layout's vector field: :data:`VECTOR_FIELD`, float16."""
    vector = vector_attribute(info)
    return (
        vector.get("identifier") == VECTOR_FIELD
        and vector.get("data_type", "").lower() == VECTOR_DTYPE.__name__
    )


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
