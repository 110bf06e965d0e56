"""The extractor interface shared by the LLM extractor and the offline extractor."""

from __future__ import annotations

from typing import Protocol

from gaama.extract.types import (
    EpisodeView,
    ExtractionContext,
    ExtractionResult,
    ReflectionDraft,
    ReflectionInput,
)


class Extractor(Protocol):
    #: "offline" or the LLM model name; logged and used as a metric label.
    name: str

    async def extract(
        self, chunk: list[EpisodeView], context: ExtractionContext
    ) -> ExtractionResult:
        """Facts and 1–3 concepts per episode for one chunk of consecutive episodes."""
        ...

    async def reflect(
        self, facts: list[ReflectionInput], existing: list[str]
    ) -> list[ReflectionDraft]:
        """Insights combining several of ``facts``; ``existing`` are reflections to avoid."""
        ...
