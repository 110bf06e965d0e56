"""Retrieval prefers what is true now (or at ``as_of``).

A fact that a later one ended (``valid_to`` set), and an episode all of whose facts ended, is
*superseded*. By default it stays a candidate with its score times ``superseded_weight``, and
the ranked list puts it after every item that holds, so a question about the past still finds
it but never above what replaced it; ``omit_superseded`` leaves it out. With ``as_of`` the
memory is read as it stood then: nothing said after ``as_of``, and what held at ``as_of``
counts as current (a fact ended later was current then).

What replaced a superseded candidate answers the same question: the item that ended it
(``superseded_by``, followed to the one that holds) ranks at least as high as the superseded one
would have, and is read in when the search did not find it (:func:`successors_wanted`,
:func:`inherit`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gaama.model import NodeKind
from gaama.retrieval.pack import Item, rank_key


def holds(item: Item, as_of: float | None) -> bool:
    """Whether ``item`` held at ``as_of`` (now, when None)."""
    return item.validity.current(as_of)


#: Links of a supersession chain followed from a superseded candidate to what holds.
CHAIN_HOPS = 4


#: Endings whose successor states the value that holds in the old one's place (a stop, such as
#: "Olive died", names only what ended: it takes no rank).
REPLACED = ("update", "correction")


def successors_wanted(
    items: Sequence[Item], have: Collection[str], as_of: float | None
) -> list[str]:
    """Ids that end a superseded item of ``items`` and are not among ``have``."""
    return list(
        dict.fromkeys(
            i.validity.superseded_by
            for i in items
            if i.validity.superseded_by
            and i.validity.superseded_reason in REPLACED
            and not holds(i, as_of)
            and i.validity.superseded_by not in have
        )
    )


def inherit(items: list[Item], found: Mapping[str, Item], as_of: float | None) -> list[Item]:
    """``items`` with each superseded one's score and similarity passed on to what holds in its
    place (followed along ``superseded_by`` in ``items`` and ``found``); a successor from
    ``found`` joins the items. An item said after ``as_of`` inherits nothing."""
    by_id = {i.id: i for i in items}
    pool = {**found, **by_id}
    joined: dict[str, Item] = {}
    for item in items:
        if holds(item, as_of) or item.validity.superseded_reason not in REPLACED:
            continue
        nxt = pool.get(item.validity.superseded_by)
        for _ in range(CHAIN_HOPS):
            if nxt is None or holds(nxt, as_of):
                break
            nxt = pool.get(nxt.validity.superseded_by)
        if nxt is None or not holds(nxt, as_of) or (as_of is not None and nxt.time > as_of):
            continue
        nxt.score = max(nxt.score, item.score)
        nxt.sim = max(nxt.sim, item.sim)
        if nxt.id not in by_id:
            joined[nxt.id] = nxt
    return [*items, *joined.values()]


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
