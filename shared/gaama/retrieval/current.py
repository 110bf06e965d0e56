"""Retrieval prefers what is true now (or at ``as_of``).

A fact that a later one ended (``valid_to`` set), and an episode all of whose facts ended, is
*superseded*. By default it stays a candidate with its score times ``superseded_weight``, and
the ranked list puts it after every item that holds, so a question about the past still finds
it but never above what replaced it; ``omit_superseded`` leaves it out. With ``as_of`` the
memory is read as it stood then: nothing said after ``as_of``, and what held at ``as_of``
counts as current (a fact ended later was current then).
"""

from __future__ import annotations

from collections.abc import Sequence

from gaama.model import NodeKind
from gaama.retrieval.pack import Item, rank_key


def holds(item: Item, as_of: float | None) -> bool:
    """Whether ``item`` held at ``as_of`` (now, when None)."""
    return item.validity.current(as_of)


def prefer_current(
    items: Sequence[Item], as_of: float | None, weight: float, omit: bool
) -> list[Item]:
    """``items`` without what ``as_of`` had not seen yet; superseded ones demoted (their score
    times ``weight``) or, with ``omit``, left out; in rank order."""
    out: list[Item] = []
    for item in items:
        if as_of is not None and item.time > as_of:
            continue
        if not holds(item, as_of):
            if omit:
                continue
            item.score *= weight
        out.append(item)
    return sorted(out, key=rank_key)


def current_first(items: Sequence[Item], as_of: float | None) -> list[Item]:
    """The items that hold, then the superseded ones, each group in its order."""
    return [i for i in items if holds(i, as_of)] + [i for i in items if not holds(i, as_of)]


def packed_current_first(memory: Sequence[Item], as_of: float | None) -> list[Item]:
    """The packed memory with its facts that hold before its superseded facts; everything else
    (reflections, the episodes in conversation order) where it was."""
    facts = [i for i in memory if i.kind is NodeKind.FACT]
    ordered = iter(current_first(facts, as_of))
    return [next(ordered) if i.kind is NodeKind.FACT else i for i in memory]
