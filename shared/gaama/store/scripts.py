"""The store's Lua scripts: package files under ``store/lua/``, each read once per process.

Each file opens with a comment naming its KEYS and ARGV. A script is registered per client
(:func:`register`); redis-py sends it by SHA and falls back to its source when Redis has lost it
(a restart, SCRIPT FLUSH).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript


@cache
def source(name: str) -> str:
    """The text of ``store/lua/<name>``."""
    return resources.files("gaama.store").joinpath("lua", name).read_text(encoding="utf-8")


def register(redis: aioredis.Redis, name: str) -> AsyncScript:
    """``store/lua/<name>`` registered on ``redis``."""
    return redis.register_script(source(name))
