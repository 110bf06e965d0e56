"""Assertions on Redis scoped to one test's namespace (its key prefix), never the server's
global state: other tests, and other runs, share the server."""

from __future__ import annotations

from gaama.store.graph import GraphStore


async def namespace_size(graph: GraphStore) -> int:
    """How many keys the test's key prefix holds (every key the stores write starts with it)."""
    return len([k async for k in graph.redis.scan_iter(match=f"{graph.keys.prefix}:*", count=1000)])
