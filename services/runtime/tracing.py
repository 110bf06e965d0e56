"""Trace context across the process boundary: W3C ``traceparent``/``tracestate`` in Kafka
record headers and HTTP request headers, and the spans of receiving and sending them.

- A consumed record's headers give its remote parent (:func:`record_context`, the record's
  producer's span: ingest's HTTP request, a platform's own producer, the stage before); the
  stage's *consume* span is its child (:func:`consumed`) and the record's work runs in that
  span's context (:func:`within`).
- An event published carries the context it was made in (:func:`carrier`); the *publish*
  span (:func:`publishing`) is its child, and the headers sent name the publish span.
- While tracing is off no span is made and the headers of a consumed record are carried
  through unchanged, so a trace still joins across a stage that does not record it.
- :class:`TraceRequests`: an ASGI middleware making the server span of each HTTP request, the
  child of the request's own ``traceparent`` when it has one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gaama import tracing
from gaama.config import Settings
from services.runtime.logformat import about, set_tenant
from services.runtime.logformat import configure as configure_logs
from services.runtime.records import Record

#: The headers of the trace context (W3C Trace Context).
TRACE_HEADERS = ("traceparent", "tracestate")

Headers = tuple[tuple[str, bytes], ...]

_propagator = TraceContextTextMapPropagator()


class _HeaderGetter(Getter[Sequence[tuple[str, bytes]]]):
    def get(self, carrier: Sequence[tuple[str, bytes]], key: str) -> list[str] | None:
        found = [
            v.decode("latin-1") for k, v in carrier if k.lower() == key and isinstance(v, bytes)
        ]
        return found or None

    def keys(self, carrier: Sequence[tuple[str, bytes]]) -> list[str]:
        return [k for k, _ in carrier]


class _HeaderSetter(Setter[list[tuple[str, bytes]]]):
    def set(self, carrier: list[tuple[str, bytes]], key: str, value: str) -> None:
        carrier.append((key, value.encode("latin-1")))


_GET, _SET = _HeaderGetter(), _HeaderSetter()


def trace_headers(headers: Any) -> Headers:
    """The trace-context headers among a consumed record's (any other header is dropped)."""
    if not headers:
        return ()
    return tuple(
        (str(k), bytes(v))
        for k, v in headers
        if isinstance(k, str) and k.lower() in TRACE_HEADERS and isinstance(v, bytes | bytearray)
    )


def record_context(headers: Headers) -> Context | None:
    """The remote parent named by a record's headers; None when they name none."""
    if not headers:
        return None
    ctx = _propagator.extract(headers, getter=_GET)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def inject(ctx: Context | None = None) -> Headers:
    """The trace-context headers of ``ctx`` (default: the current context)."""
    out: list[tuple[str, bytes]] = []
    _propagator.inject(out, context=ctx, setter=_SET)
    return tuple(out)


def consumed(
    topic: str, partition: int | None, offset: int | None, headers: Headers, service: str
) -> tuple[Context | None, Headers]:
    """A record was received: its consume span (ended at once; the work is its child) and the
    context its work runs in, with the headers its output carries."""
    parent = record_context(headers)
    if not tracing.enabled():
        return parent, headers
    attrs: dict[str, str | int] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": topic,
        "messaging.consumer.group.name": service,
    }
    if partition is not None:
        attrs["messaging.destination.partition.id"] = str(partition)
    if offset is not None:
        attrs["messaging.kafka.offset"] = offset
    span = tracing.tracer().start_span(
        f"process {topic}", context=parent, kind=SpanKind.CONSUMER, attributes=attrs
    )
    span.end()
    ctx = trace.set_span_in_context(span, parent)
    return ctx, inject(ctx)


@contextmanager
def within(ctx: Context | None) -> Iterator[None]:
    """Run the block in ``ctx`` (a consumed record's); nothing changes for None."""
    if ctx is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def carrier() -> Headers:
    """The headers an event made now carries (the current context; none when there is none)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return ()
    return inject()


@contextmanager
def publishing(topic: str, parent: Headers) -> Iterator[Headers]:
    """The publish span of one event made in the context ``parent`` names; yields the headers
    to send (naming the publish span; ``parent`` itself while tracing is off)."""
    if not tracing.enabled():
        yield parent
        return
    attrs = {
        "messaging.system": "kafka",
        "messaging.operation.type": "send",
        "messaging.destination.name": topic,
    }
    with tracing.tracer().start_as_current_span(
        f"send {topic}", context=record_context(parent), kind=SpanKind.PRODUCER, attributes=attrs
    ):
        yield inject()


class TraceRequests:
    """ASGI middleware: a server span per HTTP request (``<method> <route>``), the child of the
    request's ``traceparent``; its status code and the route template as attributes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        raw = [(k.decode("latin-1"), v) for k, v in scope.get("headers", ())]
        parent = record_context(trace_headers(raw))
        method = scope.get("method", "GET")
        # Named by the route's template once routed: a path may hold ids, never a span name.
        attrs = {"http.request.method": method}
        status: dict[str, int] = {}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        with tracing.tracer().start_as_current_span(
            method, context=parent, kind=SpanKind.SERVER, attributes=attrs
        ) as span:
            try:
                await self.app(scope, receive, sending)
            finally:
                route = scope.get("route")
                template = getattr(route, "path", None)
                if isinstance(template, str):
                    span.update_name(f"{method} {template}")
                    span.set_attribute("http.route", template)
                code = status.get("code")
                if code is not None:
                    span.set_attribute("http.response.status_code", code)
                    if code >= 500:
                        span.set_status(trace.StatusCode.ERROR)


@contextmanager
def handling(record: Record, tenant: str | None = None) -> Iterator[None]:
    """The block is the work of a consumed ``record`` (of ``tenant``): its spans are children
    of the record's consume span, its log lines name the record and the tenant's digest."""
    with within(record.trace), about((record.topic, record.partition, record.offset), tenant):
        yield


def start(service: str, settings: Settings) -> None:
    """Logs in the configured format and level, and spans to the configured exporter."""
    configure_logs(service, settings)
    tracing.configure(
        service,
        settings.otel_exporter,
        path=settings.otel_file,
        sample_ratio=settings.otel_sample_ratio,
    )


def batch_links(records: Sequence[Record]) -> list[tracing.Link]:
    """Links to the consume spans of ``records`` (the work of a batch done once for all)."""
    if not tracing.enabled():
        return []
    out = []
    for r in records:
        ctx = trace.get_current_span(r.trace).get_span_context() if r.trace is not None else None
        if ctx is not None and ctx.is_valid:
            out.append(tracing.Link(ctx))
    return out


def trace_request(tenant: str, **counts: int) -> None:
    """The current HTTP request is ``tenant``'s: its span and log lines carry the digest."""
    set_tenant(tenant)
    tracing.annotate(
        lambda: {
            "gaama.tenant.digest": tracing.tenant_digest(tenant),
            **{f"gaama.{k}": v for k, v in counts.items()},
        }
    )
