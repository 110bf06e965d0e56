"""Background ticks survive any failure: counted, logged at a bounded rate, retried next tick."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry
from redis.exceptions import ConnectionError as RedisConnectionError

from gaama.errors import StoreUnavailable
from gaama.metrics import stage_metrics
from services.runtime.background import Periodic


async def test_failed_ticks_are_counted_logged_at_a_bounded_rate_and_retried(
    caplog: pytest.LogCaptureFixture,
):
    m = stage_metrics("extract", CollectorRegistry(), tasks=("idle_chunks",))
    now = [0.0]
    outcomes: list[BaseException | None] = [
        StoreUnavailable("down"),
        RedisConnectionError("refused"),  # a raw redis-py outage is still an outage
        KeyError("bug"),
        StoreUnavailable("down"),
        None,
    ]

    async def tick() -> None:
        exc = outcomes.pop(0)
        if exc is not None:
            raise exc

    p = Periodic("idle_chunks", tick, m.task_failures, log_every_s=60, clock=lambda: now[0])
    caplog.set_level(logging.INFO, "gaama.runtime")
    assert await p() is False
    now[0] = 10
    assert await p() is False  # within a minute of the last log line: counted, not logged
    assert await p() is False
    now[0] = 70
    assert await p() is False  # logged again, saying how many were held back
    assert await p() is True
    failures = m.task_failures
    assert failures.labels("idle_chunks", "store_unavailable")._value.get() == 3
    assert failures.labels("idle_chunks", "error")._value.get() == 1
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert "2 similar failures not logged" in messages[1]
    assert "recovered after 4 failed ticks" in messages[2]


async def test_cancellation_is_not_swallowed():
    m = stage_metrics("extract", CollectorRegistry())

    async def tick() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await Periodic("consumer_lag", tick, m.task_failures)()


def test_task_failure_series_exist_up_front():
    registry = CollectorRegistry()
    stage_metrics("extract", registry, tasks=("consumer_lag", "idle_chunks"))
    value = registry.get_sample_value(
        "gaama_extract_task_failures_total", {"task": "idle_chunks", "reason": "store_unavailable"}
    )
    assert value == 0
