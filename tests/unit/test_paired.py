"""``python -m benchmarks paired``: per-question recall, the paired interval, and the committed
ranks file read back into the benchmark's own figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cli import main
from benchmarks.metrics import recall, recall_at
from benchmarks.paired import compare, merge, question_recall
from gaama.errors import ValidationError

ROOT = Path(__file__).resolve().parents[2]
RANKS = ROOT / "bench-results" / "locomo-cat3-ranks.json"
SUMMARY = ROOT / "bench-results" / "locomo-cat3.json"


def entry(
    category: int, evidence: list[str], **runs: tuple[dict[str, Any], dict[str, bool]]
) -> dict:
    e: dict[str, Any] = {"conversation": "c", "question": "q", "category": category}
    e["evidence"] = evidence
    for name, (rank, memory) in runs.items():
        e[name] = {"rank": rank, "memory": memory}
    return e


def test_question_recall_is_the_metrics_recall() -> None:
    # Ranked items as the benchmark sees them: each covers a set of turns.
    ranked = [{"x"}, {"a"}, {"y"}, {"b"}]
    evidence = ["a", "b", "c", "a"]  # a repeated turn counts once, as in benchmarks.metrics
    rank = {"a": 2, "b": 4, "c": None}
    e = entry(1, evidence, run=(rank, {"a": True, "b": False, "c": True}))
    for k in (1, 2, 3, 4):
        assert question_recall(e, "run", k) == recall_at(ranked, evidence, k)
    assert question_recall(e, "run", None) == recall({"a", "c"}, evidence)


def test_a_run_against_itself_moves_nothing() -> None:
    e = entry(3, ["a"], a=({"a": 4}, {"a": True}), b=({"a": 4}, {"a": True}))
    for row in compare([e, e], "a", "b"):
        assert (row.a, row.b, row.low, row.high, row.gained, row.lost) == (
            row.a,
            row.a,
            0.0,
            0.0,
            0,
            0,
        )


def test_a_run_better_on_every_question_has_an_interval_above_zero() -> None:
    entries = [
        entry(1, ["a", "b"], a=({"a": 15, "b": None}, {}), b=({"a": 3, "b": 9}, {"a": True}))
        for _ in range(12)
    ]
    rows = {(r.category, r.metric): r for r in compare(entries, "a", "b", k=10)}
    at10 = rows[(1, "R@10")]
    assert (at10.a, at10.b, at10.gained, at10.lost) == (0.0, 1.0, 12, 0)
    assert at10.low == at10.high == 1.0
    budget = rows[(None, "R@budget")]
    assert (budget.a, budget.b, budget.low > 0) == (0.0, 0.5, True)


def test_the_committed_ranks_file_gives_the_benchmarks_figures() -> None:
    """The means are the figures `python -m benchmarks locomo` printed for the same run."""
    entries = json.loads(RANKS.read_text())
    modes = json.loads(SUMMARY.read_text())["modes"]
    for a, b in (("gaama:off", "gaama"), ("semantic", "semantic:cover-0.2")):
        for row in compare(entries, a, b, k=10, resamples=200):
            category = "overall" if row.category is None else f"cat{row.category}"
            assert row.a == pytest.approx(modes[a][category][row.metric], abs=1e-12)
            assert row.b == pytest.approx(modes[b][category][row.metric], abs=1e-12)
            assert row.low <= row.b - row.a <= row.high or row.low == row.high


def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    e = entry(1, ["a"], gaama=({"a": 1}, {"a": True}))
    with pytest.raises(ValidationError, match=r"'gaama:off' is not asked.*'gaama'"):
        compare([e], "gaama:off", "gaama")
    with pytest.raises(ValidationError, match="not a ranks file"):
        compare({"modes": {}}, "a", "b")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="no questions"):
        compare([], "a", "b")
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"modes": {}}))
    assert main(["paired", str(summary), "a", "b"]) == 2
    assert "not a ranks file" in capsys.readouterr().err
    assert main(["paired", str(tmp_path / "missing.json"), "a", "b"]) == 2
    assert "cannot read the ranks file" in capsys.readouterr().err


def test_b_from_a_second_file_is_matched_question_by_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = [
        {**entry(1, ["a"], gaama=({"a": 3}, {"a": True})), "question": "q1"},
        {**entry(2, ["b", "c"], gaama=({"b": 12, "c": None}, {"b": True})), "question": "q2"},
    ]
    # The other run lists the questions in another order; q2 gains "c" at rank 4.
    second = [
        {**entry(2, ["c", "b"], gaama=({"b": 12, "c": 4}, {"b": True})), "question": "q2"},
        {**entry(1, ["a"], gaama=({"a": 3}, {"a": True})), "question": "q1"},
    ]
    rows = {
        (r.category, r.metric): r for r in compare(merge(first, second, "gaama", "B"), "gaama", "B")
    }
    assert (rows[(2, "R@10")].a, rows[(2, "R@10")].b, rows[(2, "R@10")].gained) == (0.0, 0.5, 1)
    assert rows[(1, "R@10")].b == rows[(1, "R@10")].a == 1.0
    a_path, b_path = tmp_path / "a.json", tmp_path / "b.json"
    a_path.write_text(json.dumps(first))
    b_path.write_text(json.dumps(second))
    assert main(["paired", str(a_path), "gaama", "gaama", "--b-ranks", str(b_path)]) == 0
    assert f"B = gaama ({b_path})" in capsys.readouterr().out
    # Not the same questions, or not the same evidence: refused with the reason.
    with pytest.raises(ValidationError, match="do not hold the same questions"):
        merge(first, second[:1], "gaama", "B")
    changed = [{**second[0], "evidence": ["b"]}, second[1]]
    with pytest.raises(ValidationError, match="'q2': its evidence differs"):
        merge(first, changed, "gaama", "B")
    with pytest.raises(ValidationError, match="'semantic' is not asked"):
        merge(first, second, "semantic", "B")
