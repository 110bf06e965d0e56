"""Searches run in-process over a synthetic tenant, for probes that measure where a search's
time or CPU goes: the tenant loaded as ``python -m benchmarks query`` loads it, the query texts
encoded before the clock starts (no embed stage)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from benchmarks.query import load_tenant
from benchmarks.synthetic import query_texts
from gaama.config import load_settings
from gaama.devstack import processes
from gaama.embed import build_embedder
from gaama.retrieval.search import Retriever
from gaama.store import connect
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex


class Encoded:
    """The queries' vectors, encoded up front: the embed stage costs nothing here."""

    name, dim = "encoded", 384

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    async def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


@dataclass
class Searches:
    """A loaded tenant and a retriever over it; the caller closes ``client``."""

    client: aioredis.Redis
    index: VectorIndex
    graph: GraphStore
    retriever: Retriever
    tenant: str
    texts: list[str]


async def searches(url: str, prefix: str, nodes: int, count: int) -> Searches:
    """A tenant of ``nodes`` synthetic nodes under key prefix ``prefix`` in the Redis at ``url``
    (loaded unless that Redis holds it already) and ``count`` query texts encoded for it."""
    settings = load_settings(redis_url=url, key_prefix=prefix, index_name=f"{prefix}-idx")
    client = connect(url, socket_timeout=600)
    keys = Keys(prefix)
    index = VectorIndex(client, f"{prefix}-idx", settings.embed_dim, keys)
    await index.ensure()
    tenant = f"{prefix}-{nodes}"
    if not await client.exists(keys.degrees(tenant)):
        await load_tenant(client, keys, tenant, nodes, seed=nodes, progress=False)
    texts = query_texts(4096)[:count]
    vectors = dict(zip(texts, await build_embedder(settings).embed(texts), strict=True))
    graph = GraphStore(client, keys)
    retriever = Retriever(graph, index, Encoded(vectors), settings)
    return Searches(client, index, graph, retriever, tenant, texts)


def run(measure: Callable[[str], Coroutine[Any, Any, None]], url: str | None) -> None:
    """Run ``measure`` against the Redis at ``url``, or, without one, against a Redis started for
    the run and stopped after it."""
    if url:
        asyncio.run(measure(url))
        return
    with processes.temporary_redis() as started:
        asyncio.run(measure(started))
