"""Time expressions in queries resolved to periods against a fixed reference (the conversation's
latest turn), one test per rule of :mod:`gaama.retrieval.timeq`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gaama.retrieval.timeq import Period, in_periods, query_periods, text_periods

REF = datetime(2023, 8, 20, 13, 0, tzinfo=UTC)  # a Sunday


def _p(start: tuple[int, ...], end: tuple[int, ...]) -> Period:
    return Period(datetime(*start, tzinfo=UTC), datetime(*end, tzinfo=UTC))


@pytest.mark.parametrize(
    ("query", "period"),
    [
        # Rule 1: the turns' relative phrases, resolved against the reference.
        ("What happened yesterday?", _p((2023, 8, 19), (2023, 8, 20))),
        ("Where did she go last week?", _p((2023, 8, 13), (2023, 8, 20))),
        ("What did they do last weekend?", _p((2023, 8, 13), (2023, 8, 20))),
        ("What did she read last month?", _p((2023, 7, 1), (2023, 8, 1))),
        ("What did he paint last year?", _p((2022, 1, 1), (2023, 1, 1))),
        ("What did they buy two months ago?", _p((2023, 6, 1), (2023, 7, 1))),
        ("Where did they travel this summer?", _p((2023, 6, 1), (2023, 9, 1))),
        ("What did he cook last Friday?", _p((2023, 8, 18), (2023, 8, 19))),
    ],
)
def test_relative_phrases_resolve_like_the_turns(query: str, period: Period) -> None:
    assert query_periods(query, REF) == [period]


@pytest.mark.parametrize(
    ("query", "period"),
    [
        # Rule 2: a month without a year is the latest such month before the reference month...
        ("What did Mel do last May?", _p((2023, 5, 1), (2023, 6, 1))),
        ("What did Mel do in May?", _p((2023, 5, 1), (2023, 6, 1))),
        ("What did Mel do last September?", _p((2022, 9, 1), (2022, 10, 1))),
        ("Who visited in August?", _p((2022, 8, 1), (2022, 9, 1))),
        # ... and after "this", the reference year's.
        ("Who visited this August?", _p((2023, 8, 1), (2023, 9, 1))),
    ],
)
def test_a_month_without_a_year_is_the_latest(query: str, period: Period) -> None:
    assert query_periods(query, REF) == [period]


@pytest.mark.parametrize(
    ("query", "period"),
    [
        # Rule 3: absolute days, weeks before a day, months, seasons and years.
        ("What happened on 7 May 2023?", _p((2023, 5, 7), (2023, 5, 8))),
        ("What happened the week before 9 June 2023?", _p((2023, 6, 2), (2023, 6, 9))),
        ("What did she bake in June 2022?", _p((2022, 6, 1), (2022, 7, 1))),
        ("What did she bake in March of 2021?", _p((2021, 3, 1), (2021, 4, 1))),
        ("Where did they ski in winter 2022?", _p((2022, 12, 1), (2023, 3, 1))),
        ("What did he buy in 2022?", _p((2022, 1, 1), (2023, 1, 1))),
    ],
)
def test_absolute_periods(query: str, period: Period) -> None:
    assert query_periods(query, REF) == [period]


def test_before_and_after_open_the_period() -> None:
    # Rule 4: before / until / by open it to the past, after / since to the future.
    (before,) = query_periods("What did she do before 2022?", REF)
    assert before.end == datetime(2022, 1, 1, tzinfo=UTC) and before.start.year == 1
    (after,) = query_periods("What changed after May 2023?", REF)
    assert after.start == datetime(2023, 6, 1, tzinfo=UTC) and after.end.year == 9999
    (since,) = query_periods("What changed since May 2023?", REF)
    assert since.start == datetime(2023, 5, 1, tzinfo=UTC)
    (until,) = query_periods("Where did he live until last year?", REF)
    assert until.end == datetime(2022, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the support group?",
        "What did she do before the trip?",
        "How many 5k races did he run?",
        "What is her favourite book?",
        "What did she do on 31 February 2023?",
    ],
)
def test_no_period_no_prior(query: str) -> None:
    assert query_periods(query, REF) == []


def test_naive_reference_is_utc() -> None:
    naive = REF.replace(tzinfo=None)
    assert query_periods("What happened yesterday?", naive) == [_p((2023, 8, 19), (2023, 8, 20))]


def test_a_node_is_in_a_period_by_its_time_or_the_dates_it_names() -> None:
    periods = query_periods("What did Mel do last May?", REF)
    in_may = datetime(2023, 5, 14, 9, 0, tzinfo=UTC).timestamp()
    in_june = datetime(2023, 6, 14, 9, 0, tzinfo=UTC).timestamp()
    assert in_periods(periods, in_may, "")
    assert not in_periods(periods, in_june, "Melanie ran a race (said on 14 June 2023).")
    # Said in June about a day in May: the date in its text counts.
    assert in_periods(periods, in_june, "Melanie ran a charity race on 20 May 2023.")
    assert in_periods(periods, None, "[1:56 pm on 8 May, 2023] Melanie: I ran a race.")
    assert not in_periods([], in_may, "on 20 May 2023")
    assert text_periods("Melanie painted a lake in 2022.") == [_p((2022, 1, 1), (2023, 1, 1))]
