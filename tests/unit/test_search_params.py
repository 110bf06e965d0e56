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
