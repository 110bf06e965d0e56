"""What extractors consume and produce — the same schema for the LLM and the offline extractor."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class EpisodeView:
    """One episode as an extractor sees it."""

    id: str
    speaker: str
    raw_text: str  # what was said, without the time prefix
    text: str  # the stored episode text, "[<session time>] <speaker>: <text>"
    timestamp: datetime  # aware, UTC
    turn_id: str = ""


@dataclass(frozen=True, slots=True)
class ContextFact:
    id: str
    text: str


@dataclass(frozen=True, slots=True)
class ExtractionContext:
    """Older memory shown to the extractor (capped at ~2000 words by the caller)."""

    episodes: list[EpisodeView] = field(default_factory=list)
    facts: list[ContextFact] = field(default_factory=list)
    concepts: list[str] = field(default_factory=list)  # existing concept labels of the tenant


@dataclass(frozen=True, slots=True)
class FactDraft:
    text: str  # atomic, self-contained; relative dates resolved to absolute ones
    source_episode_ids: tuple[str, ...]  # all within the chunk
    belief: float = 1.0  # in [0, 1]
    subject: str = ""  # who/what the fact is about (a speaker name, usually)
    concepts: tuple[str, ...] = ()  # labels the fact is about


@dataclass(frozen=True, slots=True)
class ExtractionResult:
    facts: list[FactDraft]
    episode_concepts: dict[str, tuple[str, ...]]  # episode id -> 1..3 labels
    extractor: str  # "offline" or the model name


@dataclass(frozen=True, slots=True)
class ReflectionInput:
    id: str
    text: str
    concepts: tuple[str, ...] = ()
    subject: str = ""


@dataclass(frozen=True, slots=True)
class ReflectionDraft:
    text: str
    fact_ids: tuple[str, ...]  # at least two facts it combines
    subject: str = ""


def word_count(text: str) -> int:
    """Words of ``text``: whitespace-separated tokens, as every budget here counts them."""
    return len(text.split())
