"""Errors raised by GAAMA.

The tree::

    GaamaError                      base of everything we raise on purpose
    ├── RetryableError              transient: retry with backoff, then dead-letter
    │   ├── StoreUnavailable        Redis did not answer in time / connection lost (outage)
    │   ├── LLMTransientError       429, 5xx, timeouts, connection errors from the LLM, after
    │   │                           the client's own retries: the endpoint is down (outage)
    │   ├── LLMMalformedOutput      output still malformed after the client's re-asks
    │   ├── ChunkBusy               another close holds a chunk's lock; it ends or its lease
    │   │                           lapses (retried without limit, like an outage)
    │   └── BrokerUnavailable       Kafka-compatible broker unreachable (outage)
    └── PermanentError              retrying cannot help: dead-letter at once
        ├── ValidationError         bad input (HTTP body, Kafka message, config)
        ├── NodesGone               a conditional write's sources were forgotten meanwhile
        ├── LLMOutputError          a refusal, a rejected request, or an answer that is JSON
        │                           but unusable (fails validation)
        ├── CassetteMiss            replay mode and the request is not in the cassette
        ├── ConfigError             invalid or missing setting (names the variable)
        ├── NotFound                a node that does not exist *for this tenant*
        ├── Forbidden               a credential's bound scope or permissions refuse it
        └── DimensionMismatch       embedder dimension differs from the vector index

Every class carries a ``retryable`` flag so generic wrappers never need ``isinstance``
chains (the habit of aiokafka's ``errors.py``); a retryable error also says whether it is an
``outage`` (retried without limit: dead-lettering during an outage only moves the problem) and
whether its ``retries_spent`` (the layer that raised it has retried already: retrying again would
nest the layers). See docs/architecture.md, "Delivery guarantees".
"""

from __future__ import annotations


class GaamaError(Exception):
    """Base class of every error GAAMA raises on purpose."""

    retryable: bool = False
    outage: bool = False
    retries_spent: bool = False
    reason: str = "error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class RetryableError(GaamaError):
    retryable = True
    reason = "transient"


class PermanentError(GaamaError):
    retryable = False
    reason = "permanent"


class StoreUnavailable(RetryableError):
    reason = "store_unavailable"
    outage = True


class LLMTransientError(RetryableError):
    """Raised after GAAMA_LLM_MAX_RETRIES retries of the client (or the embedder): the endpoint
    is down or throttling. Its input is not at fault, so it is an outage: the runtime keeps the
    batch and retries it without limit, like Redis being away, instead of dead-lettering turns
    whose facts would then never be extracted."""

    reason = "llm_transient"
    outage = True


class LLMMalformedOutput(RetryableError):
    """The model's answer was still malformed (not JSON, cut off) after the client's re-asks.
    Sampling differs from one ask to the next, so the runtime retries the batch
    GAAMA_MAX_RETRIES times before dead-lettering it as ``llm_output``."""

    reason = "llm_output"


class ChunkBusy(RetryableError):
    """Another close holds a chunk's lock. That close ends, or its lease lapses within
    GAAMA_CHUNK_LOCK_S when its worker died, so the record is retried without limit like an
    outage: passing over it would move the chunk's boundary, and dead-lettering it would drop
    its turn's facts."""

    reason = "chunk_busy"
    outage = True


class BrokerUnavailable(RetryableError):
    reason = "broker_unavailable"
    outage = True


class ValidationError(PermanentError):
    reason = "invalid"


class NodesGone(PermanentError):
    """A conditional write found nodes it depends on deleted (a forget ran meanwhile)."""

    reason = "gone"

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"{len(missing)} node(s) the write depends on are gone: {missing[:5]}")
        self.missing = missing


class LLMOutputError(PermanentError):
    reason = "llm_output"


class CassetteMiss(PermanentError):
    reason = "cassette_miss"


class ConfigError(PermanentError):
    reason = "config"


class NotFound(PermanentError):
    reason = "not_found"


class Forbidden(PermanentError):
    """The caller is known but may not do this: an end-user token reaching past its subject,
    its conversation or its permissions (HTTP 403; nothing is read or written)."""

    reason = "forbidden"
    http_status = 403


class DimensionMismatch(PermanentError):
    reason = "dimension_mismatch"
