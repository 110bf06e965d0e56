"""Reads prefer what holds: no search without ``as_of`` ranks a superseded fact above the
current fact that supersedes it; ``as_of`` reads memory as it stood; items carry validity.
Real Redis, offline extractor, the supersession chunks of the component test."""

from __future__ import annotations

import pytest

from gaama.model import NodeKind
from gaama.retrieval.search import Retriever
from tests.component.test_extraction_pipeline import pipelines
from tests.component.test_supersession import CHUNKS, START, _stored

pytestmark = pytest.mark.requires_stack

QUERIES = [
    "Where does Dana live?",
    "Which city did Dana move to?",
    "Dana Porto",
    "Lisbon",
    "Did Dana live in Porto?",
    "Berlin move",
    "Where did Dana live before Lisbon?",
]


async def _ingest(settings, graph, index, embedder, tenant):
    extract, _, _ = pipelines(settings, graph, index, embedder)
    events = await _stored(graph, embedder, tenant)
    for conv, _, _ in CHUNKS:
        for ev in events[conv]:
            await extract.on_episode(ev)


@pytest.mark.parametrize("mode", ["gaama", "semantic"])
@pytest.mark.parametrize("params", [{}, {"superseded_weight": 1.0}, {"w_ppr": 0.9}])
async def test_no_superseded_fact_above_its_superseder(
    settings, graph, index, embedder, mode, params
):
    await _ingest(settings, graph, index, embedder, "cur")
    retriever = Retriever(graph, index, embedder, settings)
    seen_superseded = 0
    for query in QUERIES:
        res = await retriever.search("cur", query, mode=mode, k=20, params=params)
        for items in (res.ranked, [i for i in res.memory if i.kind is NodeKind.FACT]):
            at = {i.id: n for n, i in enumerate(items)}
            for n, item in enumerate(items):
                by = item.validity.superseded_by
                if item.validity.valid_to is not None and item.kind is NodeKind.FACT:
                    seen_superseded += 1
                    assert by, item
                    if by in at and items[at[by]].validity.valid_to is None:
                        assert at[by] < n, (query, items)
    assert seen_superseded  # the old facts are still found, below what replaced them


async def test_as_of_reads_memory_as_it_stood(settings, graph, index, embedder):
    await _ingest(settings, graph, index, embedder, "asof")
    retriever = Retriever(graph, index, embedder, settings)
    now = await retriever.search("asof", "Where does Dana live?", k=10)
    facts = [i for i in now.ranked if i.kind is NodeKind.FACT]
    assert "Berlin" in facts[0].text and facts[0].validity.valid_to is None
    assert facts[0].validity.valid_from is not None
    old = next(i for i in now.ranked if "Porto" in i.text and i.kind is NodeKind.FACT)
    assert old.validity.valid_to is not None and old.validity.superseded_by
    # between Porto and Lisbon: Porto held, nothing later was said yet
    t = START.timestamp() + 5 * 86400
    then = await retriever.search("asof", "Where does Dana live?", k=10, as_of=t)
    assert then.ranked and all(i.time <= t for i in then.ranked)
    assert "Porto" in next(i for i in then.ranked if i.kind is NodeKind.FACT).text
    omit = await retriever.search(
        "asof", "Where does Dana live?", k=10, params={"omit_superseded": True}
    )
    assert omit.ranked and all(i.validity.valid_to is None for i in omit.ranked)
