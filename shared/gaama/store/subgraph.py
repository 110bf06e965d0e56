"""Subgraph reads of a search, each one server-side script call: the expansion around the
seeds, the read-ahead of expanded nodes' fields and vectors, and the provenance of what is
returned (see :mod:`gaama.retrieval.search`).

Each is a Lua script (``store/lua/``) rather than a pipeline: on the hot path of a search
(hundreds of nodes per stage) redis-py spends far more time encoding and dispatching single
commands than Redis spends answering them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import AskError, MovedError, NoScriptError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gaama.ids import kind_prefix
from gaama.model import STORED_WEIGHT_POWER, EdgeKind, NodeKind
from gaama.store import cluster, scripts
from gaama.store.codecs import VECTOR_DTYPE, VECTOR_FIELD, as_text, stored_vectors
from gaama.store.errors import store_errors
from gaama.store.keys import Keys

T = TypeVar("T")
#: The expansion's walk weights cross the Lua boundary as integers in units of 2⁻³⁰: exact, and
#: parsed without string handling.
WEIGHT_UNITS = 2**30


@dataclass(frozen=True, slots=True)
class Expansion:
    """A subgraph read by :meth:`GraphStore.expand`: ids in admission order (seeds first), each
    node's full store degree, and ``(i, j, walk weight)`` rows indexing into ``nodes``, one per
    undirected edge."""

    nodes: list[str]
    degrees: np.ndarray
    edges: np.ndarray


class SubgraphReads:
    """The subgraph reads of :class:`~gaama.store.graph.GraphStore` (its base class)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._expand = scripts.register(redis, "expand.lua")
        self._read_vectors = scripts.register(redis, "read_vectors.lua")
        self._provenance = scripts.register(redis, "provenance.lua")

    async def expand(
        self,
        tenant: str,
        seeds: Sequence[str],
        *,
        hops: int,
        hub_degree: int,
        max_nodes: int,
        type_weights: Mapping[EdgeKind, float],
        conversation: str | None = None,
        subject: str | None = None,
    ) -> Expansion:
        """The subgraph around ``seeds``, computed inside Redis in one round trip.

        Breadth-first for ``hops`` rings, edges followed both ways. Hubs
        (:func:`gaama.model.is_hub` of ``hub_degree``) are not expanded through (their edges to
        nodes reached from elsewhere stay). A node's neighbours are admitted heaviest walk weight
        first (:func:`gaama.model.walk_weight` with ``type_weights``, ties by id) until
        ``max_nodes``; with a scope, non-concept nodes outside it
        are dropped. Once the subgraph is full no further adjacency is read, so the work is
        bounded by ``max_nodes`` whatever the graph. Edges: every edge read on the way whose
        both ends are in the subgraph (an edge between two nodes whose adjacency was not read —
        the outermost ring, and nodes reached after the subgraph filled — is not seen). Every
        key read is under the tenant's prefix: another tenant's node cannot be reached.
        """
        if not seeds:
            return Expansion([], np.zeros(0, dtype=np.int64), np.zeros((0, 3)))
        weights = ";".join(f"{k.value}={w!r}" for k, w in type_weights.items())
        args: list[Any] = [
            self.keys.adj_prefix(tenant),
            self.keys.node(tenant, ""),
            hops,
            hub_degree,
            max_nodes,
            conversation or "",
            subject or "",
            f"{kind_prefix(NodeKind.CONCEPT)}_",
            weights,
            STORED_WEIGHT_POWER,
            WEIGHT_UNITS,
            *seeds,
        ]
        # One declared key routes the call to the tenant's shard; the rest share its hash slot.
        with store_errors():
            ids, degrees, edges = await self._expand(
                keys=[self.keys.adj(tenant, seeds[0]), self.keys.degrees(tenant)], args=args
            )
        rows = np.asarray(edges, dtype=np.float64).reshape(-1, 3)
        rows[:, 2] /= WEIGHT_UNITS
        return Expansion([i.decode() for i in ids], np.asarray(degrees, dtype=np.int64), rows)

    async def read_vectors(
        self, tenant: str, ids: Sequence[str], *, fields: Sequence[str], dim: int, limit: int
    ) -> tuple[list[tuple[str, dict[str, str]]], np.ndarray]:
        """Stored ``fields`` and vector of the first ``limit`` of ``ids``, in the order given, that
        have a ``dim``-dimensional vector (others are passed over, as the vector index would), in
        one round trip: ``([(id, {field: value})], (n, dim) float32 rows)``, a field absent
        from a node left out. Every key read is under the tenant's prefix.

        Each row is the node's stored float16 vector (:data:`VECTOR_FIELD`, the one the index
        holds) as float32.

        Retrieval's read-ahead (see :mod:`gaama.retrieval.search`); ids are GAAMA node ids,
        which never hold a comma (the script takes them as one comma-separated argument).
        """
        shown, vectors, _ = await self._read_ahead(tenant, ids, fields, dim, limit, None)
        return shown, vectors

    async def read_vectors_during(
        self,
        tenant: str,
        ids: Sequence[str],
        *,
        fields: Sequence[str],
        dim: int,
        limit: int,
        work: Callable[[], T],
    ) -> tuple[list[tuple[str, dict[str, str]]], np.ndarray, T]:
        """:meth:`read_vectors`, running ``work()`` (CPU, in this thread) while Redis executes
        the read: the request is on the wire before ``work`` starts and the reply is read after
        it returns. Returns the read and ``work``'s result."""
        shown, vectors, done = await self._read_ahead(tenant, ids, fields, dim, limit, work)
        return shown, vectors, cast(T, done)

    async def _read_ahead(
        self,
        tenant: str,
        ids: Sequence[str],
        fields: Sequence[str],
        dim: int,
        limit: int,
        work: Callable[[], T] | None,
    ) -> tuple[list[tuple[str, dict[str, str]]], np.ndarray, T | None]:
        if not ids or limit <= 0:
            return [], np.zeros((0, dim), dtype=np.float32), work() if work else None
        wanted = [f for f in fields if f != VECTOR_FIELD]
        keys = [self.keys.node(tenant, ids[0])]  # routes the call to the tenant's shard
        args: list[str | int] = [
            self.keys.node(tenant, ""),
            ",".join([*wanted, VECTOR_FIELD]),
            dim * VECTOR_DTYPE().itemsize,
            limit,
            ",".join(ids),
        ]
        done: T | None = None
        with store_errors():
            if work is None:
                rows = await self._read_vectors(keys=keys, args=args)
            else:
                rows, done = await self._call_during(self._read_vectors, keys, args, work)
        width = len(wanted) + 2  # id, the shown fields, the vector
        shown = []
        for at in range(0, len(rows), width):
            values = zip(wanted, rows[at + 1 : at + width - 1], strict=True)
            shown.append(
                (rows[at].decode(), {f: v.decode("utf-8", "replace") for f, v in values if v})
            )
        return shown, stored_vectors(rows[width - 1 :: width], dim), done

    async def _call_during(
        self, script: Any, keys: list[str], args: list[str | int], work: Callable[[], T]
    ) -> tuple[Any, T]:
        """Send one call of a read-only script, run ``work`` while Redis executes it, then read
        its reply.

        On a connection taken from the client's pool for the call: the request is written before
        ``work`` starts. (A task that awaits the client's own call, started beside ``work``,
        needs two turns of the event loop before it writes, so ``work`` would run first.)
        """
        node = None
        if cluster.is_cluster(self.redis):
            await cluster.initialized(self.redis)
            node = cluster.owner(self.redis, keys[0])
        if node is not None:  # Redis Cluster: a connection to the primary holding the keys
            conn = node.acquire_connection()
        else:
            conn = await self.redis.connection_pool.get_connection()  # type: ignore[no-untyped-call]
        ran = False
        try:
            try:
                await conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
                done, ran = work(), True
                reply = await _script_reply(conn, script, keys, args)
            except (MovedError, AskError):
                # The slot moved (or is moving) since the client read the slot map: the
                # client's own call follows the redirection.
                if not ran:
                    done, ran = work(), True
                reply = await script(keys=keys, args=args)
            except (RedisConnectionError, RedisTimeoutError):
                # A pooled connection Redis has dropped (a restart, an idle timeout) fails here,
                # at the first write or read. The script only reads: reconnect and run it again
                # once, as the client's own calls do.
                await conn.disconnect()
                if not ran:
                    done, ran = work(), True
                await conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
                reply = await _script_reply(conn, script, keys, args)
            return reply, done
        except BaseException:
            # A reply may still be on its way (work failed, the task was cancelled): this
            # connection cannot serve another call.
            await conn.disconnect()
            raise
        finally:
            if node is not None:
                node.release(conn)
            else:
                await self.redis.connection_pool.release(conn)

    async def provenance(self, tenant: str, ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Source turns of each node of ``tenant`` in ``ids`` as ``(episode id, external turn
        id)``, in order and without repeats, resolved inside Redis in one round trip (see
        ``lua/provenance.lua``). Missing nodes and concepts have none."""
        if not ids:
            return {}
        args = [self.keys.node(tenant, ""), self.keys.adj_prefix(tenant), *ids]
        with store_errors():  # one declared key routes the call to the tenant's shard
            rows = await self._provenance(keys=[self.keys.node(tenant, ids[0])], args=args)
        return {
            i: [(as_text(r[j]), as_text(r[j + 1])) for j in range(0, len(r) - 1, 2)]
            for i, r in zip(ids, rows, strict=True)
        }


async def _script_reply(conn: Any, script: Any, keys: list[str], args: list[str | int]) -> Any:
    """The reply to an EVALSHA of ``script`` just sent on ``conn``; if Redis no longer holds the
    script (a restart, SCRIPT FLUSH), its source is sent instead."""
    try:
        return await conn.read_response()
    except NoScriptError:
        await conn.send_command("EVAL", script.script, len(keys), *keys, *args)
        return await conn.read_response()
