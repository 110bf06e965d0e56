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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


def _ranks(values: Mapping[str, float]) -> dict[str, int]:
    """1-based rank of each key by value, highest first (ties by key, so it is deterministic)."""
    order = sorted(values, key=lambda n: (-values[n], n))
    return {n: r for r, n in enumerate(order, 1)}


def fuse(
    sims: Mapping[str, float], lex: Mapping[str, float], w_lex: float, fusion: Fusion
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
    return {
        n: max(s, 0.0) / top_sim + w_lex * max(lex.get(n, 0.0), 0.0) / top_lex
        for n, s in sims.items()
    }
