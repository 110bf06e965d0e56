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
