"""The offline extractor: facts, episode concepts and reflections without an LLM."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from gaama.extract.base import Extractor
from gaama.extract.concepts import GENERIC_WORDS
from gaama.extract.offline import OfflineExtractor
from gaama.extract.pronouns import rewrite_pronouns
from gaama.extract.types import (
    EpisodeView,
    ExtractionContext,
    ExtractionResult,
    ReflectionInput,
)

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)*$")


def _ep(i: int, speaker: str, text: str) -> EpisodeView:
    return EpisodeView(
        id=f"ep{i}",
        speaker=speaker,
        raw_text=text,
        text=f"[8 May 2023 13:56] {speaker}: {text}",
        timestamp=WHEN,
        turn_id=f"D1:{i}",
    )


CHUNK = [
    _ep(1, "Caroline", "Hey Mel! Good to see you! How have you been?"),
    _ep(2, "Melanie", "Hey Caroline! Good to see you! I'm swamped with the kids & work."),
    _ep(3, "Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
    _ep(4, "Melanie", "Wow, that's cool, Caroline! Did you hear any inspiring stories?"),
    _ep(5, "Caroline", "The transgender stories were so inspiring! Haha, thanks!"),
    _ep(6, "Melanie", "Yeah, I painted that lake sunrise last year! Maybe I'll paint more."),
    _ep(7, "Melanie", "Your empathy will really help the people in your support group."),
]


async def _extract(chunk: list[EpisodeView] = CHUNK) -> ExtractionResult:
    return await OfflineExtractor().extract(chunk, ExtractionContext())


def test_satisfies_the_protocol() -> None:
    extractor: Extractor = OfflineExtractor()
    assert extractor.name == "offline"


async def test_facts_are_rewritten_and_dated() -> None:
    result = await _extract()
    texts = [f.text for f in result.facts]
    assert "Caroline went to a LGBTQ support group on 7 May 2023 and it was so powerful." in texts
    assert "Melanie painted that lake sunrise in 2022." in texts
    assert "Melanie is swamped with the kids & work (said on 8 May 2023)." in texts
    assert result.extractor == "offline"
    by_text = {f.text: f for f in result.facts}
    support = by_text[texts[[t.startswith("Caroline went") for t in texts].index(True)]]
    assert support.source_episode_ids == ("ep3",)
    assert support.subject == "Caroline"
    assert support.belief == 1.0
    assert "lgbtq_support_group" in support.concepts


async def test_questions_and_small_talk_are_not_facts() -> None:
    result = await _extract()
    sources = {f.source_episode_ids[0] for f in result.facts}
    assert "ep1" not in sources  # greeting and a question
    assert "ep4" not in sources  # reaction and a question
    assert all("?" not in f.text for f in result.facts)
    assert all("thanks" not in f.text.lower() for f in result.facts)
    assert all(re.search(r"\b(I|my|me)\b", f.text) is None for f in result.facts)


async def test_hedged_facts_have_lower_belief() -> None:
    result = await _extract()
    hedged = [f for f in result.facts if "paint more" in f.text]
    assert len(hedged) == 1
    assert hedged[0].belief < 1.0
    assert hedged[0].text == "Maybe Melanie will paint more (said on 8 May 2023)."


async def test_you_becomes_the_other_speaker() -> None:
    result = await _extract()
    empathy = [f for f in result.facts if "empathy" in f.text]
    assert empathy[0].text.startswith(
        "Caroline's empathy will really help the people in Caroline's"
    )
    assert empathy[0].subject == "Caroline"
    assert empathy[0].source_episode_ids == ("ep7",)


async def test_clauses_joined_by_a_spaced_dash_are_facts_of_their_own() -> None:
    chunk = [
        _ep(1, "Jon", "My studio opened last week - I finally have a place to teach dance!"),
        _ep(2, "Gina", "I run 5 - 6 km on a well-known trail every morning."),
    ]
    texts = [f.text for f in (await _extract(chunk)).facts]
    # two clauses, two facts, each dated and rewritten on its own
    assert any(t.startswith("Jon's studio opened") for t in texts)
    assert any(t.startswith("Jon finally has a place to teach dance") for t in texts)
    assert not any("studio" in t and "teach" in t for t in texts)
    # a range between numbers and a hyphenated word are not clause breaks
    assert [t for t in texts if "trail" in t] == [
        "Gina runs 5 - 6 km on a well-known trail every morning (said on 8 May 2023)."
    ]


def test_pronoun_rules() -> None:
    assert rewrite_pronouns("I love my kids", "Melanie", "Caroline").text == (
        "Melanie loves Melanie's kids"
    )
    assert rewrite_pronouns("I've told you about it", "Mel", "Caro").text == (
        "Mel has told Caro about it"
    )
    assert rewrite_pronouns("We went camping with our kids", "Mel", "Caro").text == (
        "Mel and others went camping with Mel's kids"
    )
    # With more or fewer than two speakers "you" stays.
    assert rewrite_pronouns("I told you", "Mel", None).text == "Mel told you"


async def test_episode_concepts() -> None:
    result = await _extract()
    assert set(result.episode_concepts) <= {ep.id for ep in CHUNK}
    assert "lgbtq_support_group" in result.episode_concepts["ep3"]
    for labels in result.episode_concepts.values():
        assert 1 <= len(labels) <= 3
        assert len(set(labels)) == len(labels)
        for label in labels:
            assert SNAKE.match(label), label
            assert not {"caroline", "melanie", "mel"} & set(label.split("_")), label
            assert label not in GENERIC_WORDS
    # The greeting reply inherits the topic of its neighbour instead of being left bare.
    assert "ep4" in result.episode_concepts


async def test_existing_concepts_are_reused() -> None:
    chunk = [_ep(1, "Melanie", "We had a great time on our camping trips with the kids.")]
    context = ExtractionContext(concepts=["camping_trip"])
    result = await OfflineExtractor().extract(chunk, context)
    assert "camping_trip" in result.episode_concepts["ep1"]
    assert "camping_trips" not in {c for f in result.facts for c in f.concepts}


async def test_known_facts_are_restated_with_their_new_sources() -> None:
    """A fact already in memory comes back with the chunk's turn as its source (so the pipeline
    adds that turn to the fact's provenance, which forgetting relies on); never twice in one
    chunk."""
    from gaama.extract.types import ContextFact

    first = await _extract()
    context = ExtractionContext(
        facts=[ContextFact(id=str(i), text=f.text) for i, f in enumerate(first.facts)]
    )
    again = await OfflineExtractor().extract(CHUNK, context)
    assert [(f.text, f.source_episode_ids) for f in again.facts] == [
        (f.text, f.source_episode_ids) for f in first.facts
    ]
    texts = [f.text for f in again.facts]
    assert len(texts) == len(set(texts))


async def test_deterministic() -> None:
    assert await _extract() == await _extract()


def _inputs() -> list[ReflectionInput]:
    return [
        ReflectionInput(
            "f1", "Caroline went to a support group on 7 May 2023.", ("support",), "Caroline"
        ),
        ReflectionInput(
            "f2",
            "Caroline mentors LGBTQ youth (said on 9 June 2023).",
            ("support", "mentor"),
            "Caroline",
        ),
        ReflectionInput(
            "f3", "Caroline gives talks at school (said on 9 June 2023).", ("support",), "Caroline"
        ),
        ReflectionInput("f4", "Melanie painted a sunrise in 2022.", ("painting",), "Melanie"),
        ReflectionInput(
            "f5", "Melanie likes support groups (said on 9 June 2023).", ("support",), "Melanie"
        ),
    ]


async def test_reflections_combine_facts_of_one_subject() -> None:
    drafts = await OfflineExtractor().reflect(_inputs(), [])
    assert len(drafts) == 1
    draft = drafts[0]
    assert draft.fact_ids == ("f1", "f2", "f3")
    assert draft.subject == "Caroline"
    # The pattern over time the facts make, not their texts strung together.
    assert draft.text == "Caroline came back to support 3 times (7 May 2023, 9 June 2023)."
    assert "support group" not in draft.text


async def test_reflection_of_many_days_lists_the_first_and_spans_them_all() -> None:
    facts = [
        ReflectionInput(f"f{i}", f"Mel ran a race on {i} May 2023.", ("running",), "Mel")
        for i in range(1, 9)
    ]
    drafts = await OfflineExtractor(max_group=8).reflect(facts, [])
    assert [d.text for d in drafts] == [
        "Mel came back to running 8 times, from 1 May 2023 to 8 May 2023 (1 May 2023, "
        "2 May 2023, 3 May 2023, 4 May 2023, 5 May 2023, 6 May 2023, ...)."
    ]


async def test_reflection_without_dates_states_the_count() -> None:
    facts = [ReflectionInput(f"f{i}", f"Mel ran race {i}.", ("running",), "Mel") for i in range(3)]
    drafts = await OfflineExtractor().reflect(facts, [])
    assert [d.text for d in drafts] == ["Mel came back to running 3 times."]


async def test_reflections_skip_existing_and_are_deterministic() -> None:
    extractor = OfflineExtractor()
    first = await extractor.reflect(_inputs(), [])
    assert first == await extractor.reflect(_inputs(), [])
    existing = [first[0].text.upper().replace(":", " - ")]
    assert await extractor.reflect(_inputs(), existing) == []


async def test_reflection_group_size_is_capped() -> None:
    facts = [ReflectionInput(f"f{i}", f"Mel ran race {i}.", ("running",), "Mel") for i in range(9)]
    drafts = await OfflineExtractor(max_group=4).reflect(facts, [])
    assert len(drafts) == 1
    assert drafts[0].fact_ids == ("f0", "f1", "f2", "f3")
    assert await OfflineExtractor().reflect(facts[:1], []) == []


async def _fact_texts(*turns: tuple[str, str]) -> list[str]:
    chunk = [_ep(i, speaker, text) for i, (speaker, text) in enumerate(turns, 1)]
    return [f.text for f in (await _extract(chunk)).facts]


async def test_reactions_greetings_and_courtesies_make_no_fact() -> None:
    texts = await _fact_texts(
        ("Caroline", "Hi Melanie! Thanks so much, Melanie!"),
        ("Melanie", "Thank you Caroline, you rock!"),
        ("Caroline", "Be careful with that knee. Take care of yourself, Mel!"),
        ("Melanie", "Enjoy the concert tonight! Good luck with the adoption interview!"),
        ("Caroline", "That sounds amazing, Melanie!"),
    )
    assert texts == []


async def test_discourse_openers_are_stripped_and_the_content_kept() -> None:
    texts = await _fact_texts(
        ("Caroline", "Guess what, Priya finally signed up for the marathon!"),
        ("Melanie", "You know what, I started a pottery class."),
        ("Caroline", "By the way, my sister moved to Boston."),
        ("Melanie", "I just wanted to let you know that I adopted a puppy named Oscar."),
        ("Caroline", "Thanks to my mentor, I got the internship."),
    )
    assert texts == [
        "Priya finally signed up for the marathon (said on 8 May 2023).",
        "Melanie started a pottery class (said on 8 May 2023).",
        "Caroline's sister moved to Boston (said on 8 May 2023).",
        "Melanie adopted a puppy named Oscar (said on 8 May 2023).",
        "Thanks to Caroline's mentor, Caroline got the internship (said on 8 May 2023).",
    ]


async def test_one_fact_per_clause() -> None:
    texts = await _fact_texts(
        ("Melanie", "I painted the lake at sunrise; my kids hiked the trail with me."),
    )
    assert texts == [
        "Melanie painted the lake at sunrise (said on 8 May 2023).",
        "Melanie's kids hiked the trail with Melanie (said on 8 May 2023).",
    ]
