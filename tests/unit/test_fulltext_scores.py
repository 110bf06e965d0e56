"""Tenant-local BM25 (gaama.store.fulltext): the idf and the score from counts and frequencies,
the counts kept per version; the index options read from FT.INFO."""

from __future__ import annotations

import math

import pytest

from gaama.store.fulltext import K1, B, Counts, bm25, idf, length, partial, scores, total
from gaama.store.index_layout import INDEX_OPTIONS, has_index_options


def test_idf_falls_with_the_documents_holding_the_term_and_stays_positive() -> None:
    assert idf(100, 1) > idf(100, 10) > idf(100, 100) > 0
    assert idf(100, 1) == pytest.approx(math.log(1 + 99.5 / 1.5))
    assert idf(3, 7) == idf(3, 3)  # a count beyond the scope's size is the scope's size


def test_bm25_sums_terms_saturates_frequency_and_normalises_length() -> None:
    weights = {"kiln": 2.0, "clay": 0.5}
    freqs = {"kiln": {"a": 1.0, "b": 1.0, "c": 3.0}, "clay": {"b": 1.0}}
    got = bm25(freqs, {"a": 4, "b": 4, "c": 4, "d": 4}, weights)
    assert got["b"] > got["a"] > got["d"] == 0.0  # a second term adds
    assert got["a"] == pytest.approx(2.0 * (K1 + 1) / (1 + K1))  # mean length: no change
    assert got["c"] < 3 * got["a"]  # frequency saturates
    short, long_ = bm25({"kiln": {"s": 1.0, "l": 1.0}}, {"s": 2, "l": 6}, {"kiln": 1.0}).values()
    assert short > long_
    assert short == pytest.approx((K1 + 1) / (1 + K1 * (1 - B + B * 2 / 4)))


def test_candidates_are_chosen_by_the_sum_over_terms_without_lengths() -> None:
    got = partial(
        {"kiln": {"a": 1.0, "b": 1.0}, "clay": {"b": 2.0, "c": 0.0}}, {"kiln": 2.0, "clay": 1.0}
    )
    assert got == pytest.approx({"a": 2.0, "b": 2.0 + 1.0 * 2 * (K1 + 1) / (2 + K1)})


def test_replies_and_lengths_are_read() -> None:
    assert total([3, b"k1", b"2", b"k2", b"1"]) == 3
    assert scores([2, b"k1", b"2", b"k2", b"1"]) == {"k1": 2.0, "k2": 1.0}
    assert total({"total_results": 4, "results": []}) == 4
    assert scores({"results": [{"id": "k", "score": 1.5}]}) == {"k": 1.5}
    assert length("[2023-05-08] Mona: I'm at the kiln_room!") == 10


def test_counts_are_kept_under_their_version_only() -> None:
    counts = Counts(scopes=2)
    first = counts.scope("@t:{a}", ("v1", "3"))
    first.n = 10
    first.terms["kiln"] = (2, {"k1": 1.0})
    assert counts.scope("@t:{a}", ("v1", "3")) is first
    again = counts.scope("@t:{a}", ("v1", "4"))  # an episode appended: read again
    assert again is not first and again.n is None and not again.terms
    assert counts.scope("@t:{a}", ("v1", "3")) is not first  # the old version is gone
    unversioned = counts.scope("@t:{b}", None)
    unversioned.n = 5
    assert counts.scope("@t:{b}", None).n is None  # no version: nothing kept
    b, c = counts.scope("@t:{b}", "x"), counts.scope("@t:{c}", "y")
    b.n = c.n = 1
    counts.scope("@t:{d}", "z")  # the scope searched longest ago makes room
    assert counts.scope("@t:{c}", "y") is c
    assert counts.scope("@t:{b}", "x") is not b


def test_index_options_are_read_from_either_protocol() -> None:
    both = [o.encode() for o in INDEX_OPTIONS] + [b"NOHL"]
    assert has_index_options([b"index_name", b"i", b"index_options", both, b"attributes", []])
    assert has_index_options({b"index_name": b"i", b"index_options": both})
    assert not has_index_options([b"index_name", b"i", b"index_options", [], b"attributes", []])
    assert not has_index_options({b"index_name": b"i", b"index_options": [b"NOOFFSETS"]})


def test_counts_keep_at_most_their_terms_in_all() -> None:
    counts = Counts(terms=3)
    a = counts.scope("@t:{a}", "v")
    a.terms.update({"x": (1, {}), "y": (1, {})})
    b = counts.scope("@t:{b}", "v")
    b.terms.update({"x": (1, {}), "y": (1, {})})
    counts.trim()  # 4 terms: the scope searched longest ago goes
    assert counts.scope("@t:{b}", "v") is b and counts.scope("@t:{a}", "v") is not a
    alone = Counts(terms=3)
    c = alone.scope("@t:{c}", "v")
    c.terms.update({"x": (1, {}), "y": (1, {}), "z": (1, {}), "w": (1, {})})
    alone.trim()  # one scope over the bound on its own keeps its counts of nothing
    assert alone.scope("@t:{c}", "v") is c and not c.terms
