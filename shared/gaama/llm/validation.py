"""The LLM's answers: the JSON schemas asked for, and their validation — nothing the model says
is stored blindly.

Every answer is checked against what was asked: source ids must belong to the chunk, fact ids to
the given facts, beliefs are numbers clamped to [0, 1], concept labels are normalised snake_case
topics. Broken items are repaired when the intent is clear (a single id instead of a list,
``"0.8"`` for 0.8) and dropped otherwise; an answer with nothing usable at all raises
:class:`~gaama.errors.LLMOutputError` saying why.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gaama.errors import LLMOutputError
from gaama.extract.types import (
    EpisodeView,
    ExtractionResult,
    FactDraft,
    ReflectionDraft,
    ReflectionInput,
)

MAX_CONCEPTS = 3
MAX_LABEL_WORDS = 4
MAX_LABEL_CHARS = 64

# Labels that name no topic; a graph full of them links everything to everything.
GENERIC_LABELS = frozenset(
    {
        "chat", "conversation", "discussion", "general", "greeting", "greetings", "life",
        "misc", "miscellaneous", "other", "personal", "stuff", "things", "thing", "topic",
        "update", "updates", "feelings", "talk", "small_talk", "none", "unknown", "n_a",
    }
)  # fmt: skip

_STR: dict[str, Any] = {"type": "string"}
_STR_LIST: dict[str, Any] = {"type": "array", "items": _STR}


def _record(**properties: dict[str, Any]) -> dict[str, Any]:
    """A JSON object schema whose properties are all required and the only ones allowed."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(properties),
        "properties": properties,
    }


def _list_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


EXTRACTION_SCHEMA: dict[str, Any] = _record(
    facts=_list_of(
        _record(
            text=_STR,
            belief={"type": "number"},
            source_episode_ids=_STR_LIST,
            subject=_STR,
            concepts=_STR_LIST,
        )
    ),
    episodes=_list_of(_record(episode_id=_STR, concepts=_STR_LIST)),
)

REFLECTION_SCHEMA: dict[str, Any] = _record(
    reflections=_list_of(_record(text=_STR, fact_ids=_STR_LIST, subject=_STR))
)

ANSWER_SCHEMA: dict[str, Any] = _record(answer=_STR)

JUDGE_REWARD_SCHEMA: dict[str, Any] = _record(
    key_facts=_list_of(_record(fact=_STR, present={"type": "boolean"})),
    score={"type": "number"},
)

JUDGE_BINARY_SCHEMA: dict[str, Any] = _record(
    reasoning=_STR,
    label={"type": "string", "enum": ["CORRECT", "WRONG"]},
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_LABEL = re.compile(r"[^a-z0-9]+")


def normalize_label(raw: object, *, forbidden: frozenset[str] = frozenset()) -> str | None:
    """A snake_case topic label from ``raw``, or None when it cannot be one.

    ``"Pottery Hobby"``, ``"potteryHobby"`` and ``"pottery-hobby"`` all become
    ``"pottery_hobby"``; labels are cut to four words. Rejected: non-strings, empty labels,
    pure numbers, generic words and anything in ``forbidden`` (the speakers' names).

    Args:
        raw: The label as the model wrote it.
        forbidden: Lower-case snake_case labels to refuse.
    """
    if not isinstance(raw, str):
        return None
    words = [w for w in _NON_LABEL.split(_CAMEL.sub("_", raw.strip()).lower()) if w]
    label = "_".join(words[:MAX_LABEL_WORDS])[:MAX_LABEL_CHARS].strip("_")
    if not label or label.replace("_", "").isdigit():
        return None
    if label in GENERIC_LABELS or label in forbidden:
        return None
    return label


def _labels(raw: object, forbidden: frozenset[str]) -> tuple[str, ...]:
    if isinstance(raw, str):  # one label instead of a list: clear intent, repair it
        raw = [raw]
    if not isinstance(raw, list):
        return ()
    out: list[str] = []
    for item in raw:
        label = normalize_label(item, forbidden=forbidden)
        if label and label not in out:
            out.append(label)
    return tuple(out[:MAX_CONCEPTS])


def _ids(raw: object, allowed: set[str]) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return ()
    out: list[str] = []
    for item in raw:
        if isinstance(item, str) and item.strip() in allowed and item.strip() not in out:
            out.append(item.strip())
    return tuple(out)


def parse_belief(raw: object) -> float | None:
    """A belief in [0, 1] from what the model wrote (1.0 when omitted), or None if unusable."""
    if raw is None:
        return 1.0  # omitted: a plain statement
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            return None
    if not isinstance(raw, int | float) or not math.isfinite(raw):
        return None
    return min(1.0, max(0.0, float(raw)))


def one_line(raw: object) -> str:
    """A string with its whitespace collapsed; anything else is empty."""
    return " ".join(raw.split()) if isinstance(raw, str) else ""


def _list_field(answer: object, key: str, problems: list[str]) -> list[Any] | None:
    if not isinstance(answer, dict):
        return None
    value = answer.get(key)
    if value is None:
        problems.append(f"missing {key!r}")
        return None
    if not isinstance(value, list):
        problems.append(f"{key!r} is {type(value).__name__}, not a list")
        return None
    return value


def validate_extraction(
    answer: object, chunk: list[EpisodeView], extractor: str
) -> ExtractionResult:
    """Check and repair an extraction answer for ``chunk``.

    Args:
        answer: The parsed model output.
        chunk: The episodes the model was asked about.
        extractor: Name recorded in the result.

    Returns:
        Only validated facts and episode concepts; episodes the model skipped have no entry.

    Raises:
        LLMOutputError: the answer is not an object, has neither list, or every item in it
            was unusable.
    """
    if not isinstance(answer, dict):
        raise LLMOutputError(f"extraction answer is {type(answer).__name__}, not an object")
    allowed = {ep.id for ep in chunk}
    forbidden = frozenset(n for ep in chunk if (n := normalize_label(ep.speaker)))
    problems: list[str] = []
    raw_facts = _list_field(answer, "facts", problems)
    raw_episodes = _list_field(answer, "episodes", problems)
    if raw_facts is None and raw_episodes is None:
        raise LLMOutputError("extraction answer unusable: " + "; ".join(problems))

    facts: list[FactDraft] = []
    dropped: dict[str, int] = {}

    def drop(why: str) -> None:
        dropped[why] = dropped.get(why, 0) + 1

    seen_texts: set[str] = set()
    for item in raw_facts or []:
        if not isinstance(item, dict):
            drop("fact not an object")
            continue
        text = one_line(item.get("text"))
        if not text:
            drop("empty text")
            continue
        sources = _ids(item.get("source_episode_ids"), allowed)
        if not sources:
            drop("no source id in the chunk")
            continue
        belief = parse_belief(item.get("belief"))
        if belief is None:
            drop("belief not a number")
            continue
        if text.lower() in seen_texts:
            continue  # a repeat within one answer is harmless; keep the first
        seen_texts.add(text.lower())
        subject = one_line(item.get("subject"))
        facts.append(
            FactDraft(
                text=text,
                source_episode_ids=sources,
                belief=belief,
                subject=subject,
                concepts=_labels(item.get("concepts"), forbidden),
            )
        )

    episode_concepts: dict[str, tuple[str, ...]] = {}
    for item in raw_episodes or []:
        if not isinstance(item, dict):
            drop("episode not an object")
            continue
        ep_id = item.get("episode_id")
        if not isinstance(ep_id, str) or ep_id.strip() not in allowed:
            drop("episode id not in the chunk")
            continue
        labels = _labels(item.get("concepts"), forbidden)
        if not labels:
            drop("episode without a usable label")
            continue
        merged = episode_concepts.get(ep_id.strip(), ()) + labels
        episode_concepts[ep_id.strip()] = tuple(dict.fromkeys(merged))[:MAX_CONCEPTS]

    given = len(raw_facts or []) + len(raw_episodes or [])
    if given and not facts and not episode_concepts:
        detail = ", ".join(f"{n}× {why}" for why, n in dropped.items())
        raise LLMOutputError(f"extraction answer unusable: every item dropped ({detail})")
    return ExtractionResult(facts=facts, episode_concepts=episode_concepts, extractor=extractor)


def validate_reflections(
    answer: object, facts: list[ReflectionInput], existing: list[str]
) -> list[ReflectionDraft]:
    """Check a reflection answer: ≥ 2 known fact ids each, non-empty, not already known.

    Raises:
        LLMOutputError: the answer has no ``reflections`` list, or every item was unusable.
    """
    problems: list[str] = []
    raw = _list_field(answer, "reflections", problems)
    if raw is None:
        raise LLMOutputError(
            "reflection answer unusable: " + ("; ".join(problems) or "not an object")
        )
    allowed = {f.id for f in facts}
    known = {one_line(t).lower() for t in existing}
    out: list[ReflectionDraft] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        text = one_line(item.get("text"))
        fact_ids = _ids(item.get("fact_ids"), allowed)
        if not text or len(fact_ids) < 2 or text.lower() in known:
            continue
        known.add(text.lower())
        out.append(
            ReflectionDraft(text=text, fact_ids=fact_ids, subject=one_line(item.get("subject")))
        )
    if raw and not out:
        raise LLMOutputError(
            f"reflection answer unusable: none of {len(raw)} reflections cites two given "
            f"facts with new, non-empty text"
        )
    return out
