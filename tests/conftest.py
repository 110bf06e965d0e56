"""Session fixtures: the real embedded stack (Redis 8.2 + Query Engine, Tansu broker) on free
loopback ports, started once per test session; per-test namespaces (key prefix, index name, topic
prefix) so tests never see each other's data.

Set GAAMA_TEST_REDIS_URL and GAAMA_TEST_KAFKA_BOOTSTRAP to run against external servers instead
(and GAAMA_TEST_REDIS_CLUSTER=true when that Redis is a cluster). GAAMA_TEST_REDIS_CLUSTER=N
(N > 1) without them starts a Redis Cluster of N primaries instead of one server (`make
test-cluster`); tests that need one server of their own are marked ``single_redis`` and skipped.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gaama.config import Settings, load_settings
from gaama.embed import Embedder, build_embedder
from gaama.store import connect
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex


class StackInfo:
    def __init__(self, redis_url: str, kafka_bootstrap: str, redis_cluster: bool = False) -> None:
        self.redis_url = redis_url
        self.kafka_bootstrap = kafka_bootstrap
        self.redis_cluster = redis_cluster


def _cluster_size() -> int:
    raw = os.environ.get("GAAMA_TEST_REDIS_CLUSTER", "").strip().lower()
    if raw in ("", "0", "1", "false", "no"):
        return 1
    return 3 if raw in ("true", "yes") else int(raw)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cluster_size() == 1:
        return
    skip = pytest.mark.skip(reason="needs a single Redis of its own (GAAMA_TEST_REDIS_CLUSTER set)")
    for item in items:
        if "single_redis" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    if os.environ.get("GAAMA_TEST_NO_STACK"):
        # The stack-free tier (make test-unit): a test reaching the stack must say so.
        pytest.fail("this test uses the real stack: mark it requires_stack", pytrace=False)
    url = os.environ.get("GAAMA_TEST_REDIS_URL")
    boot = os.environ.get("GAAMA_TEST_KAFKA_BOOTSTRAP")
    shards = _cluster_size()
    if url and boot:
        yield StackInfo(url, boot, shards > 1)
        return
    from gaama import devstack

    directory: Path = tmp_path_factory.mktemp("stack")
    ports = [devstack.free_port() for _ in range(shards)]
    s = devstack.start_stack(
        directory,
        ports[0],
        devstack.free_port(),
        redis_cluster=shards,
        cluster_ports=ports if shards > 1 else None,
    )
    try:
        yield StackInfo(s.redis_url, s.kafka_bootstrap, s.cluster)
    finally:
        s.stop()


def _ns(nodeid: str) -> str:
    return "t" + hashlib.blake2b(nodeid.encode(), digest_size=5).hexdigest()


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A short name unique to this test: key prefix, index name and topic prefix derive from it."""
    return _ns(request.node.nodeid)


@pytest.fixture
def settings(stack: StackInfo, namespace: str) -> Settings:
    return load_settings(
        redis_url=stack.redis_url,
        redis_cluster=stack.redis_cluster,
        kafka_bootstrap=stack.kafka_bootstrap,
        key_prefix=namespace,
        index_name=f"{namespace}-idx",
        topic_prefix=f"{namespace}.",
        llm_max_retries=2,
        retry_backoff_s=0.05,
        chunk_idle_s=1.0,
    )


@pytest.fixture
async def redis_client(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    client = connect(settings.redis_url, cluster=settings.redis_cluster)
    yield client
    await client.aclose()


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.key_prefix)


@pytest.fixture
def graph(redis_client: aioredis.Redis, keys: Keys) -> GraphStore:
    return GraphStore(redis_client, keys)


@pytest.fixture
async def index(
    redis_client: aioredis.Redis, keys: Keys, settings: Settings
) -> AsyncIterator[VectorIndex]:
    idx = VectorIndex(redis_client, settings.index_name, settings.embed_dim, keys)
    await idx.ensure()
    yield idx
    await idx.drop()


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The default backend (ONNX Runtime), as the services build it."""
    e = build_embedder(load_settings())
    e.warm_up()  # type: ignore[attr-defined]
    return e


@pytest.fixture
async def topics(settings: Settings) -> list[str]:
    """This test's own topics (prefixed), created on the real broker."""
    from gaama.devstack import create_topics

    return await create_topics(
        settings.kafka_bootstrap, settings.topic_partitions, settings.topic_prefix
    )
