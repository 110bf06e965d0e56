"""Per-conversation lanes within a consumer batch: events of one conversation in order, the
conversations side by side (their LLM calls overlap), at most ``concurrency`` at once.

:func:`handle_in_lanes` is a whole batch of extract or reflect: the records decoded, their
events in lanes, and a forget request a barrier between the events before it and after it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Hashable
from typing import Protocol, TypeVar

from gaama.events import ForgetRequested
from gaama.forgetting import Forgetting
from services.runtime.records import BatchResult, Record, decoded, forgetting_not_wired
from services.runtime.tracing import handling


class InConversation(Protocol):
    @property
    def tenant(self) -> str: ...

    @property
    def conversation(self) -> str: ...


T = TypeVar("T")
R = TypeVar("R")
E = TypeVar("E", bound=InConversation)


async def run_lanes(
    lanes: dict[Hashable, list[T]], step: Callable[[T], Awaitable[R]], concurrency: int
) -> list[list[R]]:
    """``step`` over each lane's items in order, lanes concurrently; the results per lane, in
    the lanes' order. A failure fails the whole batch, as it would have run in sequence, once
    every lane has stopped (none is left running behind the retry)."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def lane(items: list[T]) -> list[R]:
        async with gate:
            return [await step(item) for item in items]

    outcomes = await asyncio.gather(
        *(lane(items) for items in lanes.values()), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return [o for o in outcomes if not isinstance(o, BaseException)]


async def handle_in_lanes(
    batch: list[Record],
    decode: Callable[[Record], E | ForgetRequested],
    step: Callable[[E], Awaitable[R]],
    concurrency: int,
    *,
    done: Callable[[BatchResult, R], None],
    forgetting: Forgetting | None,
    forget: Callable[[Forgetting, ForgetRequested, BatchResult], Awaitable[None]],
) -> BatchResult:
    """``step`` over the batch's events in one lane per conversation (:func:`run_lanes`), each
    outcome passed to ``done`` in lane order. A forget request waits for the events before it
    and holds back those after it; then ``forget`` handles it (with ``forgetting``, or the
    record fails as unsupported when the stage has none). Records ``decode`` rejects fail.

    Each event is handled as its record's work (:func:`~services.runtime.tracing.handling`),
    and the events its outcome publishes carry its record's trace context."""
    result = BatchResult()
    lanes: dict[Hashable, list[tuple[Record, E]]] = {}

    async def traced(item: tuple[Record, E]) -> tuple[Record, R]:
        record, ev = item
        with handling(record, ev.tenant):
            return record, await step(ev)

    async def run() -> None:
        for outcomes in await run_lanes(lanes, traced, concurrency):
            for record, outcome in outcomes:
                before = len(result.out)
                done(result, outcome)
                _carry(result, before, record)
        lanes.clear()

    for record, ev in decoded(batch, result, decode):
        if isinstance(ev, ForgetRequested):
            await run()
            if forgetting is None:
                result.failed.append(forgetting_not_wired(record))
            else:
                before = len(result.out)
                with handling(record, ev.tenant):
                    await forget(forgetting, ev, result)
                _carry(result, before, record)
            continue
        lanes.setdefault((ev.tenant, ev.conversation), []).append((record, ev))
    await run()
    return result


def _carry(result: BatchResult, start: int, record: Record) -> None:
    """The events added to ``result.out`` from ``start`` on carry ``record``'s trace context."""
    if not record.headers:
        return
    for i in range(start, len(result.out)):
        if not result.out[i].headers:
            result.out[i] = dataclasses.replace(result.out[i], headers=record.headers)
