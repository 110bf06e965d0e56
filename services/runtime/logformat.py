"""The services' log lines: plain text (``GAAMA_LOG_FORMAT=text``, the default) or one JSON
object per line (``json``), at ``GAAMA_LOG_LEVEL``.

A JSON line holds ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message`` and ``service``;
``trace_id`` and ``span_id`` when written in a recorded span; ``tenant`` (its digest,
:func:`gaama.tracing.tenant_digest`, never the name) when the work is a tenant's; ``topic``,
``partition`` and ``offset`` while a consumed record is handled (or when the call passes them
in ``extra``); ``error`` with the traceback of a logged exception.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from gaama import tracing
from gaama.config import Settings

#: The consumed record being handled: topic, partition, offset.
RECORD: ContextVar[tuple[str, int | None, int | None] | None] = ContextVar(
    "gaama_log_record", default=None
)
#: The digest of the tenant whose work is being done.
TENANT: ContextVar[str | None] = ContextVar("gaama_log_tenant", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_RECORD_FIELDS = ("topic", "partition", "offset")


@contextmanager
def about(
    record: tuple[str, int | None, int | None] | None = None, tenant: str | None = None
) -> Iterator[None]:
    """Lines written in the block name ``record`` and ``tenant`` (its digest is logged)."""
    r = RECORD.set(record) if record is not None else None
    t = TENANT.set(tracing.tenant_digest(tenant)) if tenant is not None else None
    try:
        yield
    finally:
        if t is not None:
            TENANT.reset(t)
        if r is not None:
            RECORD.reset(r)


def set_tenant(tenant: str) -> None:
    """The rest of the current task's lines are ``tenant``'s (an HTTP request, once its key
    named the tenant)."""
    TENANT.set(tracing.tenant_digest(tenant))


class JsonFormatter(logging.Formatter):
    """One JSON object per line (the fields in the module's docstring)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "service": self.service,
        }
        ids = tracing.current_ids()
        if ids is not None:
            out["trace_id"], out["span_id"] = ids
        tenant = TENANT.get()
        if tenant is not None:
            out["tenant"] = tenant
        given = {f: getattr(record, f) for f in _RECORD_FIELDS if hasattr(record, f)}
        if given:
            out.update(given)
        else:
            handled = RECORD.get()
            if handled is not None:
                out.update(zip(_RECORD_FIELDS, handled, strict=True))
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["error"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def formatter(service: str, settings: Settings) -> logging.Formatter:
    if settings.log_format == "json":
        return JsonFormatter(service)
    return logging.Formatter(TEXT_FORMAT)


def configure(service: str, settings: Settings) -> None:
    """Log to stderr in the configured format and level (a handler already on the root logger,
    such as a framework's, keeps its place and takes the format)."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    apply(service, settings)


def apply(service: str, settings: Settings) -> None:
    """Give every handler of the root logger the configured format, and the root its level."""
    root = logging.getLogger()
    root.setLevel(settings.log_level)
    for handler in root.handlers:
        handler.setFormatter(formatter(service, settings))


def uvicorn_log_config(settings: Settings) -> dict[str, Any] | None:
    """uvicorn's ``log_config``: its own (text) by default; with JSON logs, none, so its
    loggers write through the root logger's handlers in the same format."""
    if settings.log_format == "json":
        return None
    from uvicorn.config import LOGGING_CONFIG

    return LOGGING_CONFIG
