"""LLM answers validated and repaired, JSON parsing, prompt templates: pure functions."""

from __future__ import annotations

import pytest

from gaama.errors import ConfigError, LLMOutputError
from gaama.extract.types import (
    ReflectionInput,
)
from gaama.llm import prompts
from gaama.llm.replies import parse_json_object
from gaama.llm.validation import (
    normalize_label,
    validate_extraction,
    validate_reflections,
)
from tests.support.llm import MODEL, episodes


def test_parse_json_object_variants() -> None:
    assert parse_json_object('{"a": 1}') == {"a": 1}
    assert parse_json_object('```json\n{"a": 2}\n```') == {"a": 2}
    assert parse_json_object('Here you go: {"a": 3} hope it helps') == {"a": 3}
    with pytest.raises(ValueError):
        parse_json_object('{"a": ')
    with pytest.raises(ValueError):
        parse_json_object("[1, 2]")


def test_extraction_validation_repairs_and_drops() -> None:
    chunk = episodes(3)
    e0, e1, e2 = (ep.id for ep in chunk)
    answer = {
        "facts": [
            {  # kept; the foreign id is removed, belief clamped, labels normalised
                "text": "  Caroline attended a pottery workshop on 7 May 2023. ",
                "belief": 7,
                "source_episode_ids": [e0, "ep_not_in_chunk"],
                "subject": "Caroline",
                "concepts": ["Pottery Hobby", "caroline", "general", "potteryHobby", "a-b-c-d-e"],
            },
            {"text": "Only foreign ids.", "belief": 1, "source_episode_ids": ["ep_x"]},
            {"text": "   ", "belief": 1, "source_episode_ids": [e1]},
            {"text": 42, "belief": 1, "source_episode_ids": [e1]},
            {"text": "Belief is a word.", "belief": "high", "source_episode_ids": [e1]},
            {"text": "Negative belief.", "belief": -3, "source_episode_ids": e1},  # str id
            {"text": "String belief.", "belief": "0.4", "source_episode_ids": [e2], "subject": 5},
            "not an object",
        ],
        "episodes": [
            {"episode_id": e0, "concepts": ["pottery_hobby", "art", "kids", "family"]},
            {"episode_id": "ep_unknown", "concepts": ["x_topic"]},
            {"episode_id": e1, "concepts": ["Melanie", "chat"]},  # nothing usable left
        ],
    }
    result = validate_extraction(answer, chunk, MODEL)
    by_text = {f.text: f for f in result.facts}
    assert set(by_text) == {
        "Caroline attended a pottery workshop on 7 May 2023.",
        "Negative belief.",
        "String belief.",
    }
    first = by_text["Caroline attended a pottery workshop on 7 May 2023."]
    assert first.source_episode_ids == (e0,)
    assert first.belief == 1.0
    assert first.concepts == ("pottery_hobby", "a_b_c_d")
    assert by_text["Negative belief."].belief == 0.0
    assert by_text["Negative belief."].source_episode_ids == (e1,)
    assert by_text["String belief."].belief == pytest.approx(0.4)
    assert by_text["String belief."].subject == ""
    assert result.episode_concepts == {e0: ("pottery_hobby", "art", "kids")}
    assert result.extractor == MODEL


def test_empty_extraction_is_valid() -> None:
    result = validate_extraction({"facts": [], "episodes": []}, episodes(2), MODEL)
    assert result.facts == [] and result.episode_concepts == {}


def test_normalize_label() -> None:
    assert normalize_label("Camping Trip") == "camping_trip"
    assert normalize_label("job-interview!") == "job_interview"
    assert normalize_label("LGBTQ support group meetings weekly") == "lgbtq_support_group_meetings"
    assert normalize_label("misc") is None
    assert normalize_label("2023") is None
    assert normalize_label(["x"]) is None
    assert normalize_label("Caroline", forbidden=frozenset({"caroline"})) is None


def test_reflection_validation() -> None:
    facts = [ReflectionInput(id=f"fa_{i}", text=f"fact {i}") for i in range(3)]
    answer = {
        "reflections": [
            {"text": "Combines two.", "fact_ids": ["fa_0", "fa_1", "fa_9"], "subject": "C"},
            {"text": "Only one known id.", "fact_ids": ["fa_0", "fa_9"], "subject": ""},
            {"text": "Already known.", "fact_ids": ["fa_1", "fa_2"], "subject": ""},
            {"text": "", "fact_ids": ["fa_1", "fa_2"], "subject": ""},
        ]
    }
    out = validate_reflections(answer, facts, existing=["already known."])
    assert [(r.text, r.fact_ids) for r in out] == [("Combines two.", ("fa_0", "fa_1"))]
    with pytest.raises(LLMOutputError):
        validate_reflections({"reflections": [answer["reflections"][1]]}, facts, [])
    with pytest.raises(LLMOutputError):
        validate_reflections({"nope": []}, facts, [])
    assert validate_reflections({"reflections": []}, facts, []) == []


def test_prompts_render_and_check_placeholders() -> None:
    for name in prompts.PROMPT_NAMES:
        system, user = prompts.load_template(name)
        assert system and user
    p = prompts.render("answer", question="Where {braces}?", memory="{not a placeholder}")
    assert "Where {braces}?" in p.user and "{not a placeholder}" in p.user
    with pytest.raises(ConfigError, match="missing"):
        prompts.render("answer", question="q")
    with pytest.raises(ConfigError, match="unknown prompt"):
        prompts.render("nope")


def test_pathological_answers_are_errors_not_crashes() -> None:
    """100,000 nested brackets made json.loads recurse until Python gave up (RecursionError,
    which no handler expected); now it is the ValueError every caller handles."""
    with pytest.raises(ValueError, match="no JSON object"):
        parse_json_object("{" * 100_000)
    with pytest.raises(ValueError):
        parse_json_object('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
