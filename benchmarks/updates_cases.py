"""The generated cases of ``python -m benchmarks updates``: conversations in which something a
person said stops being true.

Each case is one conversation between a user and a friend, one session a day: the user states
an attribute's value, talks of other things for one to dozens of turns and days, then states its
new value (or that it stopped, or asks the memory to forget it). Around it: distractors (the
friend's own value of the same attribute, a relative with a similar name and another value), an
attribute of the user that does not change, and small talk. Every turn is rendered from a
template with an id; :data:`FIXTURE` holds, per template id, what a model answering today's
extraction schema writes for it (the LLM path through the fake server).

Deterministic from the seed: the same seed and sizes give the same cases.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.locomo_data import Conversation, Session, Turn

FIXTURE = Path(__file__).parent / "data" / "updates" / "llm_facts.json"

KINDS = (
    "residence",
    "employer",
    "role",
    "relationship",
    "pet_name",
    "pet_count",
    "possession",
    "favourite",
    "phone",
    "email",
    "stopped",
    "cancelled",
    "correction",
    "forget",
    "untrue",
)
#: Kinds whose old value must vanish from every read (a request to forget or delete).
REDACTED = ("forget",)

_USERS = ("Dana", "Marek", "Ines", "Tobias", "Priya", "Kofi", "Lena", "Rafael", "Yuki", "Omar")
# A relative whose name is close to the user's, so that similar names must be kept apart.
_SIMILAR = {
    "Dana": "Dina", "Marek": "Marco", "Ines": "Inez", "Tobias": "Tobi", "Priya": "Piya",
    "Kofi": "Kojo", "Lena": "Lina", "Rafael": "Rafa", "Yuki": "Yumi", "Omar": "Omer",
}  # fmt: skip
_FRIENDS = ("Sam", "Jo", "Alex", "Robin", "Kai", "Noor")
_CITIES = (
    "Lisbon", "Porto", "Utrecht", "Ghent", "Leeds", "Bergen", "Tallinn", "Graz", "Lyon", "Turin",
    "Krakow", "Malmo", "Cork", "Bilbao", "Aarhus", "Brno",
)  # fmt: skip
_COMPANIES = (
    "Initech", "Globex", "Umbrella Logistics", "Hooli", "Vandelay Imports", "Stark Analytics",
    "Wonka Foods", "Acme Robotics", "Soylent Labs", "Tyrell Systems",
)  # fmt: skip
_ROLES = (
    "data engineer", "product manager", "staff nurse", "head chef", "team lead",
    "art director", "site foreman", "senior accountant", "lab technician", "school librarian",
)  # fmt: skip
_PARTNERS = ("Theo", "Mila", "Jonas", "Clara", "Felix", "Nadia", "Hugo", "Elif")
_PET_NAMES = ("Biscuit", "Pepper", "Mochi", "Rufus", "Olive", "Ziggy", "Noodle", "Juniper")
_SPECIES = ("dog", "cat", "rabbit", "parrot")
_COUNT_WORDS = ("two", "three", "four", "five")
_CARS = ("Honda Jazz", "Skoda Octavia", "Toyota Yaris", "Volvo V60", "Kia Niro", "Fiat Panda")
_FAVOURITES = {
    "band": ("Radiohead", "Khruangbin", "Fleetwood Mac", "Arctic Monkeys", "Bon Iver"),
    "dish": ("ramen", "paella", "lasagne", "pho", "shakshuka"),
    "film": ("Arrival", "Amelie", "Paddington", "Heat", "Alien"),
}
_ACTIVITIES = (
    ("play squash", "squash"), ("swim laps", "swimming"), ("climb at the bouldering gym",
    "bouldering"), ("sing in a choir", "choir"), ("run a book club", "book club"),
)  # fmt: skip
_PLANS = (
    ("a trip to Japan", "Japan"), ("a kitchen renovation", "kitchen renovation"),
    ("a road trip to Norway", "Norway"), ("a surprise party", "surprise party"),
)  # fmt: skip
_SECRETS = (
    ("passport number", "my passport number is {code}", "code"),
    ("bank PIN", "my bank PIN is {pin}", "pin"),
    ("surgery", "I had a {surgery} in spring", "surgery"),
    ("home address", "my address is {street}", "street"),
)
_SURGERIES = ("gallbladder removal", "hernia repair", "cataract operation", "tonsillectomy")
_STREETS = ("14 Alder Lane", "7 Quarry Road", "22 Beacon Street", "3 Millbrook Close")

# Template id -> text; ids key the LLM fixture. {old}/{new}: the values; {x}: the species or
# kind; {who}: the user; {rel}: the relative; {friend}: the other speaker.
OLD = {
    "residence": ["residence.old.1", "residence.old.2", "residence.old.3"],
    "employer": ["employer.old.1", "employer.old.2", "employer.old.3"],
    "role": ["role.old.1", "role.old.2"],
    "relationship": ["relationship.old.1", "relationship.old.2"],
    "pet_name": ["pet_name.old.1", "pet_name.old.2"],
    "pet_count": ["pet_count.old.1", "pet_count.old.2"],
    "possession": ["possession.old.1", "possession.old.2"],
    "favourite": ["favourite.old.1", "favourite.old.2"],
    "phone": ["phone.old.1", "phone.old.2"],
    "email": ["email.old.1", "email.old.2"],
    "stopped": ["stopped.old.1", "stopped.old.2"],
    "cancelled": ["cancelled.old.1", "cancelled.old.2"],
    "correction": ["correction.old.1", "correction.old.2"],
    "forget": ["forget.old.1"],
    "untrue": ["untrue.old.1", "untrue.old.2"],
}
NEW = {
    "residence": ["residence.new.1", "residence.new.2", "residence.new.3", "residence.new.4"],
    "employer": ["employer.new.1", "employer.new.2", "employer.new.3", "employer.new.4"],
    "role": ["role.new.1", "role.new.2", "role.new.3"],
    "relationship": ["relationship.new.1", "relationship.new.2", "relationship.new.3"],
    "pet_name": ["pet_name.new.1", "pet_name.new.2", "pet_name.new.3"],
    "pet_count": ["pet_count.new.1", "pet_count.new.2", "pet_count.new.3"],
    "possession": ["possession.new.1", "possession.new.2", "possession.new.3"],
    "favourite": ["favourite.new.1", "favourite.new.2", "favourite.new.3"],
    "phone": ["phone.new.1", "phone.new.2", "phone.new.3"],
    "email": ["email.new.1", "email.new.2", "email.new.3"],
    "stopped": ["stopped.new.1", "stopped.new.2", "stopped.new.3", "stopped.new.4"],
    "cancelled": ["cancelled.new.1", "cancelled.new.2", "cancelled.new.3"],
    "correction": ["correction.new.1", "correction.new.2", "correction.new.3"],
    "forget": ["forget.new.1", "forget.new.2", "forget.new.3", "forget.new.4"],
    "untrue": ["untrue.new.1", "untrue.new.2", "untrue.new.3"],
}
TEXTS = {
    "residence.old.1": "I live in {old}, in a flat near the river.",
    "residence.old.2": "Life in {old} is treating me well, it has been my home for years.",
    "residence.old.3": "My place in {old} finally has a working heater.",
    "residence.new.1": "Big news, I have moved to {new}! The boxes are everywhere.",
    "residence.new.2": "I'm all settled in {new} now, the neighbours are lovely.",
    "residence.new.3": "We packed up and relocated to {new} over the weekend.",
    "residence.new.4": "{new} is home now; I signed the lease on a little house there.",
    "employer.old.1": "I work at {old} on the billing team.",
    "employer.old.2": "Work at {old} has been hectic this quarter.",
    "employer.old.3": "My job at {old} keeps me busy.",
    "employer.new.1": "I accepted an offer from {new} and started on Monday.",
    "employer.new.2": "I have left {old}; I'm with {new} now.",
    "employer.new.3": "First week at my new job at {new} went great.",
    "employer.new.4": "I joined {new} this month after handing in my notice.",
    "role.old.1": "I work as a {old} these days.",
    "role.old.2": "Being a {old} means long hours for me.",
    "role.new.1": "I got promoted to {new} yesterday!",
    "role.new.2": "My new title is {new}, which still feels strange to say.",
    "role.new.3": "I switched roles and I'm a {new} now.",
    "relationship.old.1": "I'm dating {old}, we met at a climbing gym.",
    "relationship.old.2": "My boyfriend {old} cooked dinner for me tonight.",
    "relationship.new.1": "{old} and I broke up last week. I'm seeing {new} now.",
    "relationship.new.2": (
        "I've been going out with {new} for a month, after things ended with {old}."
    ),
    "relationship.new.3": "My partner is {new} now; {old} and I split in the spring.",
    "pet_name.old.1": "My {x} is called {old}.",
    "pet_name.old.2": "I have a {x} named {old} who sleeps all day.",
    "pet_name.new.1": "Sadly {old} died in March. We adopted a {x} named {new} last week.",
    "pet_name.new.2": "We have a new {x} called {new} since {old} passed away.",
    "pet_name.new.3": "Our new {x} {new} arrived today; we still miss {old}.",
    "pet_count.old.1": "I have {old} {x}s at home.",
    "pet_count.old.2": "My {old} {x}s keep me company.",
    "pet_count.new.1": "We took in another one, so I have {new} {x}s now.",
    "pet_count.new.2": "With the new arrival I'm up to {new} {x}s.",
    "pet_count.new.3": "I now have {new} {x}s running around the house.",
    "possession.old.1": "I drive a {old} to work.",
    "possession.old.2": "My car is a {old}, it never lets me down.",
    "possession.new.1": "I sold the {old} and bought a {new}.",
    "possession.new.2": "I'm driving a {new} now, the {old} is gone.",
    "possession.new.3": "Traded in my {old} for a {new} on Saturday.",
    "favourite.old.1": "My favourite {x} is {old}.",
    "favourite.old.2": "Nothing beats {old}, my favourite {x} by far.",
    "favourite.new.1": "My favourite {x} is {new} now, I can't get enough of it.",
    "favourite.new.2": "These days {new} is my favourite {x}.",
    "favourite.new.3": "{new} has replaced {old} as my favourite {x}.",
    "phone.old.1": "My phone number is {old}.",
    "phone.old.2": "You can call me on {old}.",
    "phone.new.1": "I got a new number: {new}.",
    "phone.new.2": "My number changed, it's {new} now.",
    "phone.new.3": "Please use {new} from now on, the old number is disconnected.",
    "email.old.1": "My e-mail is {old}.",
    "email.old.2": "Write to me at {old}.",
    "email.new.1": "My new e-mail address is {new}.",
    "email.new.2": "I switched e-mail providers, I'm {new} now.",
    "email.new.3": "Send things to {new}, I don't check {old} any more.",
    "stopped.old.1": "I {old} every Tuesday evening.",
    "stopped.old.2": "Tuesdays are for {new_word}, I never miss it.",
    "stopped.new.1": "I gave up {new_word} last month.",
    "stopped.new.2": "I don't do {new_word} anymore, my knee can't take it.",
    "stopped.new.3": "I quit {new_word} for good.",
    "stopped.new.4": "No more {new_word} for me, I stopped in the winter.",
    "cancelled.old.1": "I'm planning {old} for the autumn.",
    "cancelled.old.2": "I've booked {old} for October.",
    "cancelled.new.1": "We called off {old}, the timing was wrong.",
    "cancelled.new.2": "I cancelled {old}.",
    "cancelled.new.3": "{old_cap} is off, sadly.",
    "correction.old.1": "My phone number is {old}.",
    "correction.old.2": "My phone number is {old}, call any time.",
    "correction.new.1": "Actually, my number is {new}, I mixed up the digits.",
    "correction.new.2": "Sorry, I gave you the wrong number earlier. It's {new}.",
    "correction.new.3": "Correction: the number is {new}, not {old}.",
    "forget.old.1": "By the way, {x}.",
    "forget.new.1": "Please forget my {topic}.",
    "forget.new.2": "Can you delete what I told you about my {topic}?",
    "forget.new.3": "I'd rather you didn't keep my {topic}, wipe it please.",
    "forget.new.4": "Remove my {topic} from your memory, please.",
    "untrue.old.1": "I'm allergic to {old}.",
    "untrue.old.2": "I can't eat {old}, I'm allergic.",
    "untrue.new.1": "Remember my {old} allergy? That's not true any more, I outgrew it.",
    "untrue.new.2": "The {old} allergy is gone, the doctor cleared me.",
    "untrue.new.3": "I'm not allergic to {old} anymore.",
    # The unchanged attribute, the distractors and small talk.
    "keep.employer": "I'm still at {keep} and happy there.",
    "keep.city": "I still love {keep}, it will always be my favourite city.",
    "distract.friend": "Funny, I {verb} {value} myself.",
    "distract.relative": "My cousin {rel} {verb} {value}, by the way.",
    "filler.1": "We watched a documentary about octopuses last night.",
    "filler.2": "The bakery on the corner started selling rye bread.",
    "filler.3": "I spent the afternoon fixing the garden fence.",
    "filler.4": "My sister sent me photos from her hiking trip.",
    "filler.5": "I tried a new recipe with lentils and it was decent.",
    "filler.6": "The train was late again this morning.",
    "filler.7": "I finished that long novel about the lighthouse keeper.",
    "filler.8": "We had a power cut for two hours on Sunday.",
    "filler.9": "I signed up for a pottery class on Thursdays.",
    "filler.10": "The weather turned cold and windy all of a sudden.",
    "reply.1": "Oh really? Tell me more.",
    "reply.2": "That sounds like a lot.",
    "reply.3": "Ha, I know the feeling.",
    "reply.4": "Nice, good for you!",
}
# Distractor phrases per kind: (verb, value pool); None where the kind has no distractor.
_DISTRACT_VERB = {
    "residence": ("live in", "lives in"),
    "employer": ("work at", "works at"),
    "role": ("work as a", "works as a"),
    "possession": ("drive a", "drives a"),
}
QUESTIONS = {
    "residence": ("Where does {who} live?", "Where did {who} live before {new}?"),
    "employer": ("Where does {who} work?", "Where did {who} work before {new}?"),
    "role": ("What is {who}'s job title?", "What was {who}'s job before {new}?"),
    "relationship": ("Who is {who} dating?", "Who was {who} dating before {new}?"),
    "pet_name": ("What is the name of {who}'s {x}?", "What was {who}'s {x} called before {new}?"),
    "pet_count": ("How many {x}s does {who} have?", "How many {x}s did {who} have before?"),
    "possession": ("What car does {who} drive?", "What car did {who} drive before the {new}?"),
    "favourite": ("What is {who}'s favourite {x}?", "What was {who}'s favourite {x} before?"),
    "phone": ("What is {who}'s phone number?", "What was {who}'s old phone number?"),
    "email": ("What is {who}'s e-mail address?", "What was {who}'s old e-mail address?"),
    "stopped": ("Does {who} still do {new_word}?", "What did {who} do on Tuesday evenings?"),
    "cancelled": ("Is {who} still planning {old}?", "What was {who} planning for the autumn?"),
    "correction": ("What is {who}'s phone number?", None),
    "forget": ("What is {who}'s {topic}?", None),
    "untrue": ("Is {who} allergic to {old}?", "What was {who} allergic to?"),
}
_ALLERGENS = ("peanuts", "shellfish", "penicillin", "cats", "pollen")
_STOP_MARKERS = ("gave up", "give up", "quit", "anymore", "any more", "no more", "stopped",
                 "no longer", "not ")  # fmt: skip
_CANCEL_MARKERS = ("called off", "cancel", " off", "no longer", "scrapped")
_UNTRUE_MARKERS = ("not true", "gone", "not allergic", "outgrew", "cleared", "no longer",
                   "anymore", "any more")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Case:
    """One generated conversation and what its questions must find.

    An item *names the current value* when it holds one of ``current`` (checked first), and a
    *stale* one when it holds one of ``stale`` but none of ``current``; ``retracted`` strings
    must be in no item at all; ``kept`` names the unchanged attribute's value.
    """

    id: str
    kind: str
    who: str
    conversation: Conversation
    question: str
    current: tuple[str, ...]
    stale: tuple[str, ...]
    as_of_question: str | None = None
    retracted: tuple[str, ...] = ()
    kept: str = ""
    kept_question: str = ""
    # The rendered text of each turn -> its template id and slot values (for the LLM fixture).
    rendered: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    gap_turns: int = 0
    gap_days: int = 0
    # Epoch seconds between the old value and the new one: what an as-of question passes.
    as_of: float | None = None


def _phone(rng: random.Random) -> str:
    return f"07{rng.randint(100, 999)} {rng.randint(100000, 999999)}"


def _email(rng: random.Random, who: str) -> str:
    host = rng.choice(("fastmail.example", "posteo.example", "mailbox.example", "proton.example"))
    return f"{who.lower()}.{rng.randint(10, 99)}@{host}"


def _two(rng: random.Random, pool: Sequence[str]) -> tuple[str, str, str]:
    a, b, c = rng.sample(list(pool), 3)
    return a, b, c


def _values(kind: str, rng: random.Random, who: str) -> dict[str, str]:
    """The case's slot values: ``old``, ``new`` and a third one for distractors (``other``)."""
    if kind == "residence":
        old, new, other = _two(rng, _CITIES)
        return {"old": old, "new": new, "other": other}
    if kind == "employer":
        old, new, other = _two(rng, _COMPANIES)
        return {"old": old, "new": new, "other": other}
    if kind == "role":
        old, new, other = _two(rng, _ROLES)
        return {"old": old, "new": new, "other": other}
    if kind == "relationship":
        old, new, other = _two(rng, _PARTNERS)
        return {"old": old, "new": new, "other": other}
    if kind == "pet_name":
        old, new, other = _two(rng, _PET_NAMES)
        return {"old": old, "new": new, "other": other, "x": rng.choice(_SPECIES)}
    if kind == "pet_count":
        i = rng.randrange(len(_COUNT_WORDS) - 1)
        return {"old": _COUNT_WORDS[i], "new": _COUNT_WORDS[i + 1], "x": rng.choice(_SPECIES)}
    if kind == "possession":
        old, new, other = _two(rng, _CARS)
        return {"old": old, "new": new, "other": other}
    if kind == "favourite":
        x = rng.choice(sorted(_FAVOURITES))
        old, new, other = _two(rng, _FAVOURITES[x])
        return {"old": old, "new": new, "other": other, "x": x}
    if kind in ("phone", "correction"):
        return {"old": _phone(rng), "new": _phone(rng)}
    if kind == "email":
        return {"old": _email(rng, who), "new": _email(rng, who)}
    if kind == "stopped":
        verb, word = rng.choice(_ACTIVITIES)
        return {"old": verb, "new_word": word, "new": word}
    if kind == "cancelled":
        plan, word = rng.choice(_PLANS)
        return {"old": plan, "old_cap": plan[:1].upper() + plan[1:], "new": word, "word": word}
    if kind == "untrue":
        return {"old": rng.choice(_ALLERGENS)}
    if kind == "forget":
        topic, said, slot = rng.choice(_SECRETS)
        secret = {
            "code": f"{rng.choice('KLMPRX')}{rng.randint(1000000, 9999999)}",
            "pin": f"{rng.randint(1000, 9999)}",
            "surgery": rng.choice(_SURGERIES),
            "street": rng.choice(_STREETS),
        }[slot]
        return {"topic": topic, "x": said.format(**{slot: secret}), "old": secret}
    raise ValueError(f"unknown kind {kind!r}")


def _markers(kind: str, v: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(current, stale) strings an item is judged by."""
    if kind == "stopped":
        return _STOP_MARKERS, (v["new_word"], v["old"].split()[-1])
    if kind == "cancelled":
        return _CANCEL_MARKERS, (v["word"],)
    if kind == "untrue":
        return _UNTRUE_MARKERS, (v["old"],)
    if kind == "forget":
        return (), (v["old"],)
    return (v["new"],), (v["old"],)


class _Builder:
    """Turns of one conversation, a session a day, alternating the user and the friend."""

    def __init__(self, case_id: str, who: str, friend: str, start: datetime) -> None:
        self.case_id, self.who, self.friend = case_id, who, friend
        self.day = start
        self.sessions: list[Session] = []
        self.turns: list[Turn] = []
        self.rendered: dict[str, tuple[str, dict[str, str]]] = {}

    def say(self, speaker: str, template: str, slots: dict[str, str]) -> None:
        text = TEXTS[template].format(**slots)
        n = len(self.sessions) + 1
        self.turns.append(Turn(f"D{n}:{len(self.turns) + 1}", speaker, text))
        self.rendered.setdefault(text, (template, dict(slots)))

    def close(self, days: int = 1) -> None:
        if self.turns:
            self.sessions.append(Session(len(self.sessions) + 1, self.day, tuple(self.turns)))
            self.turns = []
        self.day += timedelta(days=days, hours=1)

    def filler(self, rng: random.Random, turns: int) -> None:
        for _ in range(turns):
            self.say(self.who, f"filler.{rng.randint(1, 10)}", {})
            self.say(self.friend, f"reply.{rng.randint(1, 4)}", {})

    def conversation(self) -> Conversation:
        self.close()
        return Conversation(self.case_id, (self.who, self.friend), tuple(self.sessions))


def make_case(kind: str, number: int, seed: int, max_gap_turns: int, max_gap_days: int) -> Case:
    """Case ``number`` of ``kind``: its values, phrasings, gap and distractors drawn from a
    generator seeded by (seed, kind, number)."""
    rng = random.Random(f"{seed}:{kind}:{number}")
    who = rng.choice(_USERS)
    friend = rng.choice(_FRIENDS)
    v = _values(kind, rng, who) | {"who": who, "rel": _SIMILAR[who], "friend": friend}
    start = datetime(2024, 1, 1, 9, tzinfo=UTC) + timedelta(days=rng.randint(0, 300))
    b = _Builder(f"upd-{kind}-{number}", who, friend, start)
    keep_value = rng.choice([c for c in _COMPANIES if c not in v.values()])
    keep_tpl = "keep.employer"
    if kind in ("employer", "role"):
        keep_value = rng.choice([c for c in _CITIES])
        keep_tpl = "keep.city"

    b.filler(rng, rng.randint(0, 2))
    b.say(who, rng.choice(OLD[kind]), v)
    b.say(friend, f"reply.{rng.randint(1, 4)}", {})
    b.say(who, keep_tpl, {"keep": keep_value})
    verb = _DISTRACT_VERB.get(kind)
    if verb:  # the friend holds a similar attribute, and so does a relative of similar name
        slots = {"verb": verb[0], "verb3": verb[1], "value": v["other"], "rel": v["rel"]}
        b.say(friend, "distract.friend", slots)
        b.say(who, "distract.relative", slots | {"verb": verb[1]})
    gap_turns = rng.randint(1, max_gap_turns)
    gap_days = rng.randint(1, max_gap_days)
    sessions = max(1, min(gap_days, 1 + gap_turns // 4))
    per = max(1, gap_turns // sessions)
    b.close()
    for s in range(sessions):
        b.filler(rng, per)
        b.close(max(1, gap_days // sessions) if s < sessions - 1 else 1)
    b.day += timedelta(days=max(0, gap_days - sessions))
    before_new = (b.day - timedelta(seconds=1)).timestamp()
    b.say(who, rng.choice(NEW[kind]), v)
    b.say(friend, f"reply.{rng.randint(1, 4)}", {})
    b.filler(rng, rng.randint(0, 3))
    conv = b.conversation()

    current, stale = _markers(kind, v)
    question, as_of = QUESTIONS[kind]
    return Case(
        id=conv.sample_id,
        kind=kind,
        who=who,
        conversation=conv,
        question=question.format(**v),
        current=current,
        stale=stale,
        as_of_question=as_of.format(**v) if as_of else None,
        retracted=(v["old"],) if kind in REDACTED else (),
        kept=keep_value,
        kept_question=(
            f"Where does {who} work?"
            if keep_tpl == "keep.employer"
            else f"Which city does {who} love most?"
        ),
        rendered=b.rendered,
        gap_turns=gap_turns,
        gap_days=gap_days,
        as_of=before_new if as_of else None,
    )


def generate(
    seed: int,
    per_kind: int,
    kinds: Sequence[str] = KINDS,
    max_gap_turns: int = 24,
    max_gap_days: int = 40,
) -> list[Case]:
    """``per_kind`` cases of each of ``kinds``, deterministic from ``seed``."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    return [
        make_case(kind, n, seed, max_gap_turns, max_gap_days)
        for kind in kinds
        for n in range(per_kind)
    ]


def load_fixture(path: Path = FIXTURE) -> dict[str, list[dict[str, object]]]:
    """The written-down model answers: template id -> the facts a model extracts from it."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    missing = sorted(set(TEXTS) - set(raw))
    if missing:
        raise ValueError(f"{path}: no model answer for template(s) {', '.join(missing)}")
    return {k: list(v) for k, v in raw.items() if not k.startswith("_")}
