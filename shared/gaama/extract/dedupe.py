"""Fact dedupe of one chunk: which drafts are stored facts, near-duplicates or new nodes.

Same text → same id; a near-duplicate of the same tenant and subject (cosine ≥
``fact_dedupe_similarity``) → the existing fact, which gains the new sources. The extraction
pipeline finds which ids exist and the nearest same-subject fact of each new text (with the
concept labels' look-ups, in the same round trips); :func:`fact_writes` turns that into nodes
and field updates with one more round trip (the sources of the existing facts).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gaama.extract.types import EpisodeView, FactDraft
from gaama.model import Node, NodeKind
from gaama.store.graph import GraphStore

Embed = Callable[[list[str]], Awaitable[np.ndarray]]


@dataclass
class FactDedupe:
    """What the dedupe of a chunk's facts knows.

    Attributes:
        own_id: Each storable draft's own id (derived from its text), by its index.
        present: Ids the tenant held (a superset of the stored own ids is fine).
        vectors: The embeddings of the texts that were embedded, by own id.
        resolved: The id each storable draft resolves to: its own, or a near-duplicate's.
    """

    own_id: dict[int, str]
    present: set[str]
    vectors: dict[str, np.ndarray]
    resolved: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.resolved = dict(self.own_id)

    def near_duplicates(
        self,
        searched: Sequence[str],
        hits: Sequence[Sequence[Any]],
        threshold: float,
        apart: Callable[[str, Any], bool] | None = None,
    ) -> None:
        """Resolve the drafts of each searched id to its nearest hit when that is similar
        enough (``hits``: each search's results, best first), unless ``apart`` says the two
        must stay apart (the new text ends the old one: a change of value is not a duplicate)."""
        for own, found in zip(searched, hits, strict=True):
            if found and found[0].similarity >= threshold:
                if apart is not None and apart(own, found[0]):
                    continue
                target = found[0].id
                self.resolved.update({i: target for i, g in self.own_id.items() if g == own})

    async def vector(self, own: str, text: str, embed: Embed) -> list[float]:
        # A stored fact that vanished before its sources were read (a forget) was not
        # embedded: it is stored again, so it needs its vector now.
        if own not in self.vectors:
            self.vectors[own] = (await embed([text]))[0]
        vector: list[float] = self.vectors[own].tolist()
        return vector


async def fact_writes(
    graph: GraphStore,
    embed: Embed,
    tenant: str,
    conversation: str,
    drafts: Sequence[FactDraft],
    dedupe: FactDedupe,
    chunk_ids: set[str],
    by_id: dict[str, EpisodeView],
) -> tuple[list[Node], dict[str, dict[str, str]], list[str | None], list[str]]:
    """New fact nodes, source updates of existing facts, the id of each draft (None: not
    storable) and the new ids, in the drafts' order."""
    own_id, stored = dedupe.own_id, dedupe.present
    mine = set(own_id.values())
    targets = [f for f in dict.fromkeys(dedupe.resolved.values()) if f in stored or f not in mine]
    # every stored node has a kind: a row here means the fact exists
    existing = await graph.get_fields(tenant, targets, ["sources", "kind"])
    nodes: dict[str, Node] = {}
    fields: dict[str, dict[str, str]] = {}
    resolved: list[str | None] = []
    new_ids: list[str] = []
    for i, draft in enumerate(drafts):
        if i not in dedupe.resolved:
            resolved.append(None)
            continue
        sources = [s for s in draft.source_episode_ids if s in chunk_ids]
        fid = dedupe.resolved[i]
        if fid in nodes:  # same fact twice in this chunk
            prev = nodes[fid].extra["sources"].split(",")
            nodes[fid].extra["sources"] = ",".join(dict.fromkeys(prev + sources))
        elif fid in existing:
            prev_raw = existing[fid][0]
            prev = prev_raw.decode().split(",") if prev_raw else []
            fields[fid] = {"sources": ",".join(dict.fromkeys(prev + sources))}
        else:
            times = [by_id[s].timestamp.timestamp() for s in sources]
            nodes[fid] = Node(
                id=fid,
                tenant=tenant,
                kind=NodeKind.FACT,
                text=draft.text,
                time=max(times),
                conversation=conversation,
                subject=draft.subject,
                belief=draft.belief,
                vector=await dedupe.vector(own_id[i], draft.text, embed),
                extra={"sources": ",".join(sources)},
            )
            new_ids.append(fid)
        resolved.append(fid)
    return list(nodes.values()), fields, resolved, new_ids
