"""Prometheus metrics of every stage, defined in one place.

Each service builds its own :class:`Metrics` on a registry it owns (tests pass a fresh
``CollectorRegistry``). Label values are created up front so dashboards see zeros, not gaps.
Names follow ``gaama_<service>_<thing>_total|_seconds|_bytes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
LLM_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)
NODE_KINDS = ("episode", "fact", "concept", "reflection")
DLQ_REASONS = (
    "invalid",
    "tenant_mismatch",
    "llm_output",
    "llm_transient",
    "store_unavailable",
    "cassette_miss",
    "refusal",
    "config",
    "permanent",
    "transient",
    "too_large",
    "undecodable",
    "error",
)
LLM_FAILURES = (
    "timeout",
    "rate_limited",
    "server_error",
    "connection",
    "malformed",
    "refusal",
    "cassette_miss",
    "other",
)
#: Why a background task's tick failed: an outage (retried next tick) or anything else.
TASK_FAILURES = ("store_unavailable", "broker_unavailable", "error")
#: Outages a consumer stage retries without limit, stalled meanwhile.
STALL_REASONS = ("store_unavailable", "broker_unavailable")
QUERY_MODES = ("gaama", "semantic", "ppr", "flat")
QUERY_STAGES = ("embed", "knn", "expand", "ppr", "pack")


@dataclass(frozen=True)
class Declare:
    """Declares one service's metrics on the registry it owns, named ``gaama_<service>_<name>``."""

    service: str
    registry: CollectorRegistry

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(self._full(name), doc, labels, registry=self.registry)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(self._full(name), doc, labels, registry=self.registry)

    def histogram(
        self,
        name: str,
        doc: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> Histogram:
        return Histogram(self._full(name), doc, labels, buckets=buckets, registry=self.registry)

    def _full(self, name: str) -> str:
        return f"gaama_{self.service}_{name}"


@dataclass
class StageMetrics:
    """Metrics every consumer stage has (ingest, extract, reflect)."""

    consumed: Counter
    stored: Counter
    dead_lettered: Counter
    retries: Counter
    batch_seconds: Histogram
    lag: Gauge
    task_failures: Counter
    stalled_since: Gauge
    no_progress: Gauge


def stage_metrics(
    service: str, registry: CollectorRegistry, tasks: Sequence[str] = ("consumer_lag",)
) -> StageMetrics:
    """Metrics of a consumer stage; ``tasks`` names its background tasks (timers), whose failure
    counters are created up front."""
    d = Declare(service, registry)
    m = StageMetrics(
        consumed=d.counter("consumed_total", "Messages consumed"),
        stored=d.counter("stored_total", "Nodes written to the graph, by kind", ["kind"]),
        dead_lettered=d.counter(
            "dead_lettered_total", "Messages sent to the dead-letter topic, by reason", ["reason"]
        ),
        retries=d.counter("retries_total", "Retried attempts after transient errors"),
        batch_seconds=d.histogram("batch_seconds", "Time to process one batch of messages"),
        lag=d.gauge(
            "consumer_lag",
            "Messages of the partition not yet committed by this consumer group "
            "(high-water mark minus committed offset; 0 for partitions owned by another replica)",
            ["topic", "partition"],
        ),
        task_failures=d.counter(
            "task_failures_total",
            "Failed ticks of a background task (retried on the next tick), by task and reason",
            ["task", "reason"],
        ),
        stalled_since=d.gauge(
            "stalled_since_timestamp_seconds",
            "Since when (Unix time) the stage has been retrying an outage of this kind and making "
            "no progress; 0 when it is not",
            ["reason"],
        ),
        no_progress=d.gauge(
            "no_progress_seconds",
            "How long the stage has had input waiting without committing any of it, not stalled "
            "on a known outage; 0 when it makes progress or has nothing to do",
        ),
    )
    for reason in STALL_REASONS:
        m.stalled_since.labels(reason)
    for task in tasks:
        for reason in TASK_FAILURES:
            m.task_failures.labels(task, reason)
    for kind in NODE_KINDS:
        m.stored.labels(kind)
    for reason in DLQ_REASONS:
        m.dead_lettered.labels(reason)
    return m


@dataclass
class EmbedMetrics:
    seconds: Histogram
    texts: Counter


def embed_metrics(service: str, registry: CollectorRegistry) -> EmbedMetrics:
    d = Declare(service, registry)
    return EmbedMetrics(
        seconds=d.histogram("embedding_seconds", "Time to embed one batch"),
        texts=d.counter("embedded_texts_total", "Texts embedded"),
    )


def gc_pause_metric(service: str, registry: CollectorRegistry) -> Histogram:
    """Pauses of Python's garbage collector, by generation (the process's event loop and every
    request in flight wait them out)."""
    return Declare(service, registry).histogram(
        "gc_pause_seconds",
        "Garbage collections by generation and how long each took",
        ["generation"],
    )


#: Lag of the event loop: how late a timer set for now fires (ms to seconds).
LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass
class LoopMetrics:
    """How busy a service's event loop is: how late its timers fire, and the CPU time of the
    thread that runs it (``rate()`` of it is the share of time the loop was busy)."""

    lag: Histogram
    cpu: Counter


def loop_metrics(service: str, registry: CollectorRegistry) -> LoopMetrics:
    d = Declare(service, registry)
    return LoopMetrics(
        lag=d.histogram(
            "event_loop_lag_seconds",
            "How late the event loop ran a timer due now: time every request waits for the loop",
            buckets=LOOP_LAG_BUCKETS,
        ),
        cpu=d.counter(
            "event_loop_cpu_seconds",
            "CPU time of the event loop's thread; its rate is the share of time the loop was busy",
        ),
    )


@dataclass
class LLMMetrics:
    calls: Counter
    failures: Counter
    tokens: Counter
    seconds: Histogram


def llm_metrics(service: str, registry: CollectorRegistry) -> LLMMetrics:
    d = Declare(service, registry)
    m = LLMMetrics(
        calls=d.counter(
            "llm_calls_total", "LLM calls by extractor and outcome", ["extractor", "outcome"]
        ),
        failures=d.counter("llm_failures_total", "Failed LLM attempts by reason", ["reason"]),
        tokens=d.counter("llm_tokens_total", "Tokens used, by direction", ["direction"]),
        seconds=d.histogram("llm_seconds", "Latency of one LLM call", buckets=LLM_BUCKETS),
    )
    for reason in LLM_FAILURES:
        m.failures.labels(reason)
    for direction in ("in", "out"):
        m.tokens.labels(direction)
    return m


@dataclass
class QueryMetrics:
    requests: Counter
    seconds: Histogram
    stage_seconds: Histogram
    subgraph_nodes: Histogram
    ppr_iterations: Histogram
    errors: Counter


def query_metrics(registry: CollectorRegistry) -> QueryMetrics:
    d = Declare("query", registry)
    m = QueryMetrics(
        requests=d.counter(
            "requests_total", "Requests by endpoint and status", ["endpoint", "status"]
        ),
        seconds=d.histogram("seconds", "Search latency by mode", ["mode"]),
        stage_seconds=d.histogram("stage_seconds", "Search latency by stage", ["stage"]),
        subgraph_nodes=d.histogram(
            "subgraph_nodes",
            "Nodes in the expanded subgraph",
            buckets=(10, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
        ),
        ppr_iterations=d.histogram(
            "ppr_iterations", "PPR power iterations", buckets=(1, 5, 10, 20, 30, 50, 75, 100)
        ),
        errors=d.counter("errors_total", "Errors by reason", ["reason"]),
    )
    for mode in QUERY_MODES:
        m.seconds.labels(mode)
    for stage in QUERY_STAGES:
        m.stage_seconds.labels(stage)
    return m


def http_error_metric(service: str, registry: CollectorRegistry) -> Counter:
    """``gaama_<service>_http_errors_total{reason}``: HTTP answers that were errors, by reason
    (``unauthorized``, ``invalid``, ``http``, or a :class:`~gaama.errors.GaamaError`'s reason)."""
    return Declare(service, registry).counter(
        "http_errors_total", "HTTP errors by reason", ["reason"]
    )


def key_reload_metric(service: str, registry: CollectorRegistry) -> Counter:
    """``gaama_<service>_api_keys_reload_failures_total``: re-reads of the key file that failed
    (unreadable, not JSON, an invalid entry); the keys in force before stay in force."""
    return Declare(service, registry).counter(
        "api_keys_reload_failures_total", "Key file re-reads that failed (previous keys kept)"
    )


def graph_size_gauge(service: str, registry: CollectorRegistry) -> Gauge:
    g = Declare(service, registry).gauge(
        "graph_nodes", "Nodes in the index, by kind (all tenants)", ["kind"]
    )
    for kind in NODE_KINDS:
        g.labels(kind)
    return g


FORGET_SCOPES = ("conversation", "subject", "tenant")
FORGET_OUTCOMES = ("accepted", "unavailable", "invalid", "forbidden")


@dataclass
class ForgetMetrics:
    """Forget requests (query service: accepted, refused) and cascades (reflect service)."""

    requests: Counter
    cascade_seconds: Histogram
    removed: Counter
    oldest_pending_seconds: Gauge
    pending_limit_seconds: Gauge


def forget_dropped_metric(service: str, registry: CollectorRegistry) -> Counter:
    """Forget events a stage dropped because their request is not accepted (``reason``:
    ``unknown``, ``abandoned``): published lanes of a request whose publication failed."""
    return Declare(service, registry).counter(
        "forget_events_dropped_total",
        "Forget events dropped because their request was not accepted, by reason",
        ["reason"],
    )


def forget_metrics(service: str, registry: CollectorRegistry) -> ForgetMetrics:
    d = Declare(service, registry)
    m = ForgetMetrics(
        requests=d.counter(
            "forget_requests_total", "Forget requests by scope and outcome", ["scope", "outcome"]
        ),
        cascade_seconds=d.histogram(
            "forget_cascade_seconds",
            "Time from the last lane's arrival to a forget request being done",
        ),
        removed=d.counter(
            "forget_removed_total", "Nodes removed by forget cascades, by kind", ["kind"]
        ),
        oldest_pending_seconds=d.gauge(
            "forget_oldest_pending_seconds",
            "Age of the oldest forget request not yet done (0 when none)",
        ),
        pending_limit_seconds=d.gauge(
            "forget_pending_limit_seconds",
            "How long a forget request may stay pending (GAAMA_FORGET_PENDING_ALERT_S)",
        ),
    )
    for scope in FORGET_SCOPES:
        for outcome in FORGET_OUTCOMES:
            m.requests.labels(scope, outcome)
    for kind in NODE_KINDS:
        m.removed.labels(kind)
    return m


#: Why an MCP tool call failed (``gaama_mcp_tool_errors_total{reason}``).
MCP_ERROR_REASONS = (
    "invalid",  # arguments refused by the tool's schema or by the REST API (400/413/422)
    "unauthorized",  # 401/403 from the REST API
    "not_found",  # 404
    "throttled",  # 429
    "unavailable",  # 503, connection refused, a service down
    "timeout",
    "upstream",  # another error status from the REST API
    "unknown_tool",
    "internal",  # a bug in the gateway (logged with its traceback)
)


@dataclass
class McpMetrics:
    calls: Counter
    errors: Counter
    seconds: Histogram


def mcp_metrics(registry: CollectorRegistry, tools: Sequence[str]) -> McpMetrics:
    """Per-tool calls, errors by reason and latency of the MCP gateway. A call naming no known
    tool is counted under ``tool="unknown"`` so a caller cannot grow the label set."""
    d = Declare("mcp", registry)
    m = McpMetrics(
        calls=d.counter("tool_calls_total", "Tool calls by tool", ["tool"]),
        errors=d.counter(
            "tool_errors_total",
            "Tool calls that ended in a tool error, by tool and reason",
            ["tool", "reason"],
        ),
        seconds=d.histogram(
            "tool_seconds", "Tool call latency by tool (REST round trips included)", ["tool"]
        ),
    )
    for tool in (*tools, "unknown"):
        m.calls.labels(tool)
        m.seconds.labels(tool)
        for reason in MCP_ERROR_REASONS:
            m.errors.labels(tool, reason)
    return m
