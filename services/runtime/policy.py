"""Retry, isolate, dead-letter: the one wrapper around every consumer's handler.

- An outage (``outage``: Redis, the broker or the LLM endpoint unavailable,
  :class:`StoreUnavailable`, :class:`BrokerUnavailable`, :class:`LLMTransientError` once the
  client's own quick retries are spent) retries the whole batch without limit, exponential
  backoff capped at :data:`MAX_BACKOFF_S`: dead-lettering every message during an outage would
  only move the problem (and lose the facts of every dead-lettered turn); the consumer stalls,
  lag grows, the alert fires. The stores map every outage to ``StoreUnavailable``
  (``gaama.store.errors``); a raw redis-py outage error that escaped them is treated the same,
  never as poison. A chunk whose close another worker holds (``ChunkBusy``) waits the same
  way: that close ends, or its lease lapses within GAAMA_CHUNK_LOCK_S.
- A transient error whose own layer has retried it already (``retries_spent``) is not retried
  again here: retrying it would nest the layers. It is dead-lettered with the reason.
- Any other transient error (LLM output still malformed after the client's re-asks) gets
  ``max_retries`` retries with backoff, then the DLQ. Retries are
  tenacity's, one layer per failure kind (docs/architecture.md, "Delivery guarantees").
- A permanent error, or an unexpected exception, for a batch is narrowed down by retrying its
  records one by one, so one poison message never takes its neighbours with it.
- Nothing is acknowledged before the handler's writes and the published events are done; the
  caller acks after :func:`process_batch` returns.
"""

from __future__ import annotations

import logging
import random
import traceback
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from gaama.errors import GaamaError, StoreUnavailable
from gaama.store.errors import is_outage
from services.runtime.records import BatchResult, Failure, Record

log = logging.getLogger("gaama.runtime")

Handler = Callable[[list[Record]], Awaitable[BatchResult]]

#: Longest wait between two attempts, jitter included.
MAX_BACKOFF_S = 30.0


def backoff_delay(attempt: int, backoff: float) -> float:
    """Exponential backoff with ±50 % jitter for ``attempt`` (1-based), never above the cap."""
    return min(MAX_BACKOFF_S, backoff * 2.0 ** min(attempt - 1, 10) * (0.5 + random.random()))


async def _outages_as_store_unavailable(handler: Handler, batch: list[Record]) -> BatchResult:
    # A safety net under the stores' own boundary: a Redis outage is never poison.
    # Only redis-py's own errors: a bare OSError from elsewhere (a file, the LLM client) is not
    # a store outage.
    try:
        return await handler(batch)
    except RedisError as exc:
        if is_outage(exc):
            raise StoreUnavailable(f"Redis unavailable: {type(exc).__name__}: {exc}") from exc
        raise


def _retried_here(exc: BaseException) -> bool:
    """Whether this layer retries ``exc``: a transient error no other layer has retried."""
    return isinstance(exc, GaamaError) and exc.retryable and not exc.retries_spent


def _is_outage(state: RetryCallState) -> bool:
    exc = state.outcome.exception() if state.outcome else None
    return isinstance(exc, GaamaError) and exc.outage


async def _with_retries(
    handler: Handler,
    batch: list[Record],
    max_retries: int,
    backoff: float,
    on_retry: Callable[[], None],
    on_outage: Callable[[GaamaError], None] | None,
) -> BatchResult:
    def before_sleep(state: RetryCallState) -> None:
        on_retry()
        exc = state.outcome.exception() if state.outcome else None
        if on_outage is not None and isinstance(exc, GaamaError) and exc.outage:
            on_outage(exc)
        log.warning(
            "transient failure (%s), attempt %d, retrying in %.2fs: %s",
            getattr(exc, "reason", "?"),
            state.attempt_number,
            state.upcoming_sleep,
            exc,
        )

    retrying = AsyncRetrying(
        retry=retry_if_exception(_retried_here),
        stop=lambda state: not _is_outage(state) and state.attempt_number > max_retries,
        wait=lambda state: backoff_delay(state.attempt_number, backoff),
        before_sleep=before_sleep,
        reraise=True,
    )
    return await retrying(_outages_as_store_unavailable, handler, batch)


async def process_batch(
    handler: Handler,
    batch: list[Record],
    *,
    max_retries: int,
    backoff: float,
    on_retry: Callable[[], None] = lambda: None,
    on_outage: Callable[[GaamaError], None] | None = None,
) -> BatchResult:
    """Run ``handler`` over ``batch`` under the policy above; never raises for bad records.
    ``on_outage`` hears of each outage before it is retried (the stage is stalled)."""
    try:
        return await _with_retries(handler, batch, max_retries, backoff, on_retry, on_outage)
    except GaamaError as exc:
        if len(batch) == 1:
            return BatchResult(failed=[Failure(batch[0], exc.reason, str(exc))])
        log.warning("batch of %d failed (%s); isolating records", len(batch), exc.reason)
    except Exception as exc:
        if len(batch) == 1:
            log.exception(
                "unexpected error on %s[%s]@%s", batch[0].topic, batch[0].partition, batch[0].offset
            )
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return BatchResult(failed=[Failure(batch[0], "error", detail)])
        log.exception("batch of %d failed unexpectedly; isolating records", len(batch))
    result = BatchResult()
    for record in batch:
        result.merge(
            await process_batch(
                handler,
                [record],
                max_retries=max_retries,
                backoff=backoff,
                on_retry=on_retry,
                on_outage=on_outage,
            )
        )
    return result
