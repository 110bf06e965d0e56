"""``python -m benchmarks`` with two more rules for the lexical channel's credit, as per-request
parameters a ``--variant`` may set (docs/benchmarks.md, "Category 3 at R@10: general rules
measured (fifth pass)"). Both need each matched word's share of a node's full-text score,
which the store does not return: this script records it beside the store's own BM25 and leaves
every score as the store computes it.

- ``lex_idf_gate`` (γ ≥ 0): the share of a node's credit from word t is multiplied by
  ``(sim / max sim) ** (γ · (1 − r_t))``, ``r_t`` the word's idf over that of a word the scope
  lacks: a rare word's credit stands alone, a common word's needs the node's meaning to agree.
- ``lex_decay`` (0 < d ≤ 1): candidates taken in the order of the plain fusion; the share of a
  node's credit from word t is multiplied by ``d ** (candidates ahead holding t)``: a word the
  list already holds adds less each time it is repeated (redundancy-aware credit).

Usage: ``PYTHONPATH=shared:. python scripts/locomo-lexical-rules.py locomo --data … --variant
'idf-gate-2={"lex_idf_gate":2}' --variant 'decay-0.5={"lex_decay":0.5}' …`` (any argument of
``python -m benchmarks``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import gaama.retrieval.search as search_module
import gaama.store.fulltext as fulltext
from benchmarks.cli import main as benchmarks_main
from gaama.errors import ValidationError
from gaama.retrieval.lexical import fuse as plain_fuse
from gaama.store.vectors import VectorIndex

#: A node key's matched words: (share of its full-text score, word's idf over the largest, word).
Parts = list[tuple[float, float, str]]
_by_key: dict[str, Parts] = {}
_scope_n = {"n": 1}
_rule: dict[str, Any] = {}
_by_id: dict[str, Parts] = {}
_store_idf, _store_bm25, _store_lexical = fulltext.idf, fulltext.bm25, VectorIndex.lexical
_search = search_module.Retriever.search


def _idf(n: int, df: int) -> float:
    _scope_n["n"] = n  # the scope's size, for the idf of a word it lacks
    return _store_idf(n, df)


def _bm25(
    freqs: Mapping[str, Mapping[str, float]],
    lengths: Mapping[str, int],
    weights: Mapping[str, float],
) -> dict[str, float]:
    out = _store_bm25(freqs, lengths, weights)
    if not lengths:
        return out
    largest = _store_idf(_scope_n["n"], 0)
    avg = sum(lengths.values()) / len(lengths) or 1.0
    parts: dict[str, Parts] = {}
    for term, per_doc in freqs.items():
        w = weights.get(term, 0.0)
        for doc, tf in per_doc.items():
            if doc in out and tf > 0:
                norm = fulltext.K1 * (1.0 - fulltext.B + fulltext.B * max(lengths[doc], 1) / avg)
                share = w * tf * (fulltext.K1 + 1.0) / (tf + norm)
                parts.setdefault(doc, []).append((share, w / largest, term))
    for doc, p in parts.items():
        total = sum(c for c, _, _ in p) or 1.0
        _by_key[doc] = [(c / total, r, t) for c, r, t in p]
    return out


async def _lexical(self: VectorIndex, tenant: str, terms: Any, k: int, **kw: Any) -> Any:
    _by_key.clear()
    hits = await _store_lexical(self, tenant, terms, k, **kw)
    _by_id.clear()
    for key, parts in _by_key.items():
        _by_id[self.keys.id_from_node_key(key)] = parts
    return hits


def _fuse(
    sims: Mapping[str, float], lex: Mapping[str, float], w_lex: float, fusion: Any, *a: Any
) -> dict[str, float]:
    base = plain_fuse(sims, lex, w_lex, fusion, *a)
    gate, decay = _rule.get("lex_idf_gate", 0.0), _rule.get("lex_decay", 1.0)
    if fusion != "cover" or (not gate and decay == 1.0):
        return base
    top = max((max(v, 0.0) for v in sims.values()), default=0.0) or 1.0
    held: dict[str, int] = {}
    out = dict(base)
    for n in sorted(base, key=lambda n: (-base[n], n)):
        parts = _by_id.get(n)
        if not parts or not lex.get(n):
            continue
        rel = max(sims[n], 0.0) / top
        factor = sum(f * rel ** (gate * (1.0 - r)) * decay ** held.get(t, 0) for f, r, t in parts)
        out[n] = rel + w_lex * lex[n] * factor
        for _, _, t in parts:
            held[t] = held.get(t, 0) + 1
    return out


async def _search_with_rules(self: Any, tenant: str, query: str, **kw: Any) -> Any:
    params = dict(kw.pop("params", None) or {})
    gate = float(params.pop("lex_idf_gate", 0.0))
    decay = float(params.pop("lex_decay", 1.0))
    if gate < 0 or not 0 < decay <= 1:
        raise ValidationError("lex_idf_gate must be ≥ 0 and lex_decay within (0, 1]")
    _rule.update(lex_idf_gate=gate, lex_decay=decay)
    return await _search(self, tenant, query, params=params or None, **kw)


fulltext.idf, fulltext.bm25 = _idf, _bm25
VectorIndex.lexical = _lexical  # type: ignore[method-assign]
setattr(search_module, "fuse", _fuse)  # noqa: B010 (the name is not exported)
search_module.Retriever.search = _search_with_rules  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(benchmarks_main(sys.argv[1:]))
