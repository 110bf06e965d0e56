"""Relative dates resolved against the time a sentence was said.

Facts must be self-contained, so "I went there yesterday" said on 8 May 2023 becomes
"... went there on 7 May 2023". The rules here are plain regular expressions over English
phrases; `dateparser` does the calendar arithmetic for "<n> <unit> ago" / "in <n> <unit>", where
month and year lengths matter. Everything is deterministic and needs no network or model.

Output forms follow the way LoCoMo's reference answers phrase time ("the week before 8 May 2023",
"the Friday before ..."), except that single days are resolved to their calendar date.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any

__all__ = [
    "DateResolution",
    "format_day",
    "has_absolute_date",
    "resolve_relative_dates",
]

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_VAGUE_WORDS = ("a few", "few", "several", "some")

# Prepositions that already carry the sentence's grammar: "since yesterday" must become
# "since 7 May 2023", not "since on 7 May 2023".
_PREP = r"(?P<prep>\b(?:on|since|until|till|by|from|before|after|in|during|over|for|of)\s+)?"
_QTY = r"(?P<qty>\d{1,2}|a couple of|a couple|couple of|a few|few|several|some|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"  # noqa: E501
_UNIT = r"(?P<unit>day|week|weekend|month|year)s?"
_WD = r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_SEASON = r"(?P<season>spring|summer|fall|autumn|winter)"


@dataclass(frozen=True, slots=True)
class DateResolution:
    """A sentence with its relative date phrases rewritten.

    Attributes:
        text: The rewritten sentence.
        replacements: ``(original phrase, absolute form)`` pairs, in order of application.
    """

    text: str
    replacements: tuple[tuple[str, str], ...]

    @property
    def resolved(self) -> bool:
        """Whether at least one relative phrase was rewritten."""
        return bool(self.replacements)


def format_day(day: date) -> str:
    """Format a day the way facts carry it, e.g. ``7 May 2023`` (no leading zero)."""
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def _month_label(year: int, month: int) -> str:
    # Normalise month overflow so callers can pass month ± 1.
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return f"{_MONTHS[month - 1]} {year}"


def _quantity(word: str) -> int | None:
    word = word.lower()
    if word.isdigit():
        return int(word)
    return _NUMBER_WORDS.get(word)


@lru_cache(maxsize=1)
def _dateparser() -> Any:
    # Imported lazily: its language data is only needed for "<n> <unit> ago" phrases.
    import dateparser

    return dateparser


def _shift(ref: datetime, phrase: str) -> date | None:
    """Let dateparser do calendar arithmetic ("3 months ago") relative to ``ref``."""
    settings = {
        "RELATIVE_BASE": ref.replace(tzinfo=None),
        "PREFER_DATES_FROM": "future" if phrase.startswith("in ") else "past",
        "RETURN_AS_TIMEZONE_AWARE": False,
    }
    parsed = _dateparser().parse(phrase, languages=["en"], settings=settings)
    if isinstance(parsed, datetime):
        return parsed.date()
    return None


def _with_prep(match: re.Match[str], default_prep: str, body: str) -> str:
    prep = match.group("prep")
    if prep:
        return f"{prep}{body}"
    return f"{default_prep} {body}" if default_prep else body


_Rule = tuple[re.Pattern[str], Callable[[re.Match[str], datetime], str | None]]


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _day_part(match: re.Match[str], ref: datetime) -> str:
    word = match.group("rel").lower()
    part = match.group("part").lower()
    day = ref.date() + timedelta(days={"yesterday": -1, "tomorrow": 1}.get(word, 0))
    return _with_prep(match, "on", f"the {part} of {format_day(day)}")


def _simple_day(offset: int) -> Callable[[re.Match[str], datetime], str]:
    def handler(match: re.Match[str], ref: datetime) -> str:
        return _with_prep(match, "on", format_day(ref.date() + timedelta(days=offset)))

    return handler


def _night(offset: int, part: str) -> Callable[[re.Match[str], datetime], str]:
    def handler(match: re.Match[str], ref: datetime) -> str:
        day = ref.date() + timedelta(days=offset)
        return _with_prep(match, "on", f"the {part} of {format_day(day)}")

    return handler


def _weekend_saturday(today: date, rel: str) -> date:
    """Saturday of "this" or "next" weekend as seen from ``today``."""
    weekday = today.weekday()
    if weekday >= 5:
        # Said during a weekend: "this weekend" is the current one, "next" the following.
        saturday = today - timedelta(days=weekday - 5)
        return saturday + timedelta(days=7) if rel == "next" else saturday
    return today + timedelta(days=5 - weekday)


def _week(match: re.Match[str], ref: datetime) -> str:
    rel = match.group("rel").lower()
    unit = match.group("unit").lower()
    anchor = format_day(ref.date())
    if unit == "weekend" and rel in ("this", "next", "coming"):
        body = f"the weekend of {format_day(_weekend_saturday(ref.date(), rel))}"
    elif rel == "last" or rel == "past":
        body = f"the {unit} before {anchor}"
    elif rel == "next" or rel == "coming":
        body = f"the {unit} after {anchor}"
    else:
        body = f"the {unit} of {anchor}"
    prep = match.group("prep")
    # "in the week before ..." reads fine; "on the week before" does not, so drop "on".
    if prep and prep.strip().lower() != "on":
        return f"{prep}{body}"
    return body


def _month(match: re.Match[str], ref: datetime) -> str:
    delta = {"last": -1, "past": -1, "next": 1, "coming": 1}.get(match.group("rel").lower(), 0)
    return _with_prep(match, "in", _month_label(ref.year, ref.month + delta))


def _year(match: re.Match[str], ref: datetime) -> str:
    delta = {"last": -1, "past": -1, "next": 1, "coming": 1}.get(match.group("rel").lower(), 0)
    return _with_prep(match, "in", str(ref.year + delta))


def _weekday(match: re.Match[str], ref: datetime) -> str:
    rel = match.group("rel").lower()
    target = _WEEKDAYS.index(match.group("wd").lower())
    today = ref.weekday()
    if rel == "last":
        back = (today - target) % 7 or 7
        day = ref.date() - timedelta(days=back)
    else:
        ahead = (target - today) % 7 or 7
        day = ref.date() + timedelta(days=ahead)
    return _with_prep(match, "on", f"{_WEEKDAYS[target].capitalize()}, {format_day(day)}")


def _season(match: re.Match[str], ref: datetime) -> str:
    rel = match.group("rel").lower()
    season = match.group("season").lower()
    season = "autumn" if season == "fall" else season
    # Month in which each season ends (northern hemisphere); winter ends in February.
    ends = {"spring": 5, "summer": 8, "autumn": 11, "winter": 2}[season]
    year = ref.year
    if rel == "last":
        year = ref.year if ref.month > ends else ref.year - 1
    elif rel == "next":
        year = ref.year + 1 if ref.month > ends - 3 else ref.year
    return _with_prep(match, "in", f"{season} {year}")


def _ago(match: re.Match[str], ref: datetime) -> str | None:
    qty_word = match.group("qty")
    unit = match.group("unit").lower()
    count = _quantity(qty_word)
    anchor = format_day(ref.date())
    future = match.group(0).lower().lstrip().startswith("in ")
    side = "after" if future else "before"
    if count is None or unit in ("week", "weekend"):
        # Vague counts and weeks stay relative to an absolute anchor: exact and honest.
        return f"{match.group('qtyunit')} {side} {anchor}"
    phrase = f"in {count} {unit}s" if future else f"{count} {unit}s ago"
    shifted = _shift(ref, phrase)
    if shifted is None:
        return None
    if unit == "day":
        return f"on {format_day(shifted)}"
    if unit == "month":
        return f"in {_month_label(shifted.year, shifted.month)}"
    return f"in {shifted.year}"


_RULES: tuple[_Rule, ...] = (
    (_rx(_PREP + r"\bthe day before yesterday\b"), _simple_day(-2)),
    (_rx(_PREP + r"\bthe day after tomorrow\b"), _simple_day(2)),
    (
        _rx(_PREP + r"\b(?P<rel>yesterday|tomorrow|this)\s+(?P<part>morning|afternoon|evening)\b"),
        _day_part,
    ),
    (_rx(_PREP + r"\blast night\b"), _night(-1, "night")),
    (_rx(_PREP + r"\btonight\b"), _night(0, "evening")),
    (_rx(_PREP + r"\byesterday\b"), _simple_day(-1)),
    (_rx(_PREP + r"\btomorrow\b"), _simple_day(1)),
    (_rx(_PREP + r"\btoday\b"), _simple_day(0)),
    (_rx(_PREP + r"\bthe other day\b"), lambda m, r: f"a few days before {format_day(r.date())}"),
    (
        _rx(
            _PREP + r"\b(?:this\s+)?(?P<rel>last|past|this|next|coming)\s+(?P<unit>week|weekend)\b"
        ),
        _week,
    ),
    (_rx(_PREP + r"\b(?:the\s+)?(?P<rel>last|this|next|coming)\s+month\b"), _month),
    (_rx(_PREP + r"\b(?:the\s+)?(?P<rel>last|this|next|coming)\s+year\b"), _year),
    (_rx(_PREP + r"\b(?P<rel>last|this|next|coming)\s+" + _WD + r"\b"), _weekday),
    (_rx(_PREP + r"\b(?P<rel>last|this|next)\s+" + _SEASON + r"\b"), _season),
    (_rx(r"\b(?P<qtyunit>" + _QTY + r"\s+" + _UNIT + r")\s+ago\b"), _ago),
    (_rx(r"\bin\s+(?P<qtyunit>" + _QTY + r"\s+" + _UNIT + r")\b"), _ago),
)

_ABSOLUTE = re.compile(
    r"\b(?:1[89]\d\d|20\d\d)\b"  # a year
    r"|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:" + "|".join(_MONTHS) + r")\b"  # 7 May
    r"|\b(?:" + "|".join(_MONTHS) + r")\s+\d{1,2}(?:st|nd|rd|th)?\b"  # May 7
    r"|\b(?:January|February|March|April|June|July|August|September|October|November|December)\b",
)


def has_absolute_date(text: str) -> bool:
    """Whether ``text`` already names a year, a month or a calendar day.

    Args:
        text: A sentence.

    Returns:
        True for e.g. "in 2022", "on 7 May", "last June"; False for "yesterday" or no date.
    """
    return _ABSOLUTE.search(text) is not None


def resolve_relative_dates(text: str, ref: datetime) -> DateResolution:
    """Rewrite relative date phrases in ``text`` to absolute ones.

    Args:
        text: A sentence as it was said.
        ref: When it was said (the session time); naive or aware, only its date is used,
            except for dateparser's arithmetic which runs on the naive wall time.

    Returns:
        The rewritten text and the list of replacements, e.g. "I went there yesterday" said on
        8 May 2023 gives "I went there on 7 May 2023".
    """
    replacements: list[tuple[str, str]] = []
    for pattern, handler in _RULES:

        def substitute(
            match: re.Match[str],
            handler: Callable[[re.Match[str], datetime], str | None] = handler,
        ) -> str:
            new = handler(match, ref)
            if new is None:
                return match.group(0)
            replacements.append((match.group(0).strip(), new))
            # Keep the whitespace the optional preposition group swallowed at the start.
            lead = match.group(0)[: len(match.group(0)) - len(match.group(0).lstrip())]
            if match.start() == 0 and not lead:
                new = new[:1].upper() + new[1:]
            return lead + new

        text = pattern.sub(substitute, text)
    return DateResolution(text=text, replacements=tuple(replacements))
