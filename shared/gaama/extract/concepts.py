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

__all__ = [
    "DEFAULT_FUZZY_THRESHOLD",
    "GENERIC_WORDS",
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


def words_of(text: str) -> frozenset[str]:
    """A word list written as running text (easier to read and extend than a list literal)."""
    return frozenset(text.split())


#: rapidfuzz ``ratio`` (0–100) at or above which two labels are the same concept.
DEFAULT_FUZZY_THRESHOLD = 92.0

#: ``similarity(label, candidates) -> scores in [0, 1]``, e.g. cosine over embeddings.
SimilarityFn = Callable[[str, Sequence[str]], Sequence[float]]

_FUNCTION_WORDS = words_of(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each either
    else even ever every for from further had has have having he her here hers herself him
    himself his how i if in into is it its itself just me mine more most my myself no nor not
    now of off on once only or other our ours ourselves out over own same she should so some
    such than that the their theirs them themselves then there these they this those through
    to too under until up upon very was we were what when where which while who whom whose why
    will with would you your yours yourself yourselves yet still though although via per
    im ive id ill youre youve youd youll dont didnt doesnt isnt wasnt arent werent cant couldnt
    wont wouldnt shouldnt thats theres whats lets hes shes theyre weve were ya u ur
    gonna wanna gotta kinda sorta lot lots bit
    """
)

#: Words that never make a concept on their own (too generic to connect related memories).
GENERIC_WORDS = words_of(
    """
    thing things stuff time times day days week weeks weekend month months year years today
    yesterday tomorrow tonight morning afternoon evening night moment moments while lot lots way
    ways people person guy guys kind sort bit part piece place places something anything
    everything nothing someone anyone everyone one ones life world idea ideas point fact matter
    case reason side end start stuff feeling feelings experience experiences others other
    friend friends folks everybody somebody anybody question questions answer chat talk news
    word words man woman men women kid kids child children family home situation chance
    opportunity lot number type example reminder look glad sure
    """
)

# Chit-chat, reactions, verbs and adjectives: they may sit inside a label ("art_class") but
# never at its edges, so "love painting" is trimmed to "painting".
_EDGE_WORDS = words_of(
    """
    hey hi hello wow haha hahaha lol omg oh ah aw aww awww yeah yep yes nope okay ok ok thanks
    thank please sorry bye congrats congratulations cheers hmm um uh totally definitely really
    absolutely actually probably maybe perhaps pretty super quite truly literally seriously
    honestly basically especially always never often usually sometimes recently lately soon
    already again ago
    be go going went gone get got getting make made making take took taking see saw seen know
    knew think thought want wanted need needed like liked love loved loving feel felt feeling say
    said tell told try tried trying look looked looking come came give gave find found keep kept
    let put seem seemed help helped start started begin began hope hoped mean meant show showed
    share shared sharing check checked wait waited enjoy enjoyed use used bring brought means
    happen happened remember remembered mind thinking glad hear heard reach
    good great nice cool awesome amazing wonderful fantastic fun funny happy sad excited exciting
    proud special beautiful lovely sweet inspiring inspired powerful important hard tough
    interesting incredible real true whole similar different new old big small little long short
    best better worse worst favorite favourite first last next many much more most few several
    various certain able ready busy tired stoked thrilled grateful thankful lucky huge tiny
    crazy cute fine free full high low main major open own perfect positive negative awesome
    safe simple strong stressful super thoughtful worth wild blessed fulfilling meaningful
    rewarding supportive helpful valuable precious unique since ever anyway
    sound sounds sounded seems looks continue stand blend agree realize embrace express relax
    create chat chatted catch miss talk learn wish plan believe understand appreciate imagine
    guess suppose decide manage handle deal change grow move live stay leave run read write
    paint swim play watch join visit meet buy lose win care matter work sit stop turn call ask
    answer spend follow allow add set open close carry stand hold bring build become provide
    starting happening thinking doing getting going making trying looking feeling coming taking
    saying wondering hoping raising having giving keeping telling seeing putting letting
    well key easy vital future goal reality dream break progress tough awesome yay excellent
    accepted swamped thinkin doin goin nothin somethin lovin provoking plus back fancy
    talking self fam gorgeous yummy keen kind cheer around together must might huh nah yup woah
    whoa oop oops phew fyi pic pics mems fave fav bday far right remind bet young alone forward
    almost across whenever beyond towards toward without along everywhere past content bad
    normal insane lean needy blast sometime twice couple bunch lots plenty top least
    breathtaking stunning vivid resilient passionate imperfect cathartic uplifting genuine
    therapeutic emotional quiet bright cozy classical classic refreshing electric scary tranquil
    priceless empowering gratifying essential satisfying authentic abstract recent crucial
    optimistic unconditional instrumental inviting fleeting calming freeing wishing creating
    helping showing finding using encouraging spending wanting carrying dealing growing
    realizing asking knowing discovering affecting chatting lying standing expressing planning
    relaxing holding hanging playing sitting laying performing posing waving wearing smiling
    following opening appreciating fighting prioritizing researching learning exploring caring
    waking being meaning wondering living trying exist accept adopt choose prepare deserve
    offer pass teach inspire portray tackle apologize recommend spread fly capture celebrate
    explored ate played bought visited finished joined attended enjoyed loved wanted
    wanna gonna gotta outting
    """
)

# What small talk is made of; a sentence with no word outside these and the function words
# ("That's really cool!", "You've got guts") states nothing worth keeping.
_CHATTER = words_of(
    """
    hey hi hello wow haha hahaha lol omg oh ah aw aww awww yeah yep yes nope okay ok thanks
    thank please sorry bye congrats congratulations cheers hmm um uh woah whoa oops phew yay
    totally definitely really absolutely actually probably maybe perhaps pretty super quite
    truly literally seriously honestly basically especially always never often usually
    sometimes good great nice cool awesome amazing wonderful fantastic fun funny happy glad
    excited exciting proud special beautiful lovely sweet inspiring powerful important
    interesting incredible sure true stoked thrilled grateful thankful lucky gorgeous
    be get got go going went gone make made do done feel felt seem seems sound sounds look
    looks keep kept guess bet hope mean love like wish know think see thing things stuff lot
    lots way ways time day today wonder wondering good-bye ya gonna wanna gotta kinda
    """
)

_MONTH_WORDS = words_of(
    """
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday
    """
)

# Words that spoil a label even in its middle: numbers and days say when, not what.
_BANNED_INSIDE = (
    _FUNCTION_WORDS
    | _MONTH_WORDS
    | words_of(
        """today yesterday tomorrow tonight two three four five six seven eight nine ten eleven
        twelve hundred thousand"""
    )
)

_STOPWORDS = _FUNCTION_WORDS | GENERIC_WORDS | _EDGE_WORDS | _MONTH_WORDS
_LABEL_RE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*){0,2}$")
_TOKEN_RE = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_SENTENCE_END = re.compile(r"[.!?\n]")


@lru_cache(maxsize=1)
def _keyword_extractor() -> Any:
    # One YAKE instance per process; constructing it reads stopword data.
    import yake

    return yake.KeywordExtractor(lan="en", n=3, top=12, stopwords=set(_STOPWORDS))


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
    if word in GENERIC_WORDS or word in _EDGE_WORDS:
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
        if len(lowered) > 1 and lowered not in _FUNCTION_WORDS and lowered not in _CHATTER:
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
    while tokens and (tokens[0] in _STOPWORDS or tokens[0].endswith("ly")):
        tokens.pop(0)
    # Trailing past participles are verbs hanging off a noun ("sign_posted"); leading ones can
    # be adjectives ("stained_glass"), so only the right edge is trimmed of them.
    while tokens and (
        tokens[-1] in _STOPWORDS or (tokens[-1].endswith(("ly", "ed")) and len(tokens) > 1)
    ):
        tokens.pop()
    if not tokens or len(tokens) > 3:
        return None
    if any(t in _BANNED_INSIDE or len(t) < 3 for t in tokens):
        return None
    if all(t in GENERIC_WORDS or t in _EDGE_WORDS for t in tokens):
        return None
    tokens[-1] = _singular(tokens[-1])
    if len(tokens) == 1 and not _noun_like(tokens[0]):
        return None
    label = "_".join(tokens)
    return label if _LABEL_RE.match(label) else None


def extract_concepts(text: str, names: Iterable[str] = (), max_labels: int = 3) -> list[str]:
    """Pick up to ``max_labels`` topic labels for a piece of conversation.

    Args:
        text: What was said (before pronoun rewriting; names are excluded anyway).
        names: People's names to keep out of labels (the speakers, at least).
        max_labels: Upper bound on the number of labels.

    Returns:
        Distinct snake_case labels, best first; empty when the text has no topic
        ("Hey Mel! Good to see you!"). The result depends only on the arguments.
    """
    if max_labels <= 0 or not text.strip():
        return []
    excluded = _excluded_names(text, names)
    keyphrases: list[tuple[str, float]] = _keyword_extractor().extract_keywords(text)
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
