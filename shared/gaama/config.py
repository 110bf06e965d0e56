"""Settings, read once from ``GAAMA_*`` environment variables and validated at start-up.

Build them in a service's ``main()`` with :func:`load_settings` and pass them down; nothing in the
core reads the environment at import time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gaama import ids, tokens
from gaama.connections import KafkaConnection, RedisConnection
from gaama.errors import ConfigError
from gaama.ids import TenantId


class ApiKey(BaseModel):
    """One API key: only its SHA-256 is stored; the tenant it maps to; whether it is disabled."""

    model_config = ConfigDict(extra="forbid")

    key_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    tenant: TenantId
    disabled: bool = False


#: Longest API key accepted; anything longer is refused before it is hashed.
API_KEY_MAX = 512


def hash_api_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def check_key_tenants(keys: list[ApiKey], where: str) -> list[ApiKey]:
    """Refuse key sets whose tenants differ only by case: people read ``t1`` and ``T1`` as one.

    Raises:
        ValueError: naming the colliding tenants and ``where`` they were configured.
    """
    clashes = ids.case_collisions([k.tenant for k in keys])
    if clashes:
        pairs = ", ".join(f"{a!r}/{b!r}" for a, b in clashes)
        raise ValueError(
            f"{where} maps keys to tenants that differ only by case ({pairs}); tenants are "
            f"matched exactly, so rename one of each pair"
        )
    return keys


class SigningKeyEntry(BaseModel):
    """One end-user token signing key (``signing_keys`` of the key file, ``GAAMA_SIGNING_KEYS``).

    HMAC needs the secret itself, so it is stored as it is (base64url of at least 32 bytes, as
    ``gaama token keygen`` prints it): the key file is a secret.
    """

    model_config = ConfigDict(extra="forbid")

    kid: str = Field(pattern=tokens.KID_PATTERN)
    tenant: TenantId
    secret: SecretStr
    disabled: bool = False

    @field_validator("secret")
    @classmethod
    def _secret(cls, v: SecretStr) -> SecretStr:
        tokens.decode_secret(v.get_secret_value())
        return v

    def signing_key(self) -> tokens.SigningKey:
        return tokens.SigningKey.from_text(
            self.kid, self.tenant, self.secret.get_secret_value(), disabled=self.disabled
        )


@dataclass(frozen=True)
class KeyFile:
    """What a key file holds: API keys, and the signing keys of end-user tokens."""

    api_keys: list[ApiKey]
    signing_keys: list[SigningKeyEntry]


def check_signing_keys(entries: list[SigningKeyEntry], where: str) -> list[SigningKeyEntry]:
    """Refuse two signing keys under one ``kid``: a token names its key by it.

    Raises:
        ValueError: naming the repeated kids and ``where`` they were configured.
    """
    kids = [e.kid for e in entries]
    repeated = sorted({k for k in kids if kids.count(k) > 1})
    if repeated:
        raise ValueError(f"{where} has several signing keys with kid {', '.join(repeated)}")
    return entries


def load_keys(path: str | Path) -> KeyFile:
    """API keys and signing keys from a JSON file: a list of API keys (like ``GAAMA_API_KEYS``)
    or an object ``{"api_keys": [...], "signing_keys": [...]}``.

    Raises:
        ConfigError: the file is missing, not JSON, or a key is invalid (the message says which).
    """
    where = f"GAAMA_API_KEYS_FILE {str(path)!r}"
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if isinstance(raw, dict):
        extra = sorted(set(raw) - {"api_keys", "signing_keys"})
        if extra:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(extra)}")
        api, signing = raw.get("api_keys", []), raw.get("signing_keys", [])
    else:
        api, signing = raw, []
    if not isinstance(api, list) or not isinstance(signing, list):
        raise ConfigError(
            f"{where}: expected a JSON list of keys, or an object with the lists 'api_keys' "
            f"and 'signing_keys'"
        )
    try:
        keys = [ApiKey.model_validate(k) for k in api]
        entries = [SigningKeyEntry.model_validate(k) for k in signing]
        check_key_tenants(keys, where)
        check_signing_keys(entries, where)
    except (ValidationError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return KeyFile(keys, entries)


def load_key_file(path: str | Path) -> list[ApiKey]:
    """The API keys of a key file (see :func:`load_keys`).

    Raises:
        ConfigError: the file is missing, not JSON, or a key is invalid (the message says which).
    """
    return load_keys(path).api_keys


def match_key(keys: list[ApiKey], key: str) -> ApiKey | None:
    """The entry whose digest is ``key``'s, compared in constant time against every entry."""
    digest = hash_api_key(key)
    found = None
    for k in keys:
        if hmac.compare_digest(k.key_sha256, digest) and found is None:
            found = k
    return found


class RequestLimits(BaseModel):
    """What one request may ask for (``GAAMA_LIMITS__*``): per-request ``params``, ``k`` and
    ``budget`` above these answer 422 naming the bound. ``None`` means the retrieval setting's
    own value, so by default a request may lower the cost of a search but never raise it."""

    k: int = Field(20, ge=1, le=200)
    budget_words: int | None = Field(None, ge=10, le=20000)
    budget_tokens: int | None = Field(None, ge=10, le=20000)
    hops: int | None = Field(None, ge=0, le=4)
    seeds: int | None = Field(None, ge=1, le=500)
    pool_min: int | None = Field(None, ge=1, le=2000)
    graph_pool_min: int | None = Field(None, ge=1, le=2000)
    max_expanded: int | None = Field(None, ge=10, le=100000)
    expanded_candidates: int | None = Field(None, ge=0, le=100000)
    expanded_read: int | None = Field(None, ge=0, le=100000)
    max_iter: int | None = Field(None, ge=1, le=1000)
    ppr_inline_max: int | None = Field(None, ge=0, le=20000)
    cap_facts: int | None = Field(None, ge=0, le=1000)
    cap_reflections: int | None = Field(None, ge=0, le=1000)
    cap_episodes: int | None = Field(None, ge=0, le=1000)
    lexical_k: int | None = Field(None, ge=0, le=2000)


class RetrievalSettings(BaseModel):
    """The paper's retrieval defaults (ARCHITECTURE.md §1); each overridable per request."""

    # KNN pool floors (gaama.retrieval.request.pool_size): ``pool_min`` where the pool is the
    # only source of candidates (semantic), ``graph_pool_min`` where the expansion's read-ahead
    # adds its ``expanded_candidates`` (gaama, ppr).
    pool_min: int = Field(80, ge=1, le=2000)
    graph_pool_min: int = Field(40, ge=1, le=2000)
    seeds: int = Field(40, ge=1, le=500)
    hops: int = Field(2, ge=0, le=4)
    alpha: float = Field(0.6, gt=0.0, lt=1.0)  # follow probability; restart = 1 - alpha
    max_iter: int = Field(100, ge=1, le=1000)
    tol: float = Field(1e-6, gt=0.0, le=1e-2)
    hub_degree: int = Field(50, ge=1)
    hub_dampening: float = Field(0.5, ge=0.0, le=1.0)
    w_ppr: float = Field(0.1, ge=0.0, le=10.0)
    w_sim: float = Field(1.0, ge=0.0, le=10.0)
    # The packed memory's budget: ``budget_words`` whitespace words, or with ``budget_unit``
    # "tokens" ``budget_tokens`` tokens of the embedder's tokenizer (gaama.retrieval.tokencount).
    budget_unit: Literal["words", "tokens"] = "words"
    budget_words: int = Field(1000, ge=10, le=20000)
    budget_tokens: int = Field(1000, ge=10, le=20000)
    cap_facts: int = Field(60, ge=0, le=1000)
    cap_reflections: int = Field(20, ge=0, le=1000)
    cap_episodes: int = Field(80, ge=0, le=1000)
    # Nodes the expansion admits at most: bounds the subgraph, and so the walk's cost, for any
    # tenant size (docs/decisions/0003-subgraph-bound-and-read-ahead.md).
    max_expanded: int = Field(300, ge=10, le=100000)
    # Expanded nodes (outside the KNN pool) scored per query: those with the most PPR mass among
    # the first ``expanded_read`` the expansion admitted (read in the expansion's own call)
    # (docs/decisions/0003-subgraph-bound-and-read-ahead.md).
    expanded_candidates: int = Field(80, ge=0, le=100000)
    expanded_read: int = Field(80, ge=0, le=100000)
    # Largest walk (subgraph nodes + stored adjacency entries) PPR runs in the request's own
    # thread; a larger one goes to a worker thread. For a short walk a worker only adds
    # handoffs: the GIL keeps the loop waiting anyway
    # (docs/decisions/0005-ppr-in-the-request-thread.md).
    # Bounded: a request may not hold the event loop for a long walk.
    ppr_inline_max: int = Field(4000, ge=0, le=20000)
    # Lexical channel (full-text BM25 over node text, fused with the KNN pool; docs/architecture.md,
    # "Lexical channel"): the weight of its term in the seeds and the score (0 turns it off),
    # how many full-text matches it reads, and how the two channels are fused (``cover``: the
    # share of the query's term weight a node matches, unscaled).
    w_lex: float = Field(0.3, ge=0.0, le=10.0)
    lexical_k: int = Field(20, ge=0, le=2000)
    fusion: Literal["score", "rrf", "cover"] = "cover"
    # Time-aware queries (docs/architecture.md, "Time-aware queries"): what a candidate in a
    # period the query names gains on its score (0 turns the prior off).
    w_time: float = Field(0.2, ge=0.0, le=10.0)
    # The named-person prior (docs/architecture.md, "Named people"): what a candidate said by
    # (an episode's speaker) or about (a fact's or reflection's subject) a person the query
    # names gains on its score, when the candidates are said by or about others too (0: off).
    w_person: float = Field(0.1, ge=0.0, le=10.0)
    # The ranked list says each turn once: an episode a higher-ranked fact was derived from, or
    # a fact whose source turns are all above it, is passed over (packing already does this).
    rank_distinct: bool = True
    # A superseded fact (a later one ended it), or an episode all of whose facts ended, scores
    # this share of its score and ranks after every item that holds (gaama.retrieval.current);
    # with omit_superseded it is left out.
    superseded_weight: float = Field(0.05, ge=0.0, le=1.0)
    omit_superseded: bool = False
    # Items show their text compacted (docs/architecture.md, "Packing"): a fact's
    # "(said on D)" as "(said D)", one word less of the budget per fact.
    compact_text: bool = True
    # A reflection takes the reflections' share of the budget only when it scores at least this
    # share of the best candidate's score (docs/architecture.md, "Packing"; 0: always).
    reflection_floor: float = Field(0.8, ge=0.0, le=1.0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GAAMA_", env_nested_delimiter="__", extra="ignore", validate_default=True
    )

    # --- servers ---------------------------------------------------------------------------
    redis_url: str = "redis://127.0.0.1:6390/0"
    # Redis Cluster: redis_url names any one primary (the others are discovered from it).
    redis_cluster: bool = False
    # ACL user, password and TLS files of every Redis client (GAAMA_REDIS__*; TLS by rediss://).
    redis: RedisConnection = Field(default_factory=RedisConnection)
    kafka_bootstrap: str = "127.0.0.1:9093"
    # Security protocol, SASL and TLS of every Kafka client (GAAMA_KAFKA__*).
    kafka: KafkaConnection = Field(default_factory=KafkaConnection)
    topic_partitions: int = Field(4, ge=1, le=1024)
    topic_prefix: str = Field("", pattern=r"^[A-Za-z0-9_.\-]*$")  # tests isolate topics with it
    # A consumer that dies holds its partitions until the session times out: keep it short so a
    # restarted worker takes over quickly (faust's default is 60 s). The bounds are Apache
    # Kafka's default group.min.session.timeout.ms and group.max.session.timeout.ms: a broker
    # refuses a session outside them, so the start fails here instead, naming the variable.
    consumer_session_timeout_s: float = Field(10.0, ge=6, le=1800)
    # Seconds from SIGTERM until the process must be gone: set it to the pod's
    # terminationGracePeriodSeconds (a consumer finishes or abandons its batch within it).
    shutdown_grace_s: float = Field(30.0, ge=8, le=3600)
    index_name: str = Field("gaama-idx", pattern=r"^[A-Za-z0-9_\-]+$")
    key_prefix: str = Field("gaama", pattern=r"^[A-Za-z0-9_\-]+$")
    # How often each consumer refreshes gaama_<service>_consumer_lag (one ListOffsets call).
    lag_interval_s: float = Field(5.0, gt=0, le=300)
    # A consumer with input waiting that commits none of it for this long, while not stalled
    # on a known outage, reports not live (/healthz 503) so that it is restarted; 0 = never.
    progress_timeout_s: float = Field(600.0, ge=0, le=86400)

    # Durable before acknowledged: a consumer waits for Redis' AOF fsync (aof) and, with
    # replicas, for that many replicas' (durability_replicas) before committing a batch.
    durability: Literal["none", "aof", "replicas"] = "aof"
    durability_replicas: int = Field(1, ge=1, le=16)
    durability_timeout_s: float = Field(5.0, gt=0, le=120)
    # How many handled batches may be finishing (fsync wait, publication, acknowledgement) while
    # the next one is handled; at most this + 1 batches of a consumer are unacknowledged.
    batches_behind: int = Field(2, ge=1, le=8)

    # --- embeddings --------------------------------------------------------------------------
    # onnx: all-MiniLM-L6-v2 on ONNX Runtime (no torch); minilm-torch: the same model on
    # sentence-transformers (the `torch` extra); openai: an OpenAI-compatible endpoint.
    embedder: Literal["onnx", "minilm-torch", "openai"] = "onnx"
    embed_dim: int = Field(384, ge=8, le=8192)
    embed_batch: int = Field(64, ge=1, le=2048)
    onnx_model_dir: Path | None = None  # None: ~/.cache/gaama/onnx (built there if missing)
    onnx_variant: Literal["fp32", "int8"] = "fp32"
    # onnxruntime intra-op threads per process; with more than one, whether they busy-wait.
    onnx_threads: int = Field(1, ge=1, le=64)
    # The query service's intra-op threads (in place of onnx_threads there): a search encodes one
    # short query, latency-bound, and a busy replica one coalesced batch; two threads that do not
    # spin use a spare core for one query without taking it from concurrent requests
    # (docs/decisions/0012-query-embed-two-threads.md).
    query_onnx_threads: int = Field(2, ge=1, le=64)
    onnx_spin: bool = False
    # Batches of one embed call (GAAMA_EMBED_BATCH texts each) encoded at once, each on its own
    # thread: how ingest and extraction use more than one core without intra-op threads.
    onnx_lanes: int = Field(2, ge=1, le=64)
    # Query service: concurrent requests' query encodes wait this long for each other and run as
    # one batch (0 = off, every request encodes alone).
    embed_coalesce_ms: float = Field(2.0, ge=0, le=100)
    # With coalescing on and a local model: a query arriving when no encode runs or waits is
    # encoded on the event loop's thread, skipping the hand-off to a worker thread and back.
    embed_inline: bool = True
    # Python's cyclic garbage collector (docs/operations.md, "Garbage collection"): once a
    # service has started, the objects of its start-up (libraries, the model) are frozen out of
    # the collector's scans, and the youngest generation is collected after this many net
    # container allocations (0: Python's default, 700), so collections come when cyclic garbage
    # has piled up, not once per request (docs/decisions/0017-gc-freeze.md).
    gc_freeze: bool = True
    gc_gen0_threshold: int = Field(50_000, ge=0, le=10_000_000)

    # --- LLM (any OpenAI-compatible endpoint); all unset = offline extractor ----------------
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = Field(60.0, gt=0, le=600)
    llm_max_retries: int = Field(4, ge=0, le=20)
    # LLM calls wait on the network, not the CPU: a replica needs as many in flight as
    # conversations that close a chunk within one batch cycle (docs/operations.md, sizing); an
    # endpoint's quota is kept by honouring its 429s and Retry-After, not by a low default.
    llm_concurrency: int = Field(16, ge=1, le=256)
    llm_cassette: str | None = None  # JSONL path for record/replay
    llm_cassette_mode: Literal["off", "record", "replay"] = "off"
    openai_embed_model: str = "text-embedding-3-small"

    # --- ingest ------------------------------------------------------------------------------
    turn_max_chars: int = Field(8000, ge=1, le=1_000_000)
    # Large enough that the fsync wait of GAAMA_DURABILITY=aof (up to 1 s with everysec) is paid
    # once per many turns under load; at low load the window ends a batch first.
    ingest_batch: int = Field(256, ge=1, le=4096)
    ingest_batch_window_s: float = Field(0.2, gt=0, le=30)

    # --- extraction --------------------------------------------------------------------------
    extract_batch: int = Field(64, ge=1, le=4096)  # episodes per consumer batch
    # A chunk's facts event not handled by reflect within this long is sent again (outbox).
    outbox_resend_s: float = Field(120.0, gt=0, le=86400)
    reflect_batch: int = Field(64, ge=1, le=4096)  # facts events per consumer batch
    chunk_words: int = Field(500, ge=20, le=10000)
    chunk_idle_s: float = Field(30.0, gt=0, le=86400)
    # The close lock's lease, renewed while a close runs (None: 15 s): how soon a dead worker's
    # chunk can be closed by another.
    chunk_lock_s: float | None = Field(None, gt=0, le=86400)
    context_episodes: int = Field(10, ge=0, le=100)
    context_concepts: int = Field(5, ge=0, le=100)
    context_words: int = Field(2000, ge=100, le=50000)
    concept_merge_similarity: float = Field(0.9, gt=0, le=1)
    concept_merge_fuzz: float = Field(92.0, gt=0, le=100)
    fact_dedupe_similarity: float = Field(0.95, gt=0, le=1)
    # Same-subject facts nearest each new fact that the update rules are asked about (0: no
    # fact ends another; gaama.extract.supersede).
    supersede_candidates: int = Field(30, ge=0, le=200)
    # A turn asking the memory to forget something said earlier redacts the words of the facts
    # it retracts and of the speaker's turns they came from (False: the facts only end).
    redact_retracted: bool = True
    reflection_dedupe_similarity: float = Field(0.93, gt=0, le=1)
    max_retries: int = Field(3, ge=0, le=20)
    retry_backoff_s: float = Field(0.5, ge=0, le=60)

    # --- HTTP / auth -------------------------------------------------------------------------
    api_keys: list[ApiKey] = Field(default_factory=list)
    # Keys also read from this JSON file and re-read when it changes: rotation without restart.
    api_keys_file: str | None = None
    api_keys_reload_s: float = Field(5.0, ge=0.1, le=3600)
    # Signing keys of end-user tokens (also read from the key file's "signing_keys").
    signing_keys: list[SigningKeyEntry] = Field(default_factory=list)
    # How far a token's iat may lie ahead of this clock and its exp behind it.
    token_clock_skew_s: float = Field(30.0, ge=0, le=600)
    # Longest lifetime (exp - iat) of a token that is accepted or minted.
    token_max_ttl_s: int = Field(86400, ge=60, le=30 * 86400)
    # Failed authentications allowed per client address and window before 429.
    auth_fail_limit: int = Field(20, ge=1, le=100000)
    auth_fail_window_s: float = Field(60.0, ge=1, le=86400)
    # Peers (CIDRs, comma-separated) whose Forwarded / X-Forwarded-For headers are believed:
    # the ingress or load balancer in front of the services. Empty: the socket peer is the
    # client. A header from any other peer is ignored, so clients cannot choose their address.
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # SHA-256 digests of admin keys: forgetting a whole tenant needs one (X-Admin-Key).
    admin_keys: list[Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]] = Field(
        default_factory=list
    )
    # A forget request pending longer than this is reported (metric, alert GaamaForgetPending).
    forget_pending_alert_s: float = Field(3600.0, gt=0, le=30 * 86400)
    # When set, /metrics answers only to "Authorization: Bearer <token>".
    metrics_token: SecretStr | None = None
    # OpenAPI document and its /docs and /redoc pages.
    http_docs: bool = True
    # Query service: serve the memory explorer at /explorer (a static page; every read it
    # makes goes through the API with the caller's key or token). Off: /explorer answers 404.
    explorer: bool = False
    http_host: str = "127.0.0.1"
    ingest_port: int = Field(8081, ge=1, le=65535)
    extract_port: int = Field(8082, ge=1, le=65535)
    reflect_port: int = Field(8083, ge=1, le=65535)
    query_port: int = Field(8084, ge=1, le=65535)
    query_max_chars: int = Field(2000, ge=1, le=100000)
    # Largest request body either HTTP service reads (413 before parsing). A full batch of
    # 1000 turns of GAAMA_TURN_MAX_CHARS ASCII characters fits.
    http_max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    # Retry-After (seconds) of a 503 answered during an outage of Redis or the broker.
    http_retry_after_s: int = Field(5, ge=1, le=3600)
    # Longest wait for the broker to acknowledge what an HTTP request publishes (turns, forget
    # requests); past it the request answers 503 with Retry-After.
    publish_timeout_s: float = Field(5.0, gt=0, le=120)

    # --- per-tenant admission (0 = no limit) ---------------------------------------------
    # Query: requests one tenant may have in flight on a replica, and its request rate (token
    # bucket: rate per second, burst). Over either: 429 with Retry-After at once, never a queue.
    # The defaults are a share of one replica's capacity (docs/operations.md, "Per-tenant
    # fairness").
    tenant_concurrency: int = Field(4, ge=0, le=10000)
    tenant_rate: float = Field(20.0, ge=0, le=100000)
    tenant_burst: int = Field(40, ge=1, le=1000000)
    # Ingest HTTP: turns per second per tenant (a token bucket holding at least one full batch).
    ingest_tenant_rate: float = Field(500.0, ge=0, le=1000000)
    ingest_tenant_burst: int = Field(2000, ge=1, le=10000000)

    # --- logs and traces (docs/operations.md, "Tracing and logs") ---------------------------
    # ``json``: one JSON object per line (time, level, logger, message, service, trace and
    # record fields); ``text``: plain lines for a terminal.
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # Where spans go: nowhere (a no-op tracer), OTLP over HTTP (endpoint and headers from the
    # standard OTEL_EXPORTER_OTLP_* variables), the console, or JSON lines in ``otel_file``.
    otel_exporter: Literal["none", "otlp", "console", "file"] = "none"
    otel_file: str | None = None
    # Share of new traces recorded; a record or request that arrives in a trace follows the
    # sampling decision its parent made.
    otel_sample_ratio: float = Field(1.0, ge=0, le=1)

    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    limits: RequestLimits = Field(default_factory=RequestLimits)

    @field_validator("embedder", mode="before")
    @classmethod
    def _embedder_alias(cls, v: object) -> object:
        # "minilm" named the only local backend before the ONNX one; same model, same vectors.
        return "onnx" if v == "minilm" else v

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_upper(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @field_validator("metrics_token", "api_keys_file", "onnx_model_dir", "otel_file", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        # An empty variable (a placeholder Secret) means "not set", never "the empty token".
        return None if v == "" else v

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies(cls, v: object) -> object:
        if isinstance(v, str):
            v = [part.strip() for part in v.split(",") if part.strip()]
        if isinstance(v, list):
            for cidr in v:
                try:
                    ipaddress.ip_network(str(cidr), strict=False)
                except ValueError:
                    raise ValueError(f"not an IP network (CIDR): {cidr!r}") from None
        return v

    @field_validator("api_keys")
    @classmethod
    def _key_tenants(cls, v: list[ApiKey]) -> list[ApiKey]:
        return check_key_tenants(v, "GAAMA_API_KEYS")

    @field_validator("signing_keys")
    @classmethod
    def _signing_kids(cls, v: list[SigningKeyEntry]) -> list[SigningKeyEntry]:
        return check_signing_keys(v, "GAAMA_SIGNING_KEYS")

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, v: str) -> str:
        for hp in v.split(","):
            host, _, port = hp.strip().removeprefix("kafka://").rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port...], got {v!r}")
        return v

    @model_validator(mode="after")
    def _llm_complete(self) -> Settings:
        parts = {"GAAMA_LLM_BASE_URL": self.llm_base_url, "GAAMA_LLM_MODEL": self.llm_model}
        given = [k for k, v in parts.items() if v]
        if given and len(given) != len(parts):
            missing = sorted(set(parts) - set(given))
            raise ValueError(
                f"an LLM needs both GAAMA_LLM_BASE_URL and GAAMA_LLM_MODEL; "
                f"missing {', '.join(missing)}"
            )
        if self.redis.tls_files and not self.redis_url.startswith("rediss://"):
            raise ValueError(
                "GAAMA_REDIS__SSL_* files are set but GAAMA_REDIS_URL is not rediss:// (TLS)"
            )
        if self.otel_exporter == "file" and not self.otel_file:
            raise ValueError("GAAMA_OTEL_EXPORTER=file needs GAAMA_OTEL_FILE (a path)")
        if self.llm_cassette_mode != "off" and not self.llm_cassette:
            raise ValueError("GAAMA_LLM_CASSETTE_MODE is set but GAAMA_LLM_CASSETTE is not")
        return self

    @property
    def llm_enabled(self) -> bool:
        return bool(self.llm_base_url and self.llm_model) or self.llm_cassette_mode == "replay"

    @property
    def kafka_bootstrap_servers(self) -> str:
        return ",".join(h.strip().removeprefix("kafka://") for h in self.kafka_bootstrap.split(","))

    def tenant_for_key(self, key: str) -> ApiKey | None:
        """The configured entry for ``key`` (``GAAMA_API_KEYS`` only; services use a
        :class:`services.runtime.auth.KeyRing`, which adds the reloadable key file)."""
        return match_key(self.api_keys, key)


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment; raise :class:`ConfigError` naming each bad variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = "__".join(str(p) for p in err["loc"]) if err["loc"] else ""
            var = f"GAAMA_{loc.upper()}" if loc else "GAAMA settings"
            problems.append(f"{var}: {err['msg']}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
