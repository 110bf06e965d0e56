"""The time prior against the real Redis: a period the query names, resolved against the latest
turn of the scope, lifts the candidates in it; without a period nothing changes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gaama.config import Settings
from gaama.embed import MiniLMEmbedder
from gaama.ids import episode_id, fact_id
from gaama.model import Node, NodeKind
from gaama.retrieval.search import Retriever
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from tests.integration.test_lexical import _indexed

pytestmark = pytest.mark.requires_stack


def _t(*day: int) -> float:
    return datetime(*day, 12, 0, tzinfo=UTC).timestamp()


async def test_a_named_period_lifts_what_lies_in_it(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder, settings: Settings
) -> None:
    facts = [
        ("Ann ran a charity race in the park.", _t(2023, 4, 20)),
        ("Ann ran a charity race by the river.", _t(2023, 5, 20)),
        ("Ann ran a charity race in the hills.", _t(2023, 6, 20)),
    ]
    vectors = await embedder.embed([t for t, _ in facts])
    nodes = [
        Node(
            id=fact_id("t1", text),
            tenant="t1",
            kind=NodeKind.FACT,
            text=text,
            time=when,
            conversation="c1",
            subject="Ann",
            vector=vec.tolist(),
        )
        for (text, when), vec in zip(facts, vectors, strict=True)
    ]
    (latest_vec,) = await embedder.embed(["Ann: see you soon"])
    latest = Node(
        id=episode_id("t1", "c1", "D9:1"),
        tenant="t1",
        kind=NodeKind.EPISODE,
        text="[20 August 2023] Ann: see you soon",
        time=_t(2023, 8, 20),
        conversation="c1",
        subject="Ann",
        turn_id="D9:1",
        speaker="Ann",
        vector=latest_vec.tolist(),
    )
    await graph.write("t1", nodes, [])
    assert await graph.append_episode(latest)  # a turn, as ingest stores it (its NEXT chain)
    await _indexed(index, "t1", 4)
    retriever = Retriever(graph, index, embedder, settings)
    for mode in ("gaama", "semantic"):
        # "last May" against the latest turn (20 August 2023) is May 2023.
        res = await retriever.search("t1", "Where did Ann run a race last May?", mode=mode)
        assert res.ranked[0].id == nodes[1].id, mode
        off = await retriever.search(
            "t1", "Where did Ann run a race last May?", mode=mode, params={"w_time": 0}
        )
        assert {i.id: i.score for i in off.ranked}[nodes[1].id] < res.ranked[0].score
        # "in June" from the same reference is June 2023.
        res = await retriever.search("t1", "Where did Ann run a race in June?", mode=mode)
        assert res.ranked[0].id == nodes[2].id, mode
