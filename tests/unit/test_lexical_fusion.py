"""The lexical channel's fusion of similarity and full-text scores (gaama.retrieval.lexical)."""

from __future__ import annotations

import pytest

from gaama.retrieval.lexical import RRF_K, fuse, pair_share, query_pairs

SIMS = {"a": 0.8, "b": 0.6, "c": 0.4, "d": -0.1}
LEX = {"c": 12.0, "b": 3.0}


def test_score_fusion_adds_the_normalised_match() -> None:
    out = fuse(SIMS, LEX, 0.5, "score")
    assert out["a"] == pytest.approx(1.0)
    assert out["b"] == pytest.approx(0.75 + 0.5 * 0.25)
    assert out["c"] == pytest.approx(0.5 + 0.5)
    assert out["d"] == 0.0  # negative similarity clipped, no match


def test_without_matches_or_weight_relevance_follows_similarity() -> None:
    for out in (fuse(SIMS, {}, 0.5, "score"), fuse(SIMS, LEX, 0.0, "score")):
        assert sorted(out, key=lambda n: -out[n]) == ["a", "b", "c", "d"]


def test_rrf_keeps_only_the_orders() -> None:
    out = fuse(SIMS, LEX, 1.0, "rrf")
    assert out["a"] == pytest.approx(1 / (RRF_K + 1))
    assert out["c"] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    assert out["b"] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 2))
    # Scaling a channel's scores changes nothing under rrf.
    assert fuse(SIMS, {n: v * 100 for n, v in LEX.items()}, 1.0, "rrf") == out


def test_cover_fusion_adds_the_match_as_the_store_scores_it() -> None:
    # Full-text scores as shares of the query's term weight: a weak best match stays weak.
    out = fuse(SIMS, {"c": 0.3, "b": 0.1}, 0.5, "cover")
    assert out["c"] == pytest.approx(0.5 + 0.5 * 0.3)
    assert out["b"] == pytest.approx(0.75 + 0.5 * 0.1)
    assert out["a"] == pytest.approx(1.0)
    assert fuse(SIMS, {"c": 0.3}, 0.5, "score")["c"] == pytest.approx(1.0)


def test_corroborated_credit_shrinks_with_the_distance_from_the_best_meaning() -> None:
    lex = {"a": 0.4, "b": 0.4, "c": 0.4}
    out = fuse(SIMS, lex, 0.5, "cover", gate=2.0)
    assert out["a"] == pytest.approx(1.0 + 0.5 * 0.4)  # the best candidate keeps all its credit
    assert out["b"] == pytest.approx(0.75 + 0.5 * 0.4 * 0.75**2)
    assert out["c"] == pytest.approx(0.5 + 0.5 * 0.4 * 0.5**2)
    # Without a gate or floor the credit is as it was.
    assert fuse(SIMS, lex, 0.5, "cover", 0.0, 0.0) == fuse(SIMS, lex, 0.5, "cover")


def test_a_floor_takes_the_credit_of_nodes_far_from_the_best_meaning() -> None:
    lex = {"a": 0.4, "b": 0.4, "c": 0.4, "d": 0.4}
    out = fuse(SIMS, lex, 0.5, "cover", floor=0.5)
    assert out["a"] == pytest.approx(1.0 + 0.5 * 0.4)
    assert out["b"] == pytest.approx(0.75 + 0.5 * 0.4 * 0.5)  # halfway from the floor to 1
    assert out["c"] == pytest.approx(0.5)  # at the floor: no credit
    assert out["d"] == 0.0  # below it (negative similarity): none either


def test_corroboration_applies_to_score_fusion_not_to_rrf() -> None:
    gated = fuse(SIMS, LEX, 0.5, "score", gate=1.0)
    assert gated["c"] == pytest.approx(0.5 + 0.5 * 0.5)
    assert fuse(SIMS, LEX, 1.0, "rrf", gate=1.0, floor=0.5) == fuse(SIMS, LEX, 1.0, "rrf")


def test_query_pairs_are_neighbouring_content_words_in_order() -> None:
    pairs = query_pairs("Did Zoltan's band play at the jazz festivals?")
    assert pairs == {("zoltan", "band"), ("band", "play"), ("play", "jazz"), ("jazz", "festival")}
    assert query_pairs("What was it?") == frozenset()


def test_pair_share_counts_pairs_held_in_order_only() -> None:
    pairs = query_pairs("a jazz festival in the park")  # (jazz, festival), (festival, park)
    assert pair_share(pairs, "Zoltan played a jazz festival.") == 0.5
    assert pair_share(pairs, "A festival of jazz, a jazz park.") == 0.0  # reversed, apart
    assert pair_share(pairs, "Jazz festivals in parks") == 1.0  # plurals, function words skipped
    assert pair_share(frozenset(), "jazz festival") == 0.0
