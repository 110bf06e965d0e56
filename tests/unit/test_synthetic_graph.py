"""The benchmarks' synthetic graph."""

from __future__ import annotations

from benchmarks.synthetic import SyntheticGraph, plan_counts
from gaama.model import NodeKind


def test_synthetic_graph_shape() -> None:
    g = SyntheticGraph("t", 2000, seed=3)
    batches = list(g.batches())
    kinds: dict[NodeKind, int] = {}
    for b in batches:
        assert len(b.nodes) == len(b.vectors)
        for n in b.nodes:
            kinds[n.kind] = kinds.get(n.kind, 0) + 1
    assert kinds == plan_counts(2000)
    assert g.stats.hubs_over_50 >= 1  # a heavy tail, not a uniform degree
    assert g.stats.concept_degree_p50 < 50
