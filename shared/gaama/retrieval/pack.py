"""Packing scored candidates into the memory handed to an answering LLM (ARCHITECTURE §1 step 9).

The rule, precisely:

1. Rank every candidate by score (ties: higher similarity, then id). Concepts are never
   returned.
2. Caps per kind: only the best ``cap`` facts, reflections and episodes stay eligible.
3. Budget, trimmed in proportion to the caps. Each kind with at least one eligible item gets
   a share ``budget · cap_kind / Σ caps`` (the sum over those kinds, so a kind with nothing to
   offer leaves no share unused). Kinds are served facts, reflections, episodes; within its share
   a kind takes its items in rank order and stops at the first that does not fit.
   A reflection takes its kind's share only when it scores at least ``reflection_floor`` times
   the best candidate's score: it covers no turn itself but restates facts, so a share spent on
   reflections that are not about the question (a pattern of an unrelated topic) is evidence
   left out. Reflections below the floor have no share and compete for the pooled remainder
   (rule 4) in rank order; when none reaches the floor their share goes to the other kinds.
4. Unused shares are pooled and redistributed: the remaining eligible items of every kind, in
   global rank order, are added while they fit what is left of the whole budget (an item too long
   for the remainder is skipped, a shorter later one may still fit).
5. No turn is packed twice: an episode that is the source of a fact already packed is skipped
   (its content is in the memory already, in fewer words) and costs nothing. Refinement of the
   paper's rule: without it the graph's expansion, which reaches the source episodes of the facts
   it starts from, spends the episodes' share on turns the memory already holds. The same holds
   for a fact packed from the pooled remainder (rule 4) after its source episode was packed from
   the episodes' share: the episode leaves the memory and its words return to the remainder.
6. Order of the packed memory: facts by score, then reflections by score, then episodes back in
   time order (ties — turns of one session share its time — by conversation, then position in the
   conversation) so the turns read like the conversation.

The budget is counted by a *size* function over the items: by default whitespace-separated words
of the item's text (:func:`word_sizes`); a token budget passes the tokens of the embedder's
tokenizer (:mod:`gaama.retrieval.tokencount`), and the context call the tokens of each item's
rendered line. An item larger than the entire budget is never packed (it is still in the ranked
list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gaama.model import NodeKind
from gaama.store.validity import Validity

#: Kinds that packing returns, in the order they appear in the packed memory.
RETURNED_KINDS = (NodeKind.FACT, NodeKind.REFLECTION, NodeKind.EPISODE)


@dataclass(frozen=True, slots=True)
class Provenance:
    """A source turn of a returned item: the episode id and its external turn id."""

    episode_id: str
    turn_id: str


@dataclass(slots=True)
class Item:
    """One scored node as retrieval returns it."""

    id: str
    kind: NodeKind
    text: str = ""
    time: float = 0.0
    conversation: str = ""
    seq: int = 0  # position in its conversation (episodes), orders turns of one session
    sim: float = 0.0  # max-normalised similarity in [0, 1]
    ppr: float = 0.0  # max-normalised PPR in [0, 1]
    score: float = 0.0
    provenance: list[Provenance] = field(default_factory=list)
    sources: tuple[str, ...] = ()  # a fact's source episode ids (for packing, rule 5)
    validity: Validity = field(default_factory=Validity)  # a fact's valid and learned times

    speaker: str = ""  # who said it (episodes)

    @property
    def words(self) -> int:
        return len(self.text.split())


#: What an item costs of the budget, for a batch of items (one count per item, in order).
Size = Callable[[Sequence[Item]], list[int]]


def word_sizes(items: Sequence[Item]) -> list[int]:
    """Whitespace-separated words of each item's text."""
    return [i.words for i in items]


@dataclass(frozen=True, slots=True)
class Caps:
    """Per-kind caps and the budget (in the unit of the packing's size function)."""

    facts: int = 60
    reflections: int = 20
    episodes: int = 80
    budget: int = 1000
    reflection_floor: float = 0.0  # share of the best score a reflection needs for its share

    def cap(self, kind: NodeKind) -> int:
        if kind is NodeKind.FACT:
            return self.facts
        if kind is NodeKind.REFLECTION:
            return self.reflections
        return self.episodes if kind is NodeKind.EPISODE else 0


def rank_key(item: Item) -> tuple[float, float, str]:
    """Sort key of the ranking: higher score, then higher similarity, then id."""
    return (-item.score, -item.sim, item.id)


def rank(items: Iterable[Item]) -> list[Item]:
    """Returnable items (no concepts) best first."""
    return sorted((i for i in items if i.kind in RETURNED_KINDS), key=rank_key)


def capped(items: Iterable[Item], caps: Caps) -> list[Item]:
    """The best ``cap`` items of each returned kind, in global rank order."""
    room = {kind: caps.cap(kind) for kind in RETURNED_KINDS}
    out = []
    for item in rank(items):
        if room[item.kind] > 0:
            room[item.kind] -= 1
            out.append(item)
    return out


def shares(kinds: Iterable[NodeKind], caps: Caps) -> dict[NodeKind, float]:
    """Each present kind's share of the budget, proportional to its cap."""
    present = [k for k in dict.fromkeys(kinds) if caps.cap(k) > 0]
    total = sum(caps.cap(k) for k in present)
    if total == 0:
        return {}
    return {k: caps.budget * caps.cap(k) / total for k in present}


def pack(items: Iterable[Item], caps: Caps, size: Size = word_sizes) -> list[Item]:
    """Select and order the memory (see the module docstring for the exact rule).

    Args:
        items: Scored candidates of any kind; concepts are dropped.
        caps: Per-kind caps and the budget.
        size: What each item costs of the budget (default: its words).

    Returns:
        Facts by score, reflections by score, then episodes in time order.
    """
    eligible = capped(items, caps)
    floor = caps.reflection_floor * eligible[0].score if eligible else 0.0

    def has_share(item: Item) -> bool:
        return item.kind is not NodeKind.REFLECTION or item.score >= floor

    share = shares((i.kind for i in eligible if has_share(i)), caps)
    chosen: set[str] = set()
    carried: set[str] = set()  # episodes whose turn a packed fact carries

    def take(item: Item) -> None:
        chosen.add(item.id)
        if item.kind is NodeKind.FACT:
            carried.update(item.sources)

    words = dict(zip((i.id for i in eligible), size(eligible), strict=True))  # once per item
    used = 0
    for kind in RETURNED_KINDS:
        if kind not in share:
            continue
        spent = 0
        for item in (i for i in eligible if i.kind is kind and i.id not in carried):
            if not has_share(item) or spent + words[item.id] > share[kind]:
                break
            spent += words[item.id]
            take(item)
        used += spent
    left = caps.budget - used
    for item in eligible:
        if item.id in chosen or item.id in carried:
            continue
        # A fact packed now carries episodes the episodes' share may already hold: they leave
        # the memory (the fact says their turn in fewer words) and return their words.
        repeated = [e for e in item.sources if e in chosen] if item.kind is NodeKind.FACT else []
        refund = sum(words[e] for e in repeated)
        if words[item.id] > left + refund:
            continue
        chosen.difference_update(repeated)
        take(item)
        left += refund - words[item.id]
    return order_memory([i for i in eligible if i.id in chosen])


def distinct_turns(items: Iterable[Item], k: int) -> list[Item]:
    """The first ``k`` of ``items`` (best first) that say a turn not said above them: an
    episode a higher fact carries (derived from it) is passed over, and so is a fact all of whose
    source episodes are above it or carried by a fact above it."""
    out: list[Item] = []
    said: set[str] = set()  # episodes ranked, or carried by a ranked fact
    for item in items:
        if len(out) == k:
            break
        if item.kind is NodeKind.EPISODE:
            if item.id in said:
                continue
            said.add(item.id)
        elif item.kind is NodeKind.FACT and item.sources:
            if said.issuperset(item.sources):
                continue
            said.update(item.sources)
        out.append(item)
    return out


def order_memory(items: Sequence[Item]) -> list[Item]:
    """Facts and reflections by score, then episodes chronologically."""
    ranked = rank(items)
    facts = [i for i in ranked if i.kind is NodeKind.FACT]
    reflections = [i for i in ranked if i.kind is NodeKind.REFLECTION]
    episodes = sorted(
        (i for i in ranked if i.kind is NodeKind.EPISODE),
        key=lambda i: (i.time, i.conversation, i.seq, i.id),
    )
    return facts + reflections + episodes


def total_words(items: Iterable[Item]) -> int:
    return sum(i.words for i in items)


def render_memory(items: Sequence[Item]) -> str:
    """The packed memory as text for an answering LLM, one section per kind."""
    titles = {
        NodeKind.FACT: "Facts",
        NodeKind.REFLECTION: "Reflections",
        NodeKind.EPISODE: "Conversation turns",
    }
    parts = []
    for kind in RETURNED_KINDS:
        lines = [f"- {i.text}" for i in items if i.kind is kind]
        if lines:
            parts.append(f"{titles[kind]}:\n" + "\n".join(lines))
    return "\n\n".join(parts)
