"""How nodes and edges are laid out in Redis hashes, and back.

A node is one hash (``Keys.node``): its readable fields, the digests of its scopes (the vector
index's TAG fields), and its vector as float16, the form the index holds and retrieval's
read-ahead reads. Adjacency is one hash per node (``Keys.adj``): neighbour id → ``KIND|o|w`` (an
outgoing edge) or ``KIND|i|w`` (incoming), ``w`` the stored weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gaama import ids
from gaama.model import Edge, EdgeKind, Neighbour, Node, NodeKind

#: The vector, float16: indexed (HNSW, cosine) and read by retrieval's read-ahead. Half the bytes
#: of float32 for the same recall (docs/benchmarks.md, "Vector memory"). A field of its own
#: name, not the float32 field's: an index of the old layout keeps serving while
#: ``gaama migrate vectors`` builds the new one beside it.
VECTOR_FIELD = "embedding_f16"
VECTOR_DTYPE = np.float16
#: The fields of the layout before float16: the float32 vector (indexed then) and its int8 copy
#: for the read-ahead. ``gaama migrate vectors`` converts and removes them.
LEGACY_VECTOR_FIELD, LEGACY_COMPACT_FIELD = "embedding", "embedding_i8"
#: float16 tops out at 65,504; a vector with a larger component is scaled down (cosine similarity
#: ignores the scale). Embedders give unit vectors, far inside.
_F16_SAFE = 1e4
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
    """The stored form of a vector: float16, at a scale float16 holds (a non-finite vector has no
    direction to keep and is stored as zeros)."""
    v = np.asarray(vector, dtype=np.float32).ravel()
    top = float(np.abs(v).max()) if v.size else 0.0
    if not np.isfinite(top):
        v = np.zeros(v.shape, dtype=np.float32)
    elif top > _F16_SAFE:
        v = v / np.float32(top)
    return {VECTOR_FIELD: v.astype(VECTOR_DTYPE).tobytes()}


def stored_vectors(raw: Sequence[bytes], dim: int) -> np.ndarray:
    """Stored vectors (each ``dim`` float16 values) as one (n, dim) float32 matrix."""
    return np.frombuffer(b"".join(raw), dtype=VECTOR_DTYPE).reshape(-1, dim).astype(np.float32)


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
    {
        *_TEXT_FIELDS,
        *TAG_FIELDS.values(),
        "time",
        "belief",
        VECTOR_FIELD,
        LEGACY_VECTOR_FIELD,
        LEGACY_COMPACT_FIELD,
    }
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
