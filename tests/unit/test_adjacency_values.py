"""Adjacency values: one letter per edge kind and direction, the weight only when not 1, and the
layout before the letters read the same."""

from __future__ import annotations

import pytest

from gaama.model import Edge, EdgeKind, Neighbour
from gaama.store.codecs import NEXT_VALUES, adjacency_values, parse_adjacency


@pytest.mark.parametrize("kind", list(EdgeKind))
@pytest.mark.parametrize("weight", [1.0, 0.5, 0.123457, 1e-05])
def test_each_value_reads_back_as_its_edge(kind: EdgeKind, weight: float):
    at_src, at_dst = adjacency_values(Edge("a", "b", kind, weight))
    assert parse_adjacency(at_src.encode(), "b") == Neighbour("b", kind, True, weight)
    assert parse_adjacency(at_dst.encode(), "a") == Neighbour("a", kind, False, weight)
    # the value before the letters, of the same edge, reads the same
    w = f"{weight:.6g}"
    assert parse_adjacency(f"{kind.value}|o|{w}".encode(), "b") == Neighbour(
        "b", kind, True, weight
    )
    assert parse_adjacency(f"{kind.value}|i|{w}".encode(), "a") == Neighbour(
        "a", kind, False, weight
    )


def test_kinds_and_directions_have_distinct_letters_and_weight_one_is_left_out():
    values = [v for k in EdgeKind for v in adjacency_values(Edge("a", "b", k))]
    assert all(len(v) == 1 for v in values)
    assert len(set(values)) == 2 * len(EdgeKind)
    assert adjacency_values(Edge("a", "b", EdgeKind.NEXT)) == NEXT_VALUES
    assert adjacency_values(Edge("a", "b", EdgeKind.HAS_CONCEPT, 0.55)) == ("H0.55", "h0.55")


def test_a_value_of_no_kind_is_an_error_not_a_guess():
    with pytest.raises(KeyError):
        parse_adjacency(b"X", "a")
