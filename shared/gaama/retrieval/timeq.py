"""Time expressions in a query, resolved to periods, for a soft prior on node time
(docs/architecture.md, "Time-aware queries").

A question such as "What did Melanie paint last May?" names a period relative to when it is
asked. For a conversation's memory that moment is the conversation's latest turn, so:

1. the relative phrases the offline extractor resolves in turns ("yesterday", "last week",
   "two months ago", "last year", "this summer"... :mod:`gaama.extract.dates`) are resolved the
   same way against the latest turn's time;
2. a month named without a year is the most recent such month: "last May" and "in May" are the
   latest May before the reference month ("this May" is the reference year's);
3. what is then absolute becomes a period: a calendar day ("7 May 2023"), "the week / weekend
   before" a day (the seven days before it), a month ("May 2023"), a season ("summer 2023":
   June to August) or a year ("2023", any year 1900–2099);
4. "before", "until" or "by" a period opens it to the past (everything before its start),
   "after" or "since" opens it to the future.

Event-relative phrases ("before the trip") and questions that only ask for a time ("when did
...") name no period: they add no prior. The prior itself is applied in
:mod:`gaama.retrieval.search`: a candidate whose time, or a date its text names, falls in a
period gains ``w_time`` on its score.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from gaama.extract.dates import resolve_relative_dates

_MONTHS = [calendar.month_name[m] for m in range(1, 13)]
_MONTH = "|".join(_MONTHS)
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11)}
_YEAR = r"(?:19|20)\d\d"

# Rule 2: a month without a year ("last May", "this June", "in May").
_BARE_MONTH = re.compile(
    rf"\b(?P<rel>last|this|in|during)\s+(?P<month>{_MONTH})\b(?!,?\s+(?:of\s+)?(?:\d{{1,2}}\b|{_YEAR}))",
    re.IGNORECASE,
)
# Rule 3 and 4: an absolute period, with the preposition before it.
_OPEN = r"(?:(?P<open>before|until|till|by|after|since)\s+)?"
_ABSOLUTE = re.compile(
    _OPEN
    + r"(?:(?P<week>the\s+(?:week|weekend)\s+before\s+)?"
    + rf"(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?P<dm>{_MONTH}),?\s+(?P<dy>{_YEAR})"
    + rf"|(?P<m>{_MONTH}),?\s+(?:of\s+)?(?P<my>{_YEAR})"
    + rf"|(?P<s>spring|summer|fall|autumn|winter)\s+(?:of\s+)?(?P<sy>{_YEAR})"
    + rf"|(?P<y>\b{_YEAR}\b))",
    re.IGNORECASE,
)
_FAR_PAST = datetime(1, 1, 1, tzinfo=UTC)
_FAR_FUTURE = datetime(9999, 12, 31, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Period:
    """``[start, end)`` in UTC."""

    start: datetime
    end: datetime

    def holds(self, t: float) -> bool:
        return self.start.timestamp() <= t < self.end.timestamp()

    def overlaps(self, other: Period) -> bool:
        return self.start < other.end and other.start < self.end


def _month_index(name: str) -> int:
    return [m.lower() for m in _MONTHS].index(name.lower()) + 1


def _day(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def _month_period(year: int, month: int) -> Period:
    last = calendar.monthrange(year, month)[1]
    return Period(_day(date(year, month, 1)), _day(date(year, month, last)) + timedelta(days=1))


def _name_years(text: str, ref: datetime) -> str:
    """Rule 2: give a month named without a year its year (the latest before ``ref``'s month,
    or ``ref``'s own year after "this")."""

    def year_of(match: re.Match[str]) -> str:
        month = _month_index(match.group("month"))
        if match.group("rel").lower() == "this":
            year = ref.year
        else:
            year = ref.year if month < ref.month else ref.year - 1
        return f"{match.group('rel')} {match.group('month')} {year}"

    return _BARE_MONTH.sub(year_of, text)


def _periods_in(text: str) -> list[Period]:
    """Rules 3 and 4 over text whose dates are absolute."""
    out = []
    for m in _ABSOLUTE.finditer(text):
        if m.group("d"):
            try:
                day = date(int(m.group("dy")), _month_index(m.group("dm")), int(m.group("d")))
            except ValueError:  # "31 February 2023"
                continue
            if m.group("week"):
                period = Period(_day(day) - timedelta(days=7), _day(day))
            else:
                period = Period(_day(day), _day(day) + timedelta(days=1))
        elif m.group("m"):
            period = _month_period(int(m.group("my")), _month_index(m.group("m")))
        elif m.group("s"):
            year, season = int(m.group("sy")), m.group("s").lower()
            if season == "winter":  # December of that year to February of the next
                period = Period(_day(date(year, 12, 1)), _day(date(year + 1, 3, 1)))
            else:
                first, last = _SEASONS[season]
                period = Period(_month_period(year, first).start, _month_period(year, last).end)
        else:
            year = int(m.group("y"))
            period = Period(_day(date(year, 1, 1)), _day(date(year + 1, 1, 1)))
        opened = (m.group("open") or "").lower()
        if opened in ("before", "until", "till", "by"):
            period = Period(_FAR_PAST, period.start)
        elif opened in ("after", "since"):
            period = Period(period.end if opened == "after" else period.start, _FAR_FUTURE)
        out.append(period)
    return out


def query_periods(query: str, ref: datetime) -> list[Period]:
    """The periods ``query`` names, relative to ``ref`` (the conversation's latest turn; a
    naive ``ref`` is taken as UTC). Empty when it names none."""
    if ref.tzinfo is None:
        ref = ref.replace(tzinfo=UTC)
    text = resolve_relative_dates(query, ref).text
    return _periods_in(_name_years(text, ref))


def text_periods(text: str) -> list[Period]:
    """The periods an already-absolute text names ("... on 7 May 2023", "(said on ...)")."""
    return _periods_in(text)


def in_periods(periods: list[Period], t: float | None, text: str) -> bool:
    """Whether time ``t`` (epoch seconds) or any date ``text`` names falls in ``periods``."""
    if not periods:
        return False
    if t is not None and any(p.holds(t) for p in periods):
        return True
    return any(p.overlaps(q) for q in text_periods(text) for p in periods)
