"""Per-conversation lanes within a consumer batch: events of one conversation in order, the
conversations side by side (their LLM calls overlap), at most ``concurrency`` at once.

:func:`handle_in_lanes` is a whole batch of extract or reflect: the records decoded, their
events in lanes, and a forget request a barrier between the events before it and after it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Protocol, TypeVar

from gaama.events import ForgetRequested
from gaama.forgetting import Forgetting
from services.runtime.records import BatchResult, Record, decoded, forgetting_not_wired


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
    record fails as unsupported when the stage has none). Records ``decode`` rejects fail."""
    result = BatchResult()
    lanes: dict[Hashable, list[E]] = {}

    async def run() -> None:
        for outcomes in await run_lanes(lanes, step, concurrency):
            for outcome in outcomes:
                done(result, outcome)
        lanes.clear()

    for record, ev in decoded(batch, result, decode):
        if isinstance(ev, ForgetRequested):
            await run()
            if forgetting is None:
                result.failed.append(forgetting_not_wired(record))
            else:
                await forget(forgetting, ev, result)
            continue
        lanes.setdefault((ev.tenant, ev.conversation), []).append(ev)
    await run()
    return result
