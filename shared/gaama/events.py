"""Event records, one contract per topic.

Every topic carries JSON-encoded pydantic records; :func:`encode` / :func:`decode` are the single
codec (the services wrap them in a faust codec, so the core never imports faust). Keys are
``"<tenant>/<conversation>"`` for turns and episodes, so one conversation lives in one partition
and its order is kept. Every topic has a ``.dlq`` twin carrying :class:`DeadLetter` records.
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import from_json

from gaama import ids
from gaama.errors import ValidationError
from gaama.ids import ConversationId, SubjectId, TenantId, TurnId

TOPIC_TURNS = "gaama.turns.v1"
TOPIC_EPISODES = "gaama.episodes.v1"
TOPIC_FACTS = "gaama.facts.v1"
TOPICS = (TOPIC_TURNS, TOPIC_EPISODES, TOPIC_FACTS)


def dlq(topic: str) -> str:
    return f"{topic}.dlq"


def topic_name(base: str, prefix: str = "") -> str:
    """Physical topic name; ``prefix`` isolates test runs and environments sharing a broker."""
    return f"{prefix}{base}"


#: Speaker names and image captions: bounded like every caller's text (docs/operations.md).
SPEAKER_MAX = 200
CAPTION_MAX = 2000


class Event(BaseModel):
    """Base of every record: unknown fields are refused, and types are strict (``"yes"`` is not
    a bool, ``true`` is not a number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    schema_version: Literal[1] = 1


def parse_time(value: str | float | int | datetime) -> datetime:
    """An aware UTC datetime from ISO 8601 or epoch seconds; naive input is taken as UTC."""
    if isinstance(value, bool):
        raise ValueError("a timestamp must be ISO 8601 text or epoch seconds, not a boolean")
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, int | float):
        if not 0 <= value < 32503680000:
            raise ValueError(f"epoch seconds out of range: {value}")
        dt = datetime.fromtimestamp(value, tz=UTC)
    else:
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an ISO 8601 timestamp: {ids.preview(value)}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC)
    except OverflowError:  # e.g. year 1 with a positive offset
        raise ValueError(f"timestamp out of range: {ids.preview(value)}") from None


class TurnReceived(Event):
    """A conversation turn as a producer sends it (topic ``gaama.turns.v1``)."""

    tenant: TenantId
    conversation: ConversationId
    turn_id: TurnId
    speaker: Annotated[
        str,
        StringConstraints(min_length=1, max_length=SPEAKER_MAX, strip_whitespace=True),
        AfterValidator(ids.check_text),
    ]
    text: Annotated[
        str, StringConstraints(min_length=1, strip_whitespace=True), AfterValidator(ids.check_text)
    ]
    timestamp: Annotated[datetime, Field(strict=False)]
    subject: SubjectId = ""
    image_caption: Annotated[
        str, StringConstraints(max_length=CAPTION_MAX), AfterValidator(ids.check_text)
    ] = ""
    end_of_session: bool = False

    @field_validator("timestamp", mode="before")
    @classmethod
    def _ts(cls, v: Any) -> datetime:
        return parse_time(v)

    def episode_text(self) -> str:
        """The verbatim episode text: ``"[<session time>] <speaker>: <text>"``."""
        stamp = self.timestamp.strftime("%-I:%M %p on %-d %B, %Y")
        return f"[{stamp}] {self.speaker}: {self.said()}"

    def said(self) -> str:
        """What the speaker said, with a shared image's caption as ``[shares a photo of ...]``."""
        if not self.image_caption:
            return self.text
        caption = re.sub(
            r"^(a|an)\s+(photo|picture|image)\s+of\s+", "", self.image_caption.strip(), flags=re.I
        )
        return f"{self.text} [shares a photo of {caption}]"


class EpisodeStored(Event):
    """An episode is in Redis (topic ``gaama.episodes.v1``)."""

    tenant: TenantId
    conversation: ConversationId
    episode_id: str
    turn_id: TurnId
    speaker: str
    text: str  # the episode text as stored
    raw_text: str  # what the speaker said, without the time prefix
    timestamp: Annotated[datetime, Field(strict=False)]
    subject: SubjectId = ""
    end_of_session: bool = False


class FactsExtracted(Event):
    """A chunk was extracted (topic ``gaama.facts.v1``); the reflect service consumes it."""

    tenant: TenantId
    conversation: ConversationId
    chunk_id: str
    fact_ids: list[str]
    new_fact_ids: list[str] = Field(default_factory=list)
    concept_ids: list[str] = Field(default_factory=list)
    extractor: str = "offline"


ForgetScope = Literal["conversation", "subject", "tenant"]
#: Key of a forget event fanned out to every partition (a subject or a whole tenant).
FANOUT_CONVERSATION = "*"


class ForgetRequested(Event):
    """A forget request (topics ``gaama.turns.v1`` → ``gaama.episodes.v1`` → ``gaama.facts.v1``).

    It travels behind every turn produced before it: a conversation's request is keyed like its
    turns; a subject's or a tenant's is sent to every partition (``partition`` says which, the
    key's conversation is ``*``) and each stage forwards it to the same partition. Turn topics
    carry it beside :class:`TurnReceived`; :func:`decode_stream` tells them apart by ``type``.
    """

    type: Literal["forget"] = "forget"
    request_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
    tenant: TenantId
    scope: ForgetScope
    scope_id: Annotated[str, StringConstraints(max_length=ids.IDENT_MAX)] = ""
    partition: int | None = None
    requested_at: Annotated[datetime, Field(strict=False)] = Field(
        default_factory=lambda: datetime.now(UTC)
    )

    @field_validator("scope_id")
    @classmethod
    def _scope_id(cls, v: str, info: ValidationInfo) -> str:
        scope = info.data.get("scope")
        if scope == "conversation":
            return ids.check_conversation(v)
        if scope == "subject":
            if not v:
                raise ValueError("a subject forget names the subject")
            return ids.check_subject(v)
        if v:
            raise ValueError("a tenant forget takes no scope id")
        return v

    def key(self) -> bytes:
        conv = self.scope_id if self.scope == "conversation" else FANOUT_CONVERSATION
        return conversation_key(self.tenant, conv)


#: Most bytes of the original record a dead letter copies, and most characters of its key: with
#: base64 (4/3) and the other fields the envelope stays well under the broker's default largest
#: message (1 MB: Kafka's message.max.bytes, the producers' max_request_size), so a poison record
#: as large as the broker takes can still be dead-lettered.
DLQ_VALUE_MAX_BYTES = 512 * 1024
DLQ_KEY_MAX_CHARS = 1024


class DeadLetter(Event):
    """A message that could not be processed, with the reason (topics ``*.dlq``).

    ``value_b64`` is the original record, or its first :data:`DLQ_VALUE_MAX_BYTES` bytes when
    ``value_truncated`` (``value_bytes`` is the original size; the full record is still in the
    source topic at ``partition``/``offset`` for as long as the topic retains it).
    """

    source_topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    value_b64: str
    value_bytes: int | None = None
    value_truncated: bool = False
    reason: str
    error: str
    service: str
    failed_at: Annotated[datetime, Field(strict=False)] = Field(
        default_factory=lambda: datetime.now(UTC)
    )

    @classmethod
    def of(
        cls,
        *,
        source_topic: str,
        value: bytes,
        reason: str,
        error: str,
        service: str,
        key: bytes | str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> DeadLetter:
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        return cls(
            source_topic=source_topic,
            partition=partition,
            offset=offset,
            key=None if key is None else key[:DLQ_KEY_MAX_CHARS],
            value_b64=base64.b64encode(value[:DLQ_VALUE_MAX_BYTES]).decode("ascii"),
            value_bytes=len(value),
            value_truncated=len(value) > DLQ_VALUE_MAX_BYTES,
            reason=reason,
            error=error[:2000],
            service=service,
        )

    def original_value(self) -> bytes:
        return base64.b64decode(self.value_b64)


E = TypeVar("E", bound=Event)


def encode(event: Event) -> bytes:
    return event.model_dump_json().encode("utf-8")


def decode(cls: type[E], raw: bytes | str) -> E:
    """Parse ``raw`` as ``cls``; raise :class:`ValidationError` saying what is wrong.

    The JSON parser is pydantic's: it refuses lone surrogates and nesting deeper than a fixed
    limit with an error instead of a crash (``json.loads`` recurses until Python gives up).
    """
    try:
        return cls.model_validate_json(raw)
    except PydanticValidationError as exc:
        raise ValidationError(f"{cls.__name__}: {describe(exc)}") from None


def decode_stream(cls: type[E], raw: bytes | str) -> E | ForgetRequested:
    """A record of a stage's input topic: ``cls`` or a :class:`ForgetRequested` riding along."""
    probe = raw.encode() if isinstance(raw, str) else raw
    if b'"forget"' in probe:  # cheap test first: almost every record is a turn or an episode
        try:
            data = from_json(probe)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("type") == "forget":
            return decode(ForgetRequested, raw)
    return decode(cls, raw)


def decode_keyed(cls: type[E], key: bytes | str | None, raw: bytes | str) -> E | ForgetRequested:
    """A stage's input record checked against its message key: the key's tenant must be the
    event's, and for everything but a fanned-out forget the conversation too.

    Raises:
        ValidationError: bad JSON, a bad record, or a key that does not match (``tenant_mismatch``).
    """
    event = decode_stream(cls, raw)
    tenant, conversation = split_key(key)
    if isinstance(event, ForgetRequested):
        if tenant != event.tenant:
            raise ValidationError(
                f"key tenant {tenant} is not the request's {event.tenant}", reason="tenant_mismatch"
            )
        return event
    mine = (getattr(event, "tenant", None), getattr(event, "conversation", None))
    if (tenant, conversation) != mine:
        raise ValidationError(
            f"key {tenant}/{conversation} does not match the event's {mine[0]}/{mine[1]}",
            reason="tenant_mismatch",
        )
    return event


def describe(exc: PydanticValidationError) -> str:
    """One line per problem: ``field: message``. The caller's input is never echoed whole."""
    parts = []
    for e in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = e["msg"]
        if e["type"] == "json_invalid":
            msg = f"not valid JSON ({e.get('ctx', {}).get('error', msg)})"
        parts.append(f"{where}: {ids.preview(msg, 300)[1:-1]}")
    return "; ".join(parts)


def conversation_key(tenant: str, conversation: str) -> bytes:
    return f"{tenant}/{conversation}".encode()


def split_key(key: bytes | str | None) -> tuple[str, str]:
    """``(tenant, conversation)`` from a message key; raise ValidationError when malformed."""
    if key is None:
        raise ValidationError("message has no key; expected '<tenant>/<conversation>'")
    s = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    tenant, sep, conv = s.partition("/")
    if not sep or not tenant or not conv:
        raise ValidationError(f"malformed key {s!r}; expected '<tenant>/<conversation>'")
    return tenant, conv
