"""The LLM extractor: facts, concepts and reflections from a chat model, validated
(:mod:`gaama.llm.validation`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gaama.errors import LLMOutputError
from gaama.extract.types import (
    ContextFact,
    EpisodeView,
    ExtractionContext,
    ExtractionResult,
    ReflectionDraft,
    ReflectionInput,
)
from gaama.llm import prompts
from gaama.llm.client import LLMClient
from gaama.llm.validation import (
    ANSWER_SCHEMA,
    EXTRACTION_SCHEMA,
    JUDGE_BINARY_SCHEMA,
    JUDGE_REWARD_SCHEMA,
    REFLECTION_SCHEMA,
    one_line,
    parse_belief,
    validate_extraction,
    validate_reflections,
)


def _episode_lines(episodes: list[EpisodeView], label: str) -> str:
    if not episodes:
        return "(none)"
    return "\n".join(f"- {label}: {ep.id}\n  text: {one_line(ep.text)}" for ep in episodes)


def _fact_lines(facts: list[ContextFact] | list[ReflectionInput]) -> str:
    if not facts:
        return "(none)"
    return "\n".join(f"- id: {f.id}\n  text: {one_line(f.text)}" for f in facts)


class LLMExtractor:
    """:class:`~gaama.extract.base.Extractor` backed by :class:`LLMClient`.

    Also answers and judges LoCoMo questions for the benchmark harness.

    Args:
        client: The LLM client; the caller owns (and closes) it.
    """

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.name: str = client.model

    def _ask(
        self, stage: str, schema: dict[str, Any], schema_name: str, **values: str
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """The model's JSON answer to the prompt template ``stage`` filled with ``values``
        (rendered now, asked when awaited)."""
        prompt = prompts.render(stage, **values)
        return self.client.complete_json(
            stage=stage,
            system=prompt.system,
            user=prompt.user,
            schema=schema,
            schema_name=schema_name,
        )

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
        answer = await self._ask(
            "extract",
            EXTRACTION_SCHEMA,
            "gaama_extraction",
            chunk=_episode_lines(chunk, "episode_id"),
            context_episodes=_episode_lines(context.episodes, "older_episode"),
            context_facts=_fact_lines(context.facts),
            context_concepts=", ".join(context.concepts) or "(none yet)",
        )
        return validate_extraction(answer, chunk, self.name)

    async def reflect(
        self, facts: list[ReflectionInput], existing: list[str]
    ) -> list[ReflectionDraft]:
        """Insights combining at least two of ``facts``; none repeats ``existing``."""
        if len(facts) < 2:
            return []  # nothing to combine: spare the call
        answer = await self._ask(
            "reflect",
            REFLECTION_SCHEMA,
            "gaama_reflection",
            facts=_fact_lines(facts),
            existing="\n".join(f"- {one_line(t)}" for t in existing) or "(none)",
        )
        return validate_reflections(answer, facts, existing)

    async def answer(self, question: str, memory_text: str) -> str:
        """Answer ``question`` from packed memory text.

        Raises:
            LLMOutputError: the answer has no string ``answer``.
        """
        out = await self._ask(
            "answer",
            ANSWER_SCHEMA,
            "gaama_answer",
            question=question,
            memory=memory_text or "(empty)",
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
        reward_out, binary_out = await asyncio.gather(
            self._ask("judge_reward", JUDGE_REWARD_SCHEMA, "gaama_judge_reward", **values),
            self._ask("judge_binary", JUDGE_BINARY_SCHEMA, "gaama_judge_binary", **values),
        )
        return _reward(reward_out), _binary(binary_out)


def _reward(out: dict[str, Any]) -> float:
    key_facts = out.get("key_facts")
    if isinstance(key_facts, list) and key_facts:
        flags = [k.get("present") for k in key_facts if isinstance(k, dict)]
        if flags and all(isinstance(f, bool) for f in flags):
            return sum(1 for f in flags if f) / len(flags)
    score = parse_belief(out.get("score", "missing"))
    if score is None:
        raise LLMOutputError(f"judge reward unusable: {out!r:.200}")
    return score


def _binary(out: dict[str, Any]) -> bool:
    label = out.get("label")
    if not isinstance(label, str) or label.strip().upper() not in ("CORRECT", "WRONG"):
        raise LLMOutputError(f"judge label is {label!r}, not CORRECT or WRONG")
    return label.strip().upper() == "CORRECT"
