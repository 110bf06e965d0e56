"""Hub dampening must change scores (ARCHITECTURE §1 step 6).

The authors' code scales a hub's outgoing weights *before* row-normalising, which the
normalisation cancels exactly; ours dampens the normalised row and returns the removed mass to
the restart distribution.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from gaama.retrieval.ppr import personalized_pagerank

LEAVES = 60  # hub degree 60 > 50


def star() -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray]:
    n = LEAVES + 1
    w = np.zeros((n, n))
    w[0, 1:] = w[1:, 0] = 0.8
    restart = np.zeros(n)
    restart[1] = 1.0  # query matches leaf 1 only
    degrees = (w > 0).sum(axis=1)
    return sparse.csr_matrix(w), restart, degrees


def authors_transition(w: sparse.csr_matrix, degrees: np.ndarray, factor: float) -> np.ndarray:
    """The released code: scale the hub's weights, then row-normalise."""
    d = w.toarray()
    d[degrees > 50] *= factor
    rs = d.sum(axis=1, keepdims=True)
    out: np.ndarray = np.divide(d, rs, out=np.zeros_like(d), where=rs > 0)
    return out


def test_dampening_changes_scores_measurably() -> None:
    w, s, deg = star()
    plain = personalized_pagerank(w, s, degrees=deg, hub_dampening=1.0, tol=1e-12).scores
    damp = personalized_pagerank(w, s, degrees=deg, hub_dampening=0.5, tol=1e-12).scores
    # The hub hands on half its mass: every other leaf gets markedly less ...
    assert damp[2] < 0.6 * plain[2]
    # ... and the removed mass goes back to the seed, not lost.
    assert damp[1] > plain[1]
    assert damp.sum() == pytest.approx(1.0) and plain.sum() == pytest.approx(1.0)
    assert np.abs(damp - plain).sum() > 0.05


def test_authors_prenormalisation_scaling_has_no_effect() -> None:
    w, s, deg = star()
    undamped = authors_transition(w, deg, 1.0)
    for factor in (0.5, 0.1, 0.01):
        theirs = authors_transition(w, deg, factor)
        assert theirs == pytest.approx(undamped, abs=1e-15)  # identical to no dampening
        # ours really dampens the hub: a walk restarted at the hub hands on only ``factor`` of
        # its mass in the first step (the rest returns to the restart)
        hub = np.eye(len(s))[0]
        step = personalized_pagerank(w, hub, degrees=deg, hub_dampening=factor, max_iter=1)
        assert step.scores[1:].sum() == pytest.approx(0.6 * factor)


def test_authors_scores_equal_undampened_scores() -> None:
    w, s, deg = star()
    theirs_p = sparse.csr_matrix(authors_transition(w, deg, 0.5))
    # Walking the authors' matrix (its rows are stochastic) gives the undampened scores.
    theirs = personalized_pagerank(theirs_p, s, degrees=np.zeros_like(deg), tol=1e-12).scores
    plain = personalized_pagerank(w, s, degrees=deg, hub_dampening=1.0, tol=1e-12).scores
    ours = personalized_pagerank(w, s, degrees=deg, hub_dampening=0.5, tol=1e-12).scores
    assert theirs == pytest.approx(plain, abs=1e-12)
    assert not np.allclose(ours, plain, atol=1e-3)


def test_store_degree_marks_a_hub_the_subgraph_undercounts() -> None:
    # A concept with 2 neighbours in the subgraph but 300 in the store is still a hub.
    w = sparse.csr_matrix(np.array([[0, 1.0, 1.0], [1.0, 0, 0], [1.0, 0, 0]]))
    s = np.array([0, 1.0, 0])
    local = personalized_pagerank(w, s, tol=1e-12).scores
    store = personalized_pagerank(w, s, degrees=np.array([300, 1, 1]), tol=1e-12).scores
    assert store[2] < local[2]
    at_threshold = personalized_pagerank(w, s, degrees=np.array([50, 1, 1]), tol=1e-12).scores
    assert at_threshold == pytest.approx(local)  # "degree > 50": 50 is not a hub
