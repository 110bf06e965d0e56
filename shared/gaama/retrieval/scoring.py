"""Scoring the candidates of a search: similarity and PPR mass, each max-normalised over the
returnable candidates, weighted, ranked (see :mod:`gaama.retrieval.search`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gaama.ids import kind_of
from gaama.model import NodeKind
from gaama.retrieval.pack import RETURNED_KINDS, Caps, Item, rank_key


def norm_max(values: np.ndarray) -> np.ndarray:
    """``values`` divided by their maximum (all zero when the maximum is not positive)."""
    top = float(values.max()) if values.size else 0.0
    return values / top if top > 0 else np.zeros_like(values)


def cosine(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``vectors`` to ``query`` (0 for a zero vector), as the
    vector index's COSINE distance defines it (similarity = 1 − distance).

    In float32 like the index, with einsum rather than a BLAS call: einsum runs in the calling
    thread, where OpenBLAS may hand a product of this size to its worker threads, which then
    spin on the core the rest of the request needs.
    """
    if not len(vectors):
        return np.zeros(0)
    v = np.asarray(vectors, dtype=np.float32)
    q = np.asarray(query, dtype=np.float32)
    dots = np.einsum("ij,j->i", v, q)
    norms = np.sqrt(np.einsum("ij,ij->i", v, v)) * np.float32(np.sqrt(q @ q))
    out: np.ndarray = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return out.astype(np.float64)


def node_kind(node: str) -> NodeKind | None:
    """The kind of a node id, or None for an id that is not a GAAMA node's."""
    try:
        return kind_of(node)
    except ValueError:
        return None


def score_candidates(
    sims: Mapping[str, float],
    ppr: Mapping[str, float],
    w_ppr: float,
    w_sim: float,
    keep: tuple[int, Caps] | None = None,
    prior: Mapping[str, float] | None = None,
) -> list[Item]:
    """Items of the returnable candidates with max-normalised sim and PPR and the final score,
    best first (the order of :func:`~gaama.retrieval.pack.rank`).

    ``prior`` adds its value to a node's score. With ``keep=(k, caps)`` only items that can
    reach the top k or a kind's cap are built (with
    a margin for nodes that turn out to have no text): the rest cannot be returned.
    """
    ids: list[str] = []
    kinds: list[NodeKind] = []
    for node in dict.fromkeys([*sims, *ppr]):
        kind = node_kind(node)
        if kind is not None and kind in RETURNED_KINDS:
            ids.append(node)
            kinds.append(kind)
    if not ids:
        return []
    sim = norm_max(np.clip(np.array([sims.get(n, 0.0) for n in ids]), 0.0, None))
    pr = norm_max(np.array([ppr.get(n, 0.0) for n in ids]))
    score = w_ppr * pr + w_sim * sim
    if prior:  # a soft prior added to the score (the time prior of a query naming a period)
        score = score + np.array([prior.get(n, 0.0) for n in ids])
    order: list[int] = np.argsort(-score, kind="stable").tolist()
    if keep is not None:
        k, caps = keep
        room = {kind: caps.cap(kind) + _MARGIN for kind in RETURNED_KINDS}
        picked = []
        for position, idx in enumerate(order):  # the top k, and what each kind's cap takes
            if room[kinds[idx]] > 0:
                room[kinds[idx]] -= 1
                picked.append(idx)
            elif position < k + _MARGIN:
                picked.append(idx)
        order = picked
    sim_l, pr_l, score_l = sim.tolist(), pr.tolist(), score.tolist()
    items = [
        Item(id=ids[i], kind=kinds[i], sim=sim_l[i], ppr=pr_l[i], score=score_l[i]) for i in order
    ]
    items.sort(key=rank_key)  # ties of the score: higher similarity, then id
    return items


_MARGIN = 10  # extra items kept past k and the caps, for nodes that turn out to have no text
