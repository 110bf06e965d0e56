"""``python -m benchmarks paired RANKS A B``: two retrieval runs compared question by question.

Per LoCoMo category it prints how many questions gained or lost, the mean difference, and a
paired bootstrap interval for it.

RANKS is the file ``python -m benchmarks locomo --ranks PATH`` writes. (``--b-ranks`` reads B from
a second such file, such as a run with another embedder, matched question by question.) For each
question it holds the category, the evidence turns and, for every asked mode (``gaama``) or variant
(``gaama:off``), each evidence turn's rank in the ranked list (null past its end) and whether the
packed memory covers it. A and B name two of those keys. Per question, R@k is the share of its
evidence turns ranked at most k, and R@budget is the share the packed memory covers, as
:mod:`benchmarks.metrics` defines them. Their means are the ``make bench-locomo`` figures.

The interval resamples the category's questions with replacement, keeping each question's pair
together. It reports the 2.5th and 97.5th percentiles of the mean difference B − A (a fixed seed,
so a run can be repeated). In a category of a few questions one evidence turn moves the mean by
a lot, and the interval shows how much a verdict of "this category fell" can rest on.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.metrics import recall
from gaama.errors import ValidationError

if TYPE_CHECKING:
    from benchmarks import SubParsers

_QUESTION_KEYS = {"conversation", "question", "category", "evidence"}


def question_recall(entry: Mapping[str, Any], key: str, k: int | None) -> float:
    """One question's R@k under ``key`` (``k`` None: the packed memory's coverage), by
    :func:`benchmarks.metrics.recall` over the evidence turns the run covered."""
    evidence, result = entry["evidence"], entry[key]
    if k is None:
        covered = {turn for turn in evidence if result["memory"].get(turn)}
    else:
        ranks = result["rank"]
        covered = {turn for turn in evidence if (r := ranks.get(turn)) is not None and r <= k}
    return recall(covered, evidence)


def bootstrap_interval(
    a: np.ndarray, b: np.ndarray, resamples: int, rng: np.random.Generator
) -> tuple[float, float]:
    """2.5th and 97.5th percentiles of the mean of ``b − a`` over paired bootstrap resamples."""
    diff = b - a
    picks = rng.integers(0, diff.size, size=(resamples, diff.size))
    low, high = np.percentile(diff[picks].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


@dataclass(frozen=True, slots=True)
class Row:
    """One category and metric: question count, both means, the interval of B − A, and how
    many questions rose and fell."""

    category: int | None
    metric: str
    questions: int
    a: float
    b: float
    low: float
    high: float
    gained: int
    lost: int


def compare(
    entries: Sequence[Mapping[str, Any]], a: str, b: str, k: int = 10, resamples: int = 10_000
) -> list[Row]:
    """Rows for every category (None: all questions) and for R@k and R@budget.

    Raises:
        ValidationError: ``a`` or ``b`` is not in every entry, or ``k`` is past the ranks held.
    """
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and e.keys() >= _QUESTION_KEYS for e in entries
    ):
        raise ValidationError(
            "not a ranks file: expected a list of questions, each with "
            f"{', '.join(sorted(_QUESTION_KEYS))} (python -m benchmarks locomo --ranks PATH)"
        )
    if not entries:
        raise ValidationError("the ranks file holds no questions")
    for key in (a, b):
        if any(key not in e for e in entries):
            held = sorted({name for e in entries for name in e} - _QUESTION_KEYS)
            raise ValidationError(f"{key!r} is not asked in every question; held: {held}")
    if k < 1:
        raise ValidationError(f"k must be at least 1, got {k}")
    rng = np.random.default_rng(0)
    rows = []
    for category in [None, *sorted({e["category"] for e in entries})]:
        chosen = [e for e in entries if category is None or e["category"] == category]
        for metric, cut in ((f"R@{k}", k), ("R@budget", None)):
            va = np.array([question_recall(e, a, cut) for e in chosen])
            vb = np.array([question_recall(e, b, cut) for e in chosen])
            low, high = bootstrap_interval(va, vb, resamples, rng)
            rows.append(
                Row(
                    category,
                    metric,
                    len(chosen),
                    float(va.mean()),
                    float(vb.mean()),
                    low,
                    high,
                    int((vb > va).sum()),
                    int((vb < va).sum()),
                )
            )
    return rows


def table(rows: Sequence[Row], a: str, b: str) -> str:
    lines = [
        f"B = {b} against A = {a}: means over questions, B − A with its 95 % paired bootstrap "
        "interval, and the questions whose figure rose / fell",
        "",
        "| category | questions | metric | A | B | B − A | 95 % interval | rose / fell |",
        "|---|---:|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        name = "all" if r.category is None else str(r.category)
        lines.append(
            f"| {name} | {r.questions} | {r.metric} | {r.a:.3f} | {r.b:.3f} | {r.b - r.a:+.3f} "
            f"| [{r.low:+.3f}, {r.high:+.3f}] | {r.gained} / {r.lost} |"
        )
    return "\n".join(lines)


def _read(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValidationError(f"cannot read the ranks file {path}: {exc}") from exc


def merge(
    entries: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]], key: str, label: str
) -> list[dict[str, Any]]:
    """``entries`` with ``other``'s run ``key`` added as ``label``, question by question (matched
    by conversation and question; both files must hold the same questions and evidence)."""
    if not isinstance(other, list) or not all(isinstance(e, dict) for e in other):
        raise ValidationError("not a ranks file: expected a list of questions")

    def ident(e: Mapping[str, Any]) -> tuple[str, str]:
        return (str(e.get("conversation")), str(e.get("question")))

    theirs = {ident(e): e for e in other}
    if len(theirs) != len(other) or {ident(e) for e in entries} != set(theirs):
        raise ValidationError("the two ranks files do not hold the same questions")
    out = []
    for e in entries:
        o = theirs[ident(e)]
        if sorted(o["evidence"]) != sorted(e["evidence"]) or key not in o:
            why = "its evidence differs" if key in o else f"{key!r} is not asked"
            raise ValidationError(f"question {e['question']!r}: {why} in the second file")
        out.append({**e, label: o[key]})
    return out


def _cli(args: argparse.Namespace) -> int:
    entries, b = _read(args.ranks), args.b
    if args.b_ranks is not None:
        b = f"{args.b} ({args.b_ranks})"
        entries = merge(entries, _read(args.b_ranks), args.b, b)
    rows = compare(entries, args.a, b, args.k, args.resamples)
    print(table(rows, args.a, b))
    return 0


def register(sub: SubParsers) -> None:
    """Add ``paired`` to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "paired",
        help="two runs of a --ranks file compared question by question, per category",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("ranks", help="the file `python -m benchmarks locomo --ranks PATH` wrote")
    p.add_argument("a", help="the run compared against, e.g. gaama:off")
    p.add_argument("b", help="the run compared, e.g. gaama")
    p.add_argument(
        "--b-ranks",
        metavar="PATH",
        help="read B from this ranks file instead (another run on the same questions)",
    )
    p.add_argument("--k", type=int, default=10, help="R@k besides R@budget (ranks hold the top 20)")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    p.set_defaults(func=_cli)
