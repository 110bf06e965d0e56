"""Full-text scores computed from one tenant's own documents (docs/architecture.md, "Lexical
channel").

The Query Engine's BM25 scorers read index-wide statistics: how many documents hold a term and
the average document length, over every tenant's nodes. Another tenant's writes would then move
this tenant's scores — a ranking side channel across tenants, and two searches of one query
that differ while others write. Here every statistic is the search scope's own, and the Query
Engine is asked only for what one document holds (the ``DISMAX`` scorer with the scope filter
weighted 0 scores a one-term query by the term's frequency in the document, nothing else):

1. one round trip: the scope's document count ``N`` and, per term, the count ``df`` of the
   scope's documents holding it (the index's tokenizer and stemming) with the ``PER_TERM`` of
   them where it is most frequent (ties in the index's order, the tenant's own insertion
   order) — every one of them when ``df ≤ PER_TERM``, which is every term rare enough to weigh;
2. each document found scores ``Σ_t idf_t · tf·(K1 + 1)/(tf + K1)`` over the terms it was found
   with, ``idf_t = ln(1 + (N − df + ½)/(df + ½))``; the ``pool`` best are the candidates;
3. one round trip: the candidates' texts (a length is a text's words) and their frequency of
   each term whose list was cut (both restricted to the candidates with ``INKEYS``);
4. BM25 over the candidates, ``Σ_t idf_t · tf·(K1 + 1)/(tf + K1·(1 − B + B·len/avg))``,
   ``avg`` the candidates' mean length.

Step 1 costs time in proportion to the scope's documents (``N`` counts every one of them, and a
term's count every document holding it). Its results are kept per scope and term
(:class:`Counts`) while the tenant's documents stay as they are: every write of the tenant's
nodes changes its *version* (``Keys.text_version`` and the ingest counter, set in the same
atomic write, or right after a forget's removal), which the caller reads before the counts and
passes in. Scores stay exact: a count is only reused under
the version it was read at, and a version is never read before the write that made it.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gaama.store.codecs import as_text
from gaama.store.index_layout import LEXICAL_FIELD, documents

#: BM25's term-frequency saturation and length normalisation (the usual values).
K1 = 1.2
B = 0.75
#: Documents read per term in step 1: a term held by more is common in the scope (its idf is
#: at most ln(1 + N / PER_TERM)), and the candidates' frequencies of it are read in step 3.
PER_TERM = 200
#: Candidates scored exactly per result asked for.
POOL_FACTOR = 5
_WORDS = re.compile(r"[^\W_]+")

#: Runs ``FT.SEARCH`` tails where the tenant's nodes are: one list of replies per tail (two
#: replies while the tenant's cluster slot moves between primaries).
Run = Callable[[list[list[Any]]], Awaitable[list[list[Any]]]]
#: The texts of the given document keys ("" where missing).
Texts = Callable[[list[str]], Awaitable[list[str]]]


@dataclass
class _ScopeCounts:
    version: Hashable
    n: int | None = None
    #: term: (df, the PER_TERM highest frequencies, key: tf)
    terms: dict[str, tuple[int, dict[str, float]]] = field(default_factory=dict)


class Counts:
    """Step 1's counts (module docstring) of the most recently searched scopes, each kept
    under the version of its tenant's documents it was read at. Bounded by scopes and by terms
    in all (a term holds up to :data:`PER_TERM` frequencies): the scopes searched longest ago
    go first."""

    def __init__(self, scopes: int = 1024, terms: int = 8192) -> None:
        self._scopes: OrderedDict[str, _ScopeCounts] = OrderedDict()
        self._max_scopes = scopes
        self._max_terms = terms

    def scope(self, flt: str, version: Hashable | None) -> _ScopeCounts:
        """The counts of scope ``flt`` read at ``version``: empty when none were read at it
        (and kept only when there is a version: None means the tenant has none yet)."""
        found = self._scopes.get(flt)
        if found is not None and version is not None and found.version == version:
            self._scopes.move_to_end(flt)
            return found
        counts = _ScopeCounts(version)
        if version is not None:
            self._scopes[flt] = counts
            self._scopes.move_to_end(flt)
        self.trim()
        return counts

    def trim(self) -> None:
        """Drop the scopes searched longest ago while over either bound (the latest stays)."""
        terms = sum(len(c.terms) for c in self._scopes.values())
        while len(self._scopes) > 1 and (
            len(self._scopes) > self._max_scopes or terms > self._max_terms
        ):
            _, gone = self._scopes.popitem(last=False)
            terms -= len(gone.terms)
        if len(self._scopes) > self._max_scopes:
            self._scopes.clear()
        elif terms > self._max_terms:  # one scope over the bound on its own
            next(iter(self._scopes.values())).terms.clear()


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


def partial(
    freqs: Mapping[str, Mapping[str, float]], weights: Mapping[str, float]
) -> dict[str, float]:
    """Step 2's score of every document of ``freqs``: BM25 without length normalisation."""
    out: dict[str, float] = {}
    for term, per_doc in freqs.items():
        w = weights.get(term, 0.0)
        for doc, tf in per_doc.items():
            if tf > 0:
                out[doc] = out.get(doc, 0.0) + w * tf * (K1 + 1.0) / (tf + K1)
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


def _texts(reply: Any) -> list[tuple[str, str]]:
    """(key, text) of an ``FT.SEARCH ... RETURN 1 text`` reply ("" for a row without it)."""
    return [(key, row.get(LEXICAL_FIELD, "")) for key, row in documents(reply)]


def _frequencies(query: str, limit: int, keys: Sequence[str] = ()) -> list[Any]:
    tail: list[Any] = [query, "WITHSCORES", "SCORER", "DISMAX", "NOCONTENT"]
    if keys:
        tail += ["INKEYS", len(keys), *keys]
    return [*tail, "LIMIT", 0, limit, "DIALECT", 2]


async def search(
    run: Run,
    texts: Texts,
    flt: str,
    words: Sequence[str],
    k: int,
    counts: Counts | None = None,
    version: Hashable | None = None,
) -> list[tuple[str, float]]:
    """The ``k`` documents of filter ``flt`` best matching any of the escaped ``words`` by
    tenant-local BM25 (module docstring): (key, score), best first, ties by key. A score is the
    BM25 over that of a document of mean length holding each of ``words`` once (about 1 for a
    document matching every word, less for one matching only common ones). Step 1's counts are
    reused from ``counts`` when read at the tenant's current ``version`` (read by the caller
    before this call), and kept there."""
    known = (counts or Counts(scopes=0)).scope(flt, version)
    # Read before the round trip: searches running meanwhile may fill in or trim ``known``.
    n = known.n
    stats = {w: known.terms[w] for w in dict.fromkeys(words) if w in known.terms}
    todo = [w for w in dict.fromkeys(words) if w not in stats]
    # The scope filter matches and scores nothing. It comes after the term: written first, a
    # filter of several clauses takes the whole query's weight with it (RediSearch 2.10).
    scope = f"({flt})=>{{$weight:0}}"
    tails = [_frequencies(f"@{LEXICAL_FIELD}:({w}) {scope}", PER_TERM) for w in todo]
    if n is None:
        tails.insert(0, [f"({flt})", "LIMIT", 0, 0, "DIALECT", 2])
    counted = await run(tails) if tails else []
    if n is None:
        n = known.n = sum(total(r) for r in counted.pop(0))
    for w, replies in zip(todo, counted, strict=True):
        stats[w] = known.terms[w] = (
            sum(total(r) for r in replies),
            {key: tf for r in replies for key, tf in scores(r).items()},
        )
    if todo and counts is not None:
        counts.trim()
    weights: dict[str, float] = {}
    freqs: dict[str, dict[str, float]] = {}
    cut = []
    for w in words:
        df, top = stats[w]
        if df == 0 or w in weights:
            continue
        weights[w] = idf(n, df)
        freqs[w] = dict(top)
        if df > len(freqs[w]):
            cut.append(w)
    first = partial(freqs, weights)
    pool = sorted(first, key=lambda d: (-first[d], d))[: max(k, 1) * POOL_FACTOR]
    if not pool:
        return []
    # The candidates' texts ride along: read by the Query Engine, or (on a cluster, where rows
    # outside the index name's slot come back empty) from the hashes.
    shown = ["*", "INKEYS", len(pool), *pool, "RETURN", 1, LEXICAL_FIELD]
    replies = await run(
        [
            [*shown, "LIMIT", 0, len(pool), "DIALECT", 2],
            *(_frequencies(f"@{LEXICAL_FIELD}:({w})", len(pool), pool) for w in cut),
        ]
    )
    for w, more in zip(cut, replies[1:], strict=True):
        freqs[w] = {key: tf for r in more for key, tf in scores(r).items()}
    read = {key: text for r in replies[0] for key, text in _texts(r)}
    missing = [key for key in pool if not read.get(key)]
    if missing:
        read.update(zip(missing, await texts(missing), strict=True))
    lengths = {key: length(read.get(key, "")) for key in pool}
    ranked = bm25(freqs, lengths, weights)
    # Over the BM25 of a document of mean length holding every query term once: the share of
    # the query's term weight a document matches (a term the scope lacks weighs the most).
    ideal = sum(idf(n, 0) if w not in weights else weights[w] for w in dict.fromkeys(words))
    out = sorted(ranked.items(), key=lambda r: (-r[1], r[0]))[:k]
    return [(key, score / ideal) for key, score in out]
