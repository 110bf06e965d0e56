"""Concept labels for the offline extractor, and canonicalisation of labels.

A concept is a snake_case topic label (``lgbtq_support_group``, ``lake_sunrise``). Labels come
from YAKE keyphrases, cut back to their content words with stoplists (function words, generic
nouns, chit-chat, common verbs and adjectives) — a cheap stand-in for noun-phrase chunking that
needs no tagger model. A label never holds a person's name: the speakers' names, their short
forms and capitalised words in mid-sentence are excluded.

Canonicalisation keeps the concept layer sparse: a new label that is a near-duplicate of an
existing one (same lemmas in any order, or a string-similarity score over a threshold, or an
optional embedding similarity supplied by the caller) is replaced by the existing label.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from rapidfuzz import fuzz

from gaama.extract.vocabulary import (
    BANNED_INSIDE,
    CHATTER,
    EDGE_WORDS,
    FUNCTION_WORDS,
    GENERIC_WORDS,
    STOPWORDS,
    words_of,
)

__all__ = [
    "DEFAULT_FUZZY_THRESHOLD",
    "GENERIC_WORDS",
    "Keyphrases",
    "SimilarityFn",
    "canonicalize_label",
    "canonicalize_labels",
    "content_words",
    "count_duplicates",
    "extract_concepts",
    "is_base_form",
    "label_key",
    "to_label",
    "words_of",
]


#: rapidfuzz ``ratio`` (0–100) at or above which two labels are the same concept.
DEFAULT_FUZZY_THRESHOLD = 92.0


#: ``similarity(label, candidates) -> scores in [0, 1]``, e.g. cosine over embeddings.
SimilarityFn = Callable[[str, Sequence[str]], Sequence[float]]

_LABEL_RE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*){0,2}$")
_TOKEN_RE = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_SENTENCE_END = re.compile(r"[.!?\n]")


@lru_cache(maxsize=1)
def _keyword_extractor() -> Any:
    # One YAKE instance per process; constructing it reads stopword data.
    import yake

    return yake.KeywordExtractor(lan="en", n=3, top=12, stopwords=set(STOPWORDS))


#: YAKE's keyphrases of texts already read, by text (see :func:`extract_concepts`).
Keyphrases = dict[str, tuple[tuple[str, float], ...]]


def _keyphrases(text: str, memo: Keyphrases | None) -> tuple[tuple[str, float], ...]:
    if memo is not None and (known := memo.get(text)) is not None:
        return known
    found = tuple(_keyword_extractor().extract_keywords(text))
    if memo is not None:
        memo[text] = found
    return found


@lru_cache(maxsize=8192)
def _lemma(word: str) -> str:
    import simplemma

    return str(simplemma.lemmatize(word, lang="en")).lower()


def _singular(word: str) -> str:
    """Plural head nouns become singular ("camping_trips" -> "camping_trip"); nothing else.

    Full lemmatisation would turn "painting" into "paint" and "camping" into "camp", which
    changes the topic's meaning, so only plural endings are undone.
    """
    if len(word) < 4 or not word.endswith("s") or word.endswith("ss"):
        return word
    lemma = _lemma(word)
    if lemma != word and (word.startswith(lemma[:-1]) or lemma in {"child", "person"}):
        return lemma
    return word


def _noun_like(word: str) -> bool:
    """Whether a lone word can stand as a topic: not a verb form, adjective or filler.

    Without a tagger model this is a heuristic: inflected verb forms ("painted", "went") have a
    lemma different from themselves, while gerunds ("painting", "swimming") are kept because
    hobbies are named that way.
    """
    if word in GENERIC_WORDS or word in EDGE_WORDS:
        return False
    if word.endswith(("ed", "in", "ful", "ous", "ive", "ible", "able", "est")):
        return False
    return word.endswith("ing") or _lemma(word) == word


def is_base_form(word: str) -> bool:
    """Whether simplemma gives ``word`` as its own lemma (a base form, not "went"/"stories")."""
    return _lemma(word) == word.lower()


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _excluded_names(text: str, names: Iterable[str]) -> set[str]:
    """Lower-cased tokens that look like names: the given ones, their short forms, and words
    capitalised in mid-sentence (all-caps acronyms such as LGBTQ are kept)."""
    excluded: set[str] = set()
    for name in names:
        for part in name.lower().split():
            excluded.add(part)
            # Nicknames are usually the first few letters: "Mel" for "Melanie".
            for cut in range(3, len(part)):
                excluded.add(part[:cut])
    for match in _TOKEN_RE.finditer(text):
        word = match.group(0)
        if not word[:1].isupper() or word.isupper():
            continue
        before = text[: match.start()].rstrip()
        at_start = not before or _SENTENCE_END.match(before[-1]) is not None
        if not at_start and word.lower() != "i":
            excluded.add(word.lower().split("'")[0])
    return excluded


def content_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` that carry content (no function words, chit-chat, fillers
    or generic nouns); used to tell a real statement from "Haha, so true!".

    Args:
        text: A sentence.

    Returns:
        The content words, in order.
    """
    words = _TOKEN_RE.findall(_ascii(text).replace("-", " "))
    out: list[str] = []
    for word in words:
        lowered = word.strip("'").lower().split("'")[0]
        if len(lowered) > 1 and lowered not in FUNCTION_WORDS and lowered not in CHATTER:
            out.append(lowered)
    return out


def to_label(phrase: str, excluded: Iterable[str] = ()) -> str | None:
    """Turn a keyphrase into a snake_case label, or None when nothing topical is left.

    Edge words (verbs, adjectives, chit-chat, generic nouns) are trimmed, a phrase with a
    function word or an excluded name inside is dropped, and the head noun is singularised.

    Args:
        phrase: Words of a keyphrase, any case.
        excluded: Lower-cased tokens that must not appear (names).

    Returns:
        A label such as ``lake_sunrise``, or None.
    """
    banned = set(excluded)
    words = _TOKEN_RE.findall(_ascii(phrase).replace("-", " "))
    tokens = [t.strip("'’").lower().split("'")[0] for t in words]
    tokens = [t for t in tokens if t]
    if not tokens or any(t in banned for t in tokens):
        return None
    while tokens and (tokens[0] in STOPWORDS or tokens[0].endswith("ly")):
        tokens.pop(0)
    # Trailing past participles are verbs hanging off a noun ("sign_posted"); leading ones can
    # be adjectives ("stained_glass"), so only the right edge is trimmed of them.
    while tokens and (
        tokens[-1] in STOPWORDS or (tokens[-1].endswith(("ly", "ed")) and len(tokens) > 1)
    ):
        tokens.pop()
    if not tokens or len(tokens) > 3:
        return None
    if any(t in BANNED_INSIDE or len(t) < 3 for t in tokens):
        return None
    if all(t in GENERIC_WORDS or t in EDGE_WORDS for t in tokens):
        return None
    tokens[-1] = _singular(tokens[-1])
    if len(tokens) == 1 and not _noun_like(tokens[0]):
        return None
    label = "_".join(tokens)
    return label if _LABEL_RE.match(label) else None


def extract_concepts(
    text: str, names: Iterable[str] = (), max_labels: int = 3, memo: Keyphrases | None = None
) -> list[str]:
    """Pick up to ``max_labels`` topic labels for a piece of conversation.

    Args:
        text: What was said (before pronoun rewriting; names are excluded anyway).
        names: People's names to keep out of labels (the speakers, at least).
        max_labels: Upper bound on the number of labels.
        memo: Keyphrases of texts read before, filled as texts are read: YAKE is most of the
            offline extractor's time, and within one chunk it sees most texts twice (a turn of
            one sentence is read for the episode's concepts and again for its fact's).

    Returns:
        Distinct snake_case labels, best first; empty when the text has no topic
        ("Hey Mel! Good to see you!"). The result depends only on the arguments.
    """
    if max_labels <= 0 or not text.strip():
        return []
    excluded = _excluded_names(text, names)
    keyphrases = _keyphrases(text, memo)
    # YAKE scores: lower is better. Sort on (score, phrase) so ties break the same way always.
    # Single words are weaker topics than phrases ("lake_sunrise" over "painted"): halve their
    # rank by doubling the score.
    ranked = sorted(
        (float(score) * (1.0 if " " in phrase.strip() else 2.0), phrase)
        for phrase, score in keyphrases
    )
    chosen: list[str] = []
    chosen_keys: list[frozenset[str]] = []
    for _score, phrase in ranked:
        label = to_label(phrase, excluded)
        if label is None:
            continue
        key = label_key(label)
        # Skip a label whose words are all inside one already chosen ("support_group" after
        # "lgbtq_support_group"): the concept layer should not fan out into fragments.
        if any(key <= other or other <= key for other in chosen_keys):
            continue
        chosen.append(label)
        chosen_keys.append(key)
        if len(chosen) >= max_labels:
            break
    return chosen


@lru_cache(maxsize=16384)
def label_key(label: str) -> frozenset[str]:
    """The set of lemmas of a label's words: equal keys mean the same concept.

    ``painting_hobby`` and ``hobby_painting`` share a key, as do ``camping_trips`` and
    ``camping_trip``.
    """
    return frozenset(_lemma(part) for part in label.split("_") if part)


def canonicalize_label(
    label: str,
    existing_labels: Iterable[str],
    threshold: float = DEFAULT_FUZZY_THRESHOLD,
    similarity: SimilarityFn | None = None,
    similarity_threshold: float = 0.9,
) -> str:
    """Return an existing label that means the same as ``label``, else ``label`` itself.

    Checks, in order: exact match; same lemma set (word order and plurals ignored); rapidfuzz
    ``ratio`` of the spaced-out labels ≥ ``threshold``; and, when ``similarity`` is given,
    its score ≥ ``similarity_threshold``. Among several matches the best score wins, ties going
    to the alphabetically first label so the result does not depend on the input order.

    Args:
        label: The new label.
        existing_labels: Labels already in use (the tenant's, and earlier ones of the chunk).
        threshold: String-similarity threshold, 0–100.
        similarity: Optional ``(label, candidates) -> scores in [0, 1]``, e.g. embedding
            cosine; called once with all remaining candidates.
        similarity_threshold: Minimum score of ``similarity`` to merge.

    Returns:
        The canonical label.
    """
    existing = sorted(set(existing_labels))
    if not existing or label in existing:
        return label
    key = label_key(label)
    same_key = [other for other in existing if label_key(other) == key]
    if same_key:
        return same_key[0]
    spaced = label.replace("_", " ")
    best: tuple[float, str] | None = None
    for other in existing:
        score = fuzz.ratio(spaced, other.replace("_", " "))
        if score >= threshold and (best is None or score > best[0]):
            best = (score, other)
    if best is not None:
        return best[1]
    if similarity is not None:
        scores = list(similarity(label, existing))
        best_sim: tuple[float, str] | None = None
        for other, score in zip(existing, scores, strict=True):
            if score >= similarity_threshold and (best_sim is None or score > best_sim[0]):
                best_sim = (score, other)
        if best_sim is not None:
            return best_sim[1]
    return label


def canonicalize_labels(
    labels: Iterable[str],
    existing_labels: Iterable[str] = (),
    threshold: float = DEFAULT_FUZZY_THRESHOLD,
    similarity: SimilarityFn | None = None,
    similarity_threshold: float = 0.9,
) -> list[str]:
    """Canonicalise labels in order, each against the existing ones and those before it.

    Args:
        labels: New labels, in order of appearance.
        existing_labels: Labels already in use.
        threshold: String-similarity threshold, 0–100.
        similarity: Optional embedding-similarity function (see :func:`canonicalize_label`).
        similarity_threshold: Minimum score of ``similarity`` to merge.

    Returns:
        One canonical label per input label (same length and order).
    """
    pool = list(dict.fromkeys(existing_labels))
    out: list[str] = []
    for label in labels:
        canonical = canonicalize_label(label, pool, threshold, similarity, similarity_threshold)
        if canonical not in pool:
            pool.append(canonical)
        out.append(canonical)
    return out


def count_duplicates(labels: Iterable[str], threshold: float = DEFAULT_FUZZY_THRESHOLD) -> int:
    """How many distinct labels canonicalisation would fold into another one.

    Args:
        labels: Labels as produced without canonicalisation (repeats allowed).
        threshold: String-similarity threshold, 0–100.

    Returns:
        ``len(set(labels)) - len(set(canonical labels))``.
    """
    distinct = list(dict.fromkeys(labels))
    return len(distinct) - len(set(canonicalize_labels(distinct, threshold=threshold)))
