"""A HippoRAG-style baseline: Personalized PageRank over a passage–entity bipartite graph.

HippoRAG (Gutiérrez et al., 2024) and HippoRAG 2 (2025) index passages by the entities an LLM
extracts from them and answer a query by PPR seeded at the query's entities (and, in version 2,
also at the passages most similar to the query), damping 0.5, ranking passages by PPR mass. This
baseline keeps that shape with the same offline NLP the GAAMA offline extractor uses, so it needs
no LLM and no Redis changes (it is built in memory by the LoCoMo harness from the episodes and
their stored vectors):

- **Entities** of a text: runs of capitalised words (names, places, titles; sentence-initial
  function words such as "I" or "The" are dropped) plus the YAKE-based topic phrases of
  :func:`gaama.extract.concepts.extract_concepts` — a stand-in for OpenIE noun phrases. Entities
  are matched by their lower-cased text (no synonym edges: HippoRAG's are optional).
- **Seeds**: each query entity found in the graph gets weight ``1 / (passages containing it)``
  (HippoRAG's node specificity); every passage gets its min-max normalised cosine similarity times
  ``passage_weight`` (HippoRAG 2 uses 0.05). Without a matching entity the ranking is the dense
  one, as HippoRAG 2 falls back to dense retrieval when no query fact survives.
- **Walk**: PPR with follow probability ``damping`` and no hub dampening.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from gaama.extract.concepts import content_words, extract_concepts
from gaama.retrieval.ppr import personalized_pagerank

_CAPS_RUN = re.compile(r"\b[A-Z][A-Za-z0-9'’&-]*(?:\s+(?:of\s+)?[A-Z][A-Za-z0-9'’&-]*)*")
_POSSESSIVE = re.compile(r"['’]s$")


def entities_of(text: str, max_phrases: int = 5) -> set[str]:
    """Lower-cased entity strings of ``text``: capitalised runs and topic phrases.

    Args:
        text: A passage or a query.
        max_phrases: Upper bound on the YAKE phrases taken.

    Returns:
        The entities, e.g. ``{"caroline", "lgbtq", "lgbtq support group"}``.
    """
    out: set[str] = set()
    for match in _CAPS_RUN.finditer(text):
        words = [_POSSESSIVE.sub("", w) for w in match.group(0).split()]
        # Keep only runs with a content word: "I", "The", "Hey", "Thanks" are not entities.
        while words and not content_words(words[0]):
            words.pop(0)
        if words and content_words(" ".join(words)):
            out.add(" ".join(words).lower())
    for label in extract_concepts(text, max_labels=max_phrases):
        out.add(label.replace("_", " "))
    return out


@dataclass(frozen=True, slots=True)
class Passage:
    """An episode as the baseline sees it: id, turn id, what was said, rendered text."""

    id: str
    turn_id: str
    said: str
    text: str


class EntityGraph:
    """The passage–entity graph of one conversation, with its dense passage vectors.

    Args:
        passages: The passages (episodes), in conversation order.
        vectors: ``(len(passages), dim)`` L2-normalised vectors, row ``i`` for passage ``i``.
        damping: Probability of following an edge in the walk.
        passage_weight: Scale of the dense seeds relative to entity seeds.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        vectors: np.ndarray,
        *,
        damping: float = 0.5,
        passage_weight: float = 0.05,
    ) -> None:
        if len(passages) != vectors.shape[0]:
            raise ValueError(f"{len(passages)} passages but {vectors.shape[0]} vectors")
        self.passages = list(passages)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.damping = damping
        self.passage_weight = passage_weight
        entity_index: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        for i, p in enumerate(self.passages):
            for e in sorted(entities_of(p.said)):
                rows.append(i)
                cols.append(entity_index.setdefault(e, len(entity_index)))
        self.entities = entity_index
        n, m = len(self.passages), len(entity_index)
        incidence = sparse.csr_matrix(
            (np.ones(len(rows)), (rows, cols)), shape=(n, m), dtype=np.float64
        )
        incidence.data[:] = 1.0  # an entity named twice in a passage is one edge
        self.passage_count = np.asarray((incidence > 0).sum(axis=0)).ravel()
        # Node order: passages 0..n-1, then entities n..n+m-1; edges both ways.
        self.adjacency = sparse.csr_matrix(sparse.bmat([[None, incidence], [incidence.T, None]]))
        if n + m and self.adjacency.shape != (n + m, n + m):  # bmat of an empty block
            self.adjacency = sparse.csr_matrix((n + m, n + m), dtype=np.float64)

    @property
    def n_edges(self) -> int:
        return int(self.adjacency.nnz // 2)

    def similarities(self, query_vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of every passage to the (normalised) query vector."""
        q = np.asarray(query_vector, dtype=np.float32).ravel()
        norm = float(np.linalg.norm(q)) or 1.0
        return (self.vectors @ (q / norm)).astype(np.float64)

    def query_entities(self, query: str) -> list[int]:
        """Graph indices of the query's entities that occur in some passage."""
        return sorted({self.entities[e] for e in entities_of(query) if e in self.entities})

    def rank(self, query: str, query_vector: np.ndarray) -> list[tuple[int, float]]:
        """All passages, best first, as ``(passage index, score)``.

        The score is the PPR mass (or the cosine similarity when no query entity is in the
        graph); ties go to the more similar passage.
        """
        sims = self.similarities(query_vector)
        n = len(self.passages)
        matched = self.query_entities(query)
        if not matched or n == 0:
            order = np.lexsort((np.arange(n), -sims))
            return [(int(i), float(sims[i])) for i in order]
        restart = np.zeros(self.adjacency.shape[0], dtype=np.float64)
        for e in matched:
            restart[n + e] = 1.0 / max(int(self.passage_count[e]), 1)
        spread = float(sims.max() - sims.min())
        dense = (sims - sims.min()) / spread if spread > 0 else np.ones(n)
        restart[:n] = dense * self.passage_weight
        result = personalized_pagerank(
            self.adjacency, restart, alpha=self.damping, hub_dampening=1.0
        )
        scores = result.scores[:n]
        order = np.lexsort((np.arange(n), -sims, -scores))
        return [(int(i), float(scores[i])) for i in order]


def build_entity_graph(
    passages: Iterable[Passage],
    vectors: np.ndarray,
    *,
    damping: float = 0.5,
    passage_weight: float = 0.05,
) -> EntityGraph:
    """Convenience constructor (see :class:`EntityGraph`)."""
    return EntityGraph(list(passages), vectors, damping=damping, passage_weight=passage_weight)
