"""Record batches that cannot be decoded come out of aiokafka's fetch path as one salvage
record each (raw bytes, reason, offsets), between the records of the good batches around them."""

from __future__ import annotations

import struct

import pytest
from aiokafka.consumer.fetcher import READ_COMMITTED
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition

from services.runtime import salvage

TP = TopicPartition("t", 0)
GZIP, CRC_AT, CRC_FROM = 1, 17, 21


def batch(base: int, values: list[bytes], codec: int = 0) -> bytearray:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000, key=b"k", value=v, headers=[("h", b"1")])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base)
    return raw


def reseal(raw: bytearray) -> bytearray:
    """Recompute the CRC over the (altered) batch, as a producer with a bug would send it."""
    struct.pack_into(">I", raw, CRC_AT, calc_crc32c(bytes(raw[CRC_FROM:])))
    return raw


def fetch(data: bytes, fetch_offset: int = 0) -> list:
    records = salvage._RawMemoryRecords(data)
    part = salvage._SalvagingPartitionRecords(
        TP, records, [], fetch_offset, None, None, True, READ_COMMITTED
    )
    return list(part)


def test_good_batches_pass_through_unchanged() -> None:
    out = fetch(bytes(batch(0, [b"a", b"b"]) + batch(2, [b"c"], GZIP)))
    assert [(r.offset, r.value, r.headers) for r in out] == [
        (0, b"a", (("h", b"1"),)),
        (1, b"b", (("h", b"1"),)),
        (2, b"c", (("h", b"1"),)),
    ]
    assert all(salvage.undecodable(r.headers) is None for r in out)


@pytest.mark.parametrize("damage", ["compressed", "crc"])
def test_an_undecodable_batch_becomes_one_salvage_record(damage: str) -> None:
    bad = batch(2, [b"x" * 50, b"y" * 50, b"z"], GZIP)
    if damage == "compressed":
        bad[-20:-10] = b"\xff" * 10  # corrupt deflate data, CRC made to match
        reseal(bad)
    else:
        bad[-1] ^= 0xFF  # CRC left as it was
    data = bytes(batch(0, [b"a", b"b"]) + bad + batch(5, [b"after"]))
    out = fetch(data)
    assert [r.offset for r in out] == [0, 1, 4, 5]
    assert [r.value for r in out if r.offset != 4] == [b"a", b"b", b"after"]
    mark = salvage.undecodable(out[2].headers)
    assert mark is not None
    assert (mark.first_offset, mark.last_offset) == (2, 4)
    assert out[2].value == bytes(bad)  # the batch as the broker sent it
    assert ("CRC mismatch" in mark.reason) == (damage == "crc")
    assert mark.reason


def test_a_fetch_starting_inside_a_bad_batch_names_only_what_is_left() -> None:
    bad = reseal(batch(10, [b"p", b"q", b"r"], GZIP))
    bad[-8:-4] = b"\x00\x01\x02\x03"
    reseal(bad)
    out = fetch(bytes(bad), fetch_offset=11)
    mark = salvage.undecodable(out[0].headers)
    assert mark is not None and (mark.first_offset, mark.last_offset) == (11, 12)


def test_headers_cannot_forge_a_salvage_record() -> None:
    out = fetch(bytes(batch(0, [b"a"])))
    assert salvage.undecodable(out[0].headers) is None
    assert salvage.undecodable((("gaama-undecodable", b"x"),)) is None
