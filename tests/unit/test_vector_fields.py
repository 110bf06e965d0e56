"""The stored form of a vector: float16, the form the index holds and the read-ahead reads."""

from __future__ import annotations

import numpy as np

from gaama.retrieval.scoring import cosine
from gaama.store.codecs import VECTOR_FIELD, stored_vectors, vector_fields


def test_float16_keeps_the_direction():
    rng = np.random.default_rng(11)
    vector = rng.standard_normal(384).astype(np.float32)
    vector /= np.linalg.norm(vector)
    stored = vector_fields(vector)
    assert set(stored) == {VECTOR_FIELD}  # one copy: no float32 or int8 beside it
    assert len(stored[VECTOR_FIELD]) == 384 * 2
    back = stored_vectors([stored[VECTOR_FIELD]], 384)
    assert back.shape == (1, 384) and back.dtype == np.float32
    assert np.abs(back[0] - vector).max() < 1e-3  # float16: ~3 significant digits
    queries = rng.standard_normal((50, 384)).astype(np.float32)
    exact = np.array([cosine(vector[None, :], q)[0] for q in queries])
    approx = np.array([cosine(back, q)[0] for q in queries])
    assert np.abs(exact - approx).max() < 5e-4


def test_a_large_vector_is_scaled_into_float16s_range():
    vector = np.array([1e6, -3e5, 2.0, 0.0], dtype=np.float32)
    back = stored_vectors([vector_fields(vector)[VECTOR_FIELD]], 4)[0]
    assert np.isfinite(back).all()
    assert cosine(back[None, :], vector)[0] > 0.9999


def test_a_non_finite_vector_is_stored_as_zeros():
    for bad in ([float("inf"), 1.0, 0.5, -2.0], [float("nan"), 1.0, 0.5, -2.0]):
        assert vector_fields(bad)[VECTOR_FIELD] == bytes(8)
    assert cosine(np.zeros((1, 8), dtype=np.float32), np.ones(8, dtype=np.float32))[0] == 0.0


def test_no_vectors_is_an_empty_matrix():
    assert stored_vectors([], 384).shape == (0, 384)
