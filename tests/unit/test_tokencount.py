"""Token budgets: the WordPiece count (an [UNK] per character), packing within a token budget
for text with and without spaces, the request's unit, and the context block."""

from __future__ import annotations

import pytest

from gaama.config import RequestLimits, RetrievalSettings
from gaama.errors import ValidationError
from gaama.model import NodeKind
from gaama.retrieval.context import (
    CURRENT,
    ENDED,
    EPISODES,
    Message,
    build_context,
    line,
    line_sizes,
    query_of,
)
from gaama.retrieval.limits import check_request
from gaama.retrieval.pack import Caps, Item, pack
from gaama.retrieval.request import pool_size, resolve_params
from gaama.retrieval.tokencount import TokenCounter, word_count
from gaama.store.validity import Validity

F, R, E = NodeKind.FACT, NodeKind.REFLECTION, NodeKind.EPISODE

KANA = "わたしはきのうともだちとすしをたべました"  # Japanese, no spaces, no ideographs
CHINESE = "我昨天在北京吃了烤鸭非常好吃"
THAI = "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ"


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_english_is_counted_by_wordpiece(counter: TokenCounter) -> None:
    text = "Caroline went to the LGBTQ support group"
    # "lgbtq" is two pieces (lgbt ##q): one token more than the words
    assert word_count(text) == 7
    assert counter.count(text) == 8
    assert counter.count("") == 0


@pytest.mark.parametrize("text", [KANA, CHINESE, THAI])
def test_text_without_spaces_is_never_counted_by_spaces(counter: TokenCounter, text: str) -> None:
    assert word_count(text) == 1
    n = counter.count(text)
    # at least one token per character the vocabulary has no piece for; at most one per character
    assert len(text) // 2 <= n <= len(text)
    long = text * 10  # one "word" of hundreds of characters: WordPiece alone gives one [UNK]
    assert counter.count(long) == 10 * n


def test_counts_are_cached_and_batched(counter: TokenCounter) -> None:
    texts = ["one two three", KANA, "one two three"]
    assert counter.counts(texts) == [counter.count(t) for t in texts]
    small = TokenCounter(cache_size=2)
    small.counts(["a", "b c", "d e f"])
    assert len(small._cache) == 2 and small.counts(["a"]) == [1]


def _items(texts: list[str], kind: NodeKind = E) -> list[Item]:
    return [
        Item(id=f"{kind.value[0]}{n:02d}", kind=kind, text=t, score=1.0 - n / 100, time=n)
        for n, t in enumerate(texts)
    ]


def _sizes(counter: TokenCounter):  # type: ignore[no-untyped-def]
    return lambda items: counter.counts([i.text for i in items])


@pytest.mark.parametrize(
    "text", ["Melanie painted a sunrise over the lake last summer", KANA * 3, CHINESE, THAI]
)
def test_pack_honours_a_token_budget(counter: TokenCounter, text: str) -> None:
    items = _items([text] * 40)
    budget = 100
    packed = pack(items, Caps(facts=0, reflections=0, episodes=40, budget=budget), _sizes(counter))
    spent = sum(counter.counts([i.text for i in packed]))
    assert packed and spent <= budget
    assert spent > budget - counter.count(text)  # filled: the next one would not fit
    # The word count of text without spaces is 1 an item: a word budget packs far more tokens.
    by_words = pack(items, Caps(facts=0, reflections=0, episodes=40, budget=budget))
    if word_count(text) == 1:
        assert sum(counter.counts([i.text for i in by_words])) > budget


def test_request_unit_and_bounds() -> None:
    base = RetrievalSettings()
    p = resolve_params(base, None, 300, "tokens")
    assert (p.budget_unit, p.budget_tokens, p.budget_words) == ("tokens", 300, 1000)
    assert resolve_params(base, None, 300).budget_words == 300  # words by default
    assert pool_size(20, resolve_params(base, None, 2800, "tokens")) == 100
    with pytest.raises(ValidationError, match=r"10\.\.20000 tokens"):
        resolve_params(base, None, 5, "tokens")
    with pytest.raises(ValidationError, match="budget_unit"):
        resolve_params(base, None, None, "chars")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="GAAMA_LIMITS__BUDGET_TOKENS"):
        check_request(RequestLimits(), base, budget=1001, budget_unit="tokens")
    check_request(RequestLimits(), base, budget=1000, budget_unit="tokens")


def test_query_of_messages() -> None:
    chat = [
        Message("user", "I moved to Lisbon."),
        Message("assistant", "Nice!"),
        Message("user", "Where do I live"),
        Message("user", "now?"),
        Message("assistant", "Let me check."),
    ]
    assert query_of(chat, 2000) == "Where do I live\nnow?"
    assert query_of(chat, 4) == "now?"
    with pytest.raises(ValidationError, match="no user message"):
        query_of([Message("assistant", "hi"), Message("user", "  ")], 2000)


def _memory() -> list[Item]:
    now = Item(id="f_now", kind=F, text="Ana lives in Lisbon.", score=0.9, time=1_700_000_000)
    old = Item(
        id="f_old",
        kind=F,
        text="Ana lives in Porto.",
        score=0.8,
        time=1_600_000_000,
        validity=Validity(valid_from=1_600_000_000, valid_to=1_700_000_000),
    )
    refl = Item(id="r1", kind=R, text="Ana moves often.", score=0.5)
    eps = [
        Item(
            id=f"e{n}",
            kind=E,
            text=f"[9:00 am on {n + 1} May, 2023] Ana: turn {n} " + KANA,
            speaker="Ana",
            score=0.4 - n / 100,
            time=1_683_000_000 + n,
        )
        for n in (2, 0, 1)
    ]
    return [old, *eps, refl, now]


def test_context_block_sections_citations_and_budget(counter: TokenCounter) -> None:
    ctx = build_context(_memory(), 1000, counter)
    text = ctx.text
    assert text.index(CURRENT) < text.index(ENDED) < text.index(EPISODES)
    assert "- [F1] (2023-11-14) Ana lives in Lisbon." in text
    assert "[F2] (2020-09-13 to 2023-11-14, no longer holds) Ana lives in Porto." in text
    assert [cid for cid, _ in ctx.items] == ["F1", "F2", "R1", "E1", "E2", "E3"]
    assert [i.id for cid, i in ctx.items if cid.startswith("E")] == ["e0", "e1", "e2"]
    assert ctx.citations["F2"].id == "f_old" and ctx.tokens == counter.count(text)
    assert build_context(list(reversed(_memory())), 1000, counter) == ctx  # input order: none
    # A budget the memory does not fit: the lowest-ranked items leave, the block fits.
    small = build_context(_memory(), 60, counter)
    assert 0 < small.tokens <= 60 and counter.count(small.text) == small.tokens
    assert {i.id for _, i in small.items} < {i.id for _, i in ctx.items}
    assert "f_now" in {i.id for _, i in small.items}
    # Read at a time when Porto still held: both facts current then.
    then = build_context(_memory()[:1], 1000, counter, as_of=1_650_000_000)
    assert ENDED not in then.text and "(2020-09-13) Ana lives in Porto." in then.text


def test_line_sizes_fit_the_block(counter: TokenCounter) -> None:
    memory = _memory()
    sizes = line_sizes(counter, None)(memory)
    block = build_context(memory, 1000, counter)
    headers = sum(counter.counts([CURRENT, ENDED, "Reflections:", EPISODES]))
    assert block.tokens <= sum(sizes) + headers


def test_a_line_counts_its_prefix_plus_its_text(counter: TokenCounter) -> None:
    memory = _memory()
    sizes = line_sizes(counter, None)(memory)
    lines = [line(i, f"{i.kind.value[0].upper()}99", None) for i in memory]
    assert sizes == counter.counts(lines)
