"""Per-tenant admission: concurrency and rate quotas refuse at once, per tenant, and the
metrics carry hash buckets, never tenant names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.runtime.admission import BUCKETS, Admission, Throttled, tenant_bucket, tenant_metrics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_concurrency_is_per_tenant_and_released() -> None:
    adm = Admission(concurrency=2, rate=0, burst=1)
    async with adm.admit("a"), adm.admit("a"):
        with pytest.raises(Throttled) as info:
            async with adm.admit("a"):
                pass
        assert info.value.retry_after == 1 and "GAAMA_TENANT_CONCURRENCY" in str(info.value)
        async with adm.admit("b"):  # another tenant is not affected
            pass
    async with adm.admit("a"):  # slots came back
        pass


async def test_a_failing_request_gives_its_slot_back() -> None:
    adm = Admission(concurrency=1, rate=0, burst=1)
    with pytest.raises(RuntimeError):
        async with adm.admit("a"):
            raise RuntimeError("boom")
    async with adm.admit("a"):
        pass


async def test_rate_is_a_token_bucket_with_retry_after() -> None:
    clock = Clock()
    adm = Admission(concurrency=0, rate=2.0, burst=3, clock=clock)
    for _ in range(3):
        async with adm.admit("a"):
            pass
    with pytest.raises(Throttled) as info:
        async with adm.admit("a"):
            pass
    assert info.value.retry_after == 1 and "GAAMA_TENANT_RATE" in str(info.value)
    adm.take("b")  # b has its own bucket
    clock.now += 0.5  # one token back
    adm.take("a")
    with pytest.raises(Throttled):
        adm.take("a")


def test_a_cost_above_the_burst_still_passes_a_full_bucket() -> None:
    clock = Clock()
    adm = Admission(concurrency=0, rate=10.0, burst=100, clock=clock)
    adm.take("a", 1000)  # one request may be larger than the bucket: it empties it
    with pytest.raises(Throttled) as info:
        adm.take("a", 1000)
    assert info.value.retry_after == 10


async def test_metrics_have_bounded_labels_and_no_tenant_names() -> None:
    registry = CollectorRegistry()
    adm = Admission(concurrency=1, rate=0, burst=1, metrics=tenant_metrics("query", registry))
    names = [f"secret-tenant-{i}" for i in range(200)]
    for name in names:
        async with adm.admit(name):
            with pytest.raises(Throttled):
                async with adm.admit(name):
                    pass
    text = generate_latest(registry).decode()
    assert not any(n in text for n in names)
    assert {tenant_bucket(n) for n in names} == {str(b) for b in range(BUCKETS)}
    series = [ln for ln in text.splitlines() if ln.startswith("gaama_query_tenant_requests_total{")]
    assert len(series) == BUCKETS * 3
    total = sum(float(ln.rsplit(" ", 1)[1]) for ln in series if 'outcome="concurrency"' in ln)
    assert total == 200


def test_the_bucket_of_a_tenant_is_the_same_in_every_process() -> None:
    # Replicas and restarts must put a tenant in the same bucket, whatever the hash seed.
    code = (
        "from services.runtime.admission import tenant_bucket;"
        "print(' '.join(tenant_bucket(f'tenant-{i}') for i in range(64)))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(runs) == 1
    assert runs.pop().split() == [tenant_bucket(f"tenant-{i}") for i in range(64)]
