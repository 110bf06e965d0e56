"""Redis Cluster: which primary holds what, and commands sent to one chosen primary.

A tenant's keys all carry the tenant as a hash tag (:mod:`gaama.store.keys`), so they live in
one slot on one primary; redis-py's :class:`~redis.asyncio.cluster.RedisCluster` routes every
key command, script and transaction there by itself. What it cannot route is the Query Engine:
the modules we run (RediSearch 2.10 of Redis Stack 7.4) have no cluster coordinator, each
primary indexes only its own keys, and in cluster mode the server treats an ``FT.*`` command's
index name as a key — ``FT.SEARCH idx`` is answered only by the primary owning ``idx``'s slot,
the others reply ``MOVED``. So each primary gets its own index whose name carries a hash tag of
a slot that primary owns (:func:`slot_tag`), and the store sends a tenant's searches to the
tenant's primary itself (:func:`on_node`), naming that primary's index (docs/architecture.md,
"Redis Cluster").

On a single server every helper here degrades to the plain client's behaviour.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from functools import cache
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError, MovedError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gaama.errors import StoreUnavailable

SLOTS = 16384


def is_cluster(redis: Any) -> bool:
    """Whether ``redis`` is a cluster client (:func:`gaama.store.connect` with ``cluster``)."""
    return isinstance(redis, RedisCluster)


def primaries(redis: Any) -> list[ClusterNode]:
    """The cluster's primaries as the client knows them, in a stable order."""
    return sorted(redis.get_primaries(), key=lambda n: n.name)


def holding(redis: Any) -> list[ClusterNode]:
    """The primaries that hold slots (one that joined without any has no keys)."""
    return [n for n in primaries(redis) if owned_slots(redis, n)]


def slot_of(key: str) -> int:
    return int(key_slot(key.encode()))


def owner(redis: Any, key: str) -> ClusterNode:
    """The primary that holds ``key``'s slot, by the client's slot map."""
    node = redis.get_node_from_key(key)
    if node is None:  # pragma: no cover - get_node_from_key raises for an uncovered slot
        raise RedisConnectionError(f"no primary holds the slot of {key!r}")
    return node  # type: ignore[no-any-return]


def owns(redis: Any, node: ClusterNode, key: str) -> bool:
    """Whether ``node`` holds ``key``'s slot, by the client's slot map."""
    nodes = redis.nodes_manager.slots_cache.get(slot_of(key))
    return bool(nodes) and nodes[0].name == node.name


def owned_slots(redis: Any, node: ClusterNode) -> list[int]:
    cache_ = redis.nodes_manager.slots_cache
    return [s for s in range(SLOTS) if (n := cache_.get(s)) and n[0].name == node.name]


@cache
def slot_tag(slot: int) -> str:
    """A short string whose hash slot is ``slot`` (to put between braces in a key name)."""
    i = 0
    while slot_of(str(i)) != slot:
        i += 1
    return str(i)


_node_tags: dict[str, str] = {}


def node_tag(redis: Any, node: ClusterNode) -> str:
    """A hash tag of a slot ``node`` holds now (for keys that must live on it): the one given
    before while the node still holds it, else that of its lowest slot."""
    tag = _node_tags.get(node.name)
    if tag is not None and owns(redis, node, f"{{{tag}}}"):
        return tag
    slots = owned_slots(redis, node)
    if not slots:
        raise RedisConnectionError(f"primary {node.name} holds no slot")
    tag = _node_tags[node.name] = slot_tag(slots[0])
    return tag


def redirected(reply: object) -> bool:
    """Whether a reply is a MOVED or ASK redirection (the slot is elsewhere, or moving)."""
    return isinstance(reply, MovedError | AskError)


async def initialized(redis: Any) -> None:
    """Read the slot map if the client has not yet (it does so on its first command)."""
    if getattr(redis, "_initialize", False):
        await redis.initialize()


async def refresh(redis: Any) -> None:
    """Read the slot map again (after a MOVED on a command sent to a chosen primary)."""
    await redis.nodes_manager.initialize()


async def on_node(node: ClusterNode, *commands: Sequence[Any]) -> list[Any]:
    """Send ``commands`` to ``node`` in one round trip on one connection, as they are (no
    redirection followed, no reply callback); the raw replies in order, an error reply
    (``MOVED``, ``ASK``, an unknown index…) as its :class:`ResponseError` in place of a value.

    Raises:
        ConnectionError / TimeoutError: the node could not be reached.
    """
    conn = node.acquire_connection()
    try:
        await conn.send_packed_command(conn.pack_commands(list(commands)))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
        return replies
    except (RedisConnectionError, RedisTimeoutError, OSError):
        await conn.disconnect()
        raise
    except BaseException:
        await conn.disconnect()  # a reply may still be in flight: the connection is unusable
        raise
    finally:
        node.release(conn)


async def scan_keys(redis: Any, match: str, *, near: str | None = None) -> AsyncIterator[bytes]:
    """Every key matching ``match``: on a cluster, of the primary holding ``near``'s slot (a key
    of the tenant the pattern belongs to) or, without ``near``, of every primary in turn."""
    if not is_cluster(redis):
        async for key in redis.scan_iter(match=match, count=1000):
            yield key
        return
    await initialized(redis)
    nodes = [owner(redis, near)] if near is not None else primaries(redis)
    for node in nodes:
        cursor: Any = 0
        while True:
            (reply,) = await on_node(node, ["SCAN", cursor, "MATCH", match, "COUNT", 1000])
            if isinstance(reply, ResponseError):
                raise reply
            cursor, keys = reply
            for key in keys:
                yield key
            if int(cursor) == 0:
                break


class ClusterClient(RedisCluster):
    """redis-py's cluster client, with transactions run as plain MULTI/EXEC on a connection to
    the primary holding their slot (:class:`SlotTransaction`).

    redis-py 8.1's own cluster transaction runs each queued command through ``asyncio.run`` in
    a new thread, leaving connections bound to event loops that are closed by the time the
    client closes them (``RuntimeError: Event loop is closed``), and costing a thread per
    command. Every GAAMA transaction stays inside one tenant's slot, so one primary's ordinary
    pipeline does the job, with WATCH and scripts as on a single server.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._node_clients: dict[str, aioredis.Redis] = {}
        # Reply parsing of a plain client of the same protocol (no connection is made).
        self._plain_callbacks = aioredis.Redis(protocol=kwargs.get("protocol")).response_callbacks

    def node_client(self, node: ClusterNode) -> aioredis.Redis:
        """A plain client of ``node`` (made once, closed with this client)."""
        client = self._node_clients.get(node.name)
        if client is None:
            pool = aioredis.ConnectionPool(
                connection_class=node.connection_class, **node.connection_kwargs
            )
            client = self._node_clients[node.name] = aioredis.Redis(connection_pool=pool)
        return client

    def pipeline(self, transaction: bool | None = None, shard_hint: Any = None) -> Any:
        if transaction:
            return SlotTransaction(self)
        return super().pipeline(transaction=False, shard_hint=shard_hint)

    async def aclose(self, *args: Any, **kwargs: Any) -> None:
        for client in self._node_clients.values():
            await client.aclose()
        self._node_clients.clear()
        await super().aclose(*args, **kwargs)


_NO_KEY = frozenset({"MULTI", "EXEC", "DISCARD", "UNWATCH", "SCRIPT"})


def _first_key(args: Sequence[Any]) -> Any:
    name = str(args[0]).upper()
    if name in ("EVAL", "EVALSHA"):
        return args[3] if len(args) > 3 and int(args[2]) > 0 else None
    if name.split(" ")[0] in _NO_KEY or len(args) < 2:
        return None
    return args[1]


class _SlotPool:
    """The connection pool of a :class:`SlotTransaction`: the pool of the primary holding the
    slot of the first key the transaction names, chosen when it first needs a connection."""

    def __init__(self, cluster: ClusterClient, pipe: SlotTransaction) -> None:
        self.cluster = cluster
        self.pipe = pipe
        self._pool: Any = None

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        key = self.pipe.route_key
        if key is None:
            raise ResponseError("a transaction on Redis Cluster needs a key to find its primary")
        await initialized(self.cluster)
        node = owner(self.cluster, as_str(key))
        self._pool = self.cluster.node_client(node).connection_pool
        return await self._pool.get_connection()

    async def release(self, connection: Any) -> None:
        await self._pool.release(connection)

    def get_encoder(self) -> Any:
        return self.cluster.get_encoder()


class SlotTransaction(Pipeline):
    """A MULTI/EXEC transaction (with WATCH when asked) on the primary holding its keys' slot.

    A ``MOVED`` or ``ASK`` answer (the slot moved, or is moving) reads the slot map again and
    raises :class:`~gaama.errors.StoreUnavailable`: the caller's retry goes to the new owner.
    """

    def __init__(self, cluster: ClusterClient) -> None:
        self.route_key: Any = None
        self._cluster = cluster
        super().__init__(
            _SlotPool(cluster, self),  # type: ignore[arg-type]
            cluster._plain_callbacks,
            transaction=True,
            shard_hint=None,
        )

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self.route_key is None:
            self.route_key = _first_key(args)
        return super().execute_command(*args, **kwargs)

    async def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().immediate_execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except ResponseError as exc:
            await self._redirected(exc)
            raise

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error)
        except ResponseError as exc:
            await self._redirected(exc)
            raise

    async def reset(self) -> None:  # type: ignore[override]
        await super().reset()  # type: ignore[no-untyped-call]
        self.route_key = None

    async def _redirected(self, exc: ResponseError) -> None:
        text = str(exc)
        if redirected(exc) or "MOVED " in text or "ASK " in text:
            await refresh(self._cluster)
            raise StoreUnavailable(f"Redis Cluster slot moved during a transaction: {exc}") from exc


def as_str(key: Any) -> str:
    return key.decode() if isinstance(key, bytes) else str(key)
