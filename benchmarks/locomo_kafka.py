"""``python -m benchmarks locomo --via-kafka``: the turns go through the broker to running
services."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks.locomo_data import Conversation
from gaama.config import Settings
from gaama.errors import ConfigError
from gaama.events import FactsExtracted
from gaama.launch import ServiceProcess
from gaama.store.chunks import ChunkStore
from gaama.store.graph import GraphStore

# --- the broker path (--via-kafka) -----------------------------------------------------------

EXTRACTOR_UNKNOWN = "unknown"
SERVICES = ("ingest", "extract", "reflect")
STALL_TIMEOUT_S = 600.0  # no progress for this long while waiting for the services: give up


async def start_services(settings: Settings) -> list[ServiceProcess]:
    """Create the run's topics and start ingest, extract and reflect; wait until all are ready."""
    from gaama.devstack import create_topics

    await create_topics(settings.kafka_bootstrap, settings.topic_partitions, settings.topic_prefix)
    log_dir = Path(tempfile.mkdtemp(prefix="gaama-locomo-services-"))
    # inherit: an LLM configured in the caller's environment reaches the services
    procs = [ServiceProcess(name, settings, log_dir, inherit=True) for name in SERVICES]
    try:
        await asyncio.gather(*(p.astart() for p in procs))
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


async def ingest_via_kafka(
    settings: Settings,
    graph: GraphStore,
    chunks: ChunkStore,
    conversations: list[Conversation],
    tenants: dict[str, str],
    bar: tqdm[Any],
) -> str:
    """Produce every turn to the turns topic and wait until the graph is complete.

    Complete means: every episode stored and extracted (no open chunk), every chunk's
    FactsExtracted read back from the facts topic, and each chunk with new facts reflected on.

    Returns:
        The extractor the services used (from the FactsExtracted events).
    """
    from aiokafka import AIOKafkaProducer

    from gaama.events import TOPIC_TURNS, conversation_key, encode, topic_name

    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers, acks="all", request_timeout_ms=30000
    )
    await producer.start()
    try:
        topic = topic_name(TOPIC_TURNS, settings.topic_prefix)
        for conv in conversations:
            tenant = tenants[conv.sample_id]
            key = conversation_key(tenant, conv.sample_id)
            for turn in conv.turn_events(tenant):
                await producer.send(topic, value=encode(turn), key=key)
        await producer.flush()
    finally:
        await producer.stop()
    return await _wait_complete(settings, graph, chunks, conversations, tenants, bar)


async def _wait_complete(
    settings: Settings,
    graph: GraphStore,
    chunks: ChunkStore,
    conversations: list[Conversation],
    tenants: dict[str, str],
    bar: tqdm[Any],
) -> str:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from gaama.events import TOPIC_FACTS, decode, topic_name

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap_servers, enable_auto_commit=False, group_id=None
    )
    await consumer.start()
    facts: dict[tuple[str, str], FactsExtracted] = {}  # (tenant, chunk id) -> event
    ours = set(tenants.values())
    try:
        topic = topic_name(TOPIC_FACTS, settings.topic_prefix)
        await consumer.topics()  # fetch metadata: partitions are unknown until then
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            raise ConfigError(f"topic {topic} does not exist; run `gaama dev up` or create it")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)  # explicit offsets: no ListOffsets (see ARCHITECTURE §3)
        done_before, last_progress = -1, time.monotonic()
        while True:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                for m in msgs:
                    ev = decode(FactsExtracted, m.value)
                    if ev.tenant in ours:
                        facts[(ev.tenant, ev.chunk_id)] = ev
            done, complete = await _progress(graph, chunks, conversations, tenants, facts)
            bar.update(done - bar.n)
            if complete:
                break
            if done != done_before:
                done_before, last_progress = done, time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise ConfigError(
                    f"the services made no progress for {STALL_TIMEOUT_S:.0f}s "
                    f"({done} of {bar.total} turns extracted); are ingest, "
                    f"extract and reflect running in this namespace?"
                )
            await asyncio.sleep(0.5)
    finally:
        await consumer.stop()
    names = {ev.extractor for ev in facts.values()}
    return names.pop() if len(names) == 1 else ",".join(sorted(names)) or EXTRACTOR_UNKNOWN


async def _progress(
    graph: GraphStore,
    chunks: ChunkStore,
    conversations: list[Conversation],
    tenants: dict[str, str],
    facts: dict[tuple[str, str], FactsExtracted],
) -> tuple[int, bool]:
    """(turns extracted so far, whether the whole graph is complete)."""
    extracted, complete = 0, True
    for conv in conversations:
        tenant = tenants[conv.sample_id]
        ids = await graph.chain(tenant, conv.sample_id)
        marks = await graph.get_fields(tenant, ids, ["chunk"]) if ids else {}
        chunk_ids = {m[0].decode() for m in marks.values() if m[0] is not None}
        extracted += sum(1 for m in marks.values() if m[0] is not None)
        # get_fields leaves out episodes without a mark, so every episode must be in ``marks``:
        # before the extract service has read anything there are no marks and no open chunk.
        if (
            len(ids) < conv.n_turns
            or len(marks) < len(ids)
            or await chunks.episodes(tenant, conv.sample_id)
            or any(m[0] is None for m in marks.values())
        ):
            complete = False
            continue
        for c in chunk_ids:
            ev = facts.get((tenant, c))
            if ev is None or (
                ev.new_fact_ids and await graph.get_state(tenant, f"reflected:{c}") is None
            ):
                complete = False
    return extracted, complete
