"""Personalized PageRank over a small weighted subgraph, with hub dampening (ARCHITECTURE §1).

The walk, on an undirected weighted adjacency ``W`` (edges followed in both directions):

- ``P = D⁻¹ W`` is ``W`` row-normalised: a node hands its mass to its neighbours in proportion to
  the edge weights.
- Hub dampening is applied *after* normalising: the row of a hub (full, store-wide degree
  above ``hub_degree``, :func:`gaama.model.is_hub`) is multiplied by ``hub_dampening``. The
  authors' code scales the hub's weights *before* normalising, which the normalisation undoes
  exactly (so their hub dampening never changed a score; ``tests/unit/test_hub_dampening.py``
  proves both points).
- Mass that a row no longer hands on (the share a hub keeps back, and all of a dangling node's
  mass) returns to the restart distribution ``s``, so the total stays 1 at every step.
- One step: ``x ← (1 − α)·s + α·(Pᵀx + leak(x)·s)`` with ``leak(x) = Σᵢ xᵢ·(1 − rowsumᵢ(P))``;
  stop when ``‖Δx‖₁ < tol`` or after ``max_iter`` steps.

Pure numpy/scipy, no I/O. Retrieval runs a bounded walk in the request's thread while Redis
reads ahead, and a large one off the event loop (the ``ppr_inline_max`` retrieval setting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from gaama.model import is_hub

try:  # SciPy's own sparse matrix-vector kernel, called without its per-product dispatch
    from scipy.sparse._sparsetools import csc_matvec as _csc_matvec
except ImportError:  # pragma: no cover - a SciPy that moved its private kernels
    _csc_matvec = None


@dataclass(frozen=True, slots=True)
class PPRResult:
    """Scores (a probability vector, summing to 1) and the power iterations it took."""

    scores: np.ndarray
    iterations: int
    converged: bool


def symmetric_adjacency(
    n: int, edges: Sequence[tuple[int, int, float]] | np.ndarray, *, unique: bool = False
) -> sparse.csr_matrix:
    """An ``n × n`` symmetric CSR matrix from undirected ``(i, j, weight)`` edges.

    Both directions are stored so the walk follows every edge either way. An edge listed twice
    (once from each endpoint's adjacency) counts once, with the larger weight; self-loops and
    non-positive weights are dropped.

    Args:
        n: Number of nodes.
        edges: ``(i, j, w)`` with ``0 <= i, j < n`` (tuples or an ``(m, 3)`` array).
        unique: The caller guarantees each undirected edge is listed once (the store's
            expansion does), so the dedupe pass is skipped.

    Returns:
        The weighted adjacency.
    """
    return sparse.csr_matrix(csr_arrays(n, edges, unique=unique), shape=(n, n))


def csr_arrays(
    n: int, edges: Sequence[tuple[int, int, float]] | np.ndarray, *, unique: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`symmetric_adjacency`'s CSR arrays ``(data, indices, indptr)``, without building
    the SciPy matrix (whose checks cost more than the walk's arrays on a search's subgraph)."""
    arr = np.asarray(edges, dtype=np.float64).reshape(-1, 3)
    if not arr.size:
        return np.zeros(0), np.zeros(0, dtype=np.int32), np.zeros(n + 1, dtype=np.int32)
    i, j, w = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]
    keep = (i != j) & (w > 0)
    lo, hi, w = np.minimum(i, j)[keep], np.maximum(i, j)[keep], w[keep]
    if not unique:
        # Vectorised dedupe (subgraphs reach 10⁵ edges): sort by pair, heaviest first, keep the
        # first of each pair.
        order = np.lexsort((-w, hi, lo))
        lo, hi, w = lo[order], hi[order], w[order]
        first = np.ones(lo.size, dtype=bool)
        first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        lo, hi, w = lo[first], hi[first], w[first]
    rows = np.concatenate([lo, hi])
    cols = np.concatenate([hi, lo])
    data = np.concatenate([w, w])
    # CSR straight from the arrays: group the entries by row (a stable sort) and count them for
    # the row pointers, without building a scipy COO matrix to convert.
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return data[order], cols[order].astype(np.int32), indptr


def _row_scale(
    data: np.ndarray,
    indptr: np.ndarray,
    degrees: np.ndarray | None,
    hub_degree: int,
    hub_dampening: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``P = diag(scale) · W`` for ``W`` in CSR (``data``, ``indptr``): per row, 1/row-sum (0
    if dangling), times the dampening for hubs. Also returns the row sums of ``W``."""
    n, counts = indptr.size - 1, np.diff(indptr)
    # Each row's entries summed in order, as W·1 sums them (the same floating-point result).
    rows = np.repeat(np.arange(n), counts)
    row_sums = np.bincount(rows, weights=data, minlength=n).astype(np.float64, copy=False)
    scale = np.divide(1.0, row_sums, out=np.zeros_like(row_sums), where=row_sums > 0)
    if degrees is None:
        degrees = counts
    # Dampening multiplies the already-normalised row, so it cannot be normalised away.
    scale[is_hub(np.asarray(degrees), hub_degree)] *= hub_dampening
    return scale, row_sums


def personalized_pagerank(
    adjacency: sparse.csr_matrix | tuple[np.ndarray, np.ndarray, np.ndarray],
    restart: np.ndarray,
    *,
    alpha: float = 0.6,
    max_iter: int = 100,
    tol: float = 1e-6,
    degrees: np.ndarray | None = None,
    hub_degree: int = 50,
    hub_dampening: float = 0.5,
) -> PPRResult:
    """Personalized PageRank by power iteration.

    Args:
        adjacency: Symmetric non-negative weights (see :func:`symmetric_adjacency`), or their
            CSR arrays ``(data, indices, indptr)`` as :func:`csr_arrays` builds them (float64
            data), which spares building the SciPy matrix.
        restart: Non-negative restart (seed) mass per node; normalised here. All zero is
            treated as uniform.
        alpha: Probability of following an edge (restart with ``1 - alpha``).
        max_iter: Upper bound on power iterations.
        tol: Stop when the L1 change of one iteration falls below this.
        degrees: Full store degree of each node, for hub detection.
        hub_degree: Degree above which a node is a hub.
        hub_dampening: Factor on a hub's normalised outgoing row; the rest goes to ``restart``.

    Returns:
        Scores summing to 1, the iterations taken and whether ``tol`` was reached.
    """
    if isinstance(adjacency, tuple):
        data, indices, indptr = adjacency
    else:
        adj = _as_csr(adjacency)
        data, indices, indptr = adj.data, adj.indices, adj.indptr
    n = indptr.size - 1
    if n == 0:
        return PPRResult(np.zeros(0, dtype=np.float64), 0, True)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    s = np.clip(np.asarray(restart, dtype=np.float64).ravel(), 0.0, None)
    if s.shape[0] != n:
        raise ValueError(f"restart has {s.shape[0]} entries for {n} nodes")
    total = s.sum()
    s = s / total if total > 0 else np.full(n, 1.0 / n)

    # One step is x ← A·x + (α·leak(x) + 1 − α)·s with A = α·Pᵀ = α·Wᵀ·diag(scale): W's rows
    # scaled, then transposed (CSR's transpose is CSC over the same arrays, no copy).
    scale, row_sums = _row_scale(data, indptr, degrees, hub_degree, hub_dampening)
    leak = alpha * (1.0 - scale * row_sums)  # per row: mass returned to restart, times α
    rows_scaled = data * np.repeat(alpha * scale, np.diff(indptr))
    x = s.copy()
    restart_share = 1.0 - alpha
    product = _transposed_product(indices, indptr, rows_scaled)
    nxt, diff = np.empty(n), np.empty(n)
    for it in range(1, max_iter + 1):
        product(x, nxt)
        nxt += (float(leak @ x) + restart_share) * s
        np.subtract(nxt, x, out=diff)
        delta = float(np.add.reduce(np.abs(diff, out=diff)))
        x, nxt = nxt, x
        if delta < tol:
            return PPRResult(x, it, True)
    return PPRResult(x, max_iter, False)


def _transposed_product(
    indices: np.ndarray, indptr: np.ndarray, data: np.ndarray
) -> Callable[[np.ndarray, np.ndarray], None]:
    """``(x, out) ↦ out = Mᵀ·x`` for the square CSR matrix ``M`` (``data``, ``indices``,
    ``indptr``).

    ``Mᵀ`` in CSC is ``M``'s CSR arrays as they are, so SciPy's CSC kernel computes the product
    in place — the same kernel and summation order as ``M.T @ x``, without that operator's
    per-call checks and allocation, which cost more than the product on a subgraph of a few
    hundred nodes (the walk runs it every iteration).
    """
    n = indptr.size - 1
    if _csc_matvec is None or indptr.dtype != indices.dtype:
        step = sparse.csr_matrix((data, indices, indptr), shape=(n, n)).T

        def public(x: np.ndarray, out: np.ndarray) -> None:
            out[:] = step @ x

        return public

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        out.fill(0.0)
        _csc_matvec(n, n, indptr, indices, data, x, out)

    return kernel


def _as_csr(adjacency: sparse.spmatrix) -> sparse.csr_matrix:
    """``adjacency`` as float64 CSR, without a copy when it is one already."""
    if isinstance(adjacency, sparse.csr_matrix) and adjacency.dtype == np.float64:
        return adjacency
    return sparse.csr_matrix(adjacency, dtype=np.float64)
