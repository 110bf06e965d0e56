"""The lexical channel's fusion of similarity and full-text scores (gaama.retrieval.lexical)."""

from __future__ import annotations

import pytest

from gaama.retrieval.lexical import RRF_K, fuse

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
