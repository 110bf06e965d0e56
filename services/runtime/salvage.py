"""Record batches the consumer cannot decode become dead letters, not a dead consumer.

aiokafka decodes a fetched record batch while the application iterates it: a batch whose codec
library is missing, whose compressed bytes are corrupt, whose CRC does not match, or whose records
cannot be parsed raises inside the fetch and stops the consumer; restarted, it fetches the same
batch and stops again, so the partition and every tenant on it are stuck. With :func:`install`,
such a batch is handed to the application as one *salvage record* instead: at the batch's last
offset (so committing it commits the whole batch), value the batch's raw bytes as the broker sent
them, and headers an :class:`Undecodable` naming the reason and the offsets it covers. The stage
runtime dead-letters it with that reason (``reason="undecodable"``) and goes on with the next
batch. A producer cannot forge one: the marker is a Python type, not a header a record carries.

aiokafka builds its fetch results from two names in ``aiokafka.consumer.fetcher``
(``MemoryRecords``, ``PartitionRecords``); :func:`install` replaces both with the subclasses
here, for every consumer of the process. ``tests/unit/test_salvage.py`` fails if aiokafka
changes them.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import aiokafka.consumer.fetcher as fetcher
from aiokafka.structs import ConsumerRecord

log = logging.getLogger("gaama.runtime")

#: Batch framing (every record format): base offset int64, then the batch length int32.
_LENGTH = struct.Struct(">i")
_LOG_OVERHEAD = 12

_installed = False


class Undecodable(tuple[tuple[str, bytes], ...]):
    """The headers of a salvage record: empty as headers go, carrying why the batch could not
    be decoded and the offsets it spans."""

    reason: str
    first_offset: int
    last_offset: int

    def __new__(cls, reason: str, first_offset: int, last_offset: int) -> Undecodable:
        self = super().__new__(cls, ())
        self.reason = reason
        self.first_offset = first_offset
        self.last_offset = last_offset
        return self


def undecodable(headers: Any) -> Undecodable | None:
    """The salvage marker of a consumed message's headers, or None for an ordinary record."""
    return headers if isinstance(headers, Undecodable) else None


class _SalvageRecord:
    """What aiokafka's iteration over a batch yields, for a batch that cannot be decoded."""

    __slots__ = ("headers", "offset", "timestamp", "value")
    key = None
    checksum = None
    timestamp_type = 0

    def __init__(self, offset: int, timestamp: int, value: bytes, headers: Undecodable) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.value = value
        self.headers = headers


class _GuardedBatch:
    """One fetched batch: decoded at once, in full, so that a failure anywhere in it turns into
    one salvage record instead of an exception in the middle of the fetch."""

    def __init__(self, batch: Any, raw: bytes, owner: _SalvagingPartitionRecords | None) -> None:
        self._batch = batch
        self._raw = raw
        self._owner = owner
        self._crc_error: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def validate_crc(self) -> bool:
        # A mismatch is salvaged when iterated, not raised by the fetcher.
        if not self._batch.validate_crc():
            self._crc_error = f"CRC mismatch (stored {self._batch.crc})"
        return True

    def __next__(self) -> Any:  # control batches: the fetcher reads their marker record
        return next(self._batch)

    def __iter__(self) -> Any:
        if self._crc_error is None:
            try:
                records = list(self._batch)
            # Whatever decoding these bytes raises (a missing codec, corrupt compressed data,
            # truncated records, bad header strings), the batch is poison: it is dead-lettered
            # with the reason, never raised into the consumer.
            except Exception as exc:  # noqa: BLE001
                self._crc_error = f"{type(exc).__name__}: {exc}"
            else:
                return iter(records)
        return iter([self._salvage(self._crc_error)])

    def _salvage(self, error: str) -> _SalvageRecord:
        batch = self._batch
        last = batch.next_offset - 1
        start = self._owner.next_fetch_offset if self._owner is not None else batch.base_offset
        first = min(max(batch.base_offset, start), last)
        tp = self._owner.tp if self._owner is not None else "?"
        log.error("record batch %s@%d..%d cannot be decoded: %s", tp, first, last, error)
        timestamp = batch.max_timestamp if batch.max_timestamp >= 0 else batch.first_timestamp
        return _SalvageRecord(last, timestamp, self._raw, Undecodable(error, first, last))


class _RawMemoryRecords:
    """aiokafka's ``MemoryRecords`` over a fetch response's bytes, keeping each batch's raw bytes
    (the dead letter carries them)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._records = _ORIGINAL_MEMORY_RECORDS(data)
        self._pos = 0
        self.owner: _SalvagingPartitionRecords | None = None

    def has_next(self) -> bool:
        return bool(self._records.has_next())

    def size_in_bytes(self) -> int:
        return int(self._records.size_in_bytes())

    def next_batch(self) -> Any:
        batch = self._records.next_batch()
        if batch is None:
            return None
        start = self._pos
        length = _LENGTH.unpack_from(self._data, start + 8)[0]
        self._pos = start + _LOG_OVERHEAD + length
        return _GuardedBatch(batch, bytes(self._data[start : self._pos]), self.owner)


class _SalvagingPartitionRecords(fetcher.PartitionRecords):  # type: ignore[misc]
    def __init__(self, tp: Any, records: Any, *args: Any) -> None:
        self.tp = tp
        if isinstance(records, _RawMemoryRecords):
            records.owner = self
        super().__init__(tp, records, *args)

    def _consumer_record(self, tp: Any, record: Any) -> Any:
        if isinstance(record, _SalvageRecord):
            # The marker's own type survives: aiokafka would copy headers into a plain tuple.
            return ConsumerRecord(
                tp.topic,
                tp.partition,
                record.offset,
                record.timestamp,
                record.timestamp_type,
                None,
                record.value,
                None,
                -1,
                len(record.value),
                record.headers,
            )
        return super()._consumer_record(tp, record)


_ORIGINAL_MEMORY_RECORDS = fetcher.MemoryRecords


def install() -> None:
    """Salvage undecodable batches in every aiokafka consumer of this process (idempotent)."""
    global _installed
    if _installed:
        return
    fetcher.MemoryRecords = _RawMemoryRecords
    fetcher.PartitionRecords = _SalvagingPartitionRecords
    _installed = True
