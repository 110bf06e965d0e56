"""What replaced a superseded candidate ranks at least as high as it would have
(gaama.retrieval.current.inherit), read along the chain to what holds."""

from __future__ import annotations

from gaama.model import NodeKind
from gaama.retrieval.current import inherit, prefer_current, successors_wanted
from gaama.retrieval.pack import Item
from gaama.store.validity import Validity


def _fact(
    node: str, score: float, ended_by: str = "", since: float = 0.0, reason: str = "update"
) -> Item:
    validity = Validity(
        valid_from=since,
        valid_to=10.0 if ended_by else None,
        superseded_by=ended_by,
        superseded_reason=reason if ended_by else "",
    )
    return Item(
        node, NodeKind.FACT, text=node, time=since, score=score, sim=score, validity=validity
    )


def test_the_successor_of_a_superseded_candidate_takes_its_rank() -> None:
    old = _fact("old", 0.9, ended_by="new")
    other = _fact("other", 0.5)
    new = _fact("new", 0.2, since=10.0)
    ranked = prefer_current(inherit([old, other, new], {}, None), None, 0.05, False)
    assert [i.id for i in ranked] == ["new", "other", "old"]


def test_a_successor_the_search_missed_is_read_in_along_the_chain() -> None:
    first = _fact("first", 0.9, ended_by="second")
    assert successors_wanted([first], {"first"}, None) == ["second"]
    second = _fact("second", 0.0, ended_by="third", since=10.0)
    third = _fact("third", 0.0, since=20.0)
    out = inherit([first], {"second": second, "third": third}, None)
    assert [i.id for i in prefer_current(out, None, 0.05, False)] == ["third", "first"]


def test_as_of_passes_nothing_to_what_came_later() -> None:
    old = _fact("old", 0.9, ended_by="new")
    new = _fact("new", 0.1, since=10.0)
    out = inherit([old, new], {}, 5.0)  # at 5 the old fact held
    assert {i.id: i.score for i in out} == {"old": 0.9, "new": 0.1}


def test_a_stop_takes_no_rank() -> None:
    old = _fact("old", 0.9, ended_by="died", reason="negation")
    died = _fact("died", 0.2, since=10.0)
    assert successors_wanted([old], {"old"}, None) == []
    assert {i.id: i.score for i in inherit([old, died], {}, None)} == {"old": 0.9, "died": 0.2}
