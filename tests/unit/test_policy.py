"""The retry / isolate / dead-letter policy around every consumer handler."""

from __future__ import annotations

from gaama.errors import LLMTransientError, StoreUnavailable, ValidationError
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
        raise LLMTransientError("429")

    def on_retry() -> None:
        nonlocal retries
        retries += 1

    result = await process_batch(handler, [rec(1)], max_retries=2, backoff=0, on_retry=on_retry)
    assert calls == 3 and retries == 2
    assert result.failed[0].reason == "llm_transient"


async def test_store_outage_is_retried_until_it_recovers():
    calls = 0

    async def handler(batch: list[Record]) -> BatchResult:
        nonlocal calls
        calls += 1
        if calls < 6:  # more failures than max_retries: the store is never given up on
            raise StoreUnavailable("down")
        return BatchResult()

    result = await process_batch(handler, [rec(1)], max_retries=1, backoff=0)
    assert calls == 6 and not result.failed
