"""``gaama migrate index`` / ``gaama migrate vectors``: bring node hashes and the index to this
version's layout. Both names run the same idempotent upgrade, which covers every layout change so
far:

- **Exact tags.** The first layout indexed ``tenant``, ``conversation`` and ``subject`` as plain
  TAG fields, which fold case and split on ``,``: tenant ``T1``'s search returned ``t1``'s
  nodes. The current layout indexes their digests (:func:`gaama.ids.tag`).
- **float16 vectors.** The layout before it stored each vector as float32 (indexed, field
  ``embedding``) plus an int8 copy for the read-ahead (``embedding_i8``); the current one stores
  float16 once (:data:`~gaama.store.codecs.VECTOR_FIELD`), indexed and read by the read-ahead.

Migrating:

1. drops the index definition if it is of an old layout, keeping every document
   (``FT.DROPINDEX`` without ``DD``), so the backfill below does not make the Query Engine
   re-index each node twice;
2. brings every node hash of the key prefix to the layout: digest fields written, the float16
   vector computed from the float32 one, and the old vector fields removed — unless another index
   over these keys still indexes them (the old index of a migration to a new name), in which case
   a later run removes them. A node already right is left alone, so an interrupted run can simply
   be started again;
3. creates the index with the current schema and waits until it has indexed every node.

- **The full-text field** of the lexical channel (``text``).
- **Index options** (:data:`~gaama.store.index_layout.INDEX_OPTIONS`): no term offsets, no
  per-term field mask. An index without them serves as it is, at more memory per node; FT.ALTER
  cannot remove them, so the definition is dropped and made again like the others.

In place, searches answer 503 between steps 1 and 3 and writers must be stopped first (a node
written by an old writer after step 2 lacks the new fields and could not be found). Pointed at a
new index name instead, step 1 does nothing, the old index keeps serving, and running it again
after the services have moved to the new name picks up what old writers wrote meanwhile; once the
old index is dropped, a last run frees the old vector fields (docs/operations.md, "Index schema
changes").

On Redis Cluster the scan, the drop and the wait cover every primary (each has its own index); of
the old layouts, only one without the index options can exist there (the code that wrote the
others never ran on a cluster).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama import ids
from gaama.store import cluster
from gaama.store.codecs import (
    LEGACY_COMPACT_FIELD,
    LEGACY_VECTOR_FIELD,
    TAG_FIELDS,
    VECTOR_DTYPE,
    VECTOR_FIELD,
    as_text,
    vector_fields,
)
from gaama.store.errors import store_errors
from gaama.store.index_layout import (
    has_current_vectors,
    has_exact_tags,
    has_index_options,
    has_text_field,
    vector_attribute,
)
from gaama.store.vectors import VectorIndex

Progress = Callable[[str], None]
_SOURCE_FIELDS = tuple(TAG_FIELDS)  # tenant, conversation, subject
_POLL_S = 0.5


@dataclass
class MigrationReport:
    dropped_old_index: bool = False
    nodes_seen: int = 0
    nodes_updated: int = 0
    vectors_converted: int = 0
    #: Nodes whose old float32 vector and int8 copy were removed.
    old_vectors_removed: int = 0
    #: Other indexes over these keys that still index the old float32 vectors (kept for them).
    old_vectors_kept_for: list[str] = field(default_factory=list)
    indexed: int = 0


async def migrate_index(
    redis: aioredis.Redis,
    index: VectorIndex,
    *,
    batch: int = 500,
    progress: Progress = lambda _: None,
) -> MigrationReport:
    """Bring ``index`` and the node hashes under its prefix to the current layout.

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
        infos = await _infos(redis, index)
        if not all(_current(info) for info in infos):
            await index.drop()
            report.dropped_old_index = True
            progress(f"dropped the old definition of {index.name!r} (documents kept)")
        if not cluster.is_cluster(redis):
            report.old_vectors_kept_for = await _indexes_of_old_vectors(redis, index)
        if report.old_vectors_kept_for:
            progress(
                f"keeping the float32 vectors while {', '.join(report.old_vectors_kept_for)} "
                f"index them (run again once dropped to free them)"
            )
        backfill = _Backfill(redis, index.dim, drop_old=not report.old_vectors_kept_for)
        found: list[str] = []
        async for key in cluster.scan_keys(redis, f"{index.keys.node_prefix}*"):
            found.append(as_text(key))
            if len(found) >= batch:
                await _backfill_batch(backfill, found, report, batch, progress)
                found = []
        await _backfill_batch(backfill, found, report, batch, progress)
        if report.nodes_seen:
            progress(
                f"nodes checked: {report.nodes_seen}, updated: {report.nodes_updated} "
                f"(vectors converted: {report.vectors_converted})"
            )
    await index.ensure()
    report.indexed = await _wait_indexed(index, progress)
    # What the index holds changed under the tenants' counts kept by searches (store/fulltext.py)
    with store_errors():
        async with redis.pipeline(transaction=False) as pipe:
            for tenant in backfill.tenants:
                pipe.set(index.keys.text_version(tenant), secrets.token_hex(8))
            await pipe.execute()
    return report


async def _backfill_batch(
    backfill: _Backfill,
    found: list[str],
    report: MigrationReport,
    batch: int,
    progress: Progress,
) -> None:
    if not found:
        return
    await backfill.run(found, report)
    report.nodes_seen += len(found)
    if report.nodes_seen % (batch * 20) < batch:
        progress(
            f"nodes checked: {report.nodes_seen}, updated: {report.nodes_updated} "
            f"(vectors converted: {report.vectors_converted})"
        )


def _current(info: Any) -> bool:
    """Whether an FT.INFO reply shows an index of the current layout in every respect."""
    return (
        has_exact_tags(info)
        and has_current_vectors(info)
        and has_text_field(info)
        and has_index_options(info)
    )


async def _infos(redis: aioredis.Redis, index: VectorIndex) -> list[Any]:
    """FT.INFO of ``index`` (on a cluster: of each primary's); none where it does not exist."""
    if cluster.is_cluster(redis):
        return await index.infos()
    info = await _info(redis, index.name)
    return [] if info is None else [info]


async def _info(redis: aioredis.Redis, name: str) -> Any:
    try:
        return await redis.execute_command("FT.INFO", name)  # type: ignore[no-untyped-call]
    except ResponseError as exc:
        if "unknown index" in str(exc).lower() or "no such index" in str(exc).lower():
            return None
        raise


async def _indexes_of_old_vectors(redis: aioredis.Redis, index: VectorIndex) -> list[str]:
    """Other indexes over ``index``'s node keys whose vector field is the old float32 one."""
    out = []
    for raw in await redis.execute_command("FT._LIST"):  # type: ignore[no-untyped-call]
        name = as_text(raw)
        info = None if name == index.name else await _info(redis, name)
        if info is None:
            continue
        old = vector_attribute(info).get("identifier") == LEGACY_VECTOR_FIELD
        if old and index.keys.node_prefix in _prefixes(info):
            out.append(name)
    return out


class _Backfill:
    """Brings node hashes to the current layout, a batch of keys at a time (see the module)."""

    def __init__(self, redis: aioredis.Redis, dim: int, *, drop_old: bool) -> None:
        self.redis = redis
        self.drop_old = drop_old
        self.tenants: set[str] = set()  # of the nodes seen
        self.f16_size = dim * VECTOR_DTYPE().itemsize
        self.f32_size = dim * 4
        self.fields = [
            *_SOURCE_FIELDS,
            *TAG_FIELDS.values(),
            VECTOR_FIELD,
            LEGACY_VECTOR_FIELD,
            LEGACY_COMPACT_FIELD,
        ]

    async def run(self, keys: list[str], report: MigrationReport) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(key, self.fields)
            rows = await pipe.execute()
        n = len(_SOURCE_FIELDS)
        writes = 0
        async with self.redis.pipeline(transaction=False) as pipe:
            for key, row in zip(keys, rows, strict=True):
                source = ["" if v is None else as_text(v) for v in row[:n]]
                present = ["" if v is None else as_text(v) for v in row[n : 2 * n]]
                f16, f32, i8 = row[2 * n :]
                if not source[0]:  # not a node hash (no tenant): leave it alone
                    continue
                self.tenants.add(source[0])
                updates: dict[Any, Any] = {}
                digests = [ids.tag(v) for v in source]
                if digests != present:
                    updates.update(zip(TAG_FIELDS.values(), digests, strict=True))
                has_f16 = f16 is not None and len(f16) == self.f16_size
                if not has_f16 and f32 is not None and len(f32) == self.f32_size:
                    updates.update(vector_fields(np.frombuffer(f32, dtype=np.float32)))
                    report.vectors_converted += 1
                    has_f16 = True
                # The old fields go only once the float16 vector is there: never lose a vector.
                drop = has_f16 and self.drop_old and (f32 is not None or i8 is not None)
                if updates:
                    pipe.hset(key, mapping=updates)
                if drop:
                    pipe.hdel(key, LEGACY_VECTOR_FIELD, LEGACY_COMPACT_FIELD)
                    report.old_vectors_removed += 1
                if updates or drop:
                    report.nodes_updated += 1
                    writes += 1
            if writes:
                await pipe.execute()


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


def _prefixes(info: Any) -> list[str]:
    """The key prefixes of an FT.INFO reply's index definition, whichever protocol."""
    top = _as_map(info)
    definition = _as_map(top.get(b"index_definition", top.get("index_definition", [])))
    return [as_text(p) for p in definition.get(b"prefixes", definition.get("prefixes")) or []]


def _as_map(x: Any) -> dict[Any, Any]:
    """A RESP3 map as it is, a RESP2 flat list of names and values as a dict."""
    return x if isinstance(x, dict) else dict(zip(x[::2], x[1::2], strict=False))


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
