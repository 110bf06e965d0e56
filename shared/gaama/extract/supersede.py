"""Which facts a chunk's new facts end, or are ended by (the offline update rules, applied).

For each new fact the pipeline gathers the same subject's related facts (its nearest neighbours
by vector, read with the dedupe's search, and the chunk's other new facts) and asks
:func:`gaama.extract.updates.ends` of every pair in time order: the later fact is the one that
may end the earlier, whichever of them arrived first. A pair of facts equally old is left alone
(which one is later cannot be told), as is a fact without a subject. Facts already ended are
still asked about, so the endings found do not depend on the order chunks are extracted in; the
store keeps, of every fact ending an old one, the one that begins first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gaama.extract.updates import CurrentFact, NewFact, ends
from gaama.store.validity import Ending


@dataclass(frozen=True, slots=True)
class Known:
    """A fact as the rules read it: id, text, subject, and when it became true."""

    id: str
    text: str
    subject: str
    valid_from: float


def endings(fresh: Sequence[Known], related: Mapping[str, Sequence[Known]]) -> list[Ending]:
    """The endings among ``fresh`` facts and their ``related`` ones (by fresh id), sorted.

    Args:
        fresh: The chunk's new facts.
        related: For each fresh fact's id, the stored facts of its subject near it.
    """
    out: dict[tuple[str, str], Ending] = {}
    for n in fresh:
        if not n.subject:
            continue
        pool = {k.id: k for k in related.get(n.id, ())}
        pool.update({k.id: k for k in fresh})
        for c in pool.values():
            if c.id == n.id or c.subject != n.subject or c.valid_from == n.valid_from:
                continue
            newer, older = (n, c) if c.valid_from < n.valid_from else (c, n)
            if (newer.id, older.id) in out:
                continue
            old = CurrentFact(older.id, older.text, older.valid_from)
            for e in ends(NewFact(newer.text, newer.subject, newer.valid_from), [old]):
                out[newer.id, older.id] = Ending(newer.id, older.id, e.reason, newer.valid_from)
    return [out[k] for k in sorted(out)]


def ends_one(new: Known, old: Known) -> bool:
    """Whether ``new`` ends ``old`` by rule (a near-duplicate that changes a value is not
    merged into the fact it ends)."""
    if not new.subject or new.subject != old.subject:
        return False
    draft = NewFact(new.text, new.subject, new.valid_from)
    return bool(ends(draft, [CurrentFact(old.id, old.text, min(old.valid_from, new.valid_from))]))
