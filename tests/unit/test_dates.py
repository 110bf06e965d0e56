"""Relative dates resolved against the session time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gaama.extract.dates import format_day, has_absolute_date, resolve_relative_dates

# Monday, 8 May 2023 (LoCoMo conv-26, session 1).
REF = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_yesterday_becomes_the_previous_day() -> None:
    res = resolve_relative_dates("I went to the LGBTQ support group yesterday.", REF)
    assert res.text == "I went to the LGBTQ support group on 7 May 2023."
    assert res.resolved
    assert res.replacements == (("yesterday", "on 7 May 2023"),)


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("We went camping last week.", "We went camping the week before 8 May 2023."),
        ("I start a new job next week.", "I start a new job the week after 8 May 2023."),
        ("I'm moving next month.", "I'm moving in June 2023."),
        ("I took a class last month.", "I took a class in April 2023."),
        ("I painted that lake sunrise last year!", "I painted that lake sunrise in 2022!"),
        ("We'll travel next year.", "We'll travel in 2024."),
        ("I ran a race two days ago.", "I ran a race on 6 May 2023."),
        ("See you tomorrow!", "See you on 9 May 2023!"),
        ("I saw it last Friday.", "I saw it on Friday, 5 May 2023."),
        ("We go camping this weekend.", "We go camping the weekend of 13 May 2023."),
        ("I bought it 3 months ago.", "I bought it in February 2023."),
        ("I met her a few days ago.", "I met her a few days before 8 May 2023."),
        ("Last night was fun.", "On the night of 7 May 2023 was fun."),
        ("I've been painting since last year.", "I've been painting since 2022."),
        ("We went there last summer.", "We went there in summer 2022."),
        (
            "That roadtrip this past weekend was wild.",
            "That roadtrip the weekend before 8 May 2023 was wild.",
        ),
    ],
)
def test_relative_phrases(sentence: str, expected: str) -> None:
    assert resolve_relative_dates(sentence, REF).text == expected


def test_sentence_start_is_capitalised() -> None:
    assert resolve_relative_dates("Yesterday I ran.", REF).text == "On 7 May 2023 I ran."


def test_text_without_relative_dates_is_unchanged() -> None:
    sentence = "I have been in a band for two years and love the last song."
    res = resolve_relative_dates(sentence, REF)
    assert res.text == sentence
    assert not res.resolved


def test_month_and_year_roll_over() -> None:
    new_year = datetime(2023, 12, 30, tzinfo=UTC)
    assert resolve_relative_dates("I go next month", new_year).text == "I go in January 2024"
    january = datetime(2024, 1, 3, tzinfo=UTC)
    assert resolve_relative_dates("I went last month", january).text == "I went in December 2023"
    assert resolve_relative_dates("I went yesterday", january).text == "I went on 2 January 2024"


def test_absolute_date_detection() -> None:
    assert has_absolute_date("She moved in 2022.")
    assert has_absolute_date("on 7 May")
    assert has_absolute_date("back in June")
    assert not has_absolute_date("I may go yesterday")
    assert format_day(REF.date()) == "8 May 2023"


def test_deterministic() -> None:
    sentence = "Yesterday and last week and next month, two days ago."
    assert resolve_relative_dates(sentence, REF) == resolve_relative_dates(sentence, REF)
