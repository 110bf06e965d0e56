"""Retry, isolate, dead-letter: the one wrapper around every consumer's handler.

- A transient error (``retryable``) retries the whole batch with exponential backoff. Redis being
  down (:class:`StoreUnavailable`) is retried without limit, backoff capped at
  :data:`MAX_BACKOFF_S`: dead-lettering every message during an outage would only move the
  problem; the consumer stalls, lag grows, the alert fires. The stores map every outage to
  ``StoreUnavailable`` (``gaama.store.errors``); a raw redis-py outage error that escaped them is
  treated the same, never as poison. Other transient errors (LLM) get ``max_retries`` attempts,
  then the records go to the DLQ with the reason.
- A permanent error, or an unexpected exception, for a batch is narrowed down by retrying its
  records one by one, so one poison message never takes its neighbours with it.
- Nothing is acknowledged before the handler's writes and the published events are done; the
  caller acks after :func:`process_batch` returns.
"""

from __future__ import annotations

import asyncio
import logging
import random
import traceback
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

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


async def _with_retries(
    handler: Handler,
    batch: list[Record],
    max_retries: int,
    backoff: float,
    on_retry: Callable[[], None],
) -> BatchResult:
    attempt = 0
    while True:
        try:
            return await _outages_as_store_unavailable(handler, batch)
        except GaamaError as exc:
            if not exc.retryable:
                raise
            attempt += 1
            unlimited = isinstance(exc, StoreUnavailable)
            if not unlimited and attempt > max_retries:
                raise
            on_retry()
            delay = backoff_delay(attempt, backoff)
            log.warning(
                "transient failure (%s), attempt %d, retrying in %.2fs: %s",
                exc.reason,
                attempt,
                delay,
                exc,
            )
            await asyncio.sleep(delay)


async def process_batch(
    handler: Handler,
    batch: list[Record],
    *,
    max_retries: int,
    backoff: float,
    on_retry: Callable[[], None] = lambda: None,
) -> BatchResult:
    """Run ``handler`` over ``batch`` under the policy above; never raises for bad records."""
    try:
        return await _with_retries(handler, batch, max_retries, backoff, on_retry)
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
                handler, [record], max_retries=max_retries, backoff=backoff, on_retry=on_retry
            )
        )
    return result
