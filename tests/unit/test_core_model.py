"""Ids, the graph model, event contracts and settings."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest

from gaama import ids
from gaama.config import hash_api_key, load_settings
from gaama.errors import ConfigError, GaamaError, PermanentError, RetryableError, ValidationError
from gaama.events import (
    DLQ_VALUE_MAX_BYTES,
    TOPIC_EPISODES,
    TOPIC_FACTS,
    TOPIC_TURNS,
    DeadLetter,
    EpisodeStored,
    FactsExtracted,
    TurnReceived,
    decode,
    dlq,
    encode,
    split_key,
)
from gaama.model import (
    EDGE_ENDPOINTS,
    EDGE_TYPE_WEIGHTS,
    Edge,
    EdgeKind,
    NodeKind,
    is_hub,
    walk_weight,
)

# --- ids ---------------------------------------------------------------------------------


def test_ids_are_deterministic_and_scoped_by_tenant_and_kind():
    assert ids.episode_id("a", "c", "D1:1") == ids.episode_id("a", "c", "D1:1")
    assert ids.episode_id("a", "c", "D1:1") != ids.episode_id("b", "c", "D1:1")
    assert ids.episode_id("a", "c", "D1:1") != ids.episode_id("a", "c2", "D1:1")
    assert ids.fact_id("a", "Ann likes tea") == ids.fact_id("a", "  ann LIKES   tea ")
    assert ids.fact_id("a", "Ann likes tea") != ids.fact_id("b", "Ann likes tea")
    assert ids.concept_id("a", "tea") != ids.reflection_id("a", "tea")
    # part boundaries matter: ("ab", "c") is not ("a", "bc")
    assert ids.node_id("t", NodeKind.FACT, "ab", "c") != ids.node_id("t", NodeKind.FACT, "a", "bc")


def test_kind_of_reads_the_prefix():
    assert ids.kind_of(ids.fact_id("a", "x")) is NodeKind.FACT
    assert ids.kind_of(ids.episode_id("a", "c", "1")) is NodeKind.EPISODE
    with pytest.raises(ValueError, match="not a GAAMA node id"):
        ids.kind_of("zz_123")


# --- model -------------------------------------------------------------------------------


def test_edge_weights_follow_the_paper():
    assert EDGE_TYPE_WEIGHTS[EdgeKind.NEXT] == 0.8
    assert EDGE_TYPE_WEIGHTS[EdgeKind.DERIVED_FROM] == 0.8
    assert EDGE_TYPE_WEIGHTS[EdgeKind.HAS_CONCEPT] == 0.8
    assert EDGE_TYPE_WEIGHTS[EdgeKind.ABOUT_CONCEPT] == 0.8
    assert EDGE_TYPE_WEIGHTS[EdgeKind.DERIVED_FROM_FACT] == 0.5
    assert EDGE_ENDPOINTS[EdgeKind.DERIVED_FROM] == (NodeKind.FACT, NodeKind.EPISODE)


def test_edge_weight_must_be_in_unit_interval():
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        Edge("fa_1", "ep_1", EdgeKind.DERIVED_FROM, weight=1.5)


# --- events ------------------------------------------------------------------------------


def turn(**kw):
    base = {
        "tenant": "acme",
        "conversation": "c1",
        "turn_id": "D1:3",
        "speaker": "Caroline",
        "text": "I went to a support group yesterday.",
        "timestamp": "2023-05-08T13:56:00Z",
    }
    return {**base, **kw}


def test_turn_round_trip_and_episode_text():
    t = TurnReceived.model_validate(turn(image_caption="a photo of a red bowl"))
    assert decode(TurnReceived, encode(t)) == t
    assert t.episode_text() == (
        "[1:56 PM on 8 May, 2023] Caroline: I went to a support group "
        "yesterday. [shares a photo of a red bowl]"
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"text": "   "}, "text"),
        ({"timestamp": "last tuesday"}, "not an ISO 8601 timestamp"),
        ({"tenant": "a b"}, "tenant"),
        ({"conversation": "x/y"}, "conversation"),
        ({"extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_turn_validation_names_the_field(bad, message):
    with pytest.raises(ValidationError, match=message):
        decode(TurnReceived, json.dumps(turn(**bad)))


def test_naive_and_epoch_timestamps_become_utc():
    assert TurnReceived.model_validate(turn(timestamp="2023-05-08T13:56:00")).timestamp == datetime(
        2023, 5, 8, 13, 56, tzinfo=UTC
    )
    assert TurnReceived.model_validate(turn(timestamp=0)).timestamp.year == 1970


def test_every_topic_has_a_contract_and_a_dlq_twin():
    assert dlq(TOPIC_TURNS) == "gaama.turns.v1.dlq"
    examples = {
        TOPIC_TURNS: TurnReceived.model_validate(turn()),
        TOPIC_EPISODES: EpisodeStored(
            tenant="acme",
            conversation="c1",
            episode_id="ep_1",
            turn_id="D1:3",
            speaker="C",
            text="[t] C: hi",
            raw_text="hi",
            timestamp=datetime(2023, 5, 8, tzinfo=UTC),
        ),
        TOPIC_FACTS: FactsExtracted(
            tenant="acme", conversation="c1", chunk_id="ch_1", fact_ids=["fa_1"]
        ),
    }
    for event in examples.values():
        assert decode(type(event), encode(event)) == event
    letter = DeadLetter.of(
        source_topic=TOPIC_TURNS,
        value=b"\xff{bad",
        reason="invalid",
        error="not JSON",
        service="ingest",
        key=b"acme/c1",
        offset=7,
    )
    back = decode(DeadLetter, encode(letter))
    assert back.original_value() == b"\xff{bad" and back.key == "acme/c1"


def test_a_dead_letter_of_a_huge_record_stays_under_the_broker_message_size():
    huge = b"x" * 3_000_000
    letter = DeadLetter.of(
        source_topic=TOPIC_TURNS,
        value=huge,
        reason="too_large",
        error="e" * 10_000,
        service="ingest",
        key=b"k" * 100_000,
        offset=9,
    )
    raw = encode(letter)
    assert len(raw) < 1_000_000
    back = decode(DeadLetter, raw)
    assert back.value_truncated and back.value_bytes == len(huge)
    assert back.original_value() == huge[:DLQ_VALUE_MAX_BYTES]
    small = DeadLetter.of(source_topic=TOPIC_TURNS, value=b"{}", reason="r", error="", service="s")
    assert not small.value_truncated and small.value_bytes == 2


def test_decode_reports_bad_json():
    with pytest.raises(ValidationError, match="not valid JSON"):
        decode(TurnReceived, b"{nope")


def test_split_key():
    assert split_key(b"acme/conv-1") == ("acme", "conv-1")
    for bad in (None, b"acme", b"/c", b"acme/"):
        with pytest.raises(ValidationError):
            split_key(bad)


# --- settings and errors -----------------------------------------------------------------


def test_settings_defaults_are_the_papers(monkeypatch):
    for k in list(__import__("os").environ):
        if k.startswith("GAAMA_"):
            monkeypatch.delenv(k)
    s = load_settings()
    assert (s.retrieval.seeds, s.retrieval.alpha, s.retrieval.w_ppr, s.retrieval.w_sim) == (
        40,
        0.6,
        0.1,
        1.0,
    )
    assert (s.chunk_words, s.retrieval.budget_words, s.retrieval.hub_degree) == (500, 1000, 50)
    assert not s.llm_enabled


def test_bad_settings_name_the_variable(monkeypatch):
    monkeypatch.setenv("GAAMA_REDIS_URL", "http://nope")
    with pytest.raises(ConfigError, match="GAAMA_REDIS_URL"):
        load_settings()
    monkeypatch.delenv("GAAMA_REDIS_URL")
    monkeypatch.setenv("GAAMA_CHUNK_WORDS", "many")
    with pytest.raises(ConfigError, match="GAAMA_CHUNK_WORDS"):
        load_settings()
    monkeypatch.delenv("GAAMA_CHUNK_WORDS")
    monkeypatch.setenv("GAAMA_LLM_BASE_URL", "http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="GAAMA_LLM_MODEL"):
        load_settings()


def test_api_keys_are_stored_hashed(monkeypatch):
    monkeypatch.setenv(
        "GAAMA_API_KEYS", json.dumps([{"key_sha256": hash_api_key("secret"), "tenant": "acme"}])
    )
    s = load_settings()
    assert s.tenant_for_key("secret").tenant == "acme"
    assert s.tenant_for_key("other") is None
    monkeypatch.setenv("GAAMA_API_KEYS", json.dumps([{"key_sha256": "secret", "tenant": "a"}]))
    with pytest.raises(ConfigError, match="GAAMA_API_KEYS"):
        load_settings()


def test_error_tree_flags():
    assert RetryableError("x").retryable and not PermanentError("x").retryable
    assert issubclass(ValidationError, PermanentError) and issubclass(PermanentError, GaamaError)


def test_walk_weight_is_type_weight_times_stored_squared() -> None:
    assert walk_weight(EdgeKind.NEXT, 1.0) == pytest.approx(0.8)
    assert walk_weight(EdgeKind.DERIVED_FROM_FACT, 0.5) == pytest.approx(0.5 * 0.25)
    assert walk_weight(EdgeKind.ABOUT_CONCEPT, 0.9) == pytest.approx(0.8 * 0.81)


def test_a_hub_has_degree_above_the_hub_degree() -> None:
    assert is_hub(51, 50) and not is_hub(50, 50)
    assert is_hub(np.array([49, 50, 51]), 50).tolist() == [False, False, True]
