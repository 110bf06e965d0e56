"""Concept labels and their canonicalisation."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gaama.extract.concepts import (
    GENERIC_WORDS,
    canonicalize_label,
    canonicalize_labels,
    count_duplicates,
    extract_concepts,
)

SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)*$")
NAMES = ["Caroline", "Melanie"]
TURNS = [
    "I went to a LGBTQ support group yesterday and it was so powerful.",
    "Yeah, I painted that lake sunrise last year! It's special to me.",
    "Hey Caroline! I'm keen on counseling or working in mental health.",
    "Wow, Melanie! I just signed up for a pottery class yesterday. It's like therapy for me.",
    "Thanks, Mel! We went camping with the kids last week and saw a meteor shower.",
]


def test_labels_are_snake_case_and_few() -> None:
    for turn in TURNS:
        labels = extract_concepts(turn, NAMES)
        assert 1 <= len(labels) <= 3, (turn, labels)
        assert all(SNAKE.match(label) for label in labels), labels


def test_expected_topics_are_found() -> None:
    assert "lgbtq_support_group" in extract_concepts(TURNS[0], NAMES)
    assert "lake_sunrise" in extract_concepts(TURNS[1], NAMES)
    assert "pottery_class" in extract_concepts(TURNS[3], NAMES)
    assert "meteor_shower" in extract_concepts(TURNS[4], NAMES)


def test_never_a_name_or_a_generic_word() -> None:
    for turn in [*TURNS, "Hey Mel, Jonathan and I had a great time with people today."]:
        for label in extract_concepts(turn, NAMES):
            parts = label.split("_")
            assert not {"caroline", "melanie", "mel", "jonathan"} & set(parts), label
            assert not (len(parts) == 1 and parts[0] in GENERIC_WORDS), label


def test_small_talk_has_no_concept() -> None:
    assert extract_concepts("Hey Mel! Good to see you! How have you been?", NAMES) == []
    assert extract_concepts("Haha, thanks so much! That's so cool.", NAMES) == []


def test_plural_head_noun_is_singular() -> None:
    labels = extract_concepts("The transgender stories were so inspiring!", NAMES)
    assert labels[0] == "transgender_story"


def test_canonicalisation_merges_near_duplicates() -> None:
    assert canonicalize_label("hobby_painting", ["painting_hobby"]) == "painting_hobby"
    assert canonicalize_label("camping_trips", ["camping_trip"]) == "camping_trip"
    assert canonicalize_label("pottery_clas", ["pottery_class", "art"]) == "pottery_class"
    assert canonicalize_label("art", ["art"]) == "art"


def test_canonicalisation_keeps_distinct_labels_apart() -> None:
    existing = ["camping_trip", "painting_hobby", "pottery_class"]
    assert canonicalize_label("beach_trip", existing) == "beach_trip"
    assert canonicalize_label("painting", existing) == "painting"
    assert canonicalize_label("poetry_class", existing) == "poetry_class"
    assert canonicalize_label("anything", []) == "anything"


def test_threshold_is_a_parameter() -> None:
    assert canonicalize_label("art_class", ["art_clash"], threshold=80) == "art_clash"
    assert canonicalize_label("art_class", ["art_clash"], threshold=99) == "art_class"


def test_embedding_hook_is_used_last() -> None:
    calls: list[tuple[str, tuple[str, ...]]] = []

    def similarity(label: str, candidates: Sequence[str]) -> list[float]:
        calls.append((label, tuple(candidates)))
        return [0.95 if c == "trekking" else 0.1 for c in candidates]

    assert (
        canonicalize_label("hiking", ["trekking", "pottery"], similarity=similarity) == "trekking"
    )
    assert calls == [("hiking", ("pottery", "trekking"))]
    # A lemma match never reaches the hook.
    assert canonicalize_label("hikings", ["hiking"], similarity=similarity) == "hiking"
    assert len(calls) == 1


def test_canonicalize_labels_and_count_duplicates() -> None:
    labels = ["painting_hobby", "camping_trip", "hobby_painting", "camping_trips", "beach_trip"]
    assert canonicalize_labels(labels) == [
        "painting_hobby",
        "camping_trip",
        "painting_hobby",
        "camping_trip",
        "beach_trip",
    ]
    assert count_duplicates(labels) == 2
    assert count_duplicates(["art", "art", "music"]) == 0


def test_deterministic() -> None:
    first = [extract_concepts(t, NAMES) for t in TURNS]
    assert first == [extract_concepts(t, NAMES) for t in TURNS]
    order_a = canonicalize_label("hobby_painting", ["painting_hobby", "hobby_paintings"])
    order_b = canonicalize_label("hobby_painting", ["hobby_paintings", "painting_hobby"])
    assert order_a == order_b
