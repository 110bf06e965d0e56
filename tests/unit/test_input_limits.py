"""Every caller-supplied text and id has a maximum, enforced at HTTP (POST /v1/turns) and at the
topic (a record over it is refused with the reason the policy dead-letters it under, never a
crash); each refusal names the limit (docs/operations.md, "Input limits")."""

from __future__ import annotations

import json

import pytest

from gaama.config import Settings, load_settings
from gaama.errors import ValidationError
from services.ingest.handlers import (
    MAX_TURNS_PER_REQUEST,
    parse_turns_request,
    record_max_bytes,
    validate_turn,
)
from services.runtime.http import status_of
from services.runtime.records import Record

OK = {
    "conversation": "c",
    "turn_id": "1",
    "speaker": "Ann",
    "text": "hi",
    "timestamp": "2023-05-08T13:56:00Z",
}
#: field → (value over the limit, the limit as the message names it)
OVER = {
    "text": ("x" * 8001, "8000"),
    "speaker": ("s" * 201, "at most 200 characters"),
    "conversation": ("c" * 201, "at most 200 characters"),
    "subject": ("s" * 201, "at most 200 characters"),
    "turn_id": ("t" * 201, "at most 200 characters"),
    "image_caption": ("x" * 2001, "at most 2000 characters"),
}


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings()


@pytest.mark.parametrize("field", sorted(OVER))
def test_http_fields_over_their_limit(field: str, settings: Settings) -> None:
    value, named = OVER[field]
    with pytest.raises(ValidationError) as info:
        parse_turns_request({**OK, field: value}, "t", settings)
    assert named in str(info.value) and field in str(info.value)
    assert status_of(info.value) == (413 if field == "text" else 422)
    parse_turns_request({**OK, field: value[:-1]}, "t", settings)  # at the limit: accepted


def test_http_batch_size(settings: Settings) -> None:
    turns = [{**OK, "turn_id": str(i)} for i in range(MAX_TURNS_PER_REQUEST + 1)]
    with pytest.raises(ValidationError, match="at most 1000 items"):
        parse_turns_request({"turns": turns}, "t", settings)
    assert len(parse_turns_request({"turns": turns[:-1]}, "t", settings)) == 1000


def _record(value: bytes, conversation: str = "c") -> Record:
    key = f"t/{conversation}".encode()
    return Record(topic="gaama.turns.v1", key=key, value=value, partition=0, offset=7)


@pytest.mark.parametrize("field", sorted(OVER))
def test_topic_fields_over_their_limit(field: str, settings: Settings) -> None:
    value, named = OVER[field]
    body = {"schema_version": 1, "tenant": "t", **OK, "timestamp": 1.0, field: value}
    record = _record(json.dumps(body).encode(), body["conversation"])
    with pytest.raises(ValidationError) as info:
        validate_turn(record, settings)
    assert named in str(info.value)
    assert info.value.reason == ("too_large" if field == "text" else "invalid")


def test_topic_record_bytes_are_checked_before_parsing(settings: Settings) -> None:
    limit = record_max_bytes(settings)
    with pytest.raises(ValidationError, match=f"at most {limit} bytes") as info:
        validate_turn(_record(b"[" * (limit + 1)), settings)
    assert info.value.reason == "too_large"
    # The longest legal turn, every character in its longest JSON form, still fits.
    body = {
        "schema_version": 1,
        "tenant": "t",
        **OK,
        "timestamp": 1.0,
        "text": "\U0001f600" * settings.turn_max_chars,
        "image_caption": "\U0001f600" * 2000,
        "speaker": "\U0001f600" * 200,
    }
    raw = json.dumps(body).encode()  # ensure_ascii: 12 bytes per emoji
    assert len(raw) <= limit
    validate_turn(_record(raw), settings)
