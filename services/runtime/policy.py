"""Retry, isolate, dead-letter: the one wrapper around every consumer's handler.

- A transient error (``retryable``) retries the whole batch with exponential backoff. Redis being
  down is retried without limit (capped backoff): dead-lettering every message during an outage
  would only move the problem; the consumer stalls, lag grows, the alert fires. Other transient
  errors (LLM) get ``max_retries`` attempts, then the records go to the DLQ with the reason.
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

from gaama.errors import GaamaError, StoreUnavailable
from services.runtime.records import BatchResult, Failure, Record

log = logging.getLogger("gaama.runtime")

Handler = Callable[[list[Record]], Awaitable[BatchResult]]


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
            return await handler(batch)
        except GaamaError as exc:
            if not exc.retryable:
                raise
            attempt += 1
            unlimited = isinstance(exc, StoreUnavailable)
            if not unlimited and attempt > max_retries:
                raise
            on_retry()
            delay = min(30.0, backoff * 2 ** min(attempt - 1, 10)) * (0.5 + random.random())
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
