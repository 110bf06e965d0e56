"""The deterministic offline extractor: facts, concepts and reflections without an LLM.

Used when no LLM endpoint is configured, and in CI. Same schema as the LLM extractor:

- facts: one per informative, non-question sentence of a turn (clauses joined by a spaced dash
  count as sentences: "it opened last week - I teach there now" is two facts), first person
  rewritten to the speaker's name ("you" to the other speaker when the chunk has exactly two),
  relative dates resolved against the turn's time, and the day it was said appended when the
  sentence carries no date of its own ("Melanie painted that lake sunrise (said on 8 May 2023).");
- concepts: 1–3 YAKE-based labels per episode (see :mod:`gaama.extract.concepts`), reusing
  existing labels when they are near-duplicates;
- reflections: facts sharing a subject and a concept, stated as the pattern they make (how
  often and when the subject came back to the topic), not as a concatenation of the facts.

All CPU work is synchronous and fast (a few milliseconds a turn); the async methods call it.
"""

from __future__ import annotations

import asyncio
import calendar
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from functools import lru_cache

from gaama.extract.concepts import (
    DEFAULT_FUZZY_THRESHOLD,
    Keyphrases,
    SimilarityFn,
    canonicalize_label,
    content_words,
    extract_concepts,
)
from gaama.extract.dates import format_day, has_absolute_date, resolve_relative_dates
from gaama.extract.pronouns import rewrite_pronouns
from gaama.extract.sentences import split_sentences
from gaama.extract.types import (
    EpisodeView,
    ExtractionContext,
    ExtractionResult,
    FactDraft,
    ReflectionDraft,
    ReflectionInput,
)
from gaama.extract.updates import retraction_request

__all__ = ["OfflineExtractor"]

_LEADING_FILLER = re.compile(
    r"^(?:(?:hey|hi|hello|wow|whoa|oh|ah|aw+|yeah|yes|yep|yup|nope|well|so|ha(?:ha)+|lol|omg|"
    r"ok|okay|sure|thanks(?! to\b)|thank you|totally|absolutely|cool|great|nice|awesome|hmm+|"
    r"um+|plus|"
    r"btw|by the way|anyway|oh wow|wow+|woah|oops|phew|yay|ooh|gosh|nah|omg|aww+)\b[\s,!.:;-]*)+",
    re.IGNORECASE,
)
# Discourse openers announce a statement without being part of it ("Guess what, Priya signed
# up" states that Priya signed up): stripped wherever they open a sentence.
_OPENER = re.compile(
    r"^(?:(?:and|oh|so|but)\s+)?(?:guess what|you know what|you won'?t believe (?:it|this|what)"
    r"|you know|by the way|btw|anyways?|so yeah|fun fact|good news|big news|quick update"
    r"|to be honest|honestly|i (?:just )?(?:wanted|want|have|had) to (?:tell you|say|share"
    r"|let you know)(?: that)?|i (?:must|have to|gotta) say(?: that)?|just so you know"
    r"|(?:just )?wanted to (?:tell you|say|share|let you know)(?: that)?)\b[\s,!.:;-]*",
    re.IGNORECASE,
)
# Wishes, thanks and advice to the other speaker ("Take care!", "Be careful with that knee",
# "Enjoy the trip"): courtesy, not a fact about anyone.
_COURTESY = re.compile(
    r"^(?:be (?:careful|safe|kind|gentle|proud)|take care|stay (?:safe|strong|positive|healthy)"
    r"|keep (?:it up|going|up the|at it|me posted|us posted|in touch|rocking|shining)|enjoy"
    r"|have (?:a (?:great|good|nice|wonderful|fun|blast)|fun)|good luck|best of luck"
    r"|let me know|hang in there|feel free|don'?t (?:worry|forget|give up|hesitate)"
    r"|congrat\w*|thanks(?! to\b)|thank you|happy (?:birthday|anniversary|holidays)|welcome)\b",
    re.IGNORECASE,
)
_DAY = re.compile(
    r"\b(\d{1,2}) (January|February|March|April|May|June|July|August|September|October"
    r"|November|December),? ((?:19|20)\d\d)\b"
)
_MONTH_NUMBER = {calendar.month_name[n]: n for n in range(1, 13)}
# Reactions to what the other person said carry no fact of their own.
_REACTION = re.compile(
    r"^(?:that(?:'s| is| was| sounds| must| looks| seems)|this is|it(?:'s| is) so|sounds|looks|"
    r"seems|bet|must|what an?|how|so|such)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-z][A-Za-z']*")
_ALNUM = re.compile(r"[a-z0-9]+")
_HEDGES = (
    re.compile(r"\b(?:maybe|perhaps|probably|possibly|hopefully|might|not sure|unsure)\b", re.I),
    re.compile(r"\bI (?:think|guess|believe|suppose|hope)\b", re.I),
    re.compile(r"\b(?:kinda|sort of|kind of|could be|may be|may)\b", re.I),
)
# A value a short sentence may state on its own: a phone number or an e-mail address.
_VALUE = re.compile(r"\d[\d ().-]{5,}\d|[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_MAX_FACT_CONCEPTS = 2
_MAX_EPISODE_CONCEPTS = 3


@lru_cache(maxsize=1)
def _worker() -> ThreadPoolExecutor:
    # Tens of milliseconds of parsing per chunk would stall the consumer's event loop
    # (heartbeats, timers, other conversations' Redis replies). One thread: the YAKE and pysbd
    # instances are shared and not documented as thread-safe, and the GIL allows no more anyway.
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="offline-extractor")


def _normalise(text: str) -> str:
    return " ".join(_ALNUM.findall(text.lower()))


def _vocatives(names: Sequence[str]) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """The patterns of a name said at the start of a sentence or after its last comma."""
    # Longest first, so that "Melanie" is not cut to "Mel"; names of one length cannot match
    # the same text, so their order is free: sorted, one pattern serves any order of the names.
    return _vocative_patterns(tuple(sorted({n for n in names if n}, key=lambda n: (-len(n), n))))


@lru_cache(maxsize=256)
def _vocative_patterns(names: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    name_alt = "|".join(re.escape(n) for n in names)
    if not name_alt:
        return None
    return (
        re.compile(rf"^(?:{name_alt})\b[\s,!.:;-]*"),
        re.compile(rf",\s*(?:{name_alt})\s*(?=[.!?]*$)"),
    )


def _strip_address(sentence: str, names: Sequence[str]) -> str:
    """Remove leading interjections, discourse openers and vocatives ("Wow, Mel! ...", "Guess
    what, ...", "... , Caroline!")."""
    vocative = _vocatives(names)
    previous = None
    while previous != sentence:
        previous = sentence
        sentence = _LEADING_FILLER.sub("", sentence).lstrip()
        sentence = _OPENER.sub("", sentence).lstrip()
        if vocative:
            sentence = vocative[0].sub("", sentence).lstrip()
    if vocative:
        sentence = vocative[1].sub("", sentence)
    return sentence


def _short_names(names: Iterable[str]) -> list[str]:
    """Names and their first-name nicknames ("Mel" for "Melanie") as vocatives to strip."""
    out: list[str] = []
    for name in names:
        first = name.split()[0] if name.split() else name
        out.append(name)
        out.extend(first[:cut] for cut in range(3, len(first)))
    return list(dict.fromkeys(out))


def _belief(sentence: str) -> float:
    belief = 1.0
    for pattern in _HEDGES:
        if pattern.search(sentence):
            belief *= 0.7
    return round(max(belief, 0.3), 2)


def _finish(sentence: str, said_on: str, dated: bool) -> str:
    """End a fact with one full stop, adding when it was said if it has no date of its own."""
    body = sentence.rstrip(" .!?;:,-")
    if not dated:
        body = f"{body} (said on {said_on})"
    return body + "."


#: Most days a recurring pattern lists.
_DAYS_SHOWN = 6


def _pattern(who: str, topic: str, facts: Sequence[ReflectionInput]) -> str:
    """A recurring pattern: how many times ``who`` came back to ``topic``, and on which days
    (the first date each fact names), e.g. "Melanie came back to pottery 3 times (8 May 2023,
    3 July 2023, 20 August 2023)."; past :data:`_DAYS_SHOWN` days, the first ones and the span
    from the first to the last."""
    days = []
    for fact in facts:
        if m := _DAY.search(fact.text):
            try:
                days.append(date(int(m[3]), _MONTH_NUMBER[m[2]], int(m[1])))
            except ValueError:  # "31 February 2023"
                continue
    times = f"{who} came back to {topic} {len(facts)} times"
    distinct = sorted(set(days))
    if len(distinct) > _DAYS_SHOWN:  # the list is cut: the span says where it ends
        shown = ", ".join(format_day(d) for d in distinct[:_DAYS_SHOWN])
        span = f"from {format_day(distinct[0])} to {format_day(distinct[-1])}"
        return f"{times}, {span} ({shown}, ...)."
    if len(distinct) >= 2:  # every day listed: a span would repeat the first and the last
        return f"{times} ({', '.join(format_day(d) for d in distinct)})."
    if distinct:
        return f"{times}, all on {format_day(distinct[0])}."
    return f"{times}."


class OfflineExtractor:
    """Extractor protocol implementation built on yake, dateparser, pysbd and rapidfuzz.

    Args:
        fuzzy_threshold: rapidfuzz ratio (0–100) at which two concept labels merge.
        similarity: Optional embedding-similarity function for label canonicalisation.
        max_group: Most facts combined into one reflection.
        max_reflections: Most reflections returned by one ``reflect`` call.
    """

    name = "offline"

    def __init__(
        self,
        fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
        similarity: SimilarityFn | None = None,
        max_group: int = 4,
        max_reflections: int = 5,
    ) -> None:
        self.fuzzy_threshold = fuzzy_threshold
        self.similarity = similarity
        self.max_group = max_group
        self.max_reflections = max_reflections

    async def extract(
        self, chunk: list[EpisodeView], context: ExtractionContext
    ) -> ExtractionResult:
        """Facts and 1–3 concepts per episode for one chunk (see :meth:`extract_sync`), worked
        out on the extractor's thread, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_worker(), self.extract_sync, chunk, context)

    async def reflect(
        self, facts: list[ReflectionInput], existing: list[str]
    ) -> list[ReflectionDraft]:
        """Insights combining facts that share a subject and a concept."""
        return self.reflect_sync(facts, existing)

    def _canonical(self, label: str, pool: list[str]) -> str:
        canonical = canonicalize_label(label, pool, self.fuzzy_threshold, self.similarity)
        if canonical not in pool:
            pool.append(canonical)
        return canonical

    def extract_sync(
        self, chunk: Sequence[EpisodeView], context: ExtractionContext
    ) -> ExtractionResult:
        """Synchronous body of :meth:`extract`; deterministic for a given input.

        Args:
            chunk: Consecutive episodes of one conversation.
            context: Older memory; its concept labels are reused.

        Returns:
            Facts, episode concepts (episodes with no topic of their own inherit the nearest
            neighbour's first label; a chunk of pure small talk has none) and ``"offline"``.
        """
        speakers = list(dict.fromkeys(ep.speaker for ep in chunk if ep.speaker))
        names = list(dict.fromkeys([*speakers, *(ep.speaker for ep in context.episodes)]))
        vocatives = _short_names(names)
        pool: list[str] = list(dict.fromkeys(context.concepts))
        # Only this chunk's repeats are dropped. A fact already in memory (the context) is
        # stated again so its new turn becomes one of its sources: provenance stays complete,
        # which forgetting relies on (a fact lives as long as one of its sources does).
        seen_facts: set[str] = set()

        own: list[list[str]] = []
        memo: Keyphrases = {}  # this chunk's only: what a chunk gives depends on it alone
        for ep in chunk:
            labels = extract_concepts(ep.raw_text, names, _MAX_EPISODE_CONCEPTS, memo)
            own.append(list(dict.fromkeys(self._canonical(lb, pool) for lb in labels)))

        episode_concepts: dict[str, tuple[str, ...]] = {}
        for i, ep in enumerate(chunk):
            labels = own[i] or self._inherited(own, i)
            if labels:
                episode_concepts[ep.id] = tuple(labels)

        facts: list[FactDraft] = []
        for ep, ep_labels in zip(chunk, own, strict=True):
            others = [s for s in speakers if s != ep.speaker]
            other = others[0] if len(speakers) == 2 and len(others) == 1 else None
            for fact in self._facts_of(ep, other, names, vocatives, pool, ep_labels, memo):
                key = _normalise(fact.text)
                if key not in seen_facts:
                    seen_facts.add(key)
                    facts.append(fact)
        return ExtractionResult(facts=facts, episode_concepts=episode_concepts, extractor=self.name)

    @staticmethod
    def _inherited(own: list[list[str]], index: int) -> list[str]:
        # A reply without a topic of its own ("Wow, that's great!") is about what was just
        # said: take the previous episode's first label, else the next one's.
        for step in range(1, len(own)):
            for j in (index - step, index + step):
                if 0 <= j < len(own) and own[j]:
                    return own[j][:1]
        return []

    def _facts_of(
        self,
        ep: EpisodeView,
        other: str | None,
        names: list[str],
        vocatives: list[str],
        pool: list[str],
        episode_labels: list[str],
        memo: Keyphrases,
    ) -> list[FactDraft]:
        said_on = format_day(ep.timestamp.date())
        # Names of the people talking are not content: "Thanks, Caroline!" says nothing.
        people = {w.lower() for n in vocatives for w in n.split()}
        facts: list[FactDraft] = []
        for raw in split_sentences(ep.raw_text):
            sentence = _strip_address(raw, vocatives)
            if not sentence or sentence.rstrip().endswith("?"):
                continue
            if retraction_request(sentence) is not None:
                continue  # a request to the memory ("forget my ...") is not a fact
            if raw[:1].islower() and sentence == raw:
                # A subject-less note such as "shares a photo of ...": the speaker did it.
                sentence = f"{ep.speaker} {sentence}"
            sentence = sentence[:1].upper() + sentence[1:]
            words = _WORD.findall(sentence)
            content = [w for w in content_words(sentence) if w not in people]
            if _VALUE.search(sentence) and not _COURTESY.match(sentence):
                pass  # a number or an address stated ("It's 0161 555 0177.") is kept
            elif not content or _COURTESY.match(sentence):
                continue  # a pure reaction, greeting or courtesy
            elif len(content) < 2 and not (content and len(words) >= 4):
                continue
            if _REACTION.match(sentence) and len(content) < 4:
                continue
            resolution = resolve_relative_dates(sentence, ep.timestamp)
            rewritten = rewrite_pronouns(resolution.text, ep.speaker, other)
            dated = resolution.resolved or has_absolute_date(sentence)
            labels = [
                self._canonical(lb, pool)
                for lb in extract_concepts(sentence, names, _MAX_FACT_CONCEPTS, memo)
            ]
            if not labels:
                # Fall back on the turn's own topic, never on one inherited from a neighbour.
                labels = episode_labels[:1]
            facts.append(
                FactDraft(
                    text=_finish(rewritten.text, said_on, dated),
                    source_episode_ids=(ep.id,),
                    belief=_belief(sentence),
                    subject=rewritten.subject or ep.speaker,
                    concepts=tuple(dict.fromkeys(labels)),
                )
            )
        return facts

    def reflect_sync(
        self, facts: Sequence[ReflectionInput], existing: Sequence[str]
    ) -> list[ReflectionDraft]:
        """Synchronous body of :meth:`reflect`; deterministic for a given input.

        Facts are grouped by (subject, concept); every group of at least two facts yields one
        sentence stating the pattern no single fact states: how often the subject came back to
        the topic and when (the dates its facts carry, first to last), biggest groups first.
        A group with the same facts as an earlier one, or a text already in ``existing``
        (compared case- and punctuation-insensitively), is skipped.

        Args:
            facts: Facts to combine, in order (the first ``max_group`` of a group are cited).
            existing: Reflection texts already stored.

        Returns:
            At most ``max_reflections`` drafts, each citing ≥ 2 facts.
        """
        groups: dict[tuple[str, str], list[ReflectionInput]] = {}
        for fact in facts:
            for concept in dict.fromkeys(fact.concepts):
                groups.setdefault((fact.subject, concept), []).append(fact)
        ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
        known = {_normalise(text) for text in existing}
        used: set[frozenset[str]] = set()
        drafts: list[ReflectionDraft] = []
        for (subject, concept), members in ordered:
            if len(members) < 2 or len(drafts) >= self.max_reflections:
                continue
            distinct = list({m.id: m for m in members}.values())
            picked = distinct[: self.max_group]
            ids = frozenset(m.id for m in picked)
            if len(ids) < 2 or ids in used:
                continue
            text = _pattern(subject or "The user", concept.replace("_", " "), distinct)
            if _normalise(text) in known:
                continue
            used.add(ids)
            known.add(_normalise(text))
            drafts.append(
                ReflectionDraft(text=text, fact_ids=tuple(m.id for m in picked), subject=subject)
            )
        return drafts
