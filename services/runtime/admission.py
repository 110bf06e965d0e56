"""Per-tenant admission control: a tenant over its share is refused at once (429 with
``Retry-After``), so one tenant's burst never queues another's requests into timeouts.

Two quotas per tenant, both per replica and in memory:

- **concurrency**: requests of the tenant in flight; one more is refused, never queued;
- **rate**: a token bucket (``rate`` tokens a second, ``burst`` at most); a request costs one
  token (ingest charges one per turn).

Metrics carry no tenant name: a tenant is counted under ``bucket`` = a hash of its name modulo
:data:`BUCKETS`, so label cardinality is fixed whatever the number of tenants.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from gaama.errors import GaamaError

#: Hash buckets of the per-tenant metrics.
BUCKETS = 16
#: Tenants whose quotas are remembered; the least recently seen idle ones are forgotten beyond.
MAX_TRACKED = 10_000
OUTCOMES = ("admitted", "concurrency", "rate")


class Throttled(GaamaError):
    """A tenant over its quota (HTTP 429 with ``Retry-After``)."""

    reason = "throttled"
    http_status = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def tenant_bucket(tenant: str) -> str:
    """The metrics label of ``tenant``: stable, and not its name."""
    digest = hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return str(int.from_bytes(digest, "big") % BUCKETS)


@dataclass
class TenantMetrics:
    requests: Counter
    inflight: Gauge


def tenant_metrics(service: str, registry: CollectorRegistry) -> TenantMetrics:
    m = TenantMetrics(
        requests=Counter(
            f"gaama_{service}_tenant_requests_total",
            "Requests by tenant hash bucket and admission outcome (admitted, or refused for "
            "concurrency or rate)",
            ["bucket", "outcome"],
            registry=registry,
        ),
        inflight=Gauge(
            f"gaama_{service}_tenant_inflight",
            "Requests in flight by tenant hash bucket",
            ["bucket"],
            registry=registry,
        ),
    )
    for b in range(BUCKETS):
        m.inflight.labels(str(b))
        for outcome in OUTCOMES:
            m.requests.labels(str(b), outcome)
    return m


@dataclass
class _Quota:
    tokens: float
    stamp: float
    inflight: int = 0


@dataclass
class Admission:
    """Quotas of every tenant seen by this replica.

    Args:
        concurrency: Requests in flight per tenant (0: no limit).
        rate: Tokens per second per tenant (0: no limit).
        burst: Bucket size (the tokens a quiet tenant has saved up).
        setting: The variable names quoted in a refusal (``("GAAMA_TENANT_CONCURRENCY",
            "GAAMA_TENANT_RATE")``).
    """

    concurrency: int
    rate: float
    burst: int
    metrics: TenantMetrics | None = None
    setting: tuple[str, str] = ("GAAMA_TENANT_CONCURRENCY", "GAAMA_TENANT_RATE")
    clock: Callable[[], float] = time.monotonic
    _quotas: OrderedDict[str, _Quota] = field(default_factory=OrderedDict, init=False)

    def _quota(self, tenant: str) -> _Quota:
        q = self._quotas.get(tenant)
        now = self.clock()
        if q is None:
            q = self._quotas[tenant] = _Quota(tokens=float(self.burst), stamp=now)
            self._forget_idle()
        else:
            self._quotas.move_to_end(tenant)
            if self.rate:
                q.tokens = min(float(self.burst), q.tokens + (now - q.stamp) * self.rate)
            q.stamp = now
        return q

    def _forget_idle(self) -> None:
        while len(self._quotas) > MAX_TRACKED:
            tenant, q = next(iter(self._quotas.items()))
            if q.inflight:  # still busy: keep it, look no further this time
                self._quotas.move_to_end(tenant)
                return
            del self._quotas[tenant]

    def _count(self, tenant: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.requests.labels(tenant_bucket(tenant), outcome).inc()

    def take(self, tenant: str, cost: float = 1.0) -> None:
        """Charge ``cost`` tokens to ``tenant``'s rate quota.

        Raises:
            Throttled: not enough tokens; ``retry_after`` says when there will be.
        """
        if not self.rate:
            return
        q = self._quota(tenant)
        cost = min(cost, float(self.burst))  # a request as large as the bucket can still pass
        if q.tokens < cost:
            self._count(tenant, "rate")
            wait = max(1, math.ceil((cost - q.tokens) / self.rate))
            raise Throttled(
                f"tenant over its request rate ({self.rate:g}/s, burst {self.burst}; "
                f"{self.setting[1]}); retry in {wait} s",
                wait,
            )
        q.tokens -= cost

    @asynccontextmanager
    async def admit(self, tenant: str, cost: float = 1.0) -> AsyncIterator[None]:
        """Hold one of ``tenant``'s concurrency slots (and charge ``cost`` tokens) for the
        duration of the block.

        Raises:
            Throttled: the tenant is at its concurrency limit or out of tokens.
        """
        q = self._quota(tenant)
        if self.concurrency and q.inflight >= self.concurrency:
            self._count(tenant, "concurrency")
            raise Throttled(
                f"tenant over its concurrency ({self.concurrency} requests in flight; "
                f"{self.setting[0]}); retry in 1 s",
                1,
            )
        self.take(tenant, cost)
        self._count(tenant, "admitted")
        gauge = self.metrics.inflight.labels(tenant_bucket(tenant)) if self.metrics else None
        q.inflight += 1
        if gauge is not None:
            gauge.inc()
        try:
            yield
        finally:
            q.inflight -= 1
            if gauge is not None:
                gauge.dec()
