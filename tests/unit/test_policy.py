"""The retry / isolate / dead-letter policy around every consumer handler."""

from __future__ import annotations

import pytest

from gaama.errors import (
    BrokerUnavailable,
    ChunkBusy,
    GaamaError,
    LLMMalformedOutput,
    LLMTransientError,
    RetryableError,
    StoreUnavailable,
    ValidationError,
)
from services.runtime.policy import process_batch
from services.runtime.records import BatchResult, Record


def rec(i: int) -> Record:
    return Record(topic="t", key=b"a/c", value=str(i).encode(), partition=0, offset=i)


async def test_poison_record_is_isolated_and_dead_lettered():
    seen: list[list[bytes]] = []

    async def handler(batch: list[Record]) -> BatchResult:
        seen.append([r.value for r in batch])
        if any(r.value == b"2" for r in batch):
            raise ValidationError("record 2 is bad")
        res = BatchResult()
        res.stored["episode"] += len(batch)
        return res

    result = await process_batch(handler, [rec(i) for i in range(4)], max_retries=2, backoff=0)
    assert result.stored["episode"] == 3
    assert [(f.record.offset, f.reason) for f in result.failed] == [(2, "invalid")]
    assert seen[0] == [b"0", b"1", b"2", b"3"]  # whole batch first, then one by one


async def test_unexpected_exception_is_dead_lettered_not_raised():
    async def handler(batch: list[Record]) -> BatchResult:
        raise KeyError("bug")

    result = await process_batch(handler, [rec(1)], max_retries=2, backoff=0)
    assert result.failed[0].reason == "error" and "KeyError" in result.failed[0].error


async def test_transient_errors_retry_then_dead_letter():
    calls = 0
    retries = 0

    async def handler(batch: list[Record]) -> BatchResult:
        nonlocal calls
        calls += 1
        raise RetryableError("a hiccup")

    def on_retry() -> None:
        nonlocal retries
        retries += 1

    result = await process_batch(handler, [rec(1)], max_retries=2, backoff=0, on_retry=on_retry)
    assert calls == 3 and retries == 2
    assert result.failed[0].reason == "transient"


async def test_malformed_llm_output_is_asked_again_then_dead_lettered():
    """Malformed output after the client's re-asks: the batch is retried max_retries times (a
    new sample may parse), then the record is dead-lettered as llm_output."""
    calls = 0

    async def handler(batch: list[Record]) -> BatchResult:
        nonlocal calls
        calls += 1
        raise LLMMalformedOutput("output still malformed after 3 attempts")

    result = await process_batch(handler, [rec(1)], max_retries=3, backoff=0)
    assert calls == 4
    assert result.failed[0].reason == "llm_output"


@pytest.mark.parametrize(
    "outage", [StoreUnavailable, BrokerUnavailable, LLMTransientError, ChunkBusy]
)
async def test_outages_are_retried_without_limit(outage: type[GaamaError]):
    calls = 0

    async def handler(batch: list[Record]) -> BatchResult:
        nonlocal calls
        calls += 1
        if calls < 6:  # more failures than max_retries: an outage is never given up on
            raise outage("down")
        return BatchResult()

    result = await process_batch(handler, [rec(1)], max_retries=1, backoff=0)
    assert calls == 6 and not result.failed


async def test_a_raw_redis_outage_from_a_handler_is_retried_not_dead_lettered():
    """Safety net under the stores' boundary: a redis-py outage error is an outage too."""
    from redis.exceptions import TimeoutError as RedisTimeoutError

    calls = 0

    async def handler(batch: list[Record]) -> BatchResult:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise RedisTimeoutError("Timeout reading from 127.0.0.1:6379")
        return BatchResult()

    result = await process_batch(handler, [rec(1)], max_retries=0, backoff=0)
    assert calls == 4 and not result.failed


async def test_a_raw_non_outage_redis_error_is_still_poison():
    from redis.exceptions import ResponseError

    async def handler(batch: list[Record]) -> BatchResult:
        raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    result = await process_batch(handler, [rec(1)], max_retries=3, backoff=0)
    assert result.failed[0].reason == "error" and "WRONGTYPE" in result.failed[0].error


def test_backoff_is_capped_jitter_included():
    from services.runtime.policy import MAX_BACKOFF_S, backoff_delay

    delays = [backoff_delay(attempt, 0.5) for attempt in range(1, 60) for _ in range(20)]
    assert max(delays) <= MAX_BACKOFF_S
    assert min(backoff_delay(1, 0.5) for _ in range(50)) >= 0.25
    assert max(delays[-20:]) > MAX_BACKOFF_S / 2  # it does grow up to the cap
