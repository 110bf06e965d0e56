"""The offline extractor's sentence splitter gives what pysbd's own does (it only finds the
sentences' places in the text without a regular expression per sentence)."""

from __future__ import annotations

import pysbd
import pytest

from gaama.extract.sentences import _segmenter, _spans

TEXTS = [
    "",
    "Hey Mel! Good to see you! How have you been?",
    "I went to a LGBTQ support group yesterday and it was so powerful.",
    "Wow. Wow. Wow. That is it.",  # repeated sentences: each found after the previous one
    "Dr. Smith met Mr. Brown at 5 p.m. on Jan. 3rd.  Then they left.\n\nBye!",
    "It was great!!! Really?! Yes...  I think so.",
    "I ran 5.5 km today\u00a0\u2003and swam.\tThen I slept.",  # Unicode spaces after a sentence
    'She said "go home." He went. (He was tired.) Fine.',
    "ok ok ok ok",
    "A. B. C. A. B. C.",
]


@pytest.mark.parametrize("text", TEXTS)
def test_same_sentences_as_pysbd(text: str) -> None:
    reference = pysbd.Segmenter(language="en", clean=False)
    assert _segmenter().segment(text) == reference.segment(text)


def test_spans_take_each_first_occurrence_after_the_previous_one() -> None:
    text = "Wow. Wow. Yes. Wow."
    assert _spans(text, ["Wow.", "Wow.", "Wow."]) == [
        ("Wow. ", 0, 5),
        ("Wow. ", 5, 10),
        ("Wow.", 15, 19),
    ]
    assert _spans("abc", ["x", "abc"]) == [("abc", 0, 3)]  # not found: left out, as pysbd does
