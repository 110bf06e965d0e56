"""The named-person prior against the real Redis: who said a turn (its speaker) and whom a fact
is about (its subject) are read with the candidates, and a query naming one of them lifts their
nodes over a closer match said by someone else; a query naming nobody changes nothing."""

from __future__ import annotations

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


async def test_a_named_speaker_lifts_what_they_said(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder, settings: Settings
) -> None:
    # Bob's turn and fact match the question a little better (his fact even names Ann); Ann's
    # say what she did in other words.
    turns = [
        ("D1:1", "Bob", "I went hiking in the mountains last weekend."),
        ("D1:2", "Ann", "I spent Saturday on a trail up to the ridge."),
    ]
    facts = [
        ("Bob", "Bob went hiking with Ann's brother in the mountains."),
        ("Ann", "She walked the ridge trail on Saturday."),
    ]
    vectors = await embedder.embed([t for *_, t in turns] + [t for _, t in facts])
    episodes = [
        Node(
            id=episode_id("t1", "c1", turn),
            tenant="t1",
            kind=NodeKind.EPISODE,
            text=text,
            time=1_700_000_000.0 + i,
            conversation="c1",
            turn_id=turn,
            speaker=speaker,
            vector=vec.tolist(),
        )
        for i, ((turn, speaker, text), vec) in enumerate(zip(turns, vectors, strict=False))
    ]
    fact_nodes = [
        Node(
            id=fact_id("t1", text),
            tenant="t1",
            kind=NodeKind.FACT,
            text=text,
            time=1_700_000_000.0,
            conversation="c1",
            subject=subject,
            vector=vec.tolist(),
        )
        for (subject, text), vec in zip(facts, vectors[2:], strict=True)
    ]
    await graph.write("t1", [*episodes, *fact_nodes], [])
    await _indexed(index, "t1", 4)
    retriever = Retriever(graph, index, embedder, settings)
    query = "Where did Ann go hiking?"
    on = {"w_person": 0.3, "w_lex": 0}  # the lexical channel off: only the prior sees "Ann"
    off = {"w_person": 0, "w_lex": 0}
    for mode in ("gaama", "semantic"):
        before = await retriever.search("t1", query, mode=mode, params=off, k=4)
        after = await retriever.search("t1", query, mode=mode, params=on, k=4)
        first = {i.kind: i.id for i in reversed(before.ranked)}
        assert first[NodeKind.EPISODE] == episodes[0].id, mode  # Bob's turn, without the prior
        assert first[NodeKind.FACT] == fact_nodes[0].id, mode
        lifted = {i.kind: i.id for i in reversed(after.ranked)}
        assert lifted[NodeKind.EPISODE] == episodes[1].id, mode  # Ann's turn, with it
        assert lifted[NodeKind.FACT] == fact_nodes[1].id, mode
        # Exactly the prior's weight on Ann's nodes; Bob's scores unchanged.
        b = {i.id: i.score for i in before.ranked}
        a = {i.id: i.score for i in after.ranked}
        for node in (episodes[1].id, fact_nodes[1].id):
            assert a[node] == pytest.approx(b[node] + 0.3), mode
        for node in (episodes[0].id, fact_nodes[0].id):
            assert a[node] == pytest.approx(b[node]), mode
        # A question naming nobody: the prior adds nothing.
        plain = await retriever.search("t1", "Who went hiking?", mode=mode, params=on, k=4)
        again = await retriever.search("t1", "Who went hiking?", mode=mode, params=off, k=4)
        assert [(i.id, i.score) for i in plain.ranked] == [(i.id, i.score) for i in again.ranked]
