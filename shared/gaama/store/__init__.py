"""Redis storage: graph (nodes, adjacency, chains), vector index, open chunks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import redis.asyncio as aioredis

if TYPE_CHECKING:
    from gaama.connections import RedisConnection


def connect(
    url: str,
    *,
    cluster: bool = False,
    auth: RedisConnection | None = None,
    **options: Any,
) -> aioredis.Redis:
    """An async Redis client for GAAMA's stores.

    RESP2 is asked for explicitly: redis-py 8 negotiates RESP3 by default, which parses the
    search path's replies (FT.SEARCH results, nested script arrays) more slowly on this
    project's queries, and RedisVL's result processing expects RESP2 shapes.

    With ``cluster`` (``GAAMA_REDIS_CLUSTER``) the client is redis-py's cluster client
    (:class:`gaama.store.cluster.ClusterClient`) seeded from ``url``: it offers the commands the
    stores use under the same names and routes each to the primary holding its keys' slot; what
    needs a chosen primary (searches, scans, fsync waits) goes through :mod:`gaama.store.cluster`.

    ``auth`` (``GAAMA_REDIS__*``) adds the ACL user and password and, for ``rediss://``, the TLS
    files; a cluster client uses them for every primary it discovers.
    """
    if auth is not None:
        options = {**auth.client_options(url), **options}
    if cluster:
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        from gaama.store.cluster import ClusterClient

        # One immediate retry after reading the slot map again (a failover, a node restarted);
        # redis-py's default backs off for seconds, hiding an outage from the runtime, which
        # retries outages itself.
        options.setdefault("retry", Retry(NoBackoff(), 1))
        client = ClusterClient.from_url(url, protocol=2, **options)
        return cast(aioredis.Redis, client)
    if url.startswith("redis://"):  # TLS and Unix sockets keep their own connection classes
        from gaama.store.packing import PackedConnection

        options.setdefault("connection_class", PackedConnection)
    return aioredis.Redis.from_url(url, protocol=2, **options)
