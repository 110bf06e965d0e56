"""Durable before acknowledged: wait until Redis has fsynced what a batch wrote.

A consumer commits its offsets after a batch; if Redis then crashes and its last writes were
not yet on disk, those turns are lost for good (the broker no longer redelivers them). With
``GAAMA_DURABILITY=aof`` the runtime calls :meth:`Durability.wait` before it publishes a batch's
events and acknowledges its records: one marker write on a dedicated connection, then
``WAITAOF 1 <replicas> <timeout>``. The AOF is one sequence, so once the marker — written after
every write of the batch had been answered — is fsynced, so is everything before it, whichever
connection wrote it. ``replicas`` also waits for that many replicas' AOF.

What each mode guarantees is in docs/operations.md ("Delivery guarantees").

On Redis Cluster every primary keeps its own AOF: the wait writes a marker on each primary (a key
whose hash tag is a slot that primary holds) and waits for each, all at once.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama.errors import ConfigError, StoreUnavailable
from gaama.store import cluster
from gaama.store.errors import store_errors

Mode = Literal["none", "aof", "replicas"]


class Durability:
    def __init__(
        self,
        redis: aioredis.Redis,
        marker_key: str,
        mode: Mode,
        *,
        replicas: int = 1,
        timeout_s: float = 5.0,
    ) -> None:
        self.redis = redis
        self.marker_key = marker_key
        self.mode = mode
        self.replicas = replicas if mode == "replicas" else 0
        self.timeout_ms = int(timeout_s * 1000)

    async def wait(self) -> None:
        """Return once everything written before the call is fsynced (no-op for ``none``).

        Raises:
            StoreUnavailable: not confirmed within the timeout (the batch is retried).
            ConfigError: Redis runs without AOF, so the guarantee cannot be given.
        """
        if self.mode == "none":
            return
        try:
            with store_errors():
                if cluster.is_cluster(self.redis):
                    await cluster.initialized(self.redis)
                    nodes = cluster.holding(self.redis)
                    acks = await asyncio.gather(*(self._wait_on(node) for node in nodes))
                else:
                    pipe = self.redis.pipeline(transaction=False)  # one link: marker, WAITAOF
                    pipe.incr(self.marker_key)
                    pipe.execute_command("WAITAOF", 1, self.replicas, self.timeout_ms)
                    _, ack = await pipe.execute()
                    acks = [ack]
        except ResponseError as exc:
            if "appendonly" in str(exc).lower():
                raise ConfigError(
                    "GAAMA_DURABILITY=aof needs Redis with appendonly yes (AOF); enable it, or "
                    "set GAAMA_DURABILITY=none and accept losing the last second of writes on "
                    "a Redis crash"
                ) from None
            raise
        for local, replicas in acks:
            self._check(local, replicas)

    async def _wait_on(self, node: Any) -> Any:
        """Marker and WAITAOF on one primary of a cluster, on one connection."""
        marker = f"{self.marker_key}{{{cluster.node_tag(self.redis, node)}}}"
        wait = ["WAITAOF", 1, self.replicas, self.timeout_ms]
        written, ack = await cluster.on_node(node, ["INCR", marker], wait)
        for reply in (written, ack):
            if isinstance(reply, ResponseError):
                if cluster.redirected(reply):  # the slot map changed: read it again, then retry
                    await cluster.refresh(self.redis)
                    raise StoreUnavailable(f"Redis Cluster slots moved: {reply}")
                raise reply
        return ack

    def _check(self, local: Any, replicas: Any) -> None:
        if int(local) < 1 or int(replicas) < self.replicas:
            raise StoreUnavailable(
                f"Redis did not confirm the fsync within {self.timeout_ms} ms "
                f"(local {local}, replicas {replicas}/{self.replicas})"
            )
