"""What one tenant's full-text search reads (:class:`gaama.store.fulltext.Reads`): the version
of the tenant's documents, ``FT.SEARCH`` where its nodes are, and the candidates' stored fields
— on one server, when the kept counts suffice, all three in one request.

One request, written at once, matters beyond the round trip it saves: Redis answers what it
read in one pass of its event loop after all of it has run, so a read that reaches it beside
the KNN search (about 1.5 ms at 100k nodes) comes back with it, and each command sent on its
own wakes Redis, which on a busy machine can take the sender's core while it runs
(``scripts/query-critical-path.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from gaama.store.codecs import as_text
from gaama.store.errors import store_errors
from gaama.store.index_reads import IndexReads, search_errors

#: Hashes read per script call: bounds the time one call holds the server.
BATCH = 1000


class TextReads:
    """The reads of one full-text search of ``tenant``'s nodes.

    Args:
        index: The node index (its routing of ``FT.SEARCH``).
        batched: ``store/lua/batched_read.lua`` registered on the index's client.
        tenant: The tenant searched.
        fields: The stored fields read for each candidate, the full-text field first: the
            search's best are among the candidates, so what a hit returns is read with them.
    """

    def __init__(
        self, index: IndexReads, batched: AsyncScript, tenant: str, fields: Sequence[str]
    ) -> None:
        self.index = index
        self.batched = batched
        self.tenant = tenant
        self.fields = list(fields)
        #: Each candidate read: its raw values of ``fields`` (None where missing).
        self.rows: dict[str, list[Any]] = {}

    def _version_keys(self) -> list[str]:
        keys = self.index.keys
        return [keys.text_version(self.tenant), keys.state(self.tenant, "iseq")]

    async def version(self) -> Hashable | None:
        """The version of the tenant's documents (:mod:`gaama.store.fulltext`): the token its
        writes of nodes replace and its ingest counter (appended episodes), or None before its
        first such write (or after its keys were removed), when no count is kept."""
        with store_errors():
            return _version(await self.index.redis.mget(self._version_keys()))

    async def run(self, tails: list[list[Any]]) -> list[list[Any]]:
        """``FT.SEARCH`` of each of ``tails`` where the tenant's nodes are."""
        return await self.index._execute_all(self.tenant, tails)

    async def texts(self, keys: list[str]) -> list[str]:
        """The full-text field of each of ``keys`` ("" where missing), the other fields kept
        in :attr:`rows`."""
        out: list[list[Any]] = []
        with store_errors():
            for at in range(0, len(keys), BATCH):
                chunk = keys[at : at + BATCH]
                out += await self.batched(keys=chunk, args=["HMGET", *self.fields])
        return self._keep(keys, out)

    async def checked(
        self, tails: list[list[Any]], keys: list[str]
    ) -> tuple[Hashable | None, list[list[Any]], list[str]]:
        """:meth:`version`, :meth:`run` of ``tails`` and :meth:`texts` of ``keys``: on one
        server in one pipeline, written at once (the version read first); on a cluster, where
        the searches are routed one by one, side by side."""
        if self.index._nodes is not None:
            now, replies, read = await asyncio.gather(
                self.version(), self.run(tails) if tails else _nothing(), self.texts(keys)
            )
            return now, replies, read
        redis = self.index.redis
        chunks = [keys[at : at + BATCH] for at in range(0, len(keys), BATCH)]
        for attempt in range(2):
            with search_errors(self.index.name):
                async with redis.pipeline(transaction=False) as pipe:
                    pipe.mget(self._version_keys())
                    for tail in tails:
                        pipe.execute_command("FT.SEARCH", self.index.name, *tail)
                    for chunk in chunks:
                        args = [self.batched.sha, len(chunk), *chunk, "HMGET", *self.fields]
                        pipe.execute_command("EVALSHA", *args)
                    try:
                        out = await pipe.execute()
                        break
                    except NoScriptError:  # Redis lost its scripts (a restart, SCRIPT FLUSH)
                        if attempt:
                            raise
                        await redis.script_load(self.batched.script)
        now, replies = _version(out[0]), [[r] for r in out[1 : 1 + len(tails)]]
        rows = [row for chunk in out[1 + len(tails) :] for row in chunk]
        return now, replies, self._keep(keys, rows)

    def _keep(self, keys: list[str], rows: list[list[Any]]) -> list[str]:
        self.rows.update(zip(keys, rows, strict=True))
        return [as_text(row[0]) for row in rows]


def _version(values: list[Any]) -> tuple[str, str] | None:
    token, ingested = values
    return None if token is None else (as_text(token), as_text(ingested))


async def _nothing() -> list[list[Any]]:
    return []
