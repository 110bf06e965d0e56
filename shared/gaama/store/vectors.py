"""VectorIndex: KNN over node vectors with RedisVL (HNSW, cosine).

The index covers the node hashes the GraphStore writes (the vector is a field of the node), so a
node and its vector are stored by the same atomic write. Every query takes the tenant as a
required argument and the TAG filter on it is built here: callers cannot forget it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redisvl.index import AsyncSearchIndex
from redisvl.query import VectorQuery
from redisvl.query.filter import FilterExpression, Tag
from redisvl.schema import IndexSchema

from gaama.errors import DimensionMismatch, StoreUnavailable
from gaama.model import NodeKind
from gaama.store.graph import VECTOR_FIELD
from gaama.store.keys import Keys


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    kind: NodeKind
    similarity: float  # cosine similarity in [-1, 1]


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
                {"name": "tenant", "type": "tag"},
                {"name": "kind", "type": "tag"},
                {"name": "conversation", "type": "tag"},
                {"name": "subject", "type": "tag"},
                {"name": "time", "type": "numeric"},
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
        """Create the index when missing; check an existing index has our dimension."""
        try:
            if not await self._index.exists():
                await self._index.create(overwrite=False)
                return
            info = await self.redis.execute_command("FT.INFO", self.name)  # type: ignore[no-untyped-call]
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
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
    ) -> list[Hit]:
        """The ``k`` nodes of ``tenant`` nearest to ``vector``, best first."""
        flt: FilterExpression = Tag("tenant") == tenant
        if kinds:
            flt = flt & (Tag("kind") == [k_.value for k_ in kinds])
        if conversation:
            flt = flt & (Tag("conversation") == conversation)
        if subject:
            flt = flt & (Tag("subject") == subject)
        q = VectorQuery(
            vector=np.asarray(vector, dtype=np.float32).tobytes(),
            vector_field_name=VECTOR_FIELD,
            return_fields=["kind"],
            filter_expression=flt,
            num_results=k,
            ef_runtime=max(self.ef_runtime, k),
        )
        try:
            rows: list[dict[str, Any]] = await self._index.query(q)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        return [
            Hit(
                id=self.keys.id_from_node_key(r["id"]),
                kind=NodeKind(r["kind"]),
                similarity=1.0 - float(r["vector_distance"]),
            )
            for r in rows
        ]

    async def similarities(
        self, tenant: str, vector: Sequence[float] | np.ndarray, ids: Sequence[str]
    ) -> dict[str, float]:
        """Exact cosine similarity of ``vector`` to each node of ``tenant`` in ``ids``, computed
        by the Query Engine (no vector leaves Redis). Nodes without a vector, missing nodes and
        other tenants' nodes are absent from the result.

        A KNN restricted to the given keys (INKEYS) with ad-hoc brute force: exact distances for
        exactly those documents, and the tenant filter still applies.
        """
        if not ids:
            return {}
        n = len(ids)
        query = (
            f"({Tag('tenant') == tenant})"
            f"=>[KNN {n} @{VECTOR_FIELD} $vec HYBRID_POLICY ADHOC_BF AS dist]"
        )
        blob = np.asarray(vector, dtype=np.float32).tobytes()
        # A raw command: redis-py's Query/Result objects cost more than the search itself here.
        try:
            reply = await self.redis.execute_command(  # type: ignore[no-untyped-call]
                "FT.SEARCH", self.name, query,
                "INKEYS", n, *(self.keys.node(tenant, i) for i in ids),
                "RETURN", 1, "dist", "PARAMS", 2, "vec", blob,
                "LIMIT", 0, n, "DIALECT", 2,
            )  # fmt: skip
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        return {self.keys.id_from_node_key(key): 1.0 - dist for key, dist in _key_dist(reply)}

    async def count(self, tenant: str | None = None) -> dict[str, int]:
        """Indexed nodes by kind (of one tenant, or of all)."""
        out = {}
        for kind in NodeKind:
            q = f"@kind:{{{kind.value}}}"
            if tenant:
                q += f" @tenant:{{{_escape(tenant)}}}"
            try:
                res = await self.redis.execute_command(  # type: ignore[no-untyped-call]
                    "FT.SEARCH", self.name, q, "LIMIT", 0, 0
                )
            except ResponseError:
                res = [0]
            total = res.get(b"total_results", 0) if isinstance(res, dict) else res[0]
            out[kind.value] = int(total)
        return out

    async def drop(self) -> None:
        await self._index.delete(drop=False)


def _escape(value: str) -> str:
    return "".join("\\" + c if not c.isalnum() and c != "_" else c for c in value)


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


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key_dist(reply: Any) -> list[tuple[str, float]]:
    """(key, dist) of each document of an FT.SEARCH reply returning the one field ``dist``,
    in either protocol: RESP3 gives a map, RESP2 ``[total, key, [field, value], ...]``."""
    if isinstance(reply, dict):
        rows: list[dict[Any, Any]] = reply.get(b"results") or reply.get("results") or []
        out = []
        for row in rows:
            row = {_str(k): v for k, v in row.items()}
            attrs = {_str(k): v for k, v in row["extra_attributes"].items()}
            out.append((_str(row["id"]), float(_str(attrs["dist"]))))
        return out
    return [(_str(reply[i]), float(_str(reply[i + 1][1]))) for i in range(1, len(reply) - 1, 2)]
