"""The vector index on Redis Cluster: one index per primary, searched on the tenant's primary.

Without a coordinator each primary's Query Engine indexes only that primary's keys, and it takes
an ``FT.*`` command's index name for a key: only the primary owning the name's slot accepts it
(:mod:`gaama.store.cluster`). So the index ``N`` is ``N{<tag>}`` on each primary, the tag being a
slot that primary held when the index was made, found again with ``FT._LIST`` (keyless). A
tenant's search goes to the primary holding the tenant's slot, in one round trip with a probe of
a key of the tenant that is never written: ``MOVED`` on the probe means the slot map changed
(read it again, retry); ``ASK`` means the tenant's slot is being migrated, its keys split between
two primaries — both are searched and the caller merges. The Query Engine of the importing
primary indexes keys as ``MIGRATE`` restores them, and the exporting one drops them, so nothing
has to be rebuilt after a move (``tests/integration/test_cluster.py`` moves a tenant's slot while
it is written and searched; docs/architecture.md, "Redis Cluster").
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from redis.asyncio.cluster import ClusterNode
from redis.exceptions import AskError, MovedError, ResponseError

from gaama.errors import StoreUnavailable
from gaama.store import cluster
from gaama.store.codecs import as_text
from gaama.store.keys import Keys

_ATTEMPTS = 3


class NodeIndexes:
    """Per-primary names of one index, its creation on every primary, and routed commands."""

    def __init__(self, redis: Any, name: str, keys: Keys, create_args: Sequence[Any]) -> None:
        self.redis = redis
        self.name = name
        self.keys = keys
        self.create_args = [a.value if isinstance(a, Enum) else a for a in create_args]
        self._names: dict[str, str] = {}

    def _ours(self, node: ClusterNode, name: str) -> bool:
        return (
            name.startswith(f"{self.name}{{")
            and name.endswith("}")
            and cluster.owns(self.redis, node, name)
        )

    async def name_on(self, node: ClusterNode, *, create: bool) -> str | None:
        """This index's name on ``node`` (made there when missing and ``create``), or None."""
        cached = self._names.get(node.name)
        if cached is not None and cluster.owns(self.redis, node, cached):
            return cached
        (listed,) = await cluster.on_node(node, ["FT._LIST"])
        if isinstance(listed, ResponseError):
            raise listed
        for raw in listed:
            if self._ours(node, name := as_text(raw)):
                self._names[node.name] = name
                return name
        if not create:
            return None
        name = f"{self.name}{{{cluster.node_tag(self.redis, node)}}}"
        (reply,) = await cluster.on_node(node, ["FT.CREATE", name, *self.create_args])
        if isinstance(reply, ResponseError) and "already exists" not in str(reply).lower():
            raise reply
        self._names[node.name] = name
        return name

    async def each(self, *command: Any, create: bool = False) -> list[tuple[str, Any]]:
        """``command`` (its index name left out) run on every primary's index: ``(name,
        reply)`` per primary that has one. A ``MOVED`` (the slot map changed meanwhile) reads
        the map again and starts over."""
        await cluster.initialized(self.redis)
        for _ in range(_ATTEMPTS):
            out = []
            for node in cluster.holding(self.redis):
                name = await self.name_on(node, create=create)
                if name is not None:
                    (reply,) = await cluster.on_node(node, [command[0], name, *command[1:]])
                    out.append((name, reply))
            if not any(cluster.redirected(reply) for _, reply in out):
                return out
            await cluster.refresh(self.redis)
        raise StoreUnavailable(f"Redis Cluster slots kept moving under index {self.name!r}")

    def forget(self, name: str) -> None:
        """``name`` was dropped: look it up again next time."""
        self._names = {node: n for node, n in self._names.items() if n != name}

    async def ready(self) -> bool:
        """Whether every primary holding slots has the index; the slot map is read again
        first, so a primary that joined since is seen (and gets the index from ``ensure``)."""
        await cluster.refresh(self.redis)
        for node in cluster.holding(self.redis):
            if await self.name_on(node, create=False) is None:
                return False
        return True

    async def load(
        self, docs: list[tuple[str, dict[str, str]]], fields: Sequence[str]
    ) -> list[tuple[str, dict[str, str]]]:
        """``docs`` (key, row) with ``fields`` of each key's hash added to its row (a field
        the hash lacks left out): one round trip to the primary holding the keys (a tenant's:
        all on one), a key that has moved meanwhile read through the cluster client."""
        if not docs:
            return docs
        by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
        for i, (key, _) in enumerate(docs):
            node = cluster.owner(self.redis, key)
            by_node.setdefault(node.name, (node, []))[1].append(i)
        values: list[Any] = [None] * len(docs)
        for node, at in by_node.values():
            replies = await cluster.on_node(node, *(["HMGET", docs[i][0], *fields] for i in at))
            for i, reply in zip(at, replies, strict=True):
                if isinstance(reply, ResponseError):
                    if not cluster.redirected(reply):
                        raise reply
                    reply = await self.redis.hmget(docs[i][0], list(fields))
                values[i] = reply
        out = []
        for (key, row), got in zip(docs, values, strict=True):
            row = dict(row)
            row.update({f: as_text(v) for f, v in zip(fields, got, strict=True) if v is not None})
            out.append((key, row))
        return out

    async def search(self, tenant: str, tail: Sequence[Any]) -> list[Any]:
        """``FT.SEARCH <name> *tail`` on the primary holding ``tenant``'s slot: one reply, or
        two while that slot is being migrated (the exporting and the importing primary)."""
        probe = self.keys.state(tenant, "route-probe")  # never written
        await cluster.initialized(self.redis)
        for _ in range(_ATTEMPTS):
            node = cluster.owner(self.redis, probe)
            name = await self.name_on(node, create=False)
            if name is None:  # readiness makes it (VectorIndex.ensure), as on a single server
                raise StoreUnavailable(f"vector index {self.name!r} missing on {node.name}")
            where, reply = await cluster.on_node(
                node, ["EXISTS", probe], ["FT.SEARCH", name, *tail]
            )
            if isinstance(where, MovedError) or isinstance(reply, MovedError):
                await cluster.refresh(self.redis)  # the slot (or the index's own) moved
                continue
            _raise(reply, name)
            if isinstance(where, AskError):  # half moved: the rest is on the importing primary
                target = self.redis.get_node(host=where.host, port=where.port)
                if target is None:
                    await cluster.refresh(self.redis)
                    continue
                other = await self.name_on(target, create=False)
                if other is None:
                    raise StoreUnavailable(f"vector index {self.name!r} missing on {target.name}")
                (more,) = await cluster.on_node(target, ["FT.SEARCH", other, *tail])
                _raise(more, other)
                return [reply, more]
            _raise(where, name)
            return [reply]
        raise StoreUnavailable(f"Redis Cluster slot of tenant {tenant!r} kept moving")


def _raise(reply: Any, name: str) -> None:
    if not isinstance(reply, ResponseError):
        return
    text = str(reply).lower()
    if "no such index" in text or "unknown index" in text:
        raise StoreUnavailable(f"vector index {name!r} missing: {reply}")
    raise reply
