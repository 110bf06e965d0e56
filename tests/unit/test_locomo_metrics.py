"""LoCoMo recall metrics on hand-made cases."""

from __future__ import annotations

import math

import pytest

from benchmarks.metrics import (
    KS,
    QuestionScore,
    Tally,
    covered,
    percentile,
    recall,
    recall_at,
    score_question,
    split_evidence,
    usable_evidence,
)


def test_split_evidence_splits_strips_and_dedupes() -> None:
    assert split_evidence(["D8:6; D9:17", "D1:3", " D1:3 ", ""]) == ["D8:6", "D9:17", "D1:3"]


def test_usable_evidence_drops_ids_missing_from_the_conversation() -> None:
    known = {"D1:1", "D1:2", "D2:1"}
    assert usable_evidence(["D1:2;D7:99", "D2:1"], known) == ["D1:2", "D2:1"]
    assert usable_evidence(["D30:1"], known) == []


def test_recall_is_the_covered_share_of_the_evidence() -> None:
    assert recall({"a", "b", "x"}, ["a", "b", "c", "d"]) == 0.5
    assert recall(set(), ["a"]) == 0.0
    assert recall({"a"}, ["a", "a"]) == 1.0  # evidence is a set
    with pytest.raises(ValueError):
        recall({"a"}, [])


def test_recall_at_counts_only_the_first_k_items() -> None:
    # episode D1, a fact from D2+D3, a reflection (covers none), episode D4
    ranked = [frozenset({"D1"}), frozenset({"D2", "D3"}), frozenset(), frozenset({"D4"})]
    ev = ["D1", "D3", "D4"]
    assert recall_at(ranked, ev, 1) == pytest.approx(1 / 3)
    assert recall_at(ranked, ev, 2) == pytest.approx(2 / 3)
    assert recall_at(ranked, ev, 3) == pytest.approx(2 / 3)
    assert recall_at(ranked, ev, 4) == 1.0
    assert recall_at(ranked, ev, 100) == 1.0
    assert covered(ranked) == {"D1", "D2", "D3", "D4"}


def test_score_question_and_tally_average_per_category() -> None:
    t = Tally()
    ranked = [frozenset({"D1"})] * 10 + [frozenset({"D2"})] * 20
    t.add(score_question(1, ranked, [frozenset({"D2"})], ["D1", "D2"], 900, 10.0))
    t.add(score_question(2, [], [frozenset({"D9"})], ["D9"], 100, 30.0))
    t.add(QuestionScore(2, dict.fromkeys(KS, 1.0), 1.0, 200, 20.0, reward=0.5, correct=True))
    cat1 = t.summary(1)
    assert cat1["R@5"] == 0.5 and cat1["R@10"] == 0.5 and cat1["R@20"] == 1.0
    assert cat1["R@budget"] == 0.5 and cat1["n"] == 1
    cat2 = t.summary(2)
    assert cat2["R@5"] == 0.5 and cat2["R@budget"] == 1.0
    assert cat2["words"] == 150 and cat2["latency_ms"] == 25.0
    assert cat2["reward"] == 0.5 and cat2["J"] == 1.0  # only the judged question counts
    overall = t.summary()
    assert overall["n"] == 3 and overall["latency_p50_ms"] == 20.0
    assert overall["R@5"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    rep = t.report([1, 2, 3])
    assert set(rep) == {"overall", "cat1", "cat2", "cat3"}
    assert rep["cat3"]["n"] == 0 and rep["cat3"]["R@10"] is None
    assert t.summary(1)["reward"] is None


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([5.0], 0.5) == 5.0
    assert math.isnan(percentile([], 0.5))


def test_token_budget_recall_and_tokens_per_query() -> None:
    t = Tally()
    memory = [frozenset({"D1"})]
    t.add(score_question(1, [], memory, ["D1", "D2"], 90, 1.0, {500: memory, 1000: []}, 120))
    t.add(score_question(1, [], memory, ["D1"], 30, 1.0, {500: memory, 1000: memory}, 40))
    s = t.summary()
    assert s["R@500t"] == pytest.approx(0.75) and s["R@1000t"] == pytest.approx(0.5)
    assert s["tokens"] == 80 and s["words"] == 60
    # Without token budgets the columns are empty, not zero.
    bare = Tally()
    bare.add(score_question(2, [], memory, ["D1"], 10, 1.0))
    assert bare.summary()["R@500t"] is None and bare.summary()["tokens"] is None
