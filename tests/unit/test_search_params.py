"""Search parameters computed without a store."""

from __future__ import annotations

import numpy as np

from gaama.config import load_settings
from gaama.retrieval.search import pool_size, resolve_params


def test_pool_size() -> None:
    p = resolve_params(load_settings().retrieval, None)
    assert pool_size(20, p) == 80  # the paper's floor at the defaults
    assert pool_size(100, p) == 200
    assert pool_size(20, resolve_params(p, None, budget=5000)) == 250
    assert np.isclose(p.alpha, 0.6)


def test_pool_size_in_graph_modes_has_the_seeds_as_its_floor() -> None:
    p = resolve_params(load_settings().retrieval, None)
    for mode in ("gaama", "ppr"):
        assert pool_size(20, p, mode) == 50  # the budget's items; the floor is 40
        assert pool_size(20, resolve_params(p, None, budget=500), mode) == 40  # the seeds
        assert pool_size(100, p, mode) == 200
        assert pool_size(20, resolve_params(p, None, budget=5000), mode) == 250
        assert pool_size(20, resolve_params(p, {"seeds": 60}, budget=500), mode) == 60
        assert pool_size(20, resolve_params(p, {"graph_pool_min": 80}), mode) == 80
    assert pool_size(20, resolve_params(p, {"graph_pool_min": 10}), "semantic") == 80
    assert pool_size(20, resolve_params(p, None, budget=500), "semantic") == 80
