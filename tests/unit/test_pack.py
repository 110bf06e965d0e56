"""Packing: caps per kind, word budget shared in proportion to the caps, episode order."""

from __future__ import annotations

import numpy as np
import pytest

from gaama.model import NodeKind
from gaama.retrieval.candidates import compact, show
from gaama.retrieval.pack import (
    Caps,
    Item,
    capped,
    distinct_turns,
    pack,
    rank,
    render_memory,
    shares,
    total_words,
)
from gaama.retrieval.scoring import cosine

F, R, E, C = NodeKind.FACT, NodeKind.REFLECTION, NodeKind.EPISODE, NodeKind.CONCEPT


def item(
    i: str, kind: NodeKind, score: float, words: int = 1, time: float = 0.0, seq: int = 0
) -> Item:
    return Item(id=i, kind=kind, text=" ".join(["w"] * words), score=score, time=time, seq=seq)


def test_concepts_never_returned() -> None:
    items = [item("c1", C, 9.0), item("f1", F, 1.0), item("e1", E, 0.5)]
    assert [i.id for i in rank(items)[:10]] == ["f1", "e1"]
    assert all(i.kind is not C for i in pack(items, Caps()))


def test_caps_per_kind() -> None:
    items = [item(f"f{n}", F, 10 - n / 100) for n in range(100)]
    items += [item(f"r{n}", R, 5 - n / 100) for n in range(50)]
    items += [item(f"e{n}", E, 1 - n / 1000) for n in range(200)]
    kept = capped(items, Caps())
    counts = {k: sum(1 for i in kept if i.kind is k) for k in (F, R, E)}
    assert counts == {F: 60, R: 20, E: 80}
    assert {i.id for i in kept if i.kind is F} == {f"f{n}" for n in range(60)}  # the best ones
    packed = pack(items, Caps(budget=10_000))
    assert len(packed) == 160


def test_shares_are_proportional_to_caps() -> None:
    caps = Caps(budget=1000)
    s = shares([F, R, E], caps)
    assert s[F] == pytest.approx(1000 * 60 / 160)
    assert s[R] == pytest.approx(1000 * 20 / 160)
    assert s[E] == pytest.approx(1000 * 80 / 160)
    # A kind without candidates leaves no share behind.
    s2 = shares([F, E], caps)
    assert s2[F] == pytest.approx(1000 * 60 / 140) and R not in s2


def test_budget_trimmed_in_proportion_to_caps() -> None:
    # Plenty of 10-word items of each kind; facts outrank everything.
    items = [item(f"f{n}", F, 3 - n / 100, words=10) for n in range(60)]
    items += [item(f"r{n}", R, 2 - n / 100, words=10) for n in range(20)]
    items += [item(f"e{n}", E, 1 - n / 1000, words=10) for n in range(80)]
    packed = pack(items, Caps(budget=320))  # shares 120 / 40 / 160 words
    counts = {k: sum(1 for i in packed if i.kind is k) for k in (F, R, E)}
    assert counts == {F: 12, R: 4, E: 16}
    assert total_words(packed) == 320


def test_unused_share_is_redistributed() -> None:
    # Only 2 short reflections: their unused share goes to the best remaining items.
    items = [item(f"f{n}", F, 3 - n / 100, words=10) for n in range(60)]
    items += [item("r0", R, 2.5, words=5), item("r1", R, 2.4, words=5)]
    items += [item(f"e{n}", E, 1 - n / 1000, words=10) for n in range(80)]
    packed = pack(items, Caps(budget=320))
    counts = {k: sum(1 for i in packed if i.kind is k) for k in (F, R, E)}
    # facts 120 w (12), refl 10 of 40 w, episodes 160 w (16); 30 spare words → 3 more facts.
    assert counts == {F: 15, R: 2, E: 16}
    assert total_words(packed) <= 320


def test_a_reflection_below_the_floor_takes_no_share() -> None:
    # Facts score 3.0 down, so the floor at 0.5 is 1.5: r0 (2.0) has a share, r1 (1.0) not.
    items = [item(f"f{n}", F, 3 - n / 100, words=10) for n in range(60)]
    items += [item("r0", R, 2.0, words=10), item("r1", R, 1.0, words=10)]
    items += [item(f"e{n}", E, 1 - n / 1000, words=10) for n in range(80)]
    packed = {i.id for i in pack(items, Caps(budget=320, reflection_floor=0.5))}
    assert "r0" in packed and "r1" not in packed
    # Without the floor both take the reflections' share.
    assert {"r0", "r1"} <= {i.id for i in pack(items, Caps(budget=320))}


def test_when_no_reflection_reaches_the_floor_its_share_goes_to_the_other_kinds() -> None:
    items = [item(f"f{n}", F, 3 - n / 100, words=10) for n in range(60)]
    items += [item(f"r{n}", R, 1.2 - n / 100, words=10) for n in range(20)]
    items += [item(f"e{n}", E, 1 - n / 1000, words=10) for n in range(80)]
    packed = pack(items, Caps(budget=320, reflection_floor=0.5))
    counts = {k: sum(1 for i in packed if i.kind is k) for k in (F, R, E)}
    # Shares over facts and episodes only (60:80 of 320 words): 13 facts and 18 episodes; the
    # 10 words left go to the best remaining item, a fact.
    assert counts == {F: 14, R: 0, E: 18}
    assert total_words(packed) == 320


def test_budget_never_exceeded_and_oversized_items_skipped() -> None:
    items = [item("f0", F, 5, words=2000), item("f1", F, 4, words=30), item("e0", E, 3, words=40)]
    packed = pack(items, Caps(budget=100))
    assert [i.id for i in packed] == ["f1", "e0"]
    assert total_words(packed) <= 100


def test_order_facts_reflections_then_episodes_in_time_order() -> None:
    items = [
        item("e_late", E, 9.0, time=300.0),
        item("e_b", E, 8.0, time=100.0, seq=2),
        item("e_a", E, 1.0, time=100.0, seq=1),
        item("r1", R, 2.0),
        item("f1", F, 1.5),
        item("f2", F, 3.0),
    ]
    packed = pack(items, Caps())
    assert [i.id for i in packed] == ["f2", "f1", "r1", "e_a", "e_b", "e_late"]
    text = render_memory(packed)
    assert text.index("Facts:") < text.index("Reflections:") < text.index("Conversation turns:")


def test_ranked_list_is_by_score() -> None:
    items = [item("e1", E, 0.2), item("f1", F, 0.9), item("r1", R, 0.5), item("c1", C, 1.0)]
    assert [i.id for i in rank(items)[:2]] == ["f1", "r1"]


def test_no_turn_is_packed_twice() -> None:
    # e1 is the source of the packed fact f1: skipped, and its words go to e2 and e3.
    f1 = item("f1", F, 3.0, words=5)
    f1.sources = ("e1",)
    episodes = [item("e1", E, 2.0, words=10), item("e2", E, 1.5, words=10)]
    episodes.append(item("e3", E, 1.0, words=10))
    packed = pack([f1, *episodes], Caps(budget=20))
    assert {i.id for i in packed} == {"f1", "e2"}
    packed = pack([f1, *episodes], Caps(budget=35))
    assert {i.id for i in packed} == {"f1", "e2", "e3"}
    # Even ranked above its fact, an episode the fact carries is skipped (facts are served first).
    top = item("e1", E, 9.0, words=10)
    assert {i.id for i in pack([f1, top], Caps(budget=100))} == {"f1"}
    # A fact that does not say its sources skips nothing.
    f2 = item("f2", F, 3.0, words=5)
    assert {i.id for i in pack([f2, *episodes], Caps(budget=100))} == {"f2", "e1", "e2", "e3"}


def test_a_fact_packed_from_the_remainder_replaces_the_episode_it_carries() -> None:
    # Shares of 15 words: f1 fills the facts' share, e1 the episodes'. Of the 10 words pooled,
    # f2 takes 6 and carries e1's turn: e1 leaves and its 10 words let f3 and e2 in too.
    f1, f2, f3 = item("f1", F, 3.0, words=10), item("f2", F, 2.5, words=6), item("f3", F, 1.5, 6)
    f1.sources, f2.sources, f3.sources = ("e9",), ("e1",), ("e7",)
    e1, e2 = item("e1", E, 2.0, words=10), item("e2", E, 1.0, words=8)
    packed = pack([f1, f2, e1, f3, e2], Caps(facts=3, reflections=0, episodes=3, budget=30))
    assert {i.id for i in packed} == {"f1", "f2", "f3", "e2"}
    assert total_words(packed) == 30
    # The fact fits only with the episode's words returned: it still replaces the episode.
    big = item("f2", F, 2.5, words=18)
    big.sources = ("e1",)
    packed = pack([f1, big, e1], Caps(facts=3, reflections=0, episodes=3, budget=30))
    assert {i.id for i in packed} == {"f1", "f2"}


def test_cosine_matches_the_definition_and_gives_zero_for_a_zero_vector():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((4, 6)).astype(np.float32)
    vectors[2] = 0.0  # a stored zero vector has no direction: similarity 0, not NaN
    query = rng.standard_normal(6).astype(np.float32)
    got = cosine(vectors, query)
    for row, value in zip(vectors, got.tolist(), strict=True):
        norm = float(np.linalg.norm(row) * np.linalg.norm(query))
        assert value == pytest.approx(float(row @ query) / norm if norm else 0.0, abs=1e-6)
    assert got[2] == 0.0
    assert cosine(np.zeros((0, 6), dtype=np.float32), query).shape == (0,)


def test_ranked_list_says_each_turn_once() -> None:
    fact = item("f1", F, 9.0)
    fact.sources = ("e1", "e2")
    both_said = item("f2", F, 8.0)
    both_said.sources = ("e2", "e1")
    new_turn = item("f3", F, 7.0)
    new_turn.sources = ("e1", "e3")
    items = [fact, item("e1", E, 8.5), both_said, new_turn, item("e3", E, 6.0)]
    items += [item("r1", R, 5.0), item("e4", E, 4.0)]
    # e1 is carried by f1; f2 says only turns above it; e3 is carried by f3.
    assert [i.id for i in distinct_turns(items, 10)] == ["f1", "f3", "r1", "e4"]
    assert [i.id for i in distinct_turns(items, 2)] == ["f1", "f3"]
    # An episode ranked first: a fact derived from it alone says nothing new.
    solo = item("f9", F, 1.0)
    solo.sources = ("e5",)
    assert [i.id for i in distinct_turns([item("e5", E, 2.0), solo], 5)] == ["e5"]


def test_a_fact_shows_the_day_it_was_said_in_one_word_less() -> None:
    said = "Melanie painted a lake sunrise (said on 8 May 2023)."
    assert compact(F, said) == "Melanie painted a lake sunrise (said 8 May 2023)."
    assert compact(F, "Melanie ran a race on 20 May 2023.") == "Melanie ran a race on 20 May 2023."
    assert compact(E, said) == said  # a turn is shown verbatim
    shown = Item(id="f1", kind=F)
    show(shown, {"text": said}, compact_text=False)
    assert shown.text == said
