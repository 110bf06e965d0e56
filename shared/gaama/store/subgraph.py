"""Subgraph reads of a search, each one server-side script call: the expansion around the
seeds, with the read-ahead of expanded nodes' fields and vectors in the same call, and the
provenance of what is returned (see :mod:`gaama.retrieval.search`).

Each is a Lua script (``store/lua/``) rather than a pipeline: on the hot path of a search
(hundreds of nodes per stage) redis-py spends far more time encoding and dispatching single
commands than Redis spends answering them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from gaama.ids import kind_prefix
from gaama.model import STORED_WEIGHT_POWER, EdgeKind, NodeKind
from gaama.store import scripts
from gaama.store.codecs import VECTOR_DTYPE, VECTOR_FIELD, as_text, stored_vectors
from gaama.store.errors import store_errors
from gaama.store.keys import Keys

#: The expansion's walk weights cross the Lua boundary as whole numbers of units of 2⁻³⁰ (packed
#: as float64, so exactly): the same weights whatever Lua's number formatting.
WEIGHT_UNITS = 2**30
#: Divides a packed edge row: its two indexes as they are, its weight out of units.
_UNSCALE = np.array([1.0, 1.0, WEIGHT_UNITS])


@dataclass(frozen=True, slots=True)
class Expansion:
    """A subgraph read by :meth:`GraphStore.expand`: ids in admission order (seeds first), each
    node's full store degree, and ``(i, j, walk weight)`` rows indexing into ``nodes``, one per
    undirected edge."""

    nodes: list[str]
    degrees: np.ndarray
    edges: np.ndarray
    #: The read-ahead (:class:`ReadAhead`), if one was asked for: ``(id, {field: value})`` of the
    #: nodes read, in admission order, and their vectors as ``(n, dim)`` float32 rows.
    shown: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """What :meth:`SubgraphReads.expand` reads of the nodes it admits, in the same call: the
    stored ``fields`` and ``dim``-dimensional vector of the first ``limit`` admitted nodes past
    the seeds that are of a kind in ``kinds``, not in ``held`` and have such a vector (others are
    passed over, as the vector index would). Node ids never hold a comma: ``held`` crosses to
    the script as one comma-separated argument."""

    fields: Sequence[str]
    dim: int
    limit: int
    kinds: Sequence[NodeKind]
    held: Collection[str]

    @property
    def shown_fields(self) -> list[str]:
        """The fields read besides the vector, in the order the reply holds them."""
        return [f for f in self.fields if f != VECTOR_FIELD]


class SubgraphReads:
    """The subgraph reads of :class:`~gaama.store.graph.GraphStore` (its base class)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._expand = scripts.register(redis, "expand.lua")
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
        read_ahead: ReadAhead | None = None,
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

        With ``read_ahead``, the same call also reads the fields and vectors it names
        (:class:`ReadAhead`; the reply's ``shown`` and ``vectors``).
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
            *_ahead_args(read_ahead),
            *seeds,
        ]
        # One declared key routes the call to the tenant's shard; the rest share its hash slot.
        with store_errors():
            ids, degrees, edges, ahead = await self._expand(
                keys=[self.keys.adj(tenant, seeds[0]), self.keys.degrees(tenant)], args=args
            )
        nodes = ids.decode().split(",") if ids else []
        degree = np.frombuffer(degrees, dtype="<i4").astype(np.int64)
        rows = np.frombuffer(edges, dtype="<f8").reshape(-1, 3) / _UNSCALE
        if read_ahead is None:
            return Expansion(nodes, degree, rows)
        shown, vectors = _read_rows(ahead, read_ahead.shown_fields, read_ahead.dim)
        return Expansion(nodes, degree, rows, shown, vectors)

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


def _ahead_args(read_ahead: ReadAhead | None) -> list[str | int]:
    """The expansion script's read-ahead arguments (``ARGV[12..16]``; a limit of 0 reads none)."""
    if read_ahead is None or read_ahead.limit <= 0:
        return [0, "", 0, "", ""]
    return [
        read_ahead.limit,
        ",".join([*read_ahead.shown_fields, VECTOR_FIELD]),
        read_ahead.dim * VECTOR_DTYPE().itemsize,
        ",".join(kind_prefix(k) for k in read_ahead.kinds),
        ",".join(read_ahead.held),
    ]


def _read_rows(
    rows: Sequence[bytes], wanted: Sequence[str], dim: int
) -> tuple[list[tuple[str, dict[str, str]]], np.ndarray]:
    """A read-ahead's flat reply (per node: its id, the ``wanted`` fields' values, its vector)
    as ``([(id, {field: value})], (n, dim) float32 rows)``, an absent field left out."""
    width = len(wanted) + 2  # id, the shown fields, the vector
    shown = []
    for at in range(0, len(rows), width):
        values = zip(wanted, rows[at + 1 : at + width - 1], strict=True)
        shown.append((rows[at].decode(), {f: v.decode("utf-8", "replace") for f, v in values if v}))
    return shown, stored_vectors(rows[width - 1 :: width], dim)
