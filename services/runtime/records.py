"""Plain records passed between the broker wiring and the handlers (no faust types leak)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gaama.errors import ValidationError
from gaama.events import Event

E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed message."""

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None = None
    offset: int | None = None
    # The trace-context headers the record's output carries, and the context its work runs in
    # (services.runtime.tracing; None: no trace).
    headers: tuple[tuple[str, bytes], ...] = ()
    trace: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """An event to publish: ``topic`` is the logical name (the runtime adds the prefix);
    ``headers``: the trace context it was made in (services.runtime.tracing)."""

    topic: str
    key: bytes
    event: Event
    partition: int | None = None  # None: the key chooses (fan-out events name theirs)
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Failure:
    """A record the handler could not process, with the reason (goes to the DLQ)."""

    record: Record
    reason: str
    error: str


@dataclass
class BatchResult:
    out: list[Outgoing] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    stored: Counter[str] = field(default_factory=Counter)  # node kind -> nodes written
    # Writes the handler left to the runtime, in order: made once the batch before has made
    # its own, while the next batch is handled (services.runtime.acks); each is idempotent and
    # is given the batch's whole result (merged, when records were handled one by one) to
    # count what it stored and dead-letter what it could not.
    writes: list[Callable[[BatchResult], Awaitable[None]]] = field(default_factory=list)

    async def make_writes(self) -> None:
        """The deferred writes, in order, with no retry (the runtime retries each outage)."""
        for write in self.writes:
            await write(self)

    def merge(self, other: BatchResult) -> None:
        self.out += other.out
        self.failed += other.failed
        self.stored.update(other.stored)
        self.writes += other.writes


def decoded(
    batch: list[Record], result: BatchResult, decode: Callable[[Record], E]
) -> Iterator[tuple[Record, E]]:
    """The batch's records, in order, with their decoded events; a record ``decode`` rejects
    (ValidationError) goes to ``result.failed`` with the reason and is skipped."""
    for record in batch:
        try:
            event = decode(record)
        except ValidationError as exc:
            result.failed.append(Failure(record, exc.reason, str(exc)))
            continue
        yield record, event


def forgetting_not_wired(record: Record) -> Failure:
    """A forget request reached a stage built without forgetting."""
    return Failure(record, "unsupported", "forgetting is not wired")
