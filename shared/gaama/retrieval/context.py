"""The context call: packed memory as a prompt-ready text block within a token budget.

The block has up to four sections, each line an item with its citation id:

1. ``Current facts:`` facts that hold (now, or at ``as_of``), best first, each with its date
   (``valid_from``, else the time it was said): ``- [F1] (2023-05-07) Caroline ...``;
2. ``Facts that no longer hold:`` superseded facts, with the span they held, best first;
3. ``Reflections:`` ``- [R1] ...``, best first;
4. ``Conversation, in time order:`` episodes in conversation order, each with its date and
   speaker (the episode text carries both).

Citation ids number each kind from 1 in block order (``F``, ``R``, ``E``). The budget counts the
whole block's tokens (:mod:`gaama.retrieval.tokencount`): packing spends it on the items'
rendered lines, the section headers set aside first; should the block still exceed it, the
lowest-ranked item leaves and the block is rendered again. Everything here is a function of the
memory: the same memory gives the same block (ranking ties break by id, the episodes' order by
time, conversation, position and id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from gaama.errors import ValidationError
from gaama.model import NodeKind
from gaama.retrieval.current import holds
from gaama.retrieval.pack import Item, Size, order_memory, rank_key
from gaama.retrieval.tokencount import TokenCounter

Role = Literal["user", "assistant", "system", "tool"]

CURRENT, ENDED = "Current facts:", "Facts that no longer hold:"
REFLECTIONS, EPISODES = "Reflections:", "Conversation, in time order:"
HEADERS = (CURRENT, ENDED, REFLECTIONS, EPISODES)
_PREFIX = {NodeKind.FACT: "F", NodeKind.REFLECTION: "R", NodeKind.EPISODE: "E"}
#: Stands for a citation number while packing sizes a line, before the numbers are known.
_PLACEHOLDER = 99


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message of the conversation a context is built for."""

    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class Citation:
    """What a citation id names: the node and its kind."""

    id: str
    kind: NodeKind


@dataclass(slots=True)
class Context:
    """A context block: its text, its items in block order with their citation ids, and its
    token count."""

    text: str
    items: list[tuple[str, Item]]
    citations: dict[str, Citation]
    tokens: int


def query_of(messages: Sequence[Message], max_chars: int) -> str:
    """The query of a chat: its last user message, joined (oldest first) by the user messages
    directly before it; at most ``max_chars`` characters, the latest kept.

    Raises:
        ValidationError: no user message with text.
    """
    said: list[str] = []
    for m in reversed(messages):
        if m.role != "user":
            if said:
                break
            continue
        if m.content.strip():
            said.append(m.content.strip())
    if not said:
        raise ValidationError("messages: no user message with text to build the query from")
    query = "\n".join(reversed(said))
    return query[-max_chars:].strip() if len(query) > max_chars else query


def _day(t: float | None) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d") if t else ""


def line_parts(item: Item, citation: str, as_of: float | None) -> tuple[str, str]:
    """One item's line of the block as its prefix (citation, date, speaker) and its text; the
    line is the two joined by a space."""
    text = item.text
    if item.kind is NodeKind.FACT:
        v = item.validity
        since = _day(v.valid_from if v.valid_from is not None else item.time)
        if holds(item, as_of):
            when = f" ({since})" if since else ""
        else:
            until = _day(v.valid_to)
            when = f" ({since} to {until}, no longer holds)" if since else f" (until {until})"
        return f"- [{citation}]{when}", text
    if item.kind is NodeKind.EPISODE and not (item.speaker and f"{item.speaker}:" in text[:120]):
        day = _day(item.time)
        stamp = f" [{day}]" if day else ""
        said = f" {item.speaker}:" if item.speaker else ""
        return f"- [{citation}]{stamp}{said}", text
    return f"- [{citation}]", text


def line(item: Item, citation: str, as_of: float | None) -> str:
    """One item's line of the block (its text on one line: the block's layout is its own)."""
    prefix, text = line_parts(item, citation, as_of)
    return f"{prefix} {' '.join(text.split())}"


def header_tokens(counter: TokenCounter) -> int:
    """Tokens the section headers take when all are present."""
    return sum(counter.counts(list(HEADERS)))


def line_sizes(counter: TokenCounter, as_of: float | None) -> Size:
    """Packing's size function of a context: the tokens of each item's line. The tokenizer
    splits at whitespace, so a line's count is its prefix's plus its text's: the texts' counts
    are the ones a token-budget search caches."""

    def sizes(items: Sequence[Item]) -> list[int]:
        parts = [line_parts(i, f"{_PREFIX[i.kind]}{_PLACEHOLDER}", as_of) for i in items]
        prefixes = counter.counts([p for p, _ in parts])
        texts = counter.counts([t for _, t in parts])
        return [a + b for a, b in zip(prefixes, texts, strict=True)]

    return sizes


def render(memory: Sequence[Item], as_of: float | None) -> tuple[str, list[tuple[str, Item]]]:
    """The block of ``memory`` (see the module docstring) and its items with their ids."""
    ordered = order_memory(memory)
    facts = [i for i in ordered if i.kind is NodeKind.FACT]
    sections: list[tuple[str, list[Item]]] = [
        (CURRENT, [i for i in facts if holds(i, as_of)]),
        (ENDED, [i for i in facts if not holds(i, as_of)]),
        (REFLECTIONS, [i for i in ordered if i.kind is NodeKind.REFLECTION]),
        (EPISODES, [i for i in ordered if i.kind is NodeKind.EPISODE]),
    ]
    numbers = dict.fromkeys(_PREFIX.values(), 0)
    cited: list[tuple[str, Item]] = []
    parts: list[str] = []
    for title, items in sections:
        if not items:
            continue
        lines = [title]
        for item in items:
            prefix = _PREFIX[item.kind]
            numbers[prefix] += 1
            cid = f"{prefix}{numbers[prefix]}"
            cited.append((cid, item))
            lines.append(line(item, cid, as_of))
        parts.append("\n".join(lines))
    return "\n\n".join(parts), cited


def build_context(
    memory: Sequence[Item], max_tokens: int, counter: TokenCounter, as_of: float | None = None
) -> Context:
    """The context block of packed ``memory`` within ``max_tokens`` tokens: while the block is
    over the budget its lowest-ranked item leaves.

    Args:
        memory: The packed memory (packed with :func:`line_sizes` for a budget of ``max_tokens``
            less :func:`header_tokens`, so that it fits as a rule).
        max_tokens: The block's token budget.
        counter: The token counter the budget is counted by.
        as_of: Epoch seconds the memory is read at (None: now): which facts still hold.
    """
    kept = sorted(memory, key=rank_key)
    while True:
        text, cited = render(kept, as_of)
        tokens = counter.count(text) if text else 0
        if tokens <= max_tokens or not kept:
            break
        kept.pop()
    citations = {cid: Citation(item.id, item.kind) for cid, item in cited}
    return Context(text=text, items=cited, citations=citations, tokens=tokens)
