"""Forgetting as an event of the stream: what each stage does with a ForgetRequested.

A request is accepted by the query service (:meth:`ForgetStore.accept` hides the scope from
every read at once) and published behind every turn produced before it. Then, per lane (the
conversation's partition, or each partition for a subject or a tenant):

1. ingest fixes the lane's **cut** — the tenant's ingest counter — so episodes ingested on the
   lane before the request are in scope and turns sent after it are not;
2. extract takes the forgotten episodes out of open chunks (under the chunk's lock, so a chunk
   being closed finishes first; extraction writes are conditional on their sources existing);
3. reflect, the last stage, counts the lane in; when every lane is in, every turn produced
   before the request has been ingested, extracted and reflected, and the **cascade** runs:
   episodes in scope, the facts derived only from them, reflections citing a removed fact,
   concepts left without edges, their adjacency, vectors and markers (``lua/forget_episodes``).

Each step is idempotent, so a redelivered request (after a crash anywhere) redoes nothing
that was done and finishes what was not. Each step acts only on an accepted request: an event
whose request is unknown or was abandoned (its publication failed and the caller was refused)
is dropped at every stage, counted in ``dropped`` by reason, and changes nothing. The core
knows nothing of Kafka: ``lane`` is a name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from prometheus_client import Counter
from redis.asyncio.lock import Lock

from gaama.errors import ChunkBusy
from gaama.events import ForgetRequested
from gaama.extract.types import word_count
from gaama.store.chunks import ChunkStore
from gaama.store.forget import ForgetRefused, ForgetStore

log = logging.getLogger("gaama.forget")

#: How long extract waits for a chunk being closed before taking its episodes out.
LOCK_WAIT_S = 0.05


def lane_of(ev: ForgetRequested) -> str:
    """The lane a forget event travels: ``c`` for a conversation, ``p<n>`` for a fan-out."""
    return "c" if ev.scope == "conversation" else f"p{ev.partition or 0}"


@dataclass
class Forgetting:
    store: ForgetStore
    chunks: ChunkStore
    lock_ttl_s: float = 60.0
    #: Forget events dropped because their request is not accepted, by reason (``unknown``,
    #: ``abandoned``).
    dropped: Counter | None = None

    def _drop(self, ev: ForgetRequested, stage: str, reason: str) -> None:
        log.warning(
            "forget %s (%s) on %s dropped at %s: the request is %s",
            ev.request_id,
            ev.scope,
            lane_of(ev),
            stage,
            reason,
        )
        if self.dropped is not None:
            self.dropped.labels(reason).inc()

    async def at_ingest(self, ev: ForgetRequested) -> None:
        """Fix the cut of the event's lane."""
        try:
            cut = await self.store.cut(ev.tenant, ev.request_id, lane_of(ev))
        except ForgetRefused as refused:
            self._drop(ev, "ingest", refused.reason)
            return
        log.info("forget %s (%s) cut at %d on %s", ev.request_id, ev.scope, cut, lane_of(ev))

    async def at_extract(self, ev: ForgetRequested) -> int:
        """Take the scope's episodes out of open chunks; returns how many were taken out."""
        t = ev.tenant
        st = await self.store.status(t, ev.request_id)
        if st is None or st.status not in ("pending", "done"):
            self._drop(ev, "extract", st.status if st is not None else "unknown")
            return 0
        cuts = await self.store.cuts(t, ev.request_id)
        doomed = set(await self.store.doomed_episodes(t, ev.scope, ev.scope_id, cuts))
        if not doomed:
            return 0
        convs = (
            [ev.scope_id] if ev.scope == "conversation" else await self.chunks.open_conversations(t)
        )
        taken = 0
        for conv in convs:
            token = await self._lock(t, conv)
            try:
                gone = [e for e in await self.chunks.episodes(t, conv) if e in doomed]
                if not gone:
                    continue
                words = await self._words(t, gone)
                await self.chunks.remove(t, conv, gone, words)
                taken += len(gone)
            finally:
                await self.chunks.unlock(t, conv, token)
        return taken

    async def at_last_stage(self, ev: ForgetRequested) -> dict[str, int] | None:
        """Count the lane in; run the cascade once every lane is in. Returns what was removed
        (None while lanes are still on their way, or when it was done already)."""
        t = ev.tenant
        try:
            if not await self.store.arrive(t, ev.request_id, lane_of(ev)):
                return None
            started = time.perf_counter()
            cuts = await self.store.cuts(t, ev.request_id)
            doomed = await self.store.doomed_episodes(t, ev.scope, ev.scope_id, cuts)
            removed = await self.store.remove_episodes(t, doomed, request_id=ev.request_id)
        except ForgetRefused as refused:
            if refused.reason != "done":  # a redelivery of a finished request: nothing to do
                self._drop(ev, "the last stage", refused.reason)
            return None
        if ev.scope == "tenant":
            await self.store.sweep_tenant(t)
        if not await self.store.finish(
            t, ev.request_id, ev.scope, ev.scope_id, removed, now=time.time()
        ):
            return None
        log.info(
            "forget %s (%s) done in %.2fs: %s",
            ev.request_id,
            ev.scope,
            time.perf_counter() - started,
            removed,
        )
        return removed

    async def _lock(self, tenant: str, conversation: str) -> Lock:
        # A close in progress holds the lock: let it finish (its lock expires if it died).
        for _ in range(int(self.lock_ttl_s / LOCK_WAIT_S) + 1):
            token = await self.chunks.lock(tenant, conversation, self.lock_ttl_s)
            if token is not None:
                return token
            await asyncio.sleep(LOCK_WAIT_S)
        raise ChunkBusy(f"the open chunk of {tenant}/{conversation} stays locked")

    async def _words(self, tenant: str, episode_ids: list[str]) -> int:
        rows = await self.store.episode_texts(tenant, episode_ids)
        return sum(max(1, word_count(raw)) for raw in rows)
