"""The node index's reads that need no vector, and the ``FT.SEARCH`` routing every read of the
index goes through.

:class:`IndexReads` is the base of :class:`gaama.store.vectors.VectorIndex`: it sends a search
where a tenant's nodes are (the one server, or on Redis Cluster the tenant's primary through
:class:`~gaama.store.node_indexes.NodeIndexes`) behind the store's error boundary, and reads
nodes in time order (:meth:`IndexReads.scan`) and a scope's latest episode time
(:meth:`IndexReads.latest_time`), which need no KNN.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama import ids
from gaama.errors import StoreUnavailable
from gaama.model import NodeKind
from gaama.store import cluster
from gaama.store.codecs import TAG_FIELDS, as_text
from gaama.store.errors import store_errors
from gaama.store.index_layout import documents, scope_filter
from gaama.store.keys import Keys
from gaama.store.node_indexes import NodeIndexes


class IndexReads:
    """Routed ``FT.SEARCH`` and the scans of one node index; the subclass sets the attributes."""

    redis: aioredis.Redis
    name: str
    keys: Keys
    #: On Redis Cluster: the index on every primary (None on a single server).
    _nodes: NodeIndexes | None

    async def _ft_search(self, tenant: str, tail: Sequence[Any]) -> list[Any]:
        """``FT.SEARCH <index> *tail`` where ``tenant``'s nodes are: one reply, or on a cluster
        two while the tenant's slot moves between primaries (the caller merges them)."""
        if self._nodes is not None:
            return await self._nodes.search(tenant, tail)
        return [await self.redis.execute_command("FT.SEARCH", self.name, *tail)]  # type: ignore[no-untyped-call]

    async def _execute(self, tenant: str, tail: list[Any]) -> list[Any]:
        """``FT.SEARCH`` where ``tenant``'s nodes are (:meth:`_ft_search`) through the store's
        error boundary: a missing index is an outage, like an unreachable server."""
        with _search_errors(self.name):
            return await self._ft_search(tenant, tail)

    async def _execute_all(self, tenant: str, tails: list[list[Any]]) -> list[list[Any]]:
        """:meth:`_execute` of each of ``tails``: on one server in one round trip."""
        if self._nodes is not None:
            return list(await asyncio.gather(*(self._execute(tenant, t) for t in tails)))
        with _search_errors(self.name):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tail in tails:
                    pipe.execute_command("FT.SEARCH", self.name, *tail)
                return [[reply] for reply in await pipe.execute()]

    async def scan(
        self,
        tenant: str,
        *,
        kinds: Sequence[NodeKind],
        conversation: str | None = None,
        subject: str | None = None,
        time_min: float | None = None,
        time_max: float | None = None,
        min_exclusive: bool = False,
        limit: int | None,
        fields: Sequence[str] = (),
    ) -> list[tuple[str, NodeKind, dict[str, str]]]:
        """Nodes of ``tenant`` matching the filters in time order (no vector involved): ``(id,
        kind, stored fields asked for)``. ``limit=None`` reads every match, a page at a time."""
        q = f"@{TAG_FIELDS['tenant']}:{{{ids.tag(tenant)}}}"
        q += " @kind:{" + "|".join(k.value for k in kinds) + "}"
        if conversation:
            q += f" @{TAG_FIELDS['conversation']}:{{{ids.tag(conversation)}}}"
        if subject:
            q += f" @{TAG_FIELDS['subject']}:{{{ids.tag(subject)}}}"
        if time_min is not None or time_max is not None:
            lo = "-inf" if time_min is None else f"{'(' if min_exclusive else ''}{time_min!r}"
            hi = "+inf" if time_max is None else repr(time_max)
            q += f" @time:[{lo} {hi}]"
        returned = ["kind", "time", *(f for f in fields if f not in ("kind", "time"))]
        out: list[tuple[str, NodeKind, dict[str, str]]] = []
        page = 1000 if limit is None else limit
        offset = 0
        if self._nodes is not None:
            return await self._scan_cluster(tenant, q, returned, limit)
        merged = False
        while True:
            args: list[Any] = [q, "RETURN", len(returned), *returned]
            args += ["SORTBY", "time", "ASC", "LIMIT", offset, page, "DIALECT", 2]
            with store_errors():
                replies = await self._ft_search(tenant, args)
            merged = merged or len(replies) > 1
            full = False
            for reply in replies:
                docs = documents(reply)
                full = full or len(docs) == page
                for key, row in docs:
                    kind = row.get("kind", "")
                    if kind:
                        out.append((self.keys.id_from_node_key(key), NodeKind(kind), row))
            if limit is not None or not full:
                if merged:  # a tenant being moved between primaries: both halves in time order
                    out.sort(key=lambda r: float(r[2].get("time") or 0))
                    out = out[:limit] if limit is not None else out
                return out
            offset += page

    async def _scan_cluster(
        self, tenant: str, query: str, returned: list[str], limit: int | None
    ) -> list[tuple[str, NodeKind, dict[str, str]]]:
        """:meth:`scan` on a cluster: the Query Engine can neither load nor sort by the fields
        of documents outside its index name's slot, so every match's key is listed, its fields
        read from the hashes, and the rows sorted by time here."""
        keys: list[str] = []
        offset, page = 0, 1000
        while True:
            with store_errors():
                replies = await self._ft_search(
                    tenant, [query, "NOCONTENT", "LIMIT", offset, page, "DIALECT", 2]
                )
            found = [[as_text(k) for k in reply[1:]] for reply in replies]
            for batch in found:
                keys += batch
            if all(len(batch) < page for batch in found):
                break
            offset += page
        assert self._nodes is not None
        with store_errors():
            docs = await self._nodes.load([(k, {}) for k in dict.fromkeys(keys)], returned)
        rows = [
            (self.keys.id_from_node_key(key), NodeKind(row["kind"]), row)
            for key, row in docs
            if row.get("kind")
        ]
        rows.sort(key=lambda r: (float(r[2].get("time") or 0), r[0]))
        return rows if limit is None else rows[:limit]

    async def latest_time(self, tenant: str, conversation: str | None = None) -> float | None:
        """The time of ``tenant``'s latest episode (of ``conversation`` when given), or None."""
        if self._nodes is not None:  # no SORTBY over a cluster index (see _scan_cluster)
            return await self._latest_time_from_chains(tenant, conversation)
        flt = scope_filter(tenant, [NodeKind.EPISODE], conversation, None)
        args: list[Any] = [str(flt), "RETURN", 1, "time"]
        args += ["SORTBY", "time", "DESC", "LIMIT", 0, 1, "DIALECT", 2]
        (reply,) = await self._execute(tenant, args)
        docs = documents(reply)
        return float(docs[0][1]["time"]) if docs and docs[0][1].get("time") else None

    async def _latest_time_from_chains(self, tenant: str, conversation: str | None) -> float | None:
        """:meth:`latest_time` on a cluster, from the conversations' NEXT chains (sorted sets
        in turn order, on the tenant's primary): the time of each chain's last episode, the
        latest of them. One round trip per conversation of the scope."""
        near = self.keys.degrees(tenant)
        with store_errors():
            if conversation is not None:
                chains = [self.keys.chain(tenant, conversation)]
            else:
                pattern = self.keys.chain(tenant, "*")
                chains = [
                    as_text(k) async for k in cluster.scan_keys(self.redis, pattern, near=near)
                ]
            latest: float | None = None
            for chain in chains:
                last = await self.redis.zrange(chain, -1, -1)
                if not last:
                    continue
                raw = await self.redis.hget(self.keys.node(tenant, as_text(last[0])), "time")
                if raw is not None:
                    t = float(as_text(raw))
                    latest = t if latest is None else max(latest, t)
        return latest


@contextmanager
def _search_errors(index: str) -> Iterator[None]:
    """The store's error boundary for ``FT.SEARCH``: unreachable or transient is
    StoreUnavailable, and so is a missing index (a permanent error otherwise)."""
    try:
        with store_errors():
            yield
    except ResponseError as exc:
        if "no such index" in str(exc).lower():
            raise StoreUnavailable(f"vector index {index!r} missing: {exc}") from exc
        raise
