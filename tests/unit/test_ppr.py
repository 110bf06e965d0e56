"""Personalized PageRank: exact values on tiny graphs against a dense linear-algebra reference."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from gaama.retrieval import ppr
from gaama.retrieval.ppr import personalized_pagerank, symmetric_adjacency


def dense_reference(
    w: np.ndarray,
    s: np.ndarray,
    alpha: float,
    degrees: np.ndarray | None = None,
    hub_degree: int = 50,
    f: float = 0.5,
) -> np.ndarray:
    """Fixed point of x = (1-α)s + α·Mᵀx solved directly, M = P + (1 - rowsum P)·sᵀ."""
    n = w.shape[0]
    s = s / s.sum()
    rs = w.sum(axis=1)
    p = np.divide(w, rs[:, None], out=np.zeros_like(w), where=rs[:, None] > 0)
    deg = (w > 0).sum(axis=1) if degrees is None else degrees
    p[deg > hub_degree] *= f
    m = p + np.outer(1.0 - p.sum(axis=1), s)
    return np.linalg.solve(np.eye(n) - alpha * m.T, (1.0 - alpha) * s)


def run(w: np.ndarray, s: np.ndarray, **kw: float) -> np.ndarray:
    res = personalized_pagerank(sparse.csr_matrix(w), s, tol=1e-13, max_iter=1000, **kw)  # type: ignore[arg-type]
    assert res.converged
    return res.scores


def test_two_nodes_closed_form() -> None:
    # x0 = (1-α) + α·x1, x1 = α·x0  =>  x0 = 1/(1+α), x1 = α/(1+α)
    w = np.array([[0, 1], [1, 0]], dtype=float)
    x = run(w, np.array([1.0, 0.0]), alpha=0.6)
    assert x == pytest.approx([1 / 1.6, 0.6 / 1.6], abs=1e-12)


def test_path_matches_dense_reference() -> None:
    w = np.zeros((4, 4))
    for i, j, wt in [(0, 1, 0.8), (1, 2, 0.5), (2, 3, 0.8)]:
        w[i, j] = w[j, i] = wt
    s = np.array([1.0, 0, 0, 0])
    x = run(w, s, alpha=0.6)
    assert x == pytest.approx(dense_reference(w, s, 0.6), abs=1e-10)
    assert x[0] > x[1] > x[2] > x[3] > 0  # mass decays with distance from the seed


def test_triangle_with_weighted_seeds() -> None:
    w = np.array([[0, 0.8, 0.5], [0.8, 0, 0.32], [0.5, 0.32, 0]])
    s = np.array([0.9, 0.3, 0.0])
    x = run(w, s, alpha=0.6)
    assert x == pytest.approx(dense_reference(w, s, 0.6), abs=1e-10)


def test_star_and_dangling_node() -> None:
    n = 6  # hub 0, leaves 1..4, node 5 isolated (dangling)
    w = np.zeros((n, n))
    for leaf in range(1, 5):
        w[0, leaf] = w[leaf, 0] = 0.8
    s = np.array([0, 1.0, 0, 0, 0, 1.0])
    x = run(w, s, alpha=0.6)
    assert x == pytest.approx(dense_reference(w, s, 0.6), abs=1e-10)
    assert x.sum() == pytest.approx(1.0, abs=1e-12)
    assert x[2] == pytest.approx(x[3]) == pytest.approx(x[4])


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.85])
def test_mass_is_conserved_at_every_iteration_count(alpha: float) -> None:
    rng = np.random.default_rng(7)
    n = 40
    w = np.triu(rng.random((n, n)) * (rng.random((n, n)) < 0.1), 1)
    w = w + w.T
    degrees = rng.integers(0, 120, size=n)  # some hubs by store degree
    s = rng.random(n)
    for iters in (1, 2, 5, 100):
        res = personalized_pagerank(
            sparse.csr_matrix(w), s, alpha=alpha, max_iter=iters, degrees=degrees
        )
        assert res.scores.sum() == pytest.approx(1.0, abs=1e-12)
        assert (res.scores >= 0).all()
    x = run(w, s, alpha=alpha, degrees=degrees)  # type: ignore[arg-type]
    assert x == pytest.approx(dense_reference(w, s, alpha, degrees), abs=1e-10)


def test_convergence_and_iteration_count() -> None:
    w = np.zeros((5, 5))
    for i in range(4):
        w[i, i + 1] = w[i + 1, i] = 1.0
    s = np.array([1.0, 0, 0, 0, 0])
    res = personalized_pagerank(sparse.csr_matrix(w), s)  # defaults: 0.6, 100, 1e-6
    assert res.converged
    # Δ_t shrinks by α per step from ‖Δ_1‖₁ ≤ 2α: 2·0.6^t < 1e-6 needs t ≥ 29, no more.
    assert 1 < res.iterations <= 29
    assert res.scores == pytest.approx(dense_reference(w, s, 0.6), abs=1e-5)
    capped = personalized_pagerank(sparse.csr_matrix(w), s, max_iter=3)
    assert capped.iterations == 3 and not capped.converged
    loose = personalized_pagerank(sparse.csr_matrix(w), s, tol=1e-2)
    assert loose.iterations < res.iterations


def test_zero_restart_is_uniform_and_empty_graph() -> None:
    w = np.array([[0, 1.0], [1.0, 0]])
    assert run(w, np.zeros(2), alpha=0.6) == pytest.approx([0.5, 0.5])
    empty = personalized_pagerank(sparse.csr_matrix((0, 0)), np.zeros(0))
    assert empty.scores.size == 0 and empty.iterations == 0


def test_symmetric_adjacency_dedupes_both_directions() -> None:
    a = symmetric_adjacency(3, [(0, 1, 0.8), (1, 0, 0.8), (1, 2, 0.5), (2, 2, 1.0)])
    assert a.toarray() == pytest.approx(np.array([[0, 0.8, 0], [0.8, 0, 0.5], [0, 0.5, 0]]))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_in_place_kernel_gives_the_public_products_scores_exactly(
    monkeypatch: pytest.MonkeyPatch, index_dtype: type
) -> None:
    """The walk calls SciPy's sparse kernel in place; without it (a SciPy that moved it) the
    public ``Mᵀ @ x`` runs. Both give the same scores bit for bit, on a random weighted graph with
    hubs and dangling nodes, with either index width."""
    rng = np.random.default_rng(11)
    n = 300
    pairs = rng.integers(0, n - 20, size=(900, 2))  # the last 20 nodes are dangling
    edges = [(int(i), int(j), float(w)) for (i, j), w in zip(pairs, rng.random(900), strict=True)]
    adj = symmetric_adjacency(n, edges)
    adj = sparse.csr_matrix(
        (adj.data, adj.indices.astype(index_dtype), adj.indptr.astype(index_dtype)), shape=adj.shape
    )
    restart = np.zeros(n)
    restart[:40] = rng.random(40)
    degrees = rng.integers(1, 120, size=n)
    kernel = personalized_pagerank(adj, restart, degrees=degrees)
    monkeypatch.setattr(ppr, "_csc_matvec", None)
    public = personalized_pagerank(adj, restart, degrees=degrees)
    assert kernel.iterations == public.iterations > 5 and kernel.converged
    assert np.array_equal(kernel.scores, public.scores)
    assert kernel.scores == pytest.approx(
        dense_reference(adj.toarray(), restart, 0.6, degrees=degrees), abs=1e-6
    )


def test_walk_on_the_arrays_gives_the_matrix_walks_scores_exactly() -> None:
    """Retrieval walks the CSR arrays without building the SciPy matrix, and sums each row in
    order rather than by ``W·1``: the same row sums and the same scores, bit for bit, on a random
    weighted graph with hubs and dangling nodes (each undirected edge listed once, as the
    store's expansion lists them)."""
    rng = np.random.default_rng(5)
    n = 300
    pairs = {(min(i, j), max(i, j)) for i, j in rng.integers(0, n - 20, size=(900, 2)) if i != j}
    edges = np.array(
        [(i, j, w) for (i, j), w in zip(sorted(pairs), rng.random(len(pairs)), strict=True)]
    )
    data, indices, indptr = ppr.csr_arrays(n, edges, unique=True)
    adj = symmetric_adjacency(n, edges, unique=True)
    assert np.array_equal(data, adj.data) and np.array_equal(indptr, adj.indptr)
    degrees = rng.integers(1, 120, size=n)
    _, row_sums = ppr._row_scale(data, indptr, degrees, 50, 0.5)
    assert np.array_equal(row_sums, adj @ np.ones(n))
    restart = np.zeros(n)
    restart[:40] = rng.random(40)
    arrays = personalized_pagerank((data, indices, indptr), restart, degrees=degrees)
    matrix = personalized_pagerank(adj, restart, degrees=degrees)
    assert arrays.iterations == matrix.iterations > 5
    assert np.array_equal(arrays.scores, matrix.scores)
    empty = personalized_pagerank(ppr.csr_arrays(4, np.zeros((0, 3))), np.ones(4))
    assert empty.scores.tolist() == [0.25] * 4
