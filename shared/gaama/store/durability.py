"""Durable before acknowledged: wait until Redis has fsynced what a batch wrote.

A consumer commits its offsets after a batch; if Redis then crashes and its last writes were
not yet on disk, those turns are lost for good (the broker no longer redelivers them). With
``GAAMA_DURABILITY=aof`` the runtime calls :meth:`Durability.wait` before it publishes a batch's
events and acknowledges its records: one marker write on a dedicated connection, then
``WAITAOF 1 <replicas> <timeout>``. The AOF is one sequence, so once the marker — written after
every write of the batch had been answered — is fsynced, so is everything before it, whichever
connection wrote it. ``replicas`` also waits for that many replicas' AOF.

What each mode guarantees is in docs/operations.md ("Delivery guarantees").
"""

from __future__ import annotations

from typing import Literal

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama.errors import ConfigError, StoreUnavailable
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
        pipe = self.redis.pipeline(transaction=False)  # one connection: marker, then WAITAOF
        pipe.incr(self.marker_key)
        pipe.execute_command("WAITAOF", 1, self.replicas, self.timeout_ms)
        try:
            with store_errors():
                _, (local, replicas) = await pipe.execute()
        except ResponseError as exc:
            if "appendonly" in str(exc).lower():
                raise ConfigError(
                    "GAAMA_DURABILITY=aof needs Redis with appendonly yes (AOF); enable it, or "
                    "set GAAMA_DURABILITY=none and accept losing the last second of writes on "
                    "a Redis crash"
                ) from None
            raise
        if int(local) < 1 or int(replicas) < self.replicas:
            raise StoreUnavailable(
                f"Redis did not confirm the fsync within {self.timeout_ms} ms "
                f"(local {local}, replicas {replicas}/{self.replicas})"
            )
