"""Evidence recall for LoCoMo, and the per-category tallies of a benchmark run.

Coverage rule (the same for every mode, so they compare fairly): an episode covers its own turn
id; a fact covers the turn ids of the episodes it was derived from; a reflection covers none
(it is an inference over facts, not a pointer to what was said); concepts are never returned.
Recall of a question = |covered ∩ evidence| / |evidence|, averaged over questions. Over the
packed memory it is reported at the word budget (``R@budget``) and at each token budget of
:data:`TOKEN_BUDGETS` (``R@500t``: the memory packed within 500 tokens of the embedder's
tokenizer), with the mean tokens of the word budget's memory (``tokens``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: The cut-offs of the ranked list that are reported.
KS = (5, 10, 20)
#: The token budgets the memory is also packed within.
TOKEN_BUDGETS = (500, 1000)


def split_evidence(raw: Iterable[str]) -> list[str]:
    """Evidence ids with ``"a;b"`` entries split, whitespace stripped, duplicates dropped."""
    out: dict[str, None] = {}
    for entry in raw:
        for part in str(entry).replace(",", ";").split(";"):
            if part.strip():
                out[part.strip()] = None
    return list(out)


def usable_evidence(raw: Iterable[str], known: Collection[str]) -> list[str]:
    """Evidence ids that name a turn of the conversation (LoCoMo has a few that do not)."""
    return [e for e in split_evidence(raw) if e in known]


def covered(items: Iterable[Collection[str]]) -> set[str]:
    """The union of the turn ids the items cover."""
    out: set[str] = set()
    for turns in items:
        out.update(turns)
    return out


def recall(covered_ids: Collection[str], evidence: Sequence[str]) -> float:
    """Share of ``evidence`` in ``covered_ids``.

    Raises:
        ValueError: ``evidence`` is empty (such a question is skipped, not scored).
    """
    if not evidence:
        raise ValueError("recall of a question without evidence")
    wanted = set(evidence)
    return len(wanted & set(covered_ids)) / len(wanted)


def recall_at(ranked: Sequence[Collection[str]], evidence: Sequence[str], k: int) -> float:
    """Recall over the first ``k`` ranked items, each given as the turn ids it covers."""
    return recall(covered(ranked[:k]), evidence)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0–1) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(slots=True)
class QuestionScore:
    """One question answered by one mode."""

    category: int
    recall_at: dict[int, float]
    recall_budget: float
    words: int
    latency_ms: float
    reward: float | None = None
    correct: bool | None = None
    recall_tokens: dict[int, float] = field(default_factory=dict)  # by token budget
    tokens: int | None = None  # tokens of the word budget's memory


@dataclass(slots=True)
class Tally:
    """Scores of one mode, kept per question so any grouping can be summarised."""

    scores: list[QuestionScore] = field(default_factory=list)

    def add(self, score: QuestionScore) -> None:
        self.scores.append(score)

    def summary(self, category: int | None = None) -> dict[str, float | int | None]:
        """Means over the questions of ``category`` (all when None).

        Returns:
            ``R@k`` for each k in :data:`KS`, ``R@budget``, ``R@<b>t`` for each token budget b
            of :data:`TOKEN_BUDGETS`, ``n``, mean ``words`` and ``tokens``, mean and p50
            ``latency_ms``, and ``reward`` / ``J`` when answers were judged (else None).
        """
        rows = [s for s in self.scores if category is None or s.category == category]
        out: dict[str, float | int | None] = {}
        for k in KS:
            out[f"R@{k}"] = _mean([s.recall_at[k] for s in rows])
        out["R@budget"] = _mean([s.recall_budget for s in rows])
        for b in TOKEN_BUDGETS:
            out[f"R@{b}t"] = _mean([s.recall_tokens[b] for s in rows if b in s.recall_tokens])
        out["n"] = len(rows)
        out["words"] = _mean([float(s.words) for s in rows])
        out["tokens"] = _mean([float(s.tokens) for s in rows if s.tokens is not None])
        lat = [s.latency_ms for s in rows]
        out["latency_ms"] = _mean(lat)
        out["latency_p50_ms"] = percentile(lat, 0.5) if lat else None
        judged = [s for s in rows if s.reward is not None]
        out["reward"] = (
            _mean([s.reward for s in judged if s.reward is not None]) if judged else None
        )
        out["J"] = _mean([1.0 if s.correct else 0.0 for s in judged]) if judged else None
        return out

    def report(self, categories: Iterable[int]) -> dict[str, dict[str, float | int | None]]:
        """``{"overall": …, "cat1": …, …}``."""
        out = {"overall": self.summary()}
        for c in categories:
            out[f"cat{c}"] = self.summary(c)
        return out


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def score_question(
    category: int,
    ranked: Sequence[Collection[str]],
    memory: Sequence[Collection[str]],
    evidence: Sequence[str],
    words: int,
    latency_ms: float,
    by_tokens: Mapping[int, Sequence[Collection[str]]] | None = None,
    tokens: int | None = None,
) -> QuestionScore:
    """Recall at every k of :data:`KS`, over the packed memory and over the memory packed within
    each token budget of ``by_tokens``, for one question."""
    return QuestionScore(
        category=category,
        recall_at={k: recall_at(ranked, evidence, k) for k in KS},
        recall_budget=recall(covered(memory), evidence),
        words=words,
        latency_ms=latency_ms,
        recall_tokens={b: recall(covered(m), evidence) for b, m in (by_tokens or {}).items()},
        tokens=tokens,
    )
