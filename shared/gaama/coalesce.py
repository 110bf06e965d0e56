"""Micro-batching: concurrent ``embed`` calls share one encode.

The query service embeds one short query per request. Sixteen concurrent requests would run
sixteen single-row encodes one after another on the same cores; a transformer encodes a batch of
16 short texts in little more than the time of one. :class:`CoalescingEmbedder` wraps any
embedder and merges calls into batches, each one ``embed`` of the inner embedder:

- Calls that arrive while a batch runs wait for it and form the next one, which starts as soon as
  it ends (batches never overlap: the inner embedder already uses every core).
- When no batch runs, a call that arrives less than ``window_s`` (``GAAMA_EMBED_COALESCE_MS``)
  after the previous call or the end of the previous batch opens a window of ``window_s``: calls
  arriving before it closes join. A call after a quiet spell runs at once: at low load nobody is
  coming to share its batch, and a window would only add its length to the request.

Each caller gets its own rows back.

A call after a quiet spell that finds no batch running or queued is encoded right away on the
event loop's thread when the inner embedder is local (it has ``embed_sync``) and the call is
small (a query): a hand-off to a worker thread and back costs two thread wake-ups, which on
loaded cores wait for a time slice each
(docs/decisions/0013-query-embed-inline.md). The loop is held for
one encode only when it has nothing else queued here; under load every call is "busy" and
batches run in a worker thread, leaving the loop free while the model computes.

A batch runs in its own task: a caller that is cancelled (client gone, timeout) leaves the batch
running for the others. An error in a batch fails that batch's callers only.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gaama.config import Settings
from gaama.embed import Embedder


@dataclass(slots=True)
class _Call:
    texts: list[str]
    future: asyncio.Future[np.ndarray]
    queued: float = field(default_factory=time.monotonic)


class CoalescingEmbedder:
    """An :class:`~gaama.embed.Embedder` that merges concurrent calls into batches.

    Args:
        inner: the embedder that does the work.
        window_s: how long the first call of a batch waits for others (> 0).
        max_batch: a batch closes early once it holds this many texts; a single call with more
            texts still runs, as a batch of its own.
        inline: encode a quiet call of at most :data:`INLINE_MAX_TEXTS` texts on the caller's
            thread when ``inner`` has ``embed_sync`` (see the module docstring).
    """

    #: The largest call encoded inline: a query or two, a few milliseconds of the loop.
    INLINE_MAX_TEXTS = 4

    def __init__(
        self, inner: Embedder, window_s: float, max_batch: int = 64, *, inline: bool = True
    ) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be > 0 (use the inner embedder to turn batching off)")
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.window_s = window_s
        self.max_batch = max(1, max_batch)
        self._pending: list[_Call] = []
        self._pending_texts = 0
        self._timer: asyncio.TimerHandle | None = None
        self._running: asyncio.Task[None] | None = None
        self._last_activity = float("-inf")  # the latest call or end of a batch
        sync = getattr(inner, "embed_sync", None) if inline else None
        self._inline: Callable[[list[str]], np.ndarray] | None = sync
        #: Sizes (in texts) of the latest batches; tests and benchmarks read it.
        self.batches: deque[int] = deque(maxlen=1024)

    def warm_up(self) -> None:
        warm = getattr(self.inner, "warm_up", None)
        if warm is not None:
            warm()

    async def embed(self, texts: list[str]) -> np.ndarray:
        """This call's rows, ``(len(texts), dim)``, from a batch it may share with others.

        Raises:
            Exception: whatever the inner embedder raised for this call's batch.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        now = time.monotonic()
        busy = now - self._last_activity < self.window_s
        self._last_activity = now
        if (
            self._inline is not None
            and not busy
            and self._running is None
            and not self._pending
            and len(texts) <= self.INLINE_MAX_TEXTS
        ):
            try:
                rows = self._inline(list(texts))
            finally:
                self._last_activity = time.monotonic()
            self.batches.append(len(rows))
            return rows
        loop = asyncio.get_running_loop()
        call = _Call(list(texts), loop.create_future(), now)
        self._pending.append(call)
        self._pending_texts += len(texts)
        self._schedule(loop, window=busy)
        # If this caller is cancelled only its future is: the batch task is not awaited here.
        return await call.future

    def _schedule(self, loop: asyncio.AbstractEventLoop, *, window: bool) -> None:
        """Start a batch of the pending calls now, or when the open window closes."""
        if self._running is not None or not self._pending:
            return  # the running batch picks the pending calls up when it ends
        if self._pending_texts >= self.max_batch:
            self._start(loop)  # a full batch does not wait for the window to close
        elif self._timer is None:  # else the open window picks them up
            wait = self._pending[0].queued + self.window_s - time.monotonic() if window else 0.0
            if wait <= 0:
                self._start(loop)
            else:
                self._timer = loop.call_later(wait, self._start, loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None:
            return
        batch: list[_Call] = []
        size = 0
        while self._pending and (not batch or size + len(self._pending[0].texts) <= self.max_batch):
            call = self._pending.pop(0)
            size += len(call.texts)
            batch.append(call)
        self._pending_texts -= size
        # Callers cancelled while they waited need no rows.
        batch = [c for c in batch if not c.future.done()]
        if not batch:
            self._schedule(loop, window=False)
            return
        self._running = loop.create_task(self._run(batch))

    async def _run(self, batch: list[_Call]) -> None:
        try:
            vectors = await self.inner.embed([t for c in batch for t in c.texts])
        except asyncio.CancelledError:  # shutdown: nobody will get rows
            for c in batch:
                c.future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - handed to each caller of this batch, not lost
            for c in batch:
                if not c.future.done():
                    c.future.set_exception(exc)
        else:
            self.batches.append(len(vectors))
            start = 0
            for c in batch:
                rows = vectors[start : start + len(c.texts)]
                start += len(c.texts)
                if not c.future.done():
                    c.future.set_result(rows)
        finally:
            self._running = None
            self._last_activity = time.monotonic()
            # Whoever queued meanwhile has waited long enough: the next batch starts at once.
            self._schedule(asyncio.get_running_loop(), window=False)


def for_queries(embedder: Embedder, settings: Settings) -> Embedder:
    """``embedder`` behind a :class:`CoalescingEmbedder` with the ``GAAMA_EMBED_COALESCE_MS``
    window and ``GAAMA_EMBED_INLINE``, or as it is when the window is 0."""
    if settings.embed_coalesce_ms <= 0:
        return embedder
    return CoalescingEmbedder(
        embedder,
        settings.embed_coalesce_ms / 1000.0,
        settings.embed_batch,
        inline=settings.embed_inline,
    )
