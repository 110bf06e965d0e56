"""Identifiers: what a caller may name things, and the deterministic ids we derive.

**Caller-chosen identifiers** (tenant, conversation, subject, turn id) are defined here once and
used by HTTP models, Kafka records, settings and the store. They are compared byte for byte:
no case folding and no Unicode normalisation (``"é"`` as one code point and as ``e`` + a
combining accent are two different conversations). Normalising would merge ids that a platform
may consider distinct; refusing to guess keeps one end user's memory from ever reaching another's.

- tenant: 1-64 ASCII letters, digits, ``_``, ``.``, ``-``. It appears in Redis keys as the
  cluster hash tag, so ``{``, ``}``, ``:``, ``*`` and the rest of the glob syntax can never occur.
  Tenants differing only by case are distinct; settings that map API keys to two such tenants
  are refused at start-up (see :func:`case_collisions`), because people read them as one.
- conversation and turn id: 1-200 characters, no ``/`` (the Kafka key is
  ``<tenant>/<conversation>``), no leading white space, no control characters, no lone surrogates.
- subject: the same, but ``/`` is allowed (``user/42``); empty means "no subject".

Where these strings meet the search index they are stored as :func:`tag` digests (fixed-length
hex), so no string a caller chooses can match another's: not by case, not through the TAG
separator, not through query syntax.

**Derived ids**: every node id is a hash of the tenant, the node kind and the content scope that
makes the node unique, so a redelivered message computes the same id and its write is an upsert.
The tenant is part of every id: two tenants with identical text never share a node (the
authors' code hashes concept and fact text globally, which leaks across scopes).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from gaama.model import NodeKind

TENANT_MAX = 64
IDENT_MAX = 200
TENANT_PATTERN = r"^[A-Za-z0-9_.\-]+$"
#: Unicode categories never allowed in an identifier: control, unassigned surrogate halves.
_BANNED_CATEGORIES = frozenset({"Cc", "Cs"})


def _check_ident(value: str, *, slash: bool) -> str:
    if value[:1].isspace():
        raise ValueError("must not start with white space")
    if not slash and "/" in value:
        raise ValueError("must not contain '/'")
    for ch in value:
        if unicodedata.category(ch) in _BANNED_CATEGORIES:
            raise ValueError(f"must not contain control characters (found U+{ord(ch):04X})")
    return value


def _ident(value: str) -> str:
    return _check_ident(value, slash=False)


def _subject(value: str) -> str:
    return _check_ident(value, slash=True) if value else value


#: Strict string types (no coercion from numbers or bools) for every caller-chosen identifier.
TenantId = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=TENANT_MAX, pattern=TENANT_PATTERN),
]
ConversationId = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=IDENT_MAX),
    AfterValidator(_ident),
]
TurnId = ConversationId
#: A subject, or ``""`` for none.
SubjectId = Annotated[
    str, StringConstraints(strict=True, max_length=IDENT_MAX), AfterValidator(_subject)
]


def check_text(value: str) -> str:
    """``value`` if it is acceptable free text (no NUL, no lone surrogate); ValueError otherwise."""
    for ch in value:
        if ch == "\x00" or unicodedata.category(ch) == "Cs":
            raise ValueError(f"must not contain NUL or lone surrogates (found U+{ord(ch):04X})")
    return value


#: Free text a caller sends (turn text, speaker, query): strict str, no NUL, no lone surrogates
#: (they cannot be encoded as UTF-8, so they would fail far from the input that carried them).
Text = Annotated[str, StringConstraints(strict=True), AfterValidator(check_text)]


def check_conversation(value: str) -> str:
    """``value`` if it is a valid conversation id; ``ValueError`` saying why otherwise."""
    if not 1 <= len(value) <= IDENT_MAX:
        raise ValueError(f"must have 1..{IDENT_MAX} characters")
    return _ident(value)


def check_subject(value: str) -> str:
    """``value`` if it is a valid subject (``""`` allowed); ``ValueError`` otherwise."""
    if len(value) > IDENT_MAX:
        raise ValueError(f"must have at most {IDENT_MAX} characters")
    return _subject(value)


def tag(value: str) -> str:
    """The index tag of an identifier: 32 hex digits of a keyed hash of its exact UTF-8 bytes.

    Distinct strings give distinct tags (up to a 128-bit collision), and the tag holds only
    ``[0-9a-f]``, so neither case-insensitive matching, the TAG separator nor query syntax can
    make one caller's filter select another's documents. ``""`` stays ``""`` (not indexed).
    """
    if not value:
        return ""
    raw = value.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=16, person=b"gaama-tag-v2").hexdigest()


def case_collisions(tenants: list[str]) -> list[tuple[str, str]]:
    """Pairs of distinct tenant names that a person would read as the same (case-insensitive)."""
    seen: dict[str, str] = {}
    out = []
    for t in dict.fromkeys(tenants):
        folded = unicodedata.normalize("NFKC", t).casefold()
        if folded in seen:
            out.append((seen[folded], t))
        else:
            seen[folded] = t
    return out


def preview(value: object, limit: int = 64) -> str:
    """``repr`` of at most ``limit`` characters of ``value``, for error messages (never echo a
    caller's whole input back)."""
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:  # e.g. an integer beyond Python's digit limit
        return f"<{type(value).__name__}>"
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


_PREFIX = {
    NodeKind.EPISODE: "ep",
    NodeKind.FACT: "fa",
    NodeKind.CONCEPT: "co",
    NodeKind.REFLECTION: "re",
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
