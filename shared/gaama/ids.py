"""Deterministic ids.

Every id is a hash of the tenant, the node kind and the content scope that makes the node
unique, so a redelivered message computes the same id and its write is an upsert. The tenant is
part of every id: two tenants with identical text never share a node (the authors' code hashes
concept and fact text globally, which leaks across scopes).
"""

from __future__ import annotations

import hashlib
import re

from gaama.model import NodeKind

_PREFIX = {
    NodeKind.EPISODE: "ep",
    NodeKind.FACT: "fa",
    NodeKind.CONCEPT: "co",
    NodeKind.REFLECTION: "re",
    NodeKind.ENTITY: "en",
}
_KIND = {p: k for k, p in _PREFIX.items()}

_WS = re.compile(r"\s+")


def _digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=12)
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x1f")  # unit separator: ("ab","c") != ("a","bc")
    return h.hexdigest()


def normalize_text(text: str) -> str:
    """Case- and whitespace-insensitive form used for content hashing."""
    return _WS.sub(" ", text.strip().lower())


def node_id(tenant: str, kind: NodeKind, *scope: str) -> str:
    """Id of a node of ``kind`` for ``tenant`` identified by ``scope`` (content parts)."""
    return f"{_PREFIX[kind]}_{_digest(tenant, kind.value, *scope)}"


def episode_id(tenant: str, conversation: str, turn_id: str) -> str:
    return node_id(tenant, NodeKind.EPISODE, conversation, turn_id)


def fact_id(tenant: str, text: str) -> str:
    return node_id(tenant, NodeKind.FACT, normalize_text(text))


def concept_id(tenant: str, label: str) -> str:
    return node_id(tenant, NodeKind.CONCEPT, label)


def reflection_id(tenant: str, text: str) -> str:
    return node_id(tenant, NodeKind.REFLECTION, normalize_text(text))


def entity_id(tenant: str, name: str) -> str:
    return node_id(tenant, NodeKind.ENTITY, normalize_text(name))


def chunk_id(tenant: str, conversation: str, first_episode: str, last_episode: str) -> str:
    """Id of an extraction chunk: the same episodes always make the same chunk id."""
    return "ch_" + _digest(tenant, "chunk", conversation, first_episode, last_episode)


def derived_turn_id(timestamp: str, speaker: str, text: str) -> str:
    """A turn id for producers that send none: stable for the same turn content."""
    return "h_" + _digest(timestamp, speaker, text)[:16]


def kind_prefix(kind: NodeKind) -> str:
    """The id prefix of a kind (``co`` for concepts: their ids start ``co_``)."""
    return _PREFIX[kind]


def kind_of(node: str) -> NodeKind:
    """Node kind from an id's prefix; raises ``ValueError`` for a malformed id."""
    kind = _KIND.get(node.partition("_")[0])
    if kind is None:
        raise ValueError(f"not a GAAMA node id: {node!r}")
    return kind
