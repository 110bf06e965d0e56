"""``gaama migrate index``: rebuild an index of the old tag layout on exact-match digests.

The first layout indexed ``tenant``, ``conversation`` and ``subject`` as plain TAG fields, which
fold case and split on ``,``: tenant ``T1``'s search returned ``t1``'s nodes. The current layout
indexes their digests (:func:`gaama.ids.tag`). Migrating:

1. drops the old index definition, keeping every document (``FT.DROPINDEX`` without ``DD``), so
   the backfill below does not make the Query Engine re-index each node twice;
2. writes the digest fields into every node hash of the key prefix (idempotent: a node whose
   digests are right is left alone, so an interrupted run can simply be started again);
3. creates the index with the current schema and waits until it has indexed every node.

In place, searches answer 503 between steps 1 and 3 and writers must be stopped first (a node
written by an old writer after step 2 has no digests and could not be found). Pointed at a new
index name instead, step 1 does nothing, the old index keeps serving, and running it again after
the services have moved to the new name picks up what old writers wrote meanwhile
(docs/operations.md, "Index schema changes").

On Redis Cluster the scan and the wait cover every primary (each has its own index); no index of
the old layout can exist there (the code that wrote it never ran on a cluster).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama import ids
from gaama.store import cluster
from gaama.store.codecs import TAG_FIELDS, as_text
from gaama.store.errors import store_errors
from gaama.store.vectors import VectorIndex, has_exact_tags

Progress = Callable[[str], None]
_SOURCE_FIELDS = tuple(TAG_FIELDS)  # tenant, conversation, subject
_POLL_S = 0.5


@dataclass
class MigrationReport:
    dropped_old_index: bool = False
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
        info = None if cluster.is_cluster(redis) else await _info(redis, index.name)
        if info is not None and not has_exact_tags(info):
            await redis.execute_command("FT.DROPINDEX", index.name)  # type: ignore[no-untyped-call]
            report.dropped_old_index = True
            progress(f"dropped the old definition of {index.name!r} (documents kept)")
        found: list[str] = []
        async for key in cluster.scan_keys(redis, f"{index.keys.node_prefix}*"):
            found.append(as_text(key))
            if len(found) >= batch:
                await _backfill_batch(redis, found, report, batch, progress)
                found = []
        await _backfill_batch(redis, found, report, batch, progress)
        if report.nodes_seen:
            progress(f"nodes checked: {report.nodes_seen}, updated: {report.nodes_updated}")
    await index.ensure()
    report.indexed = await _wait_indexed(index, progress)
    return report


async def _backfill_batch(
    redis: aioredis.Redis, found: list[str], report: MigrationReport, batch: int, progress: Progress
) -> None:
    if not found:
        return
    report.nodes_updated += await _backfill(redis, found)
    report.nodes_seen += len(found)
    if report.nodes_seen % (batch * 20) < batch:
        progress(f"nodes checked: {report.nodes_seen}, updated: {report.nodes_updated}")


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


async def _wait_indexed(index: VectorIndex, progress: Progress) -> int:
    last = ""
    while True:
        with store_errors():
            infos = [_flat(i) for i in await index.infos()]
        docs = sum(int(float(i.get("num_docs", 0))) for i in infos)
        done = min((float(i.get("percent_indexed", 1)) for i in infos), default=1.0)
        line = f"indexed {done:.0%} ({docs} documents)"
        if line != last:
            progress(line)
            last = line
        if done >= 1.0 and all(str(i.get("indexing", "0")) in ("0", "0.0") for i in infos):
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
