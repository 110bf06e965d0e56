"""The lexical channel of retrieval: the query's words matched against node text (BM25), fused
with the KNN similarity (docs/architecture.md, "Lexical channel").

A sentence embedding blurs what conversational questions hinge on — names, rare words, numbers
— while a full-text match keeps them. Both channels rank the same nodes; the fusion here turns
the two rankings into one relevance per node, which seeds the walk and replaces plain similarity
in the score. Two fusions are offered (the ``fusion`` retrieval setting):

- ``score``: ``sim / max(sim) + w_lex · bm25 / max(bm25)``, each over the candidates: a strong
  full-text match lifts a node as much as a strong semantic one, and how much stronger one match
  is than another is kept;
- ``rrf`` (reciprocal rank): ``1 / (RRF_K + rank_sim) + w_lex / (RRF_K + rank_bm25)``, which
  keeps only each channel's order;
- ``cover``: ``sim / max(sim) + w_lex · bm25``, the full-text score as the store gives it — the
  share of the query's term weight the node matches (:mod:`gaama.store.fulltext`), not scaled to
  the best match: a node matching only the query's common words (a speaker's name) gains little
  even when nothing matches better.

Under ``score`` and ``cover`` a node's full-text credit may be scaled by how far its meaning
agrees with the query (:func:`corroboration`), and :func:`pair_share` credits the query's
ordered word pairs a text holds: rules measured against the channel's known limit and left off
(docs/benchmarks.md, "Category 3 at R@10: general rules measured (fifth pass)").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Literal

from gaama.extract.vocabulary import FUNCTION_WORDS, words_of

Fusion = Literal["score", "rrf", "cover"]
#: The usual reciprocal-rank constant: a rank's weight falls slowly over the first tens.
RRF_K = 60
#: Most query words sent to the full-text search (a long query keeps its first ones).
MAX_TERMS = 32
# Words: runs of letters and digits (an underscore or any punctuation splits them, as it does
# in the full-text index's own tokenizer).
_WORD = re.compile(r"[^\W_]+")
# Question words and auxiliaries beyond the function words: every question has them, so they
# match everything and tell nothing.
_QUESTION_WORDS = words_of(
    """
    did does do was were is are has have had can could would should will may might
    what when where which who whom whose why how kind sort
    """
)


def query_terms(query: str) -> list[str]:
    """The words of ``query`` worth matching: lower-cased runs of letters and digits, without
    function and question words and single letters, each once, in order, at most
    :data:`MAX_TERMS`. Punctuation and query-syntax characters never reach the search; a query
    of nothing else has no terms (the lexical channel then finds nothing)."""
    out: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if len(word) < 2 and not word.isdigit():
            continue
        if word in FUNCTION_WORDS or word in _QUESTION_WORDS:
            continue
        out[word] = None
        if len(out) == MAX_TERMS:
            break
    return list(out)


def _stem(word: str) -> str:
    """A word without a plural's final "s" (a light stand-in for the index's stemming)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def content_words(text: str) -> list[str]:
    """The words of ``text`` as :func:`query_terms` keeps them, in order and with repeats,
    lightly stemmed: the sequence word pairs are read from."""
    return [
        _stem(w)
        for w in _WORD.findall(text.lower())
        if (len(w) > 1 or w.isdigit()) and w not in FUNCTION_WORDS and w not in _QUESTION_WORDS
    ]


def query_pairs(query: str) -> frozenset[tuple[str, str]]:
    """The query's ordered pairs of neighbouring content words (function and question words
    between them skipped): the units a multi-word name or phrase of the query is made of."""
    words = content_words(query)[: MAX_TERMS + 1]
    return frozenset((a, b) for a, b in pairwise(words) if a != b)


def pair_share(pairs: frozenset[tuple[str, str]], text: str) -> float:
    """The share of ``pairs`` that ``text`` holds as neighbouring content words, in order."""
    if not pairs:
        return 0.0
    words = content_words(text)
    held = pairs.intersection(pairwise(words))
    return len(held) / len(pairs)


def _ranks(values: Mapping[str, float]) -> dict[str, int]:
    """1-based rank of each key by value, highest first (ties by key, so it is deterministic)."""
    order = sorted(values, key=lambda n: (-values[n], n))
    return {n: r for r, n in enumerate(order, 1)}


def fuse(
    sims: Mapping[str, float],
    lex: Mapping[str, float],
    w_lex: float,
    fusion: Fusion,
    gate: float = 0.0,
    floor: float = 0.0,
) -> dict[str, float]:
    """The relevance of every node of ``sims`` (cosine similarity) given full-text scores
    ``lex`` (nodes without a match score nothing there): see the module docstring. Non-negative;
    with no full-text match or ``w_lex == 0``, proportional to the (clipped) similarity under
    ``score`` fusion and to its reciprocal rank under ``rrf``."""
    if fusion == "rrf":
        rank_sim = _ranks(sims)
        rank_lex = _ranks({n: v for n, v in lex.items() if n in sims and v > 0})
        return {
            n: 1.0 / (RRF_K + rank_sim[n])
            + (w_lex / (RRF_K + rank_lex[n]) if n in rank_lex else 0.0)
            for n in sims
        }
    top_sim = max((max(v, 0.0) for v in sims.values()), default=0.0) or 1.0
    top_lex = (
        1.0 if fusion == "cover" else max((v for v in lex.values() if v > 0), default=0.0) or 1.0
    )
    if not gate and not floor:
        return {
            n: max(s, 0.0) / top_sim + w_lex * max(lex.get(n, 0.0), 0.0) / top_lex
            for n, s in sims.items()
        }
    out: dict[str, float] = {}
    for n, s in sims.items():
        rel = max(s, 0.0) / top_sim
        credit = w_lex * max(lex.get(n, 0.0), 0.0) / top_lex
        out[n] = rel + (credit * corroboration(rel, gate, floor) if credit else 0.0)
    return out


def corroboration(rel: float, gate: float, floor: float) -> float:
    """How far a node's meaning agrees with the query, as a factor of its lexical credit:
    ``rel ** gate`` times the share of the way ``rel`` (its similarity over the best
    candidate's) has gone from ``floor`` to 1 (1 with both at 0)."""
    factor = rel**gate if gate else 1.0
    if floor:
        factor *= min(max((rel - floor) / (1.0 - floor), 0.0), 1.0)
    return factor
