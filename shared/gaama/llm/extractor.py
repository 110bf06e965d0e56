"""The LLM extractor: facts, concepts and reflections from a chat model, validated.

Nothing the model says is stored blindly. Every answer is checked against what was asked:
source ids must belong to the chunk, fact ids to the given facts, beliefs are numbers clamped
to [0, 1], concept labels are normalised snake_case topics. Broken items are repaired when the
intent is clear (a single id instead of a list, ``"0.8"`` for 0.8) and dropped otherwise; an
answer with nothing usable at all raises :class:`~gaama.errors.LLMOutputError` saying why.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

from gaama.errors import LLMOutputError
from gaama.extract.types import (
    ContextFact,
    EpisodeView,
    ExtractionContext,
    ExtractionResult,
    FactDraft,
    ReflectionDraft,
    ReflectionInput,
)
from gaama.llm import prompts
from gaama.llm.client import LLMClient

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

_STR_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["facts", "episodes"],
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["text", "belief", "source_episode_ids", "subject", "concepts"],
                "properties": {
                    "text": {"type": "string"},
                    "belief": {"type": "number"},
                    "source_episode_ids": _STR_LIST,
                    "subject": {"type": "string"},
                    "concepts": _STR_LIST,
                },
            },
        },
        "episodes": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["episode_id", "concepts"],
                "properties": {"episode_id": {"type": "string"}, "concepts": _STR_LIST},
            },
        },
    },
}

REFLECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reflections"],
    "properties": {
        "reflections": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["text", "fact_ids", "subject"],
                "properties": {
                    "text": {"type": "string"},
                    "fact_ids": _STR_LIST,
                    "subject": {"type": "string"},
                },
            },
        }
    },
}

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["answer"],
    "properties": {"answer": {"type": "string"}},
}

JUDGE_REWARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key_facts", "score"],
    "properties": {
        "key_facts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["fact", "present"],
                "properties": {"fact": {"type": "string"}, "present": {"type": "boolean"}},
            },
        },
        "score": {"type": "number"},
    },
}

JUDGE_BINARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reasoning", "label"],
    "properties": {
        "reasoning": {"type": "string"},
        "label": {"type": "string", "enum": ["CORRECT", "WRONG"]},
    },
}

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


def _belief(raw: object) -> float | None:
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


def _text(raw: object) -> str:
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
        text = _text(item.get("text"))
        if not text:
            drop("empty text")
            continue
        sources = _ids(item.get("source_episode_ids"), allowed)
        if not sources:
            drop("no source id in the chunk")
            continue
        belief = _belief(item.get("belief"))
        if belief is None:
            drop("belief not a number")
            continue
        if text.lower() in seen_texts:
            continue  # a repeat within one answer is harmless; keep the first
        seen_texts.add(text.lower())
        subject = _text(item.get("subject"))
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
    known = {_text(t).lower() for t in existing}
    out: list[ReflectionDraft] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        text = _text(item.get("text"))
        fact_ids = _ids(item.get("fact_ids"), allowed)
        if not text or len(fact_ids) < 2 or text.lower() in known:
            continue
        known.add(text.lower())
        out.append(
            ReflectionDraft(text=text, fact_ids=fact_ids, subject=_text(item.get("subject")))
        )
    if raw and not out:
        raise LLMOutputError(
            f"reflection answer unusable: none of {len(raw)} reflections cites two given "
            f"facts with new, non-empty text"
        )
    return out


def _episode_lines(episodes: list[EpisodeView], label: str) -> str:
    if not episodes:
        return "(none)"
    return "\n".join(f"- {label}: {ep.id}\n  text: {_text(ep.text)}" for ep in episodes)


def _fact_lines(facts: list[ContextFact] | list[ReflectionInput]) -> str:
    if not facts:
        return "(none)"
    return "\n".join(f"- id: {f.id}\n  text: {_text(f.text)}" for f in facts)


class LLMExtractor:
    """:class:`~gaama.extract.base.Extractor` backed by :class:`LLMClient`.

    Also answers and judges LoCoMo questions for the benchmark harness.

    Args:
        client: The LLM client; the caller owns (and closes) it.
    """

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.name: str = client.model

    async def extract(
        self, chunk: list[EpisodeView], context: ExtractionContext
    ) -> ExtractionResult:
        """Facts and 1–3 concepts per episode for ``chunk``, validated.

        Raises:
            LLMOutputError: the answer was unusable (see :func:`validate_extraction`).
            LLMTransientError: the endpoint kept failing.
        """
        if not chunk:
            return ExtractionResult(facts=[], episode_concepts={}, extractor=self.name)
        prompt = prompts.render(
            "extract",
            chunk=_episode_lines(chunk, "episode_id"),
            context_episodes=_episode_lines(context.episodes, "older_episode"),
            context_facts=_fact_lines(context.facts),
            context_concepts=", ".join(context.concepts) or "(none yet)",
        )
        answer = await self.client.complete_json(
            stage="extract",
            system=prompt.system,
            user=prompt.user,
            schema=EXTRACTION_SCHEMA,
            schema_name="gaama_extraction",
        )
        return validate_extraction(answer, chunk, self.name)

    async def reflect(
        self, facts: list[ReflectionInput], existing: list[str]
    ) -> list[ReflectionDraft]:
        """Insights combining at least two of ``facts``; none repeats ``existing``."""
        if len(facts) < 2:
            return []  # nothing to combine: spare the call
        prompt = prompts.render(
            "reflect",
            facts=_fact_lines(facts),
            existing="\n".join(f"- {_text(t)}" for t in existing) or "(none)",
        )
        answer = await self.client.complete_json(
            stage="reflect",
            system=prompt.system,
            user=prompt.user,
            schema=REFLECTION_SCHEMA,
            schema_name="gaama_reflection",
        )
        return validate_reflections(answer, facts, existing)

    async def answer(self, question: str, memory_text: str) -> str:
        """Answer ``question`` from packed memory text.

        Raises:
            LLMOutputError: the answer has no string ``answer``.
        """
        prompt = prompts.render("answer", question=question, memory=memory_text or "(empty)")
        out = await self.client.complete_json(
            stage="answer",
            system=prompt.system,
            user=prompt.user,
            schema=ANSWER_SCHEMA,
            schema_name="gaama_answer",
        )
        text = out.get("answer")
        if not isinstance(text, str):
            raise LLMOutputError(f"answer is {type(text).__name__}, not a string")
        return text.strip()

    async def judge(self, question: str, reference: str, candidate: str) -> tuple[float, bool]:
        """Grade ``candidate`` against ``reference``: (partial-credit reward, binary J).

        The reward is the share of the reference's key facts the judge found in the candidate
        (its own ``score`` only when it listed no key facts); J is the CORRECT/WRONG label.

        Raises:
            LLMOutputError: either judge answer is unusable.
        """
        values = {"question": question, "reference": reference, "candidate": candidate}
        reward_p = prompts.render("judge_reward", **values)
        binary_p = prompts.render("judge_binary", **values)
        reward_out, binary_out = await asyncio.gather(
            self.client.complete_json(
                stage="judge_reward",
                system=reward_p.system,
                user=reward_p.user,
                schema=JUDGE_REWARD_SCHEMA,
                schema_name="gaama_judge_reward",
            ),
            self.client.complete_json(
                stage="judge_binary",
                system=binary_p.system,
                user=binary_p.user,
                schema=JUDGE_BINARY_SCHEMA,
                schema_name="gaama_judge_binary",
            ),
        )
        return _reward(reward_out), _binary(binary_out)


def _reward(out: dict[str, Any]) -> float:
    key_facts = out.get("key_facts")
    if isinstance(key_facts, list) and key_facts:
        flags = [k.get("present") for k in key_facts if isinstance(k, dict)]
        if flags and all(isinstance(f, bool) for f in flags):
            return sum(1 for f in flags if f) / len(flags)
    score = _belief(out.get("score", "missing"))
    if score is None:
        raise LLMOutputError(f"judge reward unusable: {out!r:.200}")
    return score


def _binary(out: dict[str, Any]) -> bool:
    label = out.get("label")
    if not isinstance(label, str) or label.strip().upper() not in ("CORRECT", "WRONG"):
        raise LLMOutputError(f"judge label is {label!r}, not CORRECT or WRONG")
    return label.strip().upper() == "CORRECT"
