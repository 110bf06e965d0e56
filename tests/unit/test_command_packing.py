"""Commands packed by hiredis are the bytes redis-py's own packer writes, and bad arguments are
refused as redis-py refuses them."""

from __future__ import annotations

import numpy as np
import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from gaama.store.packing import PackedConnection

KEYS = [f"gaama:{{tenant-1}}:node:f_{i:032x}" for i in range(300)]
COMMANDS = [
    ("FT.SEARCH", "idx", "*", "INKEYS", len(KEYS), *KEYS, "RETURN", 1, "text", "DIALECT", 2),
    ("HMGET", KEYS[0], "kind", "embedding_f16", "text"),
    ("EVALSHA", "ab" * 20, 2, KEYS[0], KEYS[1], 0.1, 1e-6, 1e20, -7, 2**70, float("inf")),
    ("HSET", "k", "text", "é ✓ \u2014", "vec", np.ones(384, dtype=np.float16).tobytes()),
    ("SET", "k", bytearray(b"\x00\xff"), "PX", 5),
    ("SET", "k", memoryview(b"abc" * 10000)),
    ("CONFIG SET", "slowlog-log-slower-than", 0),
    (b"CONFIG GET", "maxmemory"),
    ("PING",),
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: str(c[0]))
def test_same_bytes_as_redis_py(cmd: tuple[object, ...]) -> None:
    expected = b"".join(bytes(c) for c in Connection().pack_command(*cmd))
    assert b"".join(PackedConnection().pack_command(*cmd)) == expected


def test_pipeline_packing_is_the_commands_in_a_row() -> None:
    expected = b"".join(bytes(c) for c in Connection().pack_commands(COMMANDS))
    assert b"".join(bytes(c) for c in PackedConnection().pack_commands(COMMANDS)) == expected


@pytest.mark.parametrize("bad", [True, None, np.int64(3), np.float32(0.5), object()])
def test_refused_like_redis_py(bad: object) -> None:
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        PackedConnection().pack_command("SET", "k", bad)
