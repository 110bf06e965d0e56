"""Commands packed by hiredis (C) instead of redis-py's asyncio packer (Python).

redis-py's asyncio connection packs each command in Python and grows the output by joining it
again for every argument, so a command's cost rises with the square of its length. A search
sends long ones (the lexical channel's ``INKEYS`` lists of a hundred keys, the scripts' node
lists, a pipeline of ``HMGET`` per candidate). ``hiredis.pack_command`` writes the same bytes
(a unit test compares them) in C, in one pass over the arguments.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import DataError


class PackedConnection(aioredis.Connection):
    """A connection whose commands ``hiredis.pack_command`` packs; arguments are encoded as
    redis-py encodes them (text as UTF-8, numbers as their ``repr``), and a value of another
    type is refused with :class:`DataError`, as redis-py refuses it."""

    def pack_command(self, *args: Any) -> list[bytes]:
        # A command name of several words ("CONFIG SET") is split, as redis-py does.
        first = args[0]
        if isinstance(first, str):
            if " " in first:
                args = (*first.split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return [hiredis.pack_command(_plain(args))]


def _plain(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with buffers as bytes (hiredis takes only str, int, float and bytes); anything
    else, or a bool (an int to hiredis, refused by redis-py), is a :class:`DataError`."""
    out = []
    for arg in args:
        if isinstance(arg, (bytearray, memoryview)):
            arg = bytes(arg)
        elif isinstance(arg, bool) or not isinstance(arg, (str, bytes, int, float)):
            raise DataError(
                f"Invalid input of type: '{type(arg).__name__}'. "
                "Convert to a bytes, string, int or float first."
            )
        out.append(arg)
    return tuple(out)
