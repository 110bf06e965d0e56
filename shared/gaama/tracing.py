"""Tracing: OpenTelemetry spans around the core's stages (no Kafka or HTTP here).

:func:`configure` installs a tracer provider once per process from the ``GAAMA_OTEL_*``
settings; until then, and with ``GAAMA_OTEL_EXPORTER=none``, :func:`span` makes no span at all
and never calls the attribute builder it is given, so the stages pay one flag test.

Spans never carry a tenant's name: :func:`tenant_digest` is the attribute that identifies a
tenant (``gaama.tenant.digest``), the same digest the structured logs carry. How the trace
context travels between processes (Kafka record headers, HTTP headers) is the services'
business; here spans join whatever context is current.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

Attributes = Mapping[str, AttributeValue]
#: Attributes given as a function, so that nothing is built while tracing is off.
LazyAttributes = Callable[[], Attributes]

Exporter = Literal["none", "otlp", "console", "file"]

_state = {"enabled": False}


def enabled() -> bool:
    """Whether spans are recorded in this process."""
    return _state["enabled"]


def tenant_digest(tenant: str) -> str:
    """What spans and logs carry in place of a tenant's name: stable, and not the name."""
    h = hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=8, person=b"tenant")
    return h.hexdigest()


def tracer() -> Tracer:
    return trace.get_tracer("gaama")


def configure(
    service: str, exporter: Exporter, *, path: str | None = None, sample_ratio: float = 1.0
) -> None:
    """Record spans of ``service`` and send them to ``exporter``.

    Args:
        service: The resource's ``service.name`` is ``gaama-<service>`` unless
            ``OTEL_SERVICE_NAME`` says otherwise; ``OTEL_RESOURCE_ATTRIBUTES`` adds attributes.
        exporter: ``none`` (no-op tracer), ``otlp`` (OTLP over HTTP; endpoint, headers and
            timeout from the standard ``OTEL_EXPORTER_OTLP_*`` variables, batching from
            ``OTEL_BSP_*``), ``console`` (JSON to stdout) or ``file`` (one JSON object per
            line in ``path``, written as each span ends: for tests and debugging).
        path: The file of the ``file`` exporter.
        sample_ratio: Share of new traces recorded; a span with a parent follows the parent's
            decision (the sampled flag of the incoming ``traceparent``).
    """
    if exporter == "none":
        _state["enabled"] = False
        return
    resource = Resource.create({"service.name": f"gaama-{service}"}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(sample_ratio))
    )
    processor: SpanProcessor
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter())
    elif exporter == "console":
        processor = BatchSpanProcessor(ConsoleSpanExporter())
    else:
        if not path:
            raise ValueError("the file exporter needs a path (GAAMA_OTEL_FILE)")
        processor = SimpleSpanProcessor(JsonLinesExporter(Path(path)))
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _state["enabled"] = True


def shutdown() -> None:
    """Send the spans still buffered (at exit)."""
    provider = trace.get_tracer_provider()
    stop = getattr(provider, "shutdown", None)
    if stop is not None:
        stop()


def _attributes(attributes: Attributes | LazyAttributes | None) -> Attributes | None:
    return attributes() if callable(attributes) else attributes


@contextmanager
def span(
    name: str,
    attributes: Attributes | LazyAttributes | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    links: Sequence[Link] | None = None,
) -> Iterator[Span]:
    """A span around the block, current within it; an exception ends it with status ERROR.
    While tracing is off: no span (the current one, usually invalid, is yielded)."""
    if not _state["enabled"]:
        yield trace.get_current_span()
        return
    with tracer().start_as_current_span(
        name, kind=kind, attributes=_attributes(attributes), links=links
    ) as current:
        yield current


def annotate(attributes: Attributes | LazyAttributes) -> None:
    """Add attributes to the current span (nothing while tracing is off)."""
    if not _state["enabled"]:
        return
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(_attributes(attributes) or {})


def timed(
    name: str,
    started_ns: int,
    timings_ms: Mapping[str, float],
    attributes: Attributes | LazyAttributes | None = None,
) -> None:
    """A span ``name`` for work already done and timed, a child of the current span: from
    ``started_ns`` (epoch nanoseconds) to now, with one child per stage of ``timings_ms`` laid
    end to end in the order given (``<name>.<stage>``; a stage of 0 ms did not run)."""
    if not _state["enabled"]:
        return
    t = tracer()
    parent = t.start_span(name, start_time=started_ns, attributes=_attributes(attributes))
    inside = trace.set_span_in_context(parent)
    at = started_ns
    for stage, ms in timings_ms.items():
        if ms <= 0:
            continue
        end = at + int(ms * 1e6)
        t.start_span(f"{name}.{stage}", context=inside, start_time=at).end(end_time=end)
        at = end
    parent.end(end_time=max(at, time.time_ns()))


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids (hex), when there is a valid one."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


class JsonLinesExporter(SpanExporter):
    """Writes each finished span as one JSON object per line (the SDK's own JSON form)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(json.loads(s.to_json(indent=None))) + "\n" for s in spans)
        with self._lock:
            self._file.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            self._file.flush()
        return True


__all__ = [
    "INVALID_SPAN",
    "AttributeValue",
    "Attributes",
    "JsonLinesExporter",
    "LazyAttributes",
    "Link",
    "SpanKind",
    "annotate",
    "configure",
    "current_ids",
    "enabled",
    "shutdown",
    "span",
    "tenant_digest",
    "timed",
    "tracer",
]
