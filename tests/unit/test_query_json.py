"""The query service writes its search answer as JSON itself (no model per item): the JSON must
be what the response models describe, field for field."""

from __future__ import annotations

import json

from gaama.config import RetrievalSettings
from gaama.model import NodeKind
from gaama.retrieval.pack import Item, Provenance
from gaama.retrieval.request import SearchResult
from services.query.handlers import (
    AnswerResponse,
    ItemOut,
    ProvenanceOut,
    SearchResponse,
    Stats,
    search_json,
)


def _result() -> SearchResult:
    fact = Item(
        id="f1",
        kind=NodeKind.FACT,
        text="Melanie painted a sunrise in 2022.",
        time=1_700_000_000.25,
        conversation="c1",
        sim=0.123456789,
        ppr=1.0,
        score=0.9876543219,
        provenance=[Provenance("e1", "t1"), Provenance("e2", "t2")],
    )
    episode = Item(
        id="e9",
        kind=NodeKind.EPISODE,
        text='[2023-05-08] Caroline: "I\'m going to a support group" \u2014 ok',
        time=1_683_500_000.0,
        conversation="c2",
        sim=1e-9,
        ppr=0.0,
        score=0.5,
    )
    unpacked = Item(id="r3", kind=NodeKind.REFLECTION, text="ranked, not packed", score=0.1)
    return SearchResult(
        mode="gaama",
        memory=[episode, fact],
        ranked=[fact, unpacked],
        words=17,
        timings_ms={"embed": 1.23456, "knn": 0.0},
        subgraph_nodes=300,
        ppr_iterations=12,
        params=RetrievalSettings(),
    )


def _model(i: Item) -> ItemOut:
    # The models the route's OpenAPI schema names, built the way the service did before.
    sources = i.provenance
    return ItemOut(
        id=i.id,
        kind=i.kind.value,
        text=i.text,
        time=i.time,
        conversation=i.conversation,
        sim=round(i.sim, 6),
        ppr=round(i.ppr, 6),
        score=round(i.score, 6),
        provenance=[ProvenanceOut(episode_id=p.episode_id, turn_id=p.turn_id) for p in sources],
    )


def test_search_json_is_the_response_model() -> None:
    r = _result()
    body = search_json(r)
    expected = SearchResponse(
        memory=[_model(i) for i in r.memory],
        ranked=[_model(i) for i in r.ranked],
        words=r.words,
        tokens=None,
        budget_unit="words",
        mode=r.mode,
        stats=Stats(timings_ms={"embed": 1.235, "knn": 0.0}, subgraph_nodes=300, ppr_iterations=12),
    )
    assert SearchResponse.model_validate_json(body) == expected
    assert json.loads(body) == json.loads(expected.model_dump_json())
    assert json.loads(body)["memory"][1]["provenance"][1] == {"episode_id": "e2", "turn_id": "t2"}


def test_answer_fields_are_the_response_model() -> None:
    # The answer shares the packed part: its fields are the model's, nothing more.
    r = _result()
    packed = json.loads(search_json(r))
    del packed["ranked"]
    answer = AnswerResponse.model_validate({"answer": "yes", **packed})
    assert set(answer.model_dump()) == {"answer", *packed}
