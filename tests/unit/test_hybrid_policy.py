"""The KNN's hybrid policy, chosen from the tenant's size (the measured cases:
docs/decisions/0002-knn-hybrid-policy.md)."""

from __future__ import annotations

import pytest

from gaama.store.index_layout import hybrid_policy

K, EF = 80, 100


@pytest.mark.parametrize(
    ("tenant", "index_keys", "want"),
    [
        (100_000, 220_000, "BATCHES"),  # 100k of 110k: 67 ms brute, 1 ms HNSW
        (10_000, 220_000, "ADHOC_BF"),  # 10k of 110k: 2-3.5 ms brute, 6-10 ms HNSW (client)
        (1_870, 7_600, "ADHOC_BF"),  # a LoCoMo tenant: HNSW would save a tenth
        (100_000, 2_220_000, "BATCHES"),  # 100k of 1.11M: the engine brute-forced it (25 ms)
        (1_000_000, 2_220_000, "BATCHES"),
        (10_000, 2_220_000, "ADHOC_BF"),  # 1% of the index: HNSW would examine ~18k candidates
        (1_000, 220_000, "ADHOC_BF"),
        (500, 1_000, "ADHOC_BF"),  # fewer nodes than one HNSW search examines
        (0, 1_000, "ADHOC_BF"),  # a tenant with no degree index yet
    ],
)
def test_the_cheaper_search_is_chosen(tenant: int, index_keys: int, want: str) -> None:
    assert hybrid_policy(tenant, index_keys, K, EF) == want


@pytest.mark.parametrize("k", [40, 50, 80])
def test_a_smaller_k_does_not_send_a_mid_sized_tenant_to_hnsw(k: int) -> None:
    # 10k of 110k (220k keys): brute force 2.1-3.5 ms, HNSW 6.2-10.0 ms at the client
    # (scripts/knn-policy-ab.py): the graph modes' smaller pool must not flip it.
    assert hybrid_policy(10_000, 220_000, k, max(EF, k)) == "ADHOC_BF"
    assert hybrid_policy(100_000, 220_000, k, max(EF, k)) == "BATCHES"


def test_a_growing_tenant_switches_once_to_hnsw() -> None:
    choices = [hybrid_policy(n, 2_000_000, K, EF) for n in range(1_000, 1_000_001, 1_000)]
    switch = choices.index("BATCHES")
    assert set(choices[:switch]) == {"ADHOC_BF"} and set(choices[switch:]) == {"BATCHES"}
    # the larger the index around it, the larger a tenant must be to be walked through HNSW
    assert hybrid_policy(30_000, 200_000, K, EF) == "BATCHES"
    assert hybrid_policy(30_000, 20_000_000, K, EF) == "ADHOC_BF"
