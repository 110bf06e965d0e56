"""``gaama migrate index``: rebuild an index of the old tag layout on exact-match digests.

The first layout indexed ``tenant``, ``conversation`` and ``subject`` as plain TAG fields, which
fold case and split on ``,``: tenant ``T1``'s search returned ``t1``'s nodes. The current layout
indexes their digests (:func:`gaama.ids.tag`). Migrating:

1. drops the old index definition, keeping every document (``FT.DROPINDEX`` without ``DD``), so
   the backfill below does not make the Query Engine re-index each node twice;
2. writes the digest fields into every node hash of the key prefix (idempotent: a node whose
   digests are right is left alone, so an interrupted run can simply be started again);
3. creates the index with the current schema and waits until it has indexed every node.

An index of the current tag layout that lacks the full-text field of the lexical channel is
brought over in place instead: ``FT.ALTER ... SCHEMA ADD text TEXT`` (the node hashes already
hold the text; the Query Engine indexes it in the background while searches go on).

In place, searches answer 503 between steps 1 and 3 and writers must be stopped first (a node
written by an old writer after step 2 has no digests and could not be found). Pointed at a new
index name instead, step 1 does nothing, the old index keeps serving, and running it again after
the services have moved to the new name picks up what old writers wrote meanwhile
(docs/operations.md, "Index schema changes").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama import ids
from gaama.store.codecs import TAG_FIELDS, as_text
from gaama.store.errors import store_errors
from gaama.store.vectors import LEXICAL_FIELD, VectorIndex, has_exact_tags, has_text_field

Progress = Callable[[str], None]
_SOURCE_FIELDS = tuple(TAG_FIELDS)  # tenant, conversation, subject
_POLL_S = 0.5


@dataclass
class MigrationReport:
    dropped_old_index: bool = False
    added_text_field: bool = False
    nodes_seen: int = 0
    nodes_updated: int = 0
    indexed: int = 0


async def migrate_index(
    redis: aioredis.Redis,
    index: VectorIndex,
    *,
    batch: int = 500,
    progress: Progress = lambda _: None,
) -> MigrationReport:
    """Bring ``index`` and the node hashes under its prefix to the exact-tag layout.

    Args:
        redis: A client of the Redis holding the index.
        index: The index to migrate (its name, key prefix and dimension).
        batch: Node hashes read and written per round trip.
        progress: Called with a line of progress now and then.

    Returns:
        What was done; running it again on a migrated index changes nothing.
    """
    report = MigrationReport()
    with store_errors():
        info = await _info(redis, index.name)
        if info is not None and not has_exact_tags(info):
            await redis.execute_command("FT.DROPINDEX", index.name)  # type: ignore[no-untyped-call]
            report.dropped_old_index = True
            progress(f"dropped the old definition of {index.name!r} (documents kept)")
        elif info is not None and not has_text_field(info):
            # Adding a field keeps the index serving; the Query Engine re-scans every document
            # for it in the background (waited for below).
            await redis.execute_command(  # type: ignore[no-untyped-call]
                "FT.ALTER", index.name, "SCHEMA", "ADD", LEXICAL_FIELD, "TEXT"
            )
            report.added_text_field = True
            progress(f"added the full-text field {LEXICAL_FIELD!r} to {index.name!r}")
        cursor = 0
        while True:
            cursor, found = await redis.scan(
                cursor, match=f"{index.keys.node_prefix}*", count=batch
            )
            if found:
                report.nodes_updated += await _backfill(redis, [as_text(k) for k in found])
                report.nodes_seen += len(found)
            if report.nodes_seen and (cursor == 0 or report.nodes_seen % (batch * 20) < batch):
                progress(f"nodes checked: {report.nodes_seen}, updated: {report.nodes_updated}")
            if cursor == 0:
                break
    await index.ensure()
    report.indexed = await _wait_indexed(redis, index.name, progress)
    return report


async def _info(redis: aioredis.Redis, name: str) -> Any:
    try:
        return await redis.execute_command("FT.INFO", name)  # type: ignore[no-untyped-call]
    except ResponseError as exc:
        if "unknown index" in str(exc).lower() or "no such index" in str(exc).lower():
            return None
        raise


async def _backfill(redis: aioredis.Redis, keys: list[str]) -> int:
    wanted = [*_SOURCE_FIELDS, *TAG_FIELDS.values()]
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(key, wanted)
        rows = await pipe.execute()
    updated = 0
    async with redis.pipeline(transaction=False) as pipe:
        for key, row in zip(keys, rows, strict=True):
            values = ["" if v is None else as_text(v) for v in row]
            source, present = values[: len(_SOURCE_FIELDS)], values[len(_SOURCE_FIELDS) :]
            if not source[0]:  # not a node hash (no tenant): leave it alone
                continue
            digests = [ids.tag(v) for v in source]
            if digests != present:
                pipe.hset(key, mapping=dict(zip(TAG_FIELDS.values(), digests, strict=True)))
                updated += 1
        if updated:
            await pipe.execute()
    return updated


async def _wait_indexed(redis: aioredis.Redis, name: str, progress: Progress) -> int:
    last = ""
    while True:
        with store_errors():
            info = _flat(await _info(redis, name))
        docs = int(float(info.get("num_docs", 0)))
        done = float(info.get("percent_indexed", 1))
        line = f"indexed {done:.0%} ({docs} documents)"
        if line != last:
            progress(line)
            last = line
        if done >= 1.0 and str(info.get("indexing", "0")) in ("0", "0.0"):
            return docs
        await asyncio.sleep(_POLL_S)


def _flat(info: Any) -> dict[str, str]:
    """FT.INFO's top level as ``{name: text}`` (nested values left as their repr)."""
    if isinstance(info, dict):
        pairs = list(info.items())
    else:
        pairs = [(info[i], info[i + 1]) for i in range(0, len(info) - 1, 2)]
    out = {}
    for k, v in pairs:
        out[as_text(k)] = as_text(v) if isinstance(v, bytes | str | int | float) else repr(v)
    return out
