"""Synthetic tenant graphs shaped like real GAAMA graphs, for load benchmarks.

Shape (per tenant of ``N`` nodes): episodes 45 %, facts 35 %, concepts 10 %, reflections 10 %.

- Episodes form NEXT chains: conversations of ~20 sessions × ~20 turns, texts
  ``"[<session time>] <speaker>: <sentence>"`` built from a small vocabulary.
- Each episode has 1–3 concepts (HAS_CONCEPT). Concept popularity is heavy-tailed: a concept's
  weight is Pareto-distributed (tail index 1.3), so a few concepts are hubs of hundreds of
  edges (> 50, the hub threshold) while most have a handful. Expected degrees are capped at
  ``HUB_CAP``: concepts exist to avoid mega-hubs (ARCHITECTURE.md §1), and an uncapped Pareto
  sample at 1M nodes would put one concept on ~100k edges, which no extractor reusing topic
  labels per tenant produces.
- Facts (~0.78 per episode) derive from 1–3 neighbouring episodes of one conversation
  (DERIVED_FROM, and the ``sources`` field the extractor writes) and are about 1–2 of those
  episodes' concepts (ABOUT_CONCEPT).
- Reflections derive from 2–4 nearby facts (DERIVED_FROM_FACT).

Vectors are not MiniLM (≈120 texts/s here: 1M texts would take 2.5 h). They are topic-clustered
unit vectors in the embedding dimension: each concept is a topic centroid plus noise; an
episode mixes its concepts' vectors; a fact mixes its episodes'; a reflection its facts'. So KNN
returns structured neighbourhoods (nodes sharing concepts are close), like real embeddings.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from gaama import ids
from gaama.model import Edge, EdgeKind, Node, NodeKind

SHARES = {
    NodeKind.EPISODE: 0.45,
    NodeKind.FACT: 0.35,
    NodeKind.CONCEPT: 0.10,
    NodeKind.REFLECTION: 0.10,
}
SESSIONS, TURNS = 20, 20  # per conversation
HUB_CAP = 2000  # cap on a concept's expected degree (see module docstring)
PARETO_TAIL = 1.3
HUB_DEGREE = 50

_SPEAKERS = (
    "Caroline",
    "Melanie",
    "Jon",
    "Gina",
    "John",
    "Maria",
    "Joanna",
    "Nate",
    "Tim",
    "Audrey",
    "Andrew",
    "Evan",
    "Sam",
    "Calvin",
    "Dave",
    "Deborah",
    "Jolene",
    "James",
)
_OPENERS = (
    "I",
    "We",
    "My sister",
    "My friend",
    "Honestly, I",
    "Yesterday I",
    "Last week we",
    "This morning I",
    "Guess what, I",
    "My kids and I",
    "Lately I",
)
_VERBS = (
    "went",
    "tried",
    "finished",
    "started",
    "signed up for",
    "talked about",
    "painted",
    "visited",
    "cooked",
    "booked",
    "planned",
    "watched",
    "read",
    "joined",
    "built",
    "adopted",
    "practised",
    "organised",
    "sold",
    "bought",
    "learned",
    "fixed",
    "shared",
)
_OBJECTS = (
    "a pottery class",
    "the camping trip",
    "a new recipe",
    "the charity run",
    "a guitar lesson",
    "the museum tour",
    "an old novel",
    "a road trip",
    "the garden",
    "a support group",
    "the concert",
    "a painting",
    "the hiking trail",
    "a puppy",
    "the bakery",
    "a volunteer shift",
    "the photo album",
    "a board game night",
    "the dance workshop",
    "a science fair",
    "the family dinner",
    "a job interview",
    "the beach house",
    "a yoga retreat",
    "the bike repair",
    "a poetry reading",
)
_PLACES = (
    "near the lake",
    "downtown",
    "at the community centre",
    "with my mom",
    "in the mountains",
    "at school",
    "with the neighbours",
    "at the park",
    "over the weekend",
    "after work",
    "in Boston",
    "at the library",
    "by the river",
    "with my partner",
    "at the studio",
    "on the coast",
)
_TAILS = (
    "and it was amazing!",
    "and I loved it.",
    "which felt really rewarding.",
    "and it made me think of you.",
    "but it was harder than expected.",
    "so I'm pretty tired now.",
    "and I want to do it again.",
    "and we laughed a lot.",
    "and it reminded me of childhood.",
    "to clear my head.",
)
_TOPIC_WORDS = (
    "pottery",
    "camping",
    "painting",
    "hiking",
    "cooking",
    "music",
    "adoption",
    "career",
    "family",
    "fitness",
    "reading",
    "travel",
    "volunteering",
    "gardening",
    "photography",
    "parenting",
    "faith",
    "education",
    "pets",
    "dance",
    "baking",
    "cycling",
    "writing",
    "gaming",
    "fashion",
    "health",
    "friendship",
    "finance",
    "housing",
    "art",
    "nature",
    "sports",
    "identity",
    "community",
    "poetry",
)
_TOPIC_KINDS = (
    "hobby",
    "trip",
    "plan",
    "class",
    "goal",
    "event",
    "project",
    "habit",
    "memory",
    "struggle",
    "milestone",
    "routine",
    "group",
    "interest",
    "challenge",
)
_REFLECT = (
    "tends to",
    "finds meaning when they",
    "values opportunities to",
    "feels most at ease when they",
    "keeps coming back to",
    "prefers to",
)

_EPOCH = datetime(2023, 1, 8, tzinfo=UTC).timestamp()
_DAY = 86400.0


def plan_counts(nodes: int) -> dict[NodeKind, int]:
    """Nodes of each kind for a tenant of ``nodes`` (rounding goes to the episodes)."""
    out: dict[NodeKind, int] = {
        k: int(nodes * share) for k, share in SHARES.items() if k is not NodeKind.EPISODE
    }
    out[NodeKind.EPISODE] = nodes - sum(out.values())
    return out


@dataclass(slots=True)
class Batch:
    """A slice of the graph ready to write: nodes (vector apart, as float32 rows), edges, and
    the NEXT-chain positions of its episodes ``(conversation, episode id, position)``."""

    nodes: list[Node] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    chain: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass(slots=True)
class GraphStats:
    nodes: dict[str, int] = field(default_factory=dict)
    edges: dict[str, int] = field(default_factory=dict)
    conversations: int = 0
    concept_degree_max: int = 0
    concept_degree_p50: float = 0.0
    hubs_over_50: int = 0


def _unit(m: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(m, axis=-1, keepdims=True)
    return (m / np.where(n > 0, n, 1.0)).astype(np.float32)


class SyntheticGraph:
    """One tenant's synthetic graph, produced batch by batch (1M nodes never sit in memory as
    Python objects at once).

    Args:
        tenant: The tenant every node belongs to.
        nodes: Total nodes (about; rounding per kind).
        dim: Vector dimension (the embedder's: 384 for MiniLM).
        seed: Random seed; the same seed gives the same graph.
        batch_nodes: About how many nodes one :class:`Batch` holds.
    """

    def __init__(
        self, tenant: str, nodes: int, dim: int = 384, seed: int = 0, batch_nodes: int = 1000
    ) -> None:
        self.tenant = tenant
        self.counts = plan_counts(nodes)
        self.dim = dim
        self.batch_nodes = batch_nodes
        self.rng = np.random.default_rng(seed)
        self.stats = GraphStats(nodes={k.value: v for k, v in self.counts.items()})
        n_concepts = max(self.counts[NodeKind.CONCEPT], 1)
        weights = self.rng.pareto(PARETO_TAIL, n_concepts) + 1.0
        # Cap expected degrees at HUB_CAP: ~2 HAS_CONCEPT per episode + ~1.5 ABOUT per fact.
        total = 2.0 * self.counts[NodeKind.EPISODE] + 1.5 * self.counts[NodeKind.FACT]
        for _ in range(5):  # capping moves mass to the rest; a few rounds settle it
            weights = np.minimum(weights, HUB_CAP / total * weights.sum())
        self._cdf = np.cumsum(weights / weights.sum())
        self._degree = np.zeros(n_concepts, dtype=np.int64)
        # ~20 concepts per topic centroid: concepts of one topic are near each other.
        topics = _unit(self.rng.standard_normal((max(n_concepts // 20, 4), dim)))
        self.concept_vecs = _unit(
            topics[self.rng.integers(0, len(topics), n_concepts)]
            + 0.8 * _unit(self.rng.standard_normal((n_concepts, dim)))
        )
        self.concept_labels = self._labels(n_concepts)
        self.concept_ids = [ids.concept_id(tenant, lab) for lab in self.concept_labels]

    def _labels(self, n: int) -> list[str]:
        seen: set[str] = set()
        out = []
        for i in range(n):
            a = _TOPIC_WORDS[int(self.rng.integers(len(_TOPIC_WORDS)))]
            b = _TOPIC_KINDS[int(self.rng.integers(len(_TOPIC_KINDS)))]
            label = f"{a}_{b}" if f"{a}_{b}" not in seen else f"{a}_{b}_{i}"
            seen.add(label)
            out.append(label)
        return out

    def _noise(self, n: int) -> np.ndarray:
        return _unit(self.rng.standard_normal((n, self.dim)))

    def _pick(self, words: tuple[str, ...]) -> str:
        return words[int(self.rng.integers(len(words)))]

    def _sentence(self) -> str:
        return (
            f"{self._pick(_OPENERS)} {self._pick(_VERBS)} {self._pick(_OBJECTS)} "
            f"{self._pick(_PLACES)} {self._pick(_TAILS)}"
        )

    def batches(self) -> Iterator[Batch]:
        """Concepts first, then conversation after conversation (episodes, facts, reflections)."""
        t = self.tenant
        batch = Batch()
        for i, cid in enumerate(self.concept_ids):
            batch.nodes.append(
                Node(
                    id=cid,
                    tenant=t,
                    kind=NodeKind.CONCEPT,
                    text=self.concept_labels[i],
                    time=_EPOCH,
                )
            )
            batch.vectors.append(self.concept_vecs[i])
            if len(batch.nodes) >= self.batch_nodes:
                yield batch
                batch = Batch()
        episodes = self.counts[NodeKind.EPISODE]
        fact_rate = self.counts[NodeKind.FACT] / max(episodes, 1)
        refl_rate = self.counts[NodeKind.REFLECTION] / max(self.counts[NodeKind.FACT], 1)
        per_conv = SESSIONS * TURNS
        made = {k: 0 for k in NodeKind}
        conv_no = 0
        while made[NodeKind.EPISODE] < episodes:
            n = min(per_conv, episodes - made[NodeKind.EPISODE])
            # Facts and reflections follow the planned totals exactly, whatever the rounding.
            n_facts = round((made[NodeKind.EPISODE] + n) * fact_rate) - made[NodeKind.FACT]
            n_refl = round((made[NodeKind.FACT] + n_facts) * refl_rate) - made[NodeKind.REFLECTION]
            self._conversation(batch, f"conv-{conv_no:05d}", conv_no, n, n_facts, n_refl)
            made[NodeKind.EPISODE] += n
            made[NodeKind.FACT] += n_facts
            made[NodeKind.REFLECTION] += n_refl
            conv_no += 1
            if len(batch.nodes) >= self.batch_nodes:
                yield batch
                batch = Batch()
        if batch.nodes:
            yield batch
        self.stats.conversations = conv_no
        self.stats.nodes = {k.value: v for k, v in made.items() if v} | {
            NodeKind.CONCEPT.value: len(self.concept_ids)
        }
        deg = self._degree
        self.stats.concept_degree_max = int(deg.max()) if deg.size else 0
        self.stats.concept_degree_p50 = float(np.median(deg)) if deg.size else 0.0
        self.stats.hubs_over_50 = int((deg > HUB_DEGREE).sum())

    def _conversation(
        self, batch: Batch, conv: str, conv_no: int, n: int, n_facts: int, n_refl: int
    ) -> None:
        t, rng = self.tenant, self.rng
        speakers = (
            _SPEAKERS[(2 * conv_no) % len(_SPEAKERS)],
            _SPEAKERS[(2 * conv_no + 1) % len(_SPEAKERS)],
        )
        start = _EPOCH + conv_no * 3.0 * _DAY
        # Concepts per episode: 1–3 (mean 2), by popularity.
        k = rng.integers(1, 4, n)
        picks = np.searchsorted(self._cdf, rng.random(int(k.sum())), side="right")
        picks = np.minimum(picks, len(self._cdf) - 1)
        ep_concepts = np.split(picks, np.cumsum(k)[:-1])
        ep_vecs = np.empty((n, self.dim), dtype=np.float32)
        for i, cs in enumerate(ep_concepts):
            ep_vecs[i] = self.concept_vecs[cs].sum(axis=0)
        ep_vecs = _unit(ep_vecs + 0.8 * self._noise(n))
        ep_ids: list[str] = []
        edge = self._edge
        for i in range(n):
            session, turn = divmod(i, TURNS)
            when = start + session * 7 * _DAY + 60.0 * turn
            turn_id = f"D{session + 1}:{turn + 1}"
            eid = ids.episode_id(t, conv, turn_id)
            speaker = speakers[turn % 2]
            said = self._sentence()
            stamp = datetime.fromtimestamp(when, UTC).strftime("%-I:%M %p on %-d %B, %Y")
            batch.nodes.append(
                Node(
                    id=eid,
                    tenant=t,
                    kind=NodeKind.EPISODE,
                    text=f"[{stamp}] {speaker}: {said}",
                    time=when,
                    conversation=conv,
                    turn_id=turn_id,
                    speaker=speaker,
                    extra={"raw": said, "seq": str(i)},
                )
            )
            batch.vectors.append(ep_vecs[i])
            batch.chain.append((conv, eid, i))
            if ep_ids:
                edge(batch, ep_ids[-1], eid, EdgeKind.NEXT)
            for c in dict.fromkeys(ep_concepts[i].tolist()):
                edge(batch, eid, self.concept_ids[c], EdgeKind.HAS_CONCEPT)
                self._degree[c] += 1
            ep_ids.append(eid)
        fact_ids: list[str] = []
        fact_vecs = np.empty((max(n_facts, 0), self.dim), dtype=np.float32)
        noise = self._noise(max(n_facts, 0))
        for j in range(max(n_facts, 0)):
            # Sources: 1–3 consecutive episodes around the fact's share of the conversation.
            first = min(int(j * n / max(n_facts, 1)), n - 1)
            src = list(range(first, min(first + int(rng.integers(1, 4)), n)))
            concepts = list(dict.fromkeys(c for s in src for c in ep_concepts[s].tolist()))
            about = concepts[: int(rng.integers(1, 3))]
            speaker = speakers[int(rng.integers(2))]
            when = start + (first // TURNS) * 7 * _DAY
            day = datetime.fromtimestamp(when, UTC).strftime("%-d %B %Y")
            text = (
                f"{speaker} {self._pick(_VERBS)} {self._pick(_OBJECTS)} "
                f"{self._pick(_PLACES)} on {day} ({conv}, fact {j})."
            )
            fid = ids.fact_id(t, text)
            fact_vecs[j] = ep_vecs[src].mean(axis=0) + 0.5 * noise[j]
            batch.nodes.append(
                Node(
                    id=fid,
                    tenant=t,
                    kind=NodeKind.FACT,
                    text=text,
                    time=when,
                    conversation=conv,
                    speaker=speaker,
                    belief=0.9,
                    extra={"sources": ",".join(ep_ids[s] for s in src)},
                )
            )
            for s in src:
                edge(batch, fid, ep_ids[s], EdgeKind.DERIVED_FROM)
            for c in about:
                edge(batch, fid, self.concept_ids[c], EdgeKind.ABOUT_CONCEPT)
                self._degree[c] += 1
            fact_ids.append(fid)
        batch.vectors.extend(_unit(fact_vecs))
        refl_noise = self._noise(max(n_refl, 0))
        for r in range(max(n_refl, 0)):
            first = min(int(r * len(fact_ids) / max(n_refl, 1)), max(len(fact_ids) - 1, 0))
            src_f = list(range(first, min(first + int(rng.integers(2, 5)), len(fact_ids))))
            speaker = speakers[int(rng.integers(2))]
            text = (
                f"{speaker} {self._pick(_REFLECT)} {self._pick(_VERBS).split()[0]} "
                f"{self._pick(_OBJECTS)} {self._pick(_PLACES)} ({conv}, insight {r})."
            )
            rid = ids.reflection_id(t, text)
            vec = (fact_vecs[src_f].mean(axis=0) if src_f else refl_noise[r]) + 0.5 * refl_noise[r]
            batch.nodes.append(
                Node(
                    id=rid,
                    tenant=t,
                    kind=NodeKind.REFLECTION,
                    text=text,
                    time=start,
                    conversation=conv,
                    speaker=speaker,
                )
            )
            batch.vectors.append(_unit(vec))
            for f in src_f:
                edge(batch, rid, fact_ids[f], EdgeKind.DERIVED_FROM_FACT)

    def _edge(self, batch: Batch, src: str, dst: str, kind: EdgeKind) -> None:
        batch.edges.append(Edge(src, dst, kind))
        self.stats.edges[kind.value] = self.stats.edges.get(kind.value, 0) + 1


def query_texts(n: int, seed: int = 1) -> list[str]:
    """Questions built from the same vocabulary as the graph's texts."""
    rng = np.random.default_rng(seed)

    def pick(words: tuple[str, ...]) -> str:
        return words[int(rng.integers(len(words)))]

    forms = (
        "When did {s} {v} {o}?",
        "What did {s} say about {o} {p}?",
        "Why does {s} care about {t}?",
        "Who went {p} with {s}?",
        "How did {s} feel after {o}?",
    )
    return [
        pick(forms).format(
            s=pick(_SPEAKERS),
            v=pick(_VERBS),
            o=pick(_OBJECTS),
            p=pick(_PLACES),
            t=pick(_TOPIC_WORDS),
        )
        for _ in range(n)
    ]


def turn_texts(n: int, seed: int = 2) -> list[str]:
    """What speakers say in the ingest benchmark: sentences of the graph's vocabulary."""
    rng = np.random.default_rng(seed)

    def pick(words: tuple[str, ...]) -> str:
        return words[int(rng.integers(len(words)))]

    return [
        f"{pick(_OPENERS)} {pick(_VERBS)} {pick(_OBJECTS)} {pick(_PLACES)} {pick(_TAILS)}"
        for _ in range(n)
    ]


def speakers(conversation_no: int) -> tuple[str, str]:
    """The two speakers of a conversation."""
    return (
        _SPEAKERS[(2 * conversation_no) % len(_SPEAKERS)],
        _SPEAKERS[(2 * conversation_no + 1) % len(_SPEAKERS)],
    )
