"""Offline update rules: which of a person's current facts a new fact ends, and why.

A pure module (no store, no I/O). Given a new fact draft and the same person's current facts, it
reads each sentence as a *claim* — an attribute of its holder with a value ("Dana lives in
Lisbon": ``residence = lisbon``) or a statement that something stopped holding ("Dana no longer
plays tennis") — and ends an older fact when the new one, by rule:

- ``update``: gives a single-valued attribute a different value (residence, employer, role,
  partner, a pet's or a possession's name, a count, a favourite, a phone number, an e-mail);
- ``correction``: does so while saying it corrects ("actually", "I meant", "correction");
- ``contradiction``: denies the old value outright ("Dana doesn't live in Porto");
- ``negation``: says it holds no longer ("no longer", "stopped", "quit", "not any more", "broke
  up with", a pet that died);
- ``cancelled``: calls off a plan ("cancelled the trip to Japan", "the wedding is off");
- ``retracted``: a request to the memory to forget or delete something, or "that's not true any
  more" (:func:`retraction_request`, :func:`retracted`).

Anything unsure stays current: hedged, planned or conditional sentences ("might move to
Berlin"), questions, claims about someone else ("Dana's sister moved to Rome"), the same value
restated, and older facts the rules cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from gaama.extract.sentences import split_sentences
from gaama.extract.vocabulary import FUNCTION_WORDS, GENERIC_WORDS, words_of

__all__ = [
    "Claim",
    "CurrentFact",
    "Ending",
    "NewFact",
    "Reason",
    "Retraction",
    "ends",
    "read_claim",
    "retracted",
    "retraction_request",
]

Reason = Literal["update", "contradiction", "negation", "cancelled", "correction", "retracted"]


@dataclass(frozen=True, slots=True)
class NewFact:
    """A fact draft as the rules read it: its text, whom it is about, when it became true."""

    text: str
    subject: str
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class CurrentFact:
    """One of the same person's facts that is current (not yet ended)."""

    id: str
    text: str
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Ending:
    """An existing fact the new one ends, the reason, and the attribute it was about."""

    fact_id: str
    reason: Reason
    attribute: str


@dataclass(frozen=True, slots=True)
class Claim:
    """What a sentence says about its holder.

    ``attribute`` is a key such as ``residence``, ``pet:dog`` or ``favourite:band``; ``value``
    its normalised value. ``stopped`` holds the reason of a sentence that ends something
    (``negation``, ``cancelled``, ``contradiction``) and ``words`` the salient words it names.
    """

    attribute: str
    value: str
    stopped: Reason | None = None
    words: frozenset[str] = frozenset()
    correction: bool = False


# --- words -----------------------------------------------------------------------------------

_SAID_ON = re.compile(r"\s*\((?:said|mentioned|told) on [^)]*\)")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+")
_NOT_SALIENT = (
    FUNCTION_WORDS
    | GENERIC_WORDS
    | words_of(
        """no longer anymore any more not never stopped stop quit gave give up cancelled canceled
        cancel called off after all actually now new old current currently just also really
        said told about what that forget delete remember true is was has had have been got
        'm 's dont doesnt isnt wasnt whatever"""
    )
)


@lru_cache(maxsize=4096)
def _lemma(word: str) -> str:
    import simplemma

    return str(simplemma.lemmatize(word, lang="en")).lower()


def salient(text: str, names: Iterable[str] = ()) -> frozenset[str]:
    """Lemmas of ``text``'s content words, without function words and the given names."""
    skip = {p.lower() for n in names for p in n.replace("'s", "").split()}
    out = set()
    for tok in _TOKEN.findall(text):
        low = tok.lower().removesuffix("'s")
        if low in _NOT_SALIENT or low in skip or len(low) < 2:
            continue
        out.add(_stem(low))
    return frozenset(out - _NOT_SALIENT)


def _stem(word: str) -> str:
    """A lemma cut to the stem its inflections share ("smoking", "smokes" -> "smok")."""
    lemma = _lemma(word)
    if lemma.endswith("ing") and len(lemma) > 5:
        lemma = lemma[:-3]
    return lemma.rstrip("e") if len(lemma) > 3 else lemma


def _clean(text: str) -> str:
    text = _SAID_ON.sub("", text.replace("’", "'"))
    return " ".join(text.split()).strip().rstrip(".!;:,")


def _norm(value: str) -> str:
    value = re.sub(r"^(?:a|an|the|my|his|her|their)\s+", "", value.strip(), flags=re.I)
    value = re.sub(r"(?:\s+(?:and|of|on|upon|de|da|do|del|la|le|&))+$", "", value)
    return " ".join(re.findall(r"[a-z0-9@.+]+", value.lower())).strip(". ")


# --- claims ----------------------------------------------------------------------------------

_WHO = r"(?P<who>(?:[A-Z][\w'-]*(?: [A-Z][\w'-]*)?|I)(?: and others)?)"
_AUX = (
    r"(?:(?:just|now|finally|recently|officially|actually|currently|also|still|already|"
    r"has|have|had|is|was|am|'s|'m|been|got|did|does|do|indeed|since|then)\s+)*"
    # a first verb joined to the one that says it ("packed up and moved to ...")
    r"(?:[a-z]+(?: up| out| off)? and\s+)?"
)
_CAP = r"[A-Z][\w'&.-]*(?:[ -](?:[A-Z][\w'&.-]*|(?:de|da|do|del|la|le|on|upon|of|and)\b|&))*"
_PLACE = rf"(?P<v>{_CAP})"
_ORG = rf"(?P<v>{_CAP}|[a-z][\w&.-]*(?:\.com|\.io|Labs|Inc))"
_PERSON = r"(?P<v>[A-Z][\w'-]+(?: [A-Z][\w'-]+)?)"
_PHRASE = (
    r"(?P<v>[\w'&-]+(?: (?!(?:at|for|with|since|in|on|from|because|and|but|so|now|"
    r"these days|anymore|any more|any longer|instead)\b)[\w'&-]+){0,4})"
)
_NUM_WORDS = {
    w: n
    for n, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
        ]
    )
}
_NUM = r"(?P<n>\d{1,3}|" + "|".join(_NUM_WORDS) + r")"
_PETS = (
    r"dog|puppy|pup|cat|kitten|rabbit|bunny|hamster|parrot|bird|budgie|fish|goldfish|turtle|"
    r"tortoise|horse|pony|guinea pig|ferret|lizard|snake|gecko"
)
_THINGS = (
    r"car|bike|bicycle|motorbike|motorcycle|scooter|van|truck|boat|phone|laptop|computer|"
    r"guitar|piano|camera|watch|house|flat|apartment|tv"
)
_PARTNER = r"girlfriend|boyfriend|partner|wife|husband|fianc[ée]e?|spouse"
_PHONE = r"(?P<v>\+?\d[\d ().-]{5,}\d)"
_EMAIL = r"(?P<v>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
_SPECIES = {"puppy": "dog", "pup": "dog", "kitten": "cat", "bunny": "rabbit", "goldfish": "fish"}
_THING_OF = {"bicycle": "bike", "motorcycle": "motorbike", "flat": "apartment"}


def _species(word: str) -> str:
    word = word.lower()
    return _SPECIES.get(word, _THING_OF.get(word, word))


# (attribute, pattern after the holder): the value is group ``v`` (``n`` for counts, ``k``
# names the kind of pet, possession or favourite).
_SUBJECT_RULES: list[tuple[str, str]] = [
    ("residence", rf"(?:moved|relocated|emigrated)(?: back| over| away)? to {_PLACE}"),
    (
        "residence",
        rf"(?:lives?|living|resides?|residing|(?:all )?settled|based|staying) in {_PLACE}",
    ),
    ("residence", rf"calls? {_PLACE} home"),
    ("residence", rf"(?:new )?home is(?: now)? in {_PLACE}"),
    ("address", r"(?:new )?(?:home )?address is(?: now)? (?P<v>\d[\w ,.'-]+)"),
    ("employer", rf"(?:works?|working|employed|interning) (?:at|for|by|with) {_ORG}"),
    ("employer", rf"(?:joined|hired by|hired at) {_ORG}"),
    ("employer", rf"(?:started|starting|began)(?: a new job| a job| working| work)? at {_ORG}"),
    (
        "employer",
        rf"(?:got|landed|took|accepted) (?:a|the|an) (?:new )?(?:job|position|role|offer)"
        rf" (?:at|with) {_ORG}",
    ),
    ("employer", rf"(?:new )?(?:employer|company) is(?: now)? {_ORG}"),
    ("employer", rf"(?:new )?(?:job|position) (?:at|with) {_ORG}"),
    (
        "employer",
        rf"(?:accepted|took|signed|got) (?:an|the|a) (?:new )?(?:job )?(?:offer|contract)"
        rf" (?:from|at|with) {_ORG}",
    ),
    ("role", rf"(?:works?|working|started|serves?) as (?:a|an|the) {_PHRASE}"),
    ("role", rf"(?:got )?promoted to {_PHRASE}"),
    ("role", rf"(?:became|is now|'s now) (?:a|an|the) (?:new )?{_PHRASE}"),
    ("role", rf"(?:is|'s|am|'m) (?:a|an) (?:new )?{_PHRASE} now\b"),
    ("role", rf"(?:new )?(?:role|job title|title|position) is(?: now)? (?:a |an |the )?{_PHRASE}"),
    (
        "partner",
        rf"(?:dating|seeing|going out with|engaged to|married to|married|together with)"
        rf" {_PERSON}",
    ),
    ("partner", rf"(?:new )?(?:{_PARTNER})(?:'s name)? is(?: now)?(?: called| named)? {_PERSON}"),
    (
        "pet+:",
        rf"(?:has|have|got|adopted|rescued|owns?|brought home|bought) (?:a|an|the|another)"
        rf" (?P<new>new )?(?:\w+ )?(?P<k>{_PETS}) (?:named|called) {_PERSON}",
    ),
    ("pet:", rf"(?P<new>new )?(?P<k>{_PETS})(?:'s name)? is(?: now)?(?: named| called)? {_PERSON}"),
    # "a new rabbit, Ziggy, ..." / "new rabbit Ziggy arrived": the new pet of that kind
    (
        "pet:",
        rf"(?:(?:has|have|got|adopted|rescued) (?:a|an) )?(?P<new>new )(?P<k>{_PETS}),? {_PERSON}",
    ),
    ("count:", rf"(?:has|have|owns?|keeps?|up to)(?: got)? {_NUM} (?P<k>[a-z]+?)s?\b"),
    (
        "thing:",
        r"(?:drives?|driving|rides?|riding) (?:a|an|the) (?P<k>)(?P<v>[A-Z][\w-]*(?: \w+)?)",
    ),
    ("thing:", rf"(?P<new>new )?(?P<k>{_THINGS}) is(?: now)? (?:a|an|the) {_PHRASE}"),
    (
        "favourite:",
        r"(?:new )?(?:all-time )?favou?rite (?P<k>[a-z]+(?: [a-z]+)?) is(?: now)?"
        r"(?: definitely| probably)? (?P<v>[\w'&-]+(?: [\w'&-]+){0,3})",
    ),
    ("phone", rf"(?:new )?(?:phone|mobile|cell)?(?: ?number| phone) is(?: now)? {_PHONE}"),
    ("phone", rf"(?:reached|reachable|contacted) (?:at|on) {_PHONE}"),
    ("phone", rf"(?:got )?(?:a )?new (?:phone |mobile )?number(?: is)?:? {_PHONE}"),
    (
        "phone",
        rf"(?:phone |mobile )?number (?:changed|has changed),? (?:it's|it is|now|to)(?: now)?"
        rf" {_PHONE}",
    ),
    ("email", rf"(?:new )?(?:e-?mail|email address|e-mail address) is(?: now)? {_EMAIL}"),
    ("email", rf"(?:is|'s|'m|am)(?: now)? {_EMAIL}"),
]
_OBJ = r"(?P<obj>me|[A-Z][\w'-]*)"
# Sentences that name no holder: what the fact's subject says of themself ("Aarhus is home
# now", "Please use 0755 123456 from now on").
_HOLDERLESS: list[tuple[str, str]] = [
    ("residence", rf"^(?i:life|living|home) in {_PLACE}\b"),
    ("residence", rf"^{_PLACE} (?:is|has been|'s)(?: now)? (?:(?:my|our) )?(?:new )?home\b"),
    ("employer", rf"^(?i:work|the job|the new job|my job|my new job) (?:at|for|with) {_ORG}"),
    (
        "role",
        r"^(?i:being) (?:a|an|the) (?P<v>[\w'-]+(?: [\w'-]+)?) (?:means|is|has|keeps|takes)\b",
    ),
    (
        "phone",
        rf"^(?i:(?:please )?(?:use|call|ring|text|try|reach))(?: {_OBJ})?(?: on| at)? {_PHONE}",
    ),
    (
        "phone",
        rf"^(?i:the|my) (?:new |correct |right )?(?:phone |mobile )?number is(?: now)? {_PHONE}",
    ),
    ("phone", rf"^(?i:it's|it is|that's|that is)(?: now| actually)? {_PHONE}"),
    (
        "email",
        rf"^(?i:(?:please )?(?:write|e-?mail|mail|send (?:things|it|stuff|mail|everything)|use|"
        rf"reach))(?: to)?(?: {_OBJ})?(?: at| on| to)? {_EMAIL}",
    ),
]
_VALUE_FIRST: list[tuple[str, str]] = [
    # "Priya's place in Aarhus finally has a working heater"
    (
        "residence",
        rf"\b{_WHO}'s (?:new )?(?:place|flat|apartment|house|home) (?:in|near) {_PLACE}",
    ),
    # "My boyfriend Felix cooked dinner"
    ("partner", rf"\b{_WHO}'s (?:new )?(?:{_PARTNER}),? {_PERSON}"),
    # "First week at Priya's new job at Initech went great"
    ("employer", rf"\b{_WHO}'s (?:new )?(?:job|position|role|internship) (?:at|with) {_ORG}"),
    # "Nothing beats ramen, my favourite dish by far"
    (
        "favourite:",
        r"(?P<v>[\w'&-]+(?: [\w'&-]+){0,3}), " + _WHO + r"'s (?:new )?(?:all-time )?favou?rite"
        r" (?P<k>[a-z]+)\b",
    ),
    # "Ramen has replaced lasagne as my favourite dish"
    (
        "favourite:",
        r"(?P<v>[\w'&-]+(?: [\w'&-]+){0,2}) (?:has |have )?(?:replaced|overtaken|beaten) .+? as "
        + _WHO
        + r"'s (?:new )?favou?rite (?P<k>[a-z]+)\b",
    ),
    # "Sushi is now Dana's favourite food"
    (
        "favourite:",
        r"^(?P<v>[\w'&-]+(?: [\w'&-]+){0,3}) is(?: now)? " + _WHO + r"'s (?:new )?favou?rite "
        r"(?P<k>[a-z]+(?: [a-z]+)?)$",
    ),
]

_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|might|(?-i:may)|could|would|should|possibly|probably|"
    r"thinking (?:about|of)|"
    r"considering|plans? to|planning|hoping|hopes? to|wants? to|wanted to|would like|will|"
    r"(?<!stopped )(?<!quit )(?<!stop )going to|gonna|if|unless|wonders?|wondering|not sure|"
    r"unsure|someday|one day|dreams? of|"
    r"rumou?r|apparently|supposedly|pretend|imagine|wish(?:es)?)\b",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"\b(?:actually|correction|i meant|meant to say|misspoke|got (?:that|it) wrong|"
    r"(?:i|was) wrong|sorry,|typo|to be precise|rather)\b|, not\b",
    re.IGNORECASE,
)
_NEG_STOP = re.compile(
    r"\b(?:no longer|not any ?more|n't any ?more|not any longer|n't any longer|any ?more|"
    r"any longer|these days no)\b",
    re.IGNORECASE,
)
_NEGATED = re.compile(
    r"\b(?:does not|doesn't|do not|don't|did not|didn't|is not|isn't|am not|'m not|are not|"
    r"aren't|was not|wasn't|has not|hasn't|have not|haven't|never|no longer)\s+",
    re.IGNORECASE,
)
_STOPPED_VERB = re.compile(
    r"\b(?:stopped|quit|quitting|gave up|given up|left|leaving|ended|dropped out of|"
    r"resigned from|retired from|was laid off from|got laid off from|got fired from|"
    r"broke up with|split (?:up )?(?:with|from)|divorced|separated from|sold|got rid of|"
    r"gave away|rehomed|traded in|lost)\s+(?P<what>.+)$",
    re.IGNORECASE,
)
_DIED = re.compile(
    r"(?P<what>.+?)\s+(?:passed away|died|ran away|was put down|is gone|has gone|was stolen|"
    r"got stolen|broke down for good)\b",
    re.IGNORECASE,
)
# "No more choir for me, ..."
_NO_MORE = re.compile(
    r"^(?i:no more|no longer any) (?P<what>[^,;]+?)(?: for (?P<who>I|me|[A-Z][\w'-]*))?"
    r"(?:[,;].*)?$"
)
_SINGLE = re.compile(r"\b(?:is|'s) (?:single|unattached)(?: again| now)?\b", re.IGNORECASE)
_CANCEL = re.compile(
    r"\b(?:cancell?ed|called off|scrapped|scratched|postponed indefinitely|pulled out of|"
    r"backed out of)\s+(?P<what>.+)$|^(?P<what2>.+?)\s+(?:is|was|got|has been|'s)\s+"
    r"(?:cancell?ed|called off|off|scrapped)\b|\b(?:not|n't) (?:going|travel\w*|flying|"
    r"heading|moving)\s+(?P<what3>.+?)\s+after all\b",
    re.IGNORECASE,
)


def _holder_ok(who: str, names: Sequence[str]) -> bool:
    who = who.strip().lower().removesuffix("'s").removesuffix(" and others")
    if who == "i":
        return True
    for name in names:
        low = name.lower()
        if who in (low, low.split()[0] if low.split() else low):
            return True
    return False


@lru_cache(maxsize=1)
def _compiled() -> tuple[
    list[tuple[str, re.Pattern[str]]],
    list[tuple[str, re.Pattern[str]]],
    list[tuple[str, re.Pattern[str]]],
]:
    own = [(attr, re.compile(rf"^{_WHO}(?:'s)? {_AUX}{body}")) for attr, body in _SUBJECT_RULES]
    first = [(attr, re.compile(body)) for attr, body in _VALUE_FIRST]
    bare = [(attr, re.compile(body)) for attr, body in _HOLDERLESS]
    return own, first, bare


_HOLDER_ONLY = re.compile(rf"^{_WHO}(?:'s)?\s+{_AUX}$")


# A sentence-initial phrase of lower-case words before the holder ("With the new arrival Kofi
# is up to five rabbits").
_OPENING_PHRASE = re.compile(
    r"^(?i:with|after|since|following|now that|as of|from) (?:[a-z][\w'-]* ){0,4}?,?\s*(?=[A-Z])"
)


def _lead(sentence: str) -> str:
    # Discourse openers and interjections before the holder ("Actually, ...", "Oh and ...").
    return re.sub(
        r"^(?:(?:actually|so|well|oh|and|also|anyway|btw|correction|sorry|oops|wait|update|sadly|"
        r"unfortunately|tragically|honestly|"
        r"quick update|news|fyi|ok|okay|right|yes|no|nope)\b[\s,:!-]*)+",
        "",
        sentence,
        flags=re.IGNORECASE,
    )


def read_claim(text: str, names: Sequence[str]) -> Claim | None:
    """The claim a fact makes about one of ``names`` (or "I"), or None when it makes none the
    rules can read (unsure, about someone else, or no known attribute).

    Args:
        text: A fact's text (third person as extracted, or first person as said).
        names: How the holder may be named (the subject's name; "I" always counts).
    """
    return _read_claim(text, tuple(names))


# A pure function of its arguments returning a frozen Claim: every new fact of a person is
# compared with each of that person's current facts, so the same texts are read again and again.
@lru_cache(maxsize=8192)
def _read_claim(text: str, names: tuple[str, ...]) -> Claim | None:
    raw = _clean(text)
    if not raw or raw.endswith("?"):
        return None
    correction = bool(_CORRECTION.search(raw))
    body = _lead(raw)
    if cancel := _CANCEL.search(body):
        what = cancel["what"] or cancel["what2"] or cancel["what3"] or ""
        return Claim("plan", _norm(what), "cancelled", salient(what, names), correction)
    if _HEDGE.search(body):
        return None
    m = _NO_MORE.match(raw) or _NO_MORE.match(body)  # the lead reads "no" as an interjection
    if m and (not m["who"] or _holder_ok(m["who"], names)):
        what = m["what"]
        return Claim("state", _norm(what), "negation", salient(what, names), correction)
    stopping = _NEG_STOP.search(body)
    denied = _NEGATED.search(body)
    plain = _positive(body, names, correction)
    stop = stopping is not None
    if stopping and plain is not None and _CLAUSE.search(body, plain[1], stopping.start()):
        stop = False  # "no longer" in a later clause is about what that clause says
    if denied and plain is not None and denied.start() >= plain[1]:
        denied = None  # a negation in a later clause ("..., it never lets me down")
    if denied:
        positive = body[: denied.start()] + body[denied.end() :]
        found = _positive(positive, names, correction)
        claim = found[0] if found else None
        reason: Reason = (
            "negation" if stop or "no longer" in denied.group(0).lower() else ("contradiction")
        )
        rest = body[denied.end() :]
        words = salient(rest, names)
        if claim is not None:
            return Claim(claim.attribute, claim.value, reason, words, correction)
        if stop or reason == "negation":
            return Claim("state", _norm(rest), "negation", words, correction) if words else None
        return None
    who = re.match(rf"^{_WHO}(?:'s)?\s", body)
    if _SINGLE.search(body) and who and _holder_ok(who["who"], names):
        return Claim("partner", "", "negation", frozenset(), correction)
    if (
        (m := _STOPPED_VERB.search(body))
        and (
            not body[: m.start()].strip()  # no subject: the speaker's own ("Sold the old bike")
            or ((h := _HOLDER_ONLY.match(body[: m.start()])) and _holder_ok(h["who"], names))
        )
    ):
        what = re.split(r"\s+for (?:a|an|the)\s", m["what"])[0]  # "traded X for a Y": X
        return Claim("state", _norm(what), "negation", salient(what, names), correction)
    if (m := _DIED.match(body)) and not _owned_by_other(m["what"], names):
        what = m["what"]
        return Claim("state", _norm(what), "negation", salient(what, names), correction)
    claim = plain[0] if plain else None
    if claim is not None and stop:
        return Claim(claim.attribute, claim.value, "negation", claim.words, correction)
    return claim


def _owned_by_other(phrase: str, names: Sequence[str]) -> bool:
    """Whether ``phrase`` opens with someone else's possessive ("Carla's dog Rex")."""
    m = re.match(r"^([A-Z][\w-]*)'s\b", phrase)
    return m is not None and not _holder_ok(m[1], names)


# Where a later clause may open with its own holder ("..., so Priya has three parrots now").
_CLAUSE = re.compile(
    r"(?:[,;:]|\s-|\s–)\s+(?:(?:so|and|but|now|because)\s+)?|\s+(?:and|so|but)\s+(?=[A-Z])"
)


def _positive(body: str, names: Sequence[str], correction: bool) -> tuple[Claim, int] | None:
    """The first attribute claim ``body`` makes of its holder, and where its match ends: read
    from the sentence's start, then from each later clause's."""
    starts = [0, *(m.end() for m in _CLAUSE.finditer(body))]
    for start in starts:
        clause = body[start:]
        opening = _OPENING_PHRASE.match(clause)
        skip = opening.end() if opening else 0
        found = _positive_at(clause[skip:], names, correction, bare=start == 0)
        if found is not None:
            return found[0], start + skip + found[1]
    return None


def _positive_at(
    body: str, names: Sequence[str], correction: bool, bare: bool
) -> tuple[Claim, int] | None:
    """The claim ``body`` makes from its start; holder-less readings only when ``bare``."""
    own, first, holderless = _compiled()
    for attr, pattern in own:
        m = pattern.match(body)
        if m is None or not _holder_ok(m["who"], names):
            continue
        groups = m.groupdict()
        kind = _species(groups.get("k") or "")
        if attr == "count:":
            n = groups["n"].lower()
            value = str(_NUM_WORDS.get(n, n))
            attribute = f"count:{_lemma(kind)}"
        elif attr.endswith(":"):
            if attr == "thing:" and not kind:
                kind = "car"
            attribute = f"{attr}{kind}"
            value = _norm(groups["v"])
            if attr == "pet+:" and groups.get("new"):
                # "has a dog named Rex" adds a pet; "a new dog named Max" replaces the dog
                attribute = f"pet:{kind}"
        else:
            attribute, value = attr, _norm(groups["v"])
        if value:
            words = salient(groups.get("v") or "", names)
            return Claim(attribute, value, None, words, correction), m.end()
    for attr, pattern in first:
        m = pattern.search(body)
        if m and _holder_ok(m["who"], names):
            kind = (m.groupdict().get("k") or "").lower()
            attribute = f"{attr}{kind}" if attr.endswith(":") else attr
            value = _norm(re.sub(_VALUE_OPENERS, "", m["v"]))
            if value:
                return Claim(attribute, value, None, frozenset(), correction), m.end()
    if bare:
        for attr, pattern in holderless:
            m = pattern.match(body)
            obj = m.groupdict().get("obj") if m else None
            if obj not in (None, "me") and not _holder_ok(str(obj), names):
                continue  # "call Dana on ...": Dana's number, not the speaker's
            if m and (value := _norm(m["v"])):
                words = salient(m["v"], names)
                return Claim(attr, value, None, words, correction), m.end()
    return None


# Words before a value that are not part of it ("These days shakshuka", "Nothing beats ramen").
_VALUE_OPENERS = re.compile(
    r"^(?:(?:these days|nowadays|now|nothing beats|i love|i adore|definitely|honestly|"
    r"still)\s+)+",
    re.IGNORECASE,
)


# --- endings ---------------------------------------------------------------------------------

#: Attributes one person holds one value of at a time.
_SINGLE_VALUED = ("residence", "address", "employer", "role", "partner", "phone", "email")
_SINGLE_PREFIXES = ("pet:", "thing:", "count:", "favourite:")


def _single(attribute: str) -> bool:
    return attribute in _SINGLE_VALUED or attribute.startswith(_SINGLE_PREFIXES)


def _names(subject: str) -> tuple[str, ...]:
    return tuple(n for n in (subject, *subject.split()[:1]) if n)


def _overlaps(words: frozenset[str], text: str, names: Sequence[str]) -> bool:
    """Whether an older fact names what a stopping sentence names: every salient word it names
    when it names one or two, at least two of them otherwise."""
    if not words:
        return False
    shared = _shared(words, salient(text, names))
    return len(shared) == len(words) or len(shared) >= 2


def _shared(words: frozenset[str], have: frozenset[str]) -> set[str]:
    """Words of ``words`` found in ``have``, a stem matching a longer one it opens when both
    share five letters ("allergy" / "allergic")."""
    out = set()
    for w in words:
        if w in have or (len(w) >= 5 and any(h[:5] == w[:5] and len(h) >= 5 for h in have)):
            out.add(w)
    return out


def ends(new: NewFact, current: Sequence[CurrentFact]) -> list[Ending]:
    """The current facts ``new`` ends, each with its reason; the rest stay current.

    Only facts older than ``new`` (by ``time``; ties count as older) are ended: a late chunk
    does not end what was learned after it, so whichever order facts arrive in, the later one
    wins. A fact never ends itself or a fact with the same text.

    Args:
        new: The new fact draft.
        current: The same person's current facts.
    """
    names = _names(new.subject)
    claims = _claims(new.text, names)
    if not claims:
        return []
    new_key = _norm(_clean(new.text))
    out: list[Ending] = []
    for old in current:
        if old.time > new.time or _norm(_clean(old.text)) == new_key:
            continue
        for claim in claims:
            reason = _ending(claim, old, names)
            if reason is not None:
                out.append(Ending(old.id, reason, claim.attribute))
                break
    return out


def _claims(text: str, names: Sequence[str]) -> list[Claim]:
    """The claims of a sentence, then those of each later clause that names its own holder
    ("Send things to a@b.example, Dana doesn't check c@d.example any more")."""
    out = [c] if (c := read_claim(text, names)) is not None else []
    raw = _lead(_clean(text))
    correction = bool(_CORRECTION.search(raw))
    if raw.endswith("?") or (_HEDGE.search(raw) and not _CANCEL.search(raw)):
        return out
    for m in _CLAUSE.finditer(raw):
        rest = raw[m.end() :]
        who = re.match(rf"^{_WHO}(?:'s)?\s", rest)
        if not (who and _holder_ok(who["who"], names)):
            continue
        if (c := read_claim(rest, names)) is not None and c not in out:
            out.append(Claim(c.attribute, c.value, c.stopped, c.words, correction))
    return out


def _ending(claim: Claim, old: CurrentFact, names: Sequence[str]) -> Reason | None:
    before = read_claim(old.text, names)
    if claim.stopped is not None:
        if claim.attribute == "partner" and not claim.value:  # "single again": every partner
            return "negation" if before and before.attribute == "partner" else None
        if before is not None and before.stopped is None:
            if claim.attribute == before.attribute and claim.value == before.value:
                return claim.stopped
            if claim.attribute not in ("state", "plan") and claim.attribute != before.attribute:
                return None
        if claim.attribute in ("state", "plan") or claim.stopped == "negation":
            return claim.stopped if _overlaps(claim.words, old.text, names) else None
        return None
    if before is None or before.stopped is not None:
        return None
    if before.attribute == "pet+:" + claim.attribute.removeprefix("pet:") and claim.value:
        before = Claim(claim.attribute, before.value)  # "a new dog" replaces the dog named
    if claim.attribute != before.attribute or not _single(claim.attribute):
        return None
    if claim.value == before.value or not claim.value:
        return None
    return "correction" if claim.correction else "update"


# --- retraction ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Retraction:
    """A turn asking the memory to drop something said earlier.

    ``target`` is what it names ("passport number"); empty for "that's not true any more",
    which names the speaker's previous statement. ``redact`` is True for a request to forget
    or delete (the words themselves should go), False for a statement that no longer holds.
    """

    target: str
    redact: bool


_PLEASE = (
    r"^(?:(?:oh|and|also|so|ok|okay|hey|um|actually|one more thing|by the way|btw|wait|"
    r"on second thought|come to think of it)\b[\s,:-]*)*(?:please\s+|pls\s+|kindly\s+)?"
    r"(?:(?:can|could|would|will) you(?: please)?\s+|i(?:'d| would) like you to\s+|"
    r"i want you to\s+|i need you to\s+|you (?:should|can|must)\s+|(?:let's|lets)\s+)?"
    r"(?:please\s+)?"
)
_FORGET = re.compile(
    _PLEASE + r"(?:forget|delete|erase|remove|wipe|scrub|purge|drop|disregard|ignore|"
    r"unlearn|strike|clear|get rid of|don'?t (?:remember|keep|store|save|hold on to)|"
    r"stop remembering|no need to remember)\b(?:\s+(?:about|all about|all of|everything about))?"
    r"\s+(?P<target>.+)$",
    re.IGNORECASE,
)
_RATHER_NOT = re.compile(
    r"^(?:i'?d|i would) (?:rather|prefer(?: it if)?) (?:that )?you (?:didn'?t|did not|don'?t|not|"
    r"wouldn'?t) (?:keep|remember|store|save|hold on to|know)\s+(?P<target>[^,;]+)",
    re.IGNORECASE,
)
_UNTRUE = re.compile(
    r"^(?:(?:oh|and|also|so|actually|wait|well)\b[\s,:-]*)*(?:that|this|it)(?:'s| is| isn't|"
    r" is not|'s not| was)\s*(?:not |no longer )?(?:true|right|correct|the case|accurate|"
    r"valid)(?: any ?more| any longer)?\b|^scratch that\b|^never ?mind (?:that|what i said)\b",
    re.IGNORECASE,
)
_ABOUT = re.compile(
    r"^(?:what|everything|anything|all|the (?:thing|stuff|part|bit)s?)"
    r"(?: (?:i|you) (?:said|told you|mentioned|shared|wrote|gave you))?(?: (?:earlier|before))?"
    r"(?: about| regarding| concerning| of| on)?\s+|^(?:that|the fact that|about)\s+",
    re.IGNORECASE,
)
_TRAILER = re.compile(
    r"[\s,]*(?:from (?:your|the) memory|from memory|for me|please|thanks|thank you|"
    r"i (?:told|gave) you(?: earlier| before)?|i mentioned(?: earlier| before)?|"
    r"(?:that )?i (?:said|shared)(?: earlier| before)?|earlier|before|ok|okay)[\s.!,]*$",
    re.IGNORECASE,
)


def retraction_request(text: str) -> Retraction | None:
    """Whether a turn asks the memory to forget or delete something said earlier, or says that
    what was said is not true any more; None for anything else (including "I always forget my
    keys", which states a fact).

    Args:
        text: What the speaker said (one turn, first person).
    """
    sentences = split_sentences(_clean(text))
    for n, sentence in enumerate(sentences):
        s = sentence.strip().rstrip("?.! ")
        if m := (_FORGET.match(s) or _RATHER_NOT.match(s)):
            target = m["target"]
            for _ in range(3):
                target = _TRAILER.sub("", _ABOUT.sub("", target.strip())).strip(" ,.")
            if salient(target):
                return Retraction(target, redact=True)
        if _UNTRUE.match(s):
            # "that" is what the turn named before it ("Remember my pollen allergy? That's not
            # true any more"), else the speaker's previous statement
            before = " ".join(_REMINDER.sub("", x).strip(" ?.!,") for x in sentences[:n])
            return Retraction(before if salient(before) else "", redact=False)
    return None


# A reminder that opens what a retraction refers to ("Remember my ...?", "You know how I ...").
_REMINDER = re.compile(
    r"^(?:(?:do )?you )?(?:remember|recall|know)(?: how| that| when)?(?: i (?:said|told you))?"
    r"(?: about)?\s+|^about\s+",
    re.IGNORECASE,
)


# Words of a request that name an attribute rather than a value ("my job", "where I live").
_TARGET_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "job": ("employer", "role"),
    "work": ("employer", "role"),
    "employer": ("employer",),
    "company": ("employer",),
    "role": ("role",),
    "position": ("role",),
    "title": ("role",),
    "address": ("address", "residence"),
    "live": ("residence", "address"),
    "home": ("residence", "address"),
    "city": ("residence",),
    "move": ("residence",),
    "number": ("phone",),
    "phone": ("phone",),
    "mobile": ("phone",),
    "email": ("email",),
    "e-mail": ("email",),
    "mail": ("email",),
    "girlfriend": ("partner",),
    "boyfriend": ("partner",),
    "partner": ("partner",),
    "relationship": ("partner",),
    "ex": ("partner",),
    "wife": ("partner",),
    "husband": ("partner",),
    "dating": ("partner",),
    "favourite": ("favourite:",),
    "favorite": ("favourite:",),
}


# Words a request may use for a kind of thing it names by kind ("my surgery" names "a hernia
# repair"): each word, and the word parts a fact naming such a thing holds.
_KIND_WORDS: dict[str, tuple[str, ...]] = {
    "surgery": (
        "surgery", "surgical", "operation", "operated", "procedure", "ectomy", "otomy",
        "removal", "repair", "transplant", "implant", "bypass", "biopsy", "replacement",
    ),
    "health": (
        "diagnos", "condition", "disease", "disorder", "illness", "syndrome", "allerg",
        "diabet", "asthma", "cancer", "depress", "anxiety", "adhd", "migraine", "medication",
        "therapy", "surgery", "operation", "pregnan", "injur", "infection", "chronic",
    ),
    "password": ("password", "passcode", "pin", "code", "passphrase"),
    "pin": ("pin", "passcode", "code"),
    "id": ("passport", "licence", "license", "id", "social security", "national insurance"),
}  # fmt: skip
_KIND_OF = {
    "operation": "surgery", "procedure": "surgery", "condition": "health", "diagnosis": "health",
    "illness": "health", "medical": "health", "passcode": "password", "passport": "id",
}  # fmt: skip


def _kinds_named(text: str) -> frozenset[str]:
    """The kinds of :data:`_KIND_WORDS` whose word parts ``text`` holds."""
    low = text.lower()
    tokens = _TOKEN.findall(low)
    out = set()
    for kind, parts in _KIND_WORDS.items():
        if any(_holds_part(p, low, tokens) for p in parts):
            out.add(kind)
    return frozenset(out)


def _holds_part(part: str, text: str, tokens: Sequence[str]) -> bool:
    """A phrase anywhere in ``text``; a word part of five letters or more inside a word (the
    "ectomy" of "tonsillectomy"); a shorter one as a whole word."""
    if " " in part:
        return part in text
    if len(part) >= 5:
        return any(part in t for t in tokens)
    return part in tokens


def retracted(
    request: Retraction, subject: str, current: Sequence[CurrentFact], time: float
) -> list[Ending]:
    """The facts a retraction ends (reason ``retracted``): those said before ``time`` that name
    what it names — its salient words, or the attribute a word such as "job" or "address"
    stands for; for "that's not true any more", the facts of the latest earlier statement.

    Args:
        request: From :func:`retraction_request`.
        subject: Whose memory (the speaker of the request).
        current: That person's current facts.
        time: When the request was made.
    """
    names = _names(subject)
    earlier = [f for f in current if f.time <= time]
    if not request.target:
        earlier = [f for f in earlier if f.time < time]  # the statement before the request
        if not earlier:
            return []
        last = max(f.time for f in earlier)
        return [Ending(f.id, "retracted", "") for f in earlier if f.time == last]
    words = salient(request.target, names)
    tokens = {t.lower() for t in _TOKEN.findall(request.target)} | words
    attributes = {a for t in tokens for a in _TARGET_ATTRIBUTES.get(t, ())}
    out = []
    for fact in earlier:
        claim = read_claim(fact.text, names)
        by_attribute = claim is not None and any(
            claim.attribute == a or (a.endswith(":") and claim.attribute.startswith(a))
            for a in attributes
        )
        have = salient(fact.text, names)
        have |= {w for w in words if _KIND_OF.get(w, w) in _kinds_named(fact.text)}
        shared = _shared(words, have)
        named = bool(words) and (len(shared) == len(words) or len(shared) >= 2)
        named = named or (len(words) >= 2 and len(shared) >= 1 and by_attribute)
        if named or (by_attribute and not (words - set(_TARGET_ATTRIBUTES)) - have):
            out.append(Ending(fact.id, "retracted", claim.attribute if claim else ""))
    return out
