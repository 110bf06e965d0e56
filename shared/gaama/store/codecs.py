"""How nodes and edges are laid out in Redis hashes, and back.

A node is one hash (``Keys.node``): its readable fields, the digests of its scopes (the vector
index's TAG fields), and its vector as float16, the form the index holds and retrieval's
read-ahead reads. Adjacency is one hash per node (``Keys.adj``): neighbour id → the edge's kind
as one letter, upper case at the edge's source and lower case at its target, followed by its
stored weight unless that is 1 (:func:`adjacency_values`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gaama import ids
from gaama.model import Edge, EdgeKind, Neighbour, Node, NodeKind

#: The vector, float16: indexed (HNSW, cosine) and read by retrieval's read-ahead, in half the
#: bytes of float32
#: (docs/decisions/0008-float16-vectors-stored-once.md). A field of its own name, not the float32
#: field's: an index of the old layout keeps serving while
#: ``gaama migrate vectors`` builds the new one beside it.
VECTOR_FIELD = "embedding_f16"
VECTOR_DTYPE = np.float16
#: The fields of the layout before float16: the float32 vector (indexed then) and its int8 copy
#: for the read-ahead. ``gaama migrate vectors`` converts and removes them.
LEGACY_VECTOR_FIELD, LEGACY_COMPACT_FIELD = "embedding", "embedding_i8"
#: float16 tops out at 65,504; a vector with a larger component is scaled down (cosine similarity
#: ignores the scale). Embedders give unit vectors, far inside.
_F16_SAFE = 1e4
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
    raw = m.get("raw")
    if node.kind is NodeKind.EPISODE and raw and said_in(node.text, node.speaker) == raw:
        del m["raw"]  # the text holds it: read back from there (node_from_hash, episode_said)
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
    kind = NodeKind(get("kind"))
    if kind is NodeKind.EPISODE and "raw" not in extra:
        said = said_in(get("text"), get("speaker"))
        if said:
            extra["raw"] = said
    return Node(
        id=node_id,
        tenant=tenant,
        kind=kind,
        text=get("text"),
        time=float(get("time") or 0),
        conversation=get("conversation"),
        subject=get("subject"),
        turn_id=get("turn_id"),
        speaker=get("speaker"),
        belief=float(get("belief") or 1),
        extra=extra,
    )


def said_in(text: str, speaker: str) -> str | None:
    """What an episode's speaker said, read from its text ``"[<time>] <speaker>: <said>"``
    (:meth:`gaama.events.TurnReceived.episode_text`); ``None`` for a text of another form.

    An episode's ``raw`` field (what was said) is left out of its hash when this gives it back
    exactly: :func:`node_mapping` checks before leaving it out, so no text is ever misread.
    """
    if not text.startswith("["):
        return None
    head = f"] {speaker}: "
    at = text.find(head)
    return text[at + len(head) :] if at > 0 else None


def episode_said(raw: str, text: str, speaker: str) -> str:
    """An episode's words as said, from its stored fields: ``raw``, or, when it was left out
    (:func:`said_in`), read from the text; the text itself when neither holds them."""
    return raw or said_in(text, speaker) or text


#: Each edge kind's letter in an adjacency value: upper case at the edge's source, lower case at
#: its target. The Lua scripts that read adjacency (``store/lua/``) hold the same table.
EDGE_CODES: dict[EdgeKind, str] = {
    EdgeKind.NEXT: "N",
    EdgeKind.DERIVED_FROM: "D",
    EdgeKind.DERIVED_FROM_FACT: "F",
    EdgeKind.HAS_CONCEPT: "H",
    EdgeKind.ABOUT_CONCEPT: "A",
    EdgeKind.SUPERSEDES: "S",
}
_BY_CODE = {
    **{c.encode(): (k, True) for k, c in EDGE_CODES.items()},
    **{c.lower().encode(): (k, False) for k, c in EDGE_CODES.items()},
}
#: The layout before the letters: ``KIND|o|w`` (outgoing) or ``KIND|i|w`` (incoming), still read.
_LEGACY_KINDS = {k.value.encode(): k for k in EdgeKind}


def adjacency_code(kind: EdgeKind, *, outgoing: bool) -> str:
    """The letter that starts the adjacency value of a ``kind`` edge at its source
    (``outgoing``) or at its target."""
    code = EDGE_CODES[kind]
    return code if outgoing else code.lower()


def adjacency_value(kind: EdgeKind, outgoing: bool, weight: float) -> str:
    """The stored adjacency value of a ``kind`` edge of ``weight``, at its source (``outgoing``)
    or at its target: its kind's letter, then its weight unless that is 1 (nearly every edge: a
    letter is the whole value)."""
    w = f"{weight:.6g}"
    return adjacency_code(kind, outgoing=outgoing) + ("" if w == "1" else w)


def adjacency_values(e: Edge) -> tuple[str, str]:
    """The stored adjacency values of an edge, at its source and at its target."""
    return adjacency_value(e.kind, True, e.weight), adjacency_value(e.kind, False, e.weight)


#: The adjacency values of a NEXT edge (stored weight 1; its type weight is applied at
#: retrieval): at the earlier episode and at the later one.
NEXT_VALUES = (
    adjacency_code(EdgeKind.NEXT, outgoing=True),
    adjacency_code(EdgeKind.NEXT, outgoing=False),
)


def parse_adjacency(value: bytes | str, node: str) -> Neighbour:
    """The neighbour ``node`` as seen from an adjacency value, in either layout (see
    :func:`adjacency_values`; a value written before the letters reads the same)."""
    if isinstance(value, str):
        value = value.encode()
    if b"|" in value:
        kind, direction, weight = value.split(b"|")
        return Neighbour(
            node=node,
            kind=_LEGACY_KINDS[kind],
            outgoing=direction == b"o",
            weight=float(weight),
        )
    edge, outgoing = _BY_CODE[value[:1]]
    return Neighbour(
        node=node, kind=edge, outgoing=outgoing, weight=float(value[1:]) if value[1:] else 1.0
    )


def as_text(raw: object) -> str:
    """A Redis reply value as text: ``None`` is empty, bytes are UTF-8 (invalid bytes replaced,
    never fatal)."""
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
