"""Assertions on Redis scoped to one test's namespace (its key prefix), never the server's
global state: other tests, and other runs, share the server."""

from __future__ import annotations

from typing import Any

from gaama.store import cluster
from gaama.store.graph import GraphStore


async def namespace_size(graph: GraphStore) -> int:
    """How many keys the test's key prefix holds (every key the stores write starts with it)."""
    return len([k async for k in graph.redis.scan_iter(match=f"{graph.keys.prefix}:*", count=1000)])


async def tenant_keys(graph: GraphStore, tenant: str, pattern: str) -> list[bytes]:
    """Keys of ``tenant`` matching ``pattern`` (a key of the store's layout with ``*``), read on
    the tenant's primary on Redis Cluster (KEYS there answers for one primary only)."""
    return [
        k async for k in cluster.scan_keys(graph.redis, pattern, near=graph.keys.degrees(tenant))
    ]


async def on_every_primary(client: Any, *command: Any) -> None:
    """``command`` on the one Redis, or on every primary of a cluster (CLIENT PAUSE, say)."""
    if not cluster.is_cluster(client):
        await client.execute_command(*command)
        return
    await cluster.initialized(client)
    for node in cluster.primaries(client):
        (reply,) = await cluster.on_node(node, command)
        if isinstance(reply, Exception):
            raise reply
