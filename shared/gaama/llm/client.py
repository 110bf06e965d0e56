"""JSON-producing chat calls against any OpenAI-compatible endpoint.

:class:`LLMClient` wraps ``openai.AsyncOpenAI`` with what a pipeline stage needs:

- structured output: JSON-schema ``response_format`` first; when the server rejects it (a 400
  naming ``response_format``/``json_schema``) JSON mode, then plain text from which the JSON
  object is cut out. The downgrade is remembered per client, so only the first call pays for it;
- an explicit timeout per attempt and bounded retries with exponential backoff and jitter on
  429 (honouring ``Retry-After``), 5xx, timeouts and connection errors, then
  :class:`~gaama.errors.LLMTransientError`. The SDK's own retries are off so ours are the only
  ones and are counted;
- a malformed, truncated or empty answer asked again ``output_retries`` times, then
  :class:`~gaama.errors.LLMMalformedOutput` (retryable: sampling differs from one ask to the
  next); refusals and requests the endpoint rejects fail at once with
  :class:`~gaama.errors.LLMOutputError` (asking again rarely helps and costs tokens), and an
  endpoint that refuses the model or the key (401, 403, 404) with
  :class:`~gaama.errors.ConfigError`;
- a semaphore bounding concurrent calls, Prometheus metrics and logs naming the model;
- record/replay through a :class:`~gaama.llm.cassette.Cassette`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from typing import Any, Literal, cast

import openai
from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry

from gaama import tracing
from gaama.config import Settings
from gaama.errors import (
    CassetteMiss,
    ConfigError,
    GaamaError,
    LLMMalformedOutput,
    LLMOutputError,
    LLMTransientError,
)
from gaama.llm.cassette import Cassette, request_key
from gaama.llm.replies import BadOutput, Transient, parse_json_object, retry_after_s
from gaama.metrics import LLMMetrics, llm_metrics

log = logging.getLogger(__name__)

FormatMode = Literal["json_schema", "json_object", "text"]

#: Upper bound on a single backoff sleep, Retry-After included: a server asking for longer is
#: better served by the stage's own retry and dead-letter path than by a parked coroutine.
MAX_BACKOFF_S = 30.0

_FORMAT_REJECTION = re.compile(r"response_format|json_schema|json_object|structured", re.I)


class LLMClient:
    """Chat completions that return one JSON object, with retries, fallbacks and metrics.

    Args:
        settings: ``llm_*`` settings and ``retry_backoff_s`` (the first backoff step).
        metrics: Where to count calls; a private registry when omitted.
        openai_client: An existing client to use (then the caller closes it); by default one
            is created from the settings and closed by :meth:`aclose`.
        output_retries: Extra attempts after a malformed or truncated answer.

    Raises:
        ConfigError: no model or endpoint for a mode that needs one.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: LLMMetrics | None = None,
        openai_client: AsyncOpenAI | None = None,
        output_retries: int = 2,
    ) -> None:
        self._mode = settings.llm_cassette_mode
        self._cassette = Cassette(settings.llm_cassette) if settings.llm_cassette else None
        if self._mode != "off" and self._cassette is None:
            raise ConfigError("GAAMA_LLM_CASSETTE is required with GAAMA_LLM_CASSETTE_MODE")
        model = settings.llm_model
        if model is None and self._mode == "replay" and self._cassette is not None:
            # Replay needs no endpoint; the model (part of every key) comes from the cassette.
            models = self._cassette.models()
            if len(models) != 1:
                raise ConfigError(
                    f"GAAMA_LLM_MODEL: cassette {self._cassette.path} holds models "
                    f"{sorted(models)}; set the one to replay"
                )
            model = models.pop()
        if model is None:
            raise ConfigError("GAAMA_LLM_MODEL is not set")
        self.model: str = model
        self._metrics = metrics or llm_metrics("llm", CollectorRegistry())
        self._timeout_s = settings.llm_timeout_s
        self._max_retries = settings.llm_max_retries
        self._output_retries = output_retries
        self._backoff_s = settings.retry_backoff_s
        self._sem = asyncio.Semaphore(settings.llm_concurrency)
        self._format: FormatMode = "json_schema"
        self._owns_client = False
        self._client: AsyncOpenAI | None = None
        if openai_client is not None:
            self._client = openai_client
        elif self._mode != "replay":
            if not settings.llm_base_url:
                raise ConfigError("GAAMA_LLM_BASE_URL is not set")
            key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
            self._client = AsyncOpenAI(
                base_url=settings.llm_base_url,
                # Local servers (vLLM, Ollama, llama.cpp) ignore the key, the SDK insists on one;
                # passing it explicitly also stops the SDK from reading OPENAI_API_KEY.
                api_key=key or "unused",
                timeout=settings.llm_timeout_s,
                max_retries=0,  # ours are the only retries, so they are bounded and counted
            )
            self._owns_client = True
        for outcome in ("ok", "error"):
            self._metrics.calls.labels(self.model, outcome)
        log.info("LLM client for model %s (cassette mode %s)", self.model, self._mode)

    @property
    def format_mode(self) -> FormatMode:
        """The structured-output mode in use (downgraded after a server rejects one)."""
        return self._format

    async def aclose(self) -> None:
        """Close the OpenAI client if this object created it."""
        if self._owns_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the one public call ----------------------------------------------------------------

    async def complete_json(
        self, *, stage: str, system: str, user: str, schema: dict[str, Any], schema_name: str
    ) -> dict[str, Any]:
        """Ask the model for one JSON object following ``schema``.

        Args:
            stage: What the call is for ("extract", "reflect", ...); logged and in cassettes.
            system: System message.
            user: User message.
            schema: JSON schema of the answer (strict-mode compatible: every property required,
                ``additionalProperties: false``).
            schema_name: Name sent with the schema (``^[a-zA-Z0-9_-]+$``).

        Returns:
            The parsed JSON object. Not validated against ``schema``: callers validate.

        Raises:
            LLMTransientError: still failing after ``llm_max_retries`` retries.
            LLMOutputError: a refusal or a rejected request.
            LLMMalformedOutput: output still malformed after the output retries.
            ConfigError: the endpoint refused the model or the key (401, 403, 404), or the
                client is closed.
            CassetteMiss: replay mode and the request was never recorded.
        """
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        logical = {
            "model": self.model,
            "messages": messages,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": schema, "strict": True},
            },
        }
        key = request_key(logical)
        if self._mode == "replay":
            assert self._cassette is not None  # checked in __init__
            try:
                answer = self._cassette.lookup(key, stage=stage)
            except CassetteMiss:
                self._metrics.failures.labels("cassette_miss").inc()
                self._metrics.calls.labels(self.model, "error").inc()
                raise
            self._metrics.calls.labels(self.model, "ok").inc()
            return answer

        async with self._sem:
            try:
                answer = await self._with_retries(stage, system, user, schema, schema_name)
            except Exception as exc:
                # Counted, never swallowed: the caller's retry/dead-letter path decides.
                if not isinstance(exc, GaamaError):
                    self._metrics.failures.labels("other").inc()
                self._metrics.calls.labels(self.model, "error").inc()
                raise
        self._metrics.calls.labels(self.model, "ok").inc()
        if self._mode == "record":
            assert self._cassette is not None
            # fsync blocks for milliseconds; keep it off the event loop.
            await asyncio.to_thread(
                self._cassette.record,
                key,
                stage=stage,
                model=self.model,
                request=logical,
                response=answer,
            )
        return answer

    # --- internals --------------------------------------------------------------------------

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        # Full jitter (AWS architecture blog) spreads retries of many workers hit by the same
        # 429; a server-given Retry-After is a floor, not a suggestion.
        base = min(MAX_BACKOFF_S, self._backoff_s * (2**attempt))
        delay = random.uniform(base / 2, base)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_BACKOFF_S))
        return delay

    async def _with_retries(
        self, stage: str, system: str, user: str, schema: dict[str, Any], schema_name: str
    ) -> dict[str, Any]:
        transient_failures = 0
        output_failures = 0
        while True:
            try:
                return await self._attempt(stage, system, user, schema, schema_name)
            except Transient as exc:
                self._metrics.failures.labels(exc.reason).inc()
                if transient_failures >= self._max_retries:
                    raise LLMTransientError(
                        f"LLM {self.model} ({stage}): {exc.reason} after "
                        f"{transient_failures + 1} attempts: {exc}"
                    ) from exc
                delay = self._backoff(transient_failures, exc.retry_after)
                transient_failures += 1
                log.warning(
                    "LLM %s (%s): %s (%s); retry %d/%d in %.2fs",
                    self.model,
                    stage,
                    exc.reason,
                    exc,
                    transient_failures,
                    self._max_retries,
                    delay,
                )
                await asyncio.sleep(delay)
            except BadOutput as exc:
                self._metrics.failures.labels("malformed").inc()
                if output_failures >= self._output_retries:
                    raise LLMMalformedOutput(
                        f"LLM {self.model} ({stage}): output still malformed after "
                        f"{output_failures + 1} attempts: {exc}"
                    ) from exc
                output_failures += 1
                log.warning(
                    "LLM %s (%s): malformed output (%s); asking again (%d/%d)",
                    self.model,
                    stage,
                    exc,
                    output_failures,
                    self._output_retries,
                )

    def _messages(
        self, system: str, user: str, schema: dict[str, Any], schema_name: str
    ) -> list[dict[str, str]]:
        if self._format != "json_schema":
            # Without server-side schema enforcement the schema has to travel in the prompt;
            # JSON mode also requires the word "JSON" to appear in the messages.
            system = (
                f"{system}\n\nAnswer with exactly one JSON object named {schema_name} that "
                f"conforms to this JSON schema, and nothing else:\n{json.dumps(schema)}"
            )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _response_format(self, schema: dict[str, Any], schema_name: str) -> dict[str, Any] | None:
        if self._format == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": schema, "strict": True},
            }
        if self._format == "json_object":
            return {"type": "json_object"}
        return None

    async def _attempt(
        self, stage: str, system: str, user: str, schema: dict[str, Any], schema_name: str
    ) -> dict[str, Any]:
        # One client span per request to the endpoint, named and described as the OpenTelemetry
        # generative-AI conventions say ("chat <model>", gen_ai.*).
        with tracing.span(
            f"chat {self.model}",
            lambda: {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.system": "openai",
                "gen_ai.request.model": self.model,
                "gen_ai.output.type": "json",
                "gaama.llm.stage": stage,
            },
            kind=tracing.SpanKind.CLIENT,
        ):
            return await self._request(stage, system, user, schema, schema_name)

    async def _request(
        self, stage: str, system: str, user: str, schema: dict[str, Any], schema_name: str
    ) -> dict[str, Any]:
        client = self._client
        if client is None:
            raise ConfigError(f"LLM client for {self.model} is closed")
        while True:
            fmt = self._format
            kwargs: dict[str, Any] = {
                "model": self.model,
                "messages": self._messages(system, user, schema, schema_name),
            }
            response_format = self._response_format(schema, schema_name)
            if response_format is not None:
                kwargs["response_format"] = response_format
            started = time.perf_counter()
            try:
                # The SDK timeout bounds each socket operation; this one bounds the whole call
                # (a server trickling bytes would otherwise outlive it).
                async with asyncio.timeout(self._timeout_s + 1.0):
                    completion = await client.chat.completions.create(
                        **kwargs, timeout=self._timeout_s
                    )
            except TimeoutError as exc:
                raise Transient("timeout", f"no answer within {self._timeout_s}s") from exc
            except openai.APITimeoutError as exc:
                raise Transient("timeout", f"no answer within {self._timeout_s}s") from exc
            except openai.APIConnectionError as exc:
                raise Transient("connection", str(exc)) from exc
            except openai.BadRequestError as exc:
                if fmt != "text" and _FORMAT_REJECTION.search(str(exc)):
                    self._format = "json_object" if fmt == "json_schema" else "text"
                    log.warning(
                        "LLM %s rejected response_format %s (%s); using %s from now on",
                        self.model,
                        fmt,
                        exc,
                        self._format,
                    )
                    continue
                self._metrics.failures.labels("other").inc()
                raise LLMOutputError(
                    f"LLM {self.model} ({stage}) rejected the request: {exc}"
                ) from exc
            except openai.APIStatusError as exc:
                raise self._classify_status(stage, exc) from exc
            finally:
                self._metrics.seconds.observe(time.perf_counter() - started)
            return self._read(stage, completion)

    def _classify_status(self, stage: str, exc: openai.APIStatusError) -> Exception:
        status = exc.status_code
        if status == 429:
            return Transient("rate_limited", str(exc), retry_after_s(exc.response))
        if status >= 500:
            return Transient("server_error", str(exc), retry_after_s(exc.response))
        if status == 408:
            return Transient("timeout", str(exc))
        self._metrics.failures.labels("other").inc()
        if status in (401, 403, 404):
            return ConfigError(
                f"LLM endpoint refused model {self.model} ({status}); check GAAMA_LLM_BASE_URL, "
                f"GAAMA_LLM_MODEL and GAAMA_LLM_API_KEY: {exc}"
            )
        return LLMOutputError(f"LLM {self.model} ({stage}) rejected the request: {exc}")

    def _read(self, stage: str, completion: Any) -> dict[str, Any]:
        usage = getattr(completion, "usage", None)
        if usage is not None:
            self._metrics.tokens.labels("in").inc(getattr(usage, "prompt_tokens", 0) or 0)
            self._metrics.tokens.labels("out").inc(getattr(usage, "completion_tokens", 0) or 0)
        choices = getattr(completion, "choices", None) or []
        tracing.annotate(lambda: _usage_attributes(completion, usage, choices))
        if not choices:
            raise BadOutput("response has no choices")
        choice = choices[0]
        message = choice.message
        refusal = getattr(message, "refusal", None)
        if refusal or choice.finish_reason == "content_filter":
            self._metrics.failures.labels("refusal").inc()
            raise LLMOutputError(
                f"LLM {self.model} ({stage}) refused: {refusal or 'content filter'}",
                reason="refusal",
            )
        if choice.finish_reason == "length":
            raise BadOutput("answer truncated (finish_reason=length)")
        content = cast(str | None, message.content)
        if not content:
            raise BadOutput("empty answer")
        try:
            answer = parse_json_object(content)
        except ValueError as exc:
            raise BadOutput(str(exc)) from exc
        log.debug(
            "LLM %s (%s) answered in %s mode, tokens in=%s out=%s",
            self.model,
            stage,
            self._format,
            getattr(usage, "prompt_tokens", None),
            getattr(usage, "completion_tokens", None),
        )
        return answer


def _usage_attributes(completion: Any, usage: Any, choices: list[Any]) -> tracing.Attributes:
    """The gen_ai response attributes of a completion: model, token counts, finish reasons."""
    out: dict[str, tracing.AttributeValue] = {}
    model = getattr(completion, "model", None)
    if isinstance(model, str):
        out["gen_ai.response.model"] = model
    for attr, field in (
        ("gen_ai.usage.input_tokens", "prompt_tokens"),
        ("gen_ai.usage.output_tokens", "completion_tokens"),
    ):
        n = getattr(usage, field, None)
        if isinstance(n, int):
            out[attr] = n
    reasons = [str(c.finish_reason) for c in choices if getattr(c, "finish_reason", None)]
    if reasons:
        out["gen_ai.response.finish_reasons"] = reasons
    return out
