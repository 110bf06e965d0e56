"""Trace context in record headers, the no-op path while tracing is off, and JSON log lines."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from gaama import tracing
from gaama.config import load_settings
from services.runtime import logformat
from services.runtime.records import Record
from services.runtime.tracing import (
    consumed,
    handling,
    inject,
    publishing,
    record_context,
    trace_headers,
    within,
)

TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_only_the_trace_context_headers_are_kept():
    headers = [("traceparent", TRACEPARENT), ("x-other", b"1"), ("tracestate", b"k=v")]
    assert trace_headers(headers) == (("traceparent", TRACEPARENT), ("tracestate", b"k=v"))
    assert trace_headers(None) == ()


def test_a_record_context_round_trips_through_headers():
    ctx = record_context((("traceparent", TRACEPARENT),))
    assert ctx is not None
    assert dict(inject(ctx))["traceparent"] == TRACEPARENT
    assert record_context((("traceparent", b"garbage"),)) is None
    assert record_context(()) is None


def test_with_tracing_off_no_span_is_made_and_the_headers_pass_through(monkeypatch):
    monkeypatch.setitem(tracing._state, "enabled", False)
    headers = (("traceparent", TRACEPARENT),)
    ctx, out = consumed("t", 0, 5, headers, "extract")
    assert out == headers
    with publishing("t", out) as sent:
        assert sent == headers

    def never() -> tracing.Attributes:
        raise AssertionError("attributes built while tracing is off")

    with within(ctx), tracing.span("x", never):
        tracing.annotate(never)
        # the record's context is current: a line logged here names its trace
        assert tracing.current_ids() == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def _json_logger(service: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logformat.JsonFormatter(service))
    logger = logging.getLogger(f"test.json.{service}")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, out


def test_a_json_line_names_the_record_tenant_digest_and_span():
    logger, out = _json_logger("extract")
    record = Record("gaama.episodes.v1", b"k", b"v", partition=2, offset=41)
    span = TracerProvider().get_tracer("t").start_span("s")
    with handling(record, "acme"), within(trace.set_span_in_context(span)):
        logger.info("chunk %s closed", "c1")
    logger.warning("outside")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["message"] == "chunk c1 closed"
    assert first["level"] == "INFO" and first["logger"] == "test.json.extract"
    assert first["service"] == "extract"
    assert (first["topic"], first["partition"], first["offset"]) == ("gaama.episodes.v1", 2, 41)
    assert first["tenant"] == tracing.tenant_digest("acme") != "acme"
    assert first["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert first["time"].endswith("+00:00")
    assert not {"topic", "tenant", "trace_id"} & set(second)


def test_a_record_passed_in_extra_and_an_exception_are_logged():
    logger, out = _json_logger("ingest")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed", extra={"topic": "t", "partition": 0, "offset": 7})
    line = json.loads(out.getvalue())
    assert (line["topic"], line["partition"], line["offset"]) == ("t", 0, 7)
    assert "ValueError: boom" in line["error"]


def test_log_settings_are_validated():
    assert load_settings(log_level="debug").log_level == "DEBUG"
    with pytest.raises(Exception, match="GAAMA_LOG_FORMAT"):
        load_settings(log_format="xml")
    with pytest.raises(Exception, match="GAAMA_OTEL_FILE"):
        load_settings(otel_exporter="file")
    with pytest.raises(Exception, match="GAAMA_OTEL_SAMPLE_RATIO"):
        load_settings(otel_sample_ratio=2)
