"""How nodes and edges are laid out in Redis hashes, and back.

A node is one hash (``Keys.node``): its readable fields, the digests of its scopes (the vector
index's TAG fields), and its vector twice — float32 for the index, int8 for retrieval's
read-ahead. Adjacency is one hash per node (``Keys.adj``): neighbour id → ``KIND|o|w`` (an
outgoing edge) or ``KIND|i|w`` (incoming), ``w`` the stored weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gaama import ids
from gaama.model import Edge, EdgeKind, Neighbour, Node, NodeKind

VECTOR_FIELD = "embedding"
#: A compact copy of the vector for retrieval's read-ahead: int8, scaled so the largest component
#: is ±127. Cosine similarity ignores the scale, and the read-ahead moves a quarter of the bytes
#: per node (its accuracy and what it saves: docs/benchmarks.md, "Read-ahead vectors").
COMPACT_VECTOR_FIELD = "embedding_i8"
#: Stored weight of a NEXT edge (its type weight is applied at retrieval).
NEXT_STORED_WEIGHT = "1"
#: Index TAG fields: the exact-match digest (:func:`gaama.ids.tag`) of each scope a search
#: filters on. The readable values stay in their own fields; only the digests are indexed.
TAG_FIELDS = {"tenant": "tenant_tag", "conversation": "conversation_tag", "subject": "subject_tag"}
_TEXT_FIELDS = (
    "kind",
    "tenant",
    "text",
    "conversation",
    "subject",
    "turn_id",
    "speaker",
    "sources",
)


def vector_fields(vector: Sequence[float] | np.ndarray) -> dict[str, bytes]:
    """The stored forms of a vector: float32 (indexed) and its int8 copy (read-ahead)."""
    v = np.asarray(vector, dtype=np.float32).ravel()
    top = float(np.abs(v).max()) if v.size else 0.0
    usable = top > 0 and np.isfinite(top)  # a zero or non-finite vector has no direction to keep
    compact = np.rint(v * (127.0 / top)) if usable else np.zeros(v.shape)
    return {VECTOR_FIELD: v.tobytes(), COMPACT_VECTOR_FIELD: compact.astype(np.int8).tobytes()}


def node_mapping(node: Node) -> dict[str, Any]:
    """The hash fields of a node, vector included when it has one."""
    m: dict[str, Any] = {
        "kind": node.kind.value,
        "tenant": node.tenant,
        "text": node.text,
        "conversation": node.conversation,
        "subject": node.subject,
        "turn_id": node.turn_id,
        "speaker": node.speaker,
        "time": repr(float(node.time)),
        "belief": repr(node.belief),
        TAG_FIELDS["tenant"]: ids.tag(node.tenant),
        TAG_FIELDS["conversation"]: ids.tag(node.conversation),
        TAG_FIELDS["subject"]: ids.tag(node.subject),
    }
    for k, v in node.extra.items():
        m[k] = v
    if node.vector is not None:
        m.update(vector_fields(node.vector))
    return m


_NOT_EXTRA = frozenset(
    {*_TEXT_FIELDS, *TAG_FIELDS.values(), "time", "belief", VECTOR_FIELD, COMPACT_VECTOR_FIELD}
)


def node_from_hash(tenant: str, node_id: str, h: Mapping[bytes, bytes]) -> Node:
    """The node stored in hash ``h`` (vector not loaded); unknown fields go to ``extra``."""

    def get(f: str) -> str:
        return h.get(f.encode(), b"").decode("utf-8", "replace")

    extra = {
        k.decode(): v.decode("utf-8", "replace")
        for k, v in h.items()
        if k.decode() not in _NOT_EXTRA
    }
    if sources := get("sources"):
        extra["sources"] = sources
    return Node(
        id=node_id,
        tenant=tenant,
        kind=NodeKind(get("kind")),
        text=get("text"),
        time=float(get("time") or 0),
        conversation=get("conversation"),
        subject=get("subject"),
        turn_id=get("turn_id"),
        speaker=get("speaker"),
        belief=float(get("belief") or 1),
        extra=extra,
    )


_EDGE_KINDS = {k.value.encode(): k for k in EdgeKind}


def adjacency_values(e: Edge) -> tuple[str, str]:
    """The stored adjacency values of an edge: at its source (``KIND|o|w``) and at its target
    (``KIND|i|w``)."""
    w = f"{e.weight:.6g}"
    return f"{e.kind.value}|o|{w}", f"{e.kind.value}|i|{w}"


def parse_adjacency(value: bytes, node: str) -> Neighbour:
    """The neighbour ``node`` as seen from an adjacency value (see :func:`adjacency_values`)."""
    kind, direction, weight = value.split(b"|")
    return Neighbour(
        node=node, kind=_EDGE_KINDS[kind], outgoing=direction == b"o", weight=float(weight)
    )


def as_text(raw: object) -> str:
    """A Redis reply value as text: ``None`` is empty, bytes are UTF-8 (invalid bytes replaced,
    never fatal)."""
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
