"""Full-text scores computed from one tenant's own documents (docs/architecture.md, "Lexical
channel").

The Query Engine's BM25 scorers read index-wide statistics: how many documents hold a term and
the average document length, over every tenant's nodes. Another tenant's writes would then move
this tenant's scores — a ranking side channel across tenants, and two searches of one query
that differ while others write. Here every statistic is the search scope's own:

1. counts, in one round trip: the scope's documents ``N`` and, per term, those holding it
   ``df`` (the index's own tokenizer and stemming; ``LIMIT 0 0`` reads no document);
2. candidates: the ``pool`` documents of the scope with the highest ``max_t idf_t · tf_t`` —
   the ``DISMAX`` scorer reads nothing but the document's term frequencies, each term weighted
   by its tenant-local idf (ties in the index's insertion order, the tenant's own);
3. each candidate's frequency of each term (``DISMAX`` of a one-term query restricted to the
   candidates with ``INKEYS``), in one round trip; a candidate's length is its words.

Then BM25 over the candidates: ``Σ_t idf_t · tf·(K1 + 1) / (tf + K1·(1 − B + B·len/avg))``
with ``idf_t = ln(1 + (N − df + ½) / (df + ½))`` and ``avg`` the candidates' mean length.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from gaama.store.codecs import as_text
from gaama.store.index_layout import LEXICAL_FIELD

#: BM25's term-frequency saturation and length normalisation (the usual values).
K1 = 1.2
B = 0.75
#: Candidates scored per result asked for (step 2): a document matching several terms can rank
#: below documents of the single rarest term there, and above them once every term counts.
POOL_FACTOR = 3
_WORDS = re.compile(r"[^\W_]+")

#: Runs ``FT.SEARCH`` tails where the tenant's nodes are: one list of replies per tail (two
#: replies while the tenant's cluster slot moves between primaries).
Run = Callable[[list[list[Any]]], Awaitable[list[list[Any]]]]


def idf(n: int, df: int) -> float:
    """BM25's inverse document frequency of a term held by ``df`` of ``n`` documents (> 0)."""
    df = min(max(df, 0), max(n, 0))
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def bm25(
    freqs: Mapping[str, Mapping[str, float]],
    lengths: Mapping[str, int],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """BM25 of every document of ``lengths`` given each term's ``freqs`` (term: doc: tf) and
    ``weights`` (term: idf); lengths are normalised by their own mean."""
    if not lengths:
        return {}
    avg = sum(lengths.values()) / len(lengths) or 1.0
    out = dict.fromkeys(lengths, 0.0)
    for term, per_doc in freqs.items():
        w = weights.get(term, 0.0)
        for doc, tf in per_doc.items():
            if doc in out and tf > 0:
                norm = K1 * (1.0 - B + B * max(lengths[doc], 1) / avg)
                out[doc] += w * tf * (K1 + 1.0) / (tf + norm)
    return out


def length(text: str) -> int:
    """A document's length: its runs of letters and digits."""
    return len(_WORDS.findall(text))


def total(reply: Any) -> int:
    """The match count of an ``FT.SEARCH`` reply (RESP2 ``[total, ...]`` or a RESP3 map)."""
    if isinstance(reply, dict):
        return int(reply.get(b"total_results") or reply.get("total_results") or 0)
    return int(reply[0])


def scores(reply: Any) -> dict[str, float]:
    """key: score of an ``FT.SEARCH ... WITHSCORES NOCONTENT`` reply."""
    if isinstance(reply, dict):
        rows = reply.get(b"results") or reply.get("results") or []
        out = {}
        for row in rows:
            row = {as_text(k): v for k, v in row.items()}
            out[as_text(row["id"])] = float(row.get("score") or 0.0)
        return out
    return {as_text(reply[i]): float(reply[i + 1]) for i in range(1, len(reply) - 1, 2)}


def _weighted(words: Sequence[str], weights: Sequence[float]) -> str:
    alts = [f"{w}=>{{$weight:{x:.6f}}}" for w, x in zip(words, weights, strict=True)]
    return f"@{LEXICAL_FIELD}:({'|'.join(alts)})"


async def search(
    run: Run,
    flt: str,
    words: Sequence[str],
    k: int,
    returned: Sequence[str],
    parse: Callable[[Any], list[tuple[str, dict[str, Any], float]]],
    load_text: Callable[[list[tuple[str, dict[str, Any], float]]], Awaitable[list[str]]],
) -> list[tuple[str, dict[str, Any], float]]:
    """The ``k`` documents of filter ``flt`` best matching any of the escaped ``words`` by
    tenant-local BM25 (module docstring): (key, ``returned`` fields as read, score), best first,
    ties by key. ``parse`` reads a reply's (key, fields, score) rows; ``load_text`` gives the
    rows' texts (from the rows, or from the hashes where the search returns no fields)."""
    counted = await run(
        [
            [f"({flt})", "LIMIT", 0, 0, "DIALECT", 2],
            *([f"({flt}) @{LEXICAL_FIELD}:({w})", "LIMIT", 0, 0, "DIALECT", 2] for w in words),
        ]
    )
    n, *dfs = [sum(total(r) for r in replies) for replies in counted]
    present = [(w, idf(n, df)) for w, df in zip(words, dfs, strict=True) if df > 0]
    if not present:
        return []
    weights = dict(present)
    pool = max(k, 1) * POOL_FACTOR
    query = f"({flt}) {_weighted(list(weights), list(weights.values()))}"
    tail: list[Any] = [query, "WITHSCORES", "SCORER", "DISMAX"]
    tail += ["RETURN", len(returned), *returned, "LIMIT", 0, pool, "DIALECT", 2]
    (replies,) = await run([tail])
    rows: dict[str, tuple[str, dict[str, Any], float]] = {}
    for reply in replies:
        for row in parse(reply):
            rows.setdefault(row[0], row)
    # Two replies while the slot moves: the pool best of both, as one index would give them.
    found = sorted(rows.values(), key=lambda r: (-r[2], r[0]))[:pool]
    if not found:
        return []
    keys = [key for key, _, _ in found]
    per_term = await run(
        [
            [f"@{LEXICAL_FIELD}:({w})", "WITHSCORES", "SCORER", "DISMAX", "NOCONTENT"]
            + ["INKEYS", len(keys), *keys, "LIMIT", 0, len(keys), "DIALECT", 2]
            for w in weights
        ]
    )
    freqs = {
        w: {key: tf for reply in replies for key, tf in scores(reply).items()}
        for w, replies in zip(weights, per_term, strict=True)
    }
    lengths = {key: length(text) for key, text in zip(keys, await load_text(found), strict=True)}
    ranked = bm25(freqs, lengths, weights)
    out = [(key, row, ranked[key]) for key, row, _ in found]
    out.sort(key=lambda r: (-r[2], r[0]))
    return out[:k]
