"""A fact's validity in time, as its node hash holds it (bi-temporal).

Valid time: ``valid_from`` (when the fact became true: its source turn's session time) and
``valid_to`` (when a later fact ended it; absent while it holds). Transaction time:
``learned_at`` (when the memory stored it) and ``retired_at`` (when the memory learned that it
ended). ``superseded_by`` names the fact that ended it and ``superseded_reason`` why
(:data:`gaama.extract.updates.Reason`). Both valid times are NUMERIC fields of the vector index;
a field is left out rather than stored empty, since the index skips a document whose NUMERIC
field does not parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

VALID_FROM, VALID_TO = "valid_from", "valid_to"
LEARNED_AT, RETIRED_AT = "learned_at", "retired_at"
SUPERSEDED_BY, SUPERSEDED_REASON = "superseded_by", "superseded_reason"
#: A node redacted at its speaker's request: when, by which request turn, and why.
REDACTED_AT, REDACTED_BY, REDACTED_REASON = "redacted_at", "redacted_by", "redacted_reason"
#: The text a redacted node shows in place of the words it held.
REDACTED_TEXT = "[forgotten at the speaker's request]"
#: The fields the vector index holds as NUMERIC.
VALIDITY_INDEXED = (VALID_FROM, VALID_TO)
#: Every validity field, in the order reads return them.
VALIDITY_FIELDS = (VALID_FROM, VALID_TO, LEARNED_AT, RETIRED_AT, SUPERSEDED_BY, SUPERSEDED_REASON)


@dataclass(frozen=True, slots=True)
class Validity:
    """A node's validity as reads return it; ``valid_to`` None while the fact holds."""

    valid_from: float | None = None
    valid_to: float | None = None
    learned_at: float | None = None
    retired_at: float | None = None
    superseded_by: str = ""
    superseded_reason: str = ""

    def current(self, as_of: float | None = None) -> bool:
        """Whether the fact holds now (``as_of`` None) or held at ``as_of``: begun by then and
        not ended by then."""
        if as_of is None:
            return self.valid_to is None
        if self.valid_from is not None and self.valid_from > as_of:
            return False
        return self.valid_to is None or self.valid_to > as_of

    def as_dict(self) -> dict[str, float | str | None]:
        return {
            VALID_FROM: self.valid_from,
            VALID_TO: self.valid_to,
            LEARNED_AT: self.learned_at,
            RETIRED_AT: self.retired_at,
            SUPERSEDED_BY: self.superseded_by or None,
            SUPERSEDED_REASON: self.superseded_reason or None,
        }


@dataclass(frozen=True, slots=True)
class Ending:
    """A newer fact ending an older one: from ``valid_to`` (the newer one's ``valid_from``)
    the older one no longer holds, for ``reason``."""

    new: str
    old: str
    reason: str
    valid_to: float


def _num(value: object) -> float | None:
    if value is None or value == "" or value == b"":
        return None
    try:
        return float(value.decode() if isinstance(value, bytes) else str(value))
    except ValueError:
        return None


def _str(value: object) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def validity_of(fields: Mapping[str, object]) -> Validity:
    """The validity held by a node's fields (a hash read, a KNN reply's fields, a node's
    ``extra``); every field absent for a node without one (an episode, a reflection)."""
    return Validity(
        valid_from=_num(fields.get(VALID_FROM)),
        valid_to=_num(fields.get(VALID_TO)),
        learned_at=_num(fields.get(LEARNED_AT)),
        retired_at=_num(fields.get(RETIRED_AT)),
        superseded_by=_str(fields.get(SUPERSEDED_BY)),
        superseded_reason=_str(fields.get(SUPERSEDED_REASON)),
    )
