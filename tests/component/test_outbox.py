"""The facts event of a chunk waits in an outbox written with the chunk, until reflect has
handled it: a worker killed between the write and the publication no longer leaves a chunk
that is never reflected; a forgotten chunk's event is never sent again."""

from __future__ import annotations

import time
import uuid

import pytest
from prometheus_client import CollectorRegistry

from gaama.events import TOPIC_TURNS, ForgetRequested
from gaama.metrics import stage_metrics
from services.extract import handlers as extract
from services.extract.app import outbox_task
from services.reflect import handlers as reflect
from services.runtime.records import BatchResult
from tests.component.test_forget_cascade import C1, as_records, turns
from tests.support.redis_state import tenant_keys
from tests.support.stream import Stream, _records, record

pytestmark = pytest.mark.requires_stack


async def _extract_only(stream: Stream, records) -> list:
    """Ingest and extract, then 'crash' before the facts events are published."""

    r1 = await stream.ingest(records)
    r2 = await extract.handle(_records(r1.out), stream.extract, stream.forgetting)
    return r2.out


async def test_a_lost_publication_is_sent_again_and_reflected(settings, graph, index, embedder):
    stream = Stream(settings, graph, index, embedder)
    lost = await _extract_only(stream, as_records(turns("acme", "c1", C1)))
    assert len(lost) == 1  # the chunk was written; its event never reached the broker
    chunk = lost[0].event.chunk_id
    assert await stream.outbox.stale(time.time() + 1) != []

    sent: list[BatchResult] = []

    async def publish(result: BatchResult, _source: str) -> None:
        sent.append(result)
        await reflect.handle(_records(result.out), stream.reflect, stream.forgetting)

    tick = outbox_task(stream.outbox, 0.0, publish, stage_metrics("extract", CollectorRegistry()))
    await tick()
    assert [o.event.chunk_id for r in sent for o in r.out] == [chunk]
    assert await graph.get_state("acme", f"reflected:{chunk}") is not None
    assert await stream.outbox.stale(time.time() + 1) == []  # handled: not sent again
    await tick()
    assert len(sent) == 1


async def test_a_forgotten_chunk_leaves_no_outbox_entry(settings, graph, index, embedder):
    stream = Stream(settings, graph, index, embedder)
    await _extract_only(stream, as_records(turns("acme", "c1", C1)))
    ev = ForgetRequested(
        request_id=uuid.uuid4().hex, tenant="acme", scope="conversation", scope_id="c1"
    )
    await stream.forgets.accept(
        "acme", ev.request_id, "conversation", "c1", lanes=["c"], requester="t", now=0.0
    )
    await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
    assert await stream.outbox.stale(time.time() + 1) == []
    assert not await tenant_keys(graph, "acme", graph.keys.state("acme", "outbox", "*"))
