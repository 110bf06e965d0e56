"""The typed memory graph: node kinds, edge kinds and their default weights (paper §3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import numpy as np


class NodeKind(StrEnum):
    EPISODE = "episode"
    FACT = "fact"
    CONCEPT = "concept"
    REFLECTION = "reflection"


class EdgeKind(StrEnum):
    NEXT = "NEXT"
    DERIVED_FROM = "DERIVED_FROM"
    DERIVED_FROM_FACT = "DERIVED_FROM_FACT"
    HAS_CONCEPT = "HAS_CONCEPT"
    ABOUT_CONCEPT = "ABOUT_CONCEPT"
    SUPERSEDES = "SUPERSEDES"  # a newer fact -> the older fact it ends


#: Type weight of each edge kind (ARCHITECTURE.md §1).
EDGE_TYPE_WEIGHTS: dict[EdgeKind, float] = {
    EdgeKind.NEXT: 0.8,
    EdgeKind.DERIVED_FROM: 0.8,
    EdgeKind.HAS_CONCEPT: 0.8,
    EdgeKind.ABOUT_CONCEPT: 0.8,
    EdgeKind.DERIVED_FROM_FACT: 0.5,
    EdgeKind.SUPERSEDES: 0.5,
}

#: The walk weight raises an edge's stored weight (its confidence, in [0, 1]) to this power, so
#: weak edges carry much less mass than strong ones.
STORED_WEIGHT_POWER = 2


def walk_weight(
    kind: EdgeKind, stored: float, type_weights: Mapping[EdgeKind, float] = EDGE_TYPE_WEIGHTS
) -> float:
    """Walk weight of an edge: its type weight times its stored weight squared (§1 step 4).

    The one definition: retrieval's expansion (``store/lua/expand.lua``) receives
    ``type_weights`` and :data:`STORED_WEIGHT_POWER` as arguments and computes the same.
    """
    return type_weights[kind] * stored**STORED_WEIGHT_POWER


@overload
def is_hub(degree: int, hub_degree: int) -> bool: ...
@overload
def is_hub(degree: np.ndarray, hub_degree: int) -> np.ndarray: ...
def is_hub(degree: Any, hub_degree: int) -> Any:
    """Whether a node of this store degree is a hub: degree strictly above ``hub_degree``.

    Hubs are not expanded through and their walk rows are dampened; works elementwise on an
    array of degrees. The expansion script receives ``hub_degree`` and applies the same rule.
    """
    return degree > hub_degree


#: Which node kinds each edge kind connects (from, to); the store rejects anything else.
EDGE_ENDPOINTS: dict[EdgeKind, tuple[NodeKind, NodeKind]] = {
    EdgeKind.NEXT: (NodeKind.EPISODE, NodeKind.EPISODE),
    EdgeKind.DERIVED_FROM: (NodeKind.FACT, NodeKind.EPISODE),
    EdgeKind.DERIVED_FROM_FACT: (NodeKind.REFLECTION, NodeKind.FACT),
    EdgeKind.HAS_CONCEPT: (NodeKind.EPISODE, NodeKind.CONCEPT),
    EdgeKind.ABOUT_CONCEPT: (NodeKind.FACT, NodeKind.CONCEPT),
    EdgeKind.SUPERSEDES: (NodeKind.FACT, NodeKind.FACT),
}


@dataclass(slots=True)
class Node:
    """A node of one tenant's graph. ``vector`` is float32 bytes-compatible when present."""

    id: str
    tenant: str
    kind: NodeKind
    text: str
    time: float = 0.0  # epoch seconds (session time of the source turn)
    conversation: str = ""
    subject: str = ""
    turn_id: str = ""  # external id of the turn (episodes only)
    speaker: str = ""
    belief: float = 1.0
    vector: list[float] | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Edge:
    src: str
    dst: str
    kind: EdgeKind
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.weight <= 1.0:
            raise ValueError(f"edge weight must be in (0, 1], got {self.weight}")


@dataclass(frozen=True, slots=True)
class Neighbour:
    """One adjacency entry as the store returns it."""

    node: str
    kind: EdgeKind
    outgoing: bool  # True when the edge points from the owner to ``node``
    weight: float
