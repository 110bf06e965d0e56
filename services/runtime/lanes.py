"""Per-conversation lanes within a consumer batch: events of one conversation in order, the
conversations side by side (their LLM calls overlap), at most ``concurrency`` at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


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
