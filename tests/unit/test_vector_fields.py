"""The stored forms of a vector: float32 for the index, an int8 copy for the read-ahead."""

from __future__ import annotations

import numpy as np

from gaama.retrieval.scoring import cosine
from gaama.store.codecs import COMPACT_VECTOR_FIELD, VECTOR_FIELD, vector_fields


def test_float32_is_exact_and_the_int8_copy_keeps_the_direction():
    rng = np.random.default_rng(11)
    vector = rng.standard_normal(384).astype(np.float32)
    stored = vector_fields(vector)
    assert np.array_equal(np.frombuffer(stored[VECTOR_FIELD], dtype=np.float32), vector)
    compact = np.frombuffer(stored[COMPACT_VECTOR_FIELD], dtype=np.int8)
    assert compact.shape == (384,)
    assert int(np.abs(compact.astype(np.int16)).max()) == 127  # the largest component is ±127
    assert np.array_equal(
        np.sign(compact[np.abs(vector) > 0.05]), np.sign(vector[np.abs(vector) > 0.05])
    )
    queries = rng.standard_normal((50, 384)).astype(np.float32)
    exact = np.array([cosine(vector[None, :], q)[0] for q in queries])
    approx = np.array([cosine(compact[None, :].astype(np.float32), q)[0] for q in queries])
    assert np.abs(exact - approx).max() < 3e-3


def test_a_zero_vector_has_a_zero_copy():
    stored = vector_fields([0.0] * 8)
    assert stored[COMPACT_VECTOR_FIELD] == bytes(8)
    assert cosine(np.zeros((1, 8), dtype=np.float32), np.ones(8, dtype=np.float32))[0] == 0.0


def test_a_non_finite_vector_has_a_zero_copy():
    stored = vector_fields([float("inf"), 1.0, 0.5, -2.0])
    assert stored[COMPACT_VECTOR_FIELD] == bytes(4)
    stored = vector_fields([float("nan"), 1.0, 0.5, -2.0])
    assert stored[COMPACT_VECTOR_FIELD] == bytes(4)
