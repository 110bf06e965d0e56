"""Where one ingest batch's time goes: the real handler, timed step by step, in one process.

Starts the embedded stack (AOF, ``appendfsync everysec``), then per batch of ``--batch`` turns
(the texts ``python -m benchmarks ingest`` sends): decoding and validating the records, the
existence check, the embedding, the episode writes, the fsync wait (``Durability.wait``) and
publishing the events with acks=all, each timed around the real code. Then the same texts through
the embedder alone (embed-only rate on the same texts, same process). Prints medians per batch.

    PYTHONPATH=shared:. python scripts/ingest-batch-profile.py --batches 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from benchmarks.ingest import Conv, _turns, run_settings
from benchmarks.query import servers
from gaama.embed import build_embedder
from gaama.episodes import episode_node
from gaama.events import TOPIC_TURNS, conversation_key, encode, topic_name
from gaama.store import connect
from gaama.store.durability import Durability
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from services.ingest.handlers import IngestDeps, handle, validate_turn
from services.runtime.records import Record

Times = dict[str, list[float]]


class Timed:
    """Wraps an object's coroutine methods, adding each call's seconds to ``times[label]``."""

    def __init__(self, inner: Any, times: Times, labels: dict[str, str]) -> None:
        self._inner, self._times, self._labels = inner, times, labels

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        label = self._labels.get(name)
        if label is None:
            return attr

        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await attr(*args, **kwargs)
            finally:
                self._times[label][-1] += time.perf_counter() - t0

        return timed


async def profile(redis_url: str, bootstrap: str, batches: int, size: int) -> None:
    from aiokafka import AIOKafkaProducer

    from gaama.devstack import create_topics

    prefix = f"gprof{uuid.uuid4().hex[:6]}"
    s = run_settings(prefix, redis_url, bootstrap)
    await create_topics(bootstrap, s.topic_partitions, s.topic_prefix)
    keys = Keys(prefix)
    client = connect(redis_url, socket_timeout=30)
    await VectorIndex(client, s.index_name, s.embed_dim, keys).ensure()
    own = connect(redis_url, socket_timeout=30)
    durable = Durability(own, keys.durability_marker, "aof", timeout_s=10)
    embedder = build_embedder(s)
    embedder.warm_up()  # type: ignore[attr-defined]
    times: Times = defaultdict(list)
    labels = ("decode", "existing", "embed", "append", "handler", "fsync", "publish")
    timed = {"existing": "existing", "append_episodes": "append"}
    graph = Timed(GraphStore(client, keys), times, timed)
    deps = IngestDeps(s, graph, Timed(embedder, times, {"embed": "embed"}))  # type: ignore[arg-type]
    convs = [Conv(f"prof-t{t}", f"conv-{c}", t * 5 + c) for t in range(4) for c in range(5)]
    turns = _turns(convs, batches * size, datetime(2024, 3, 1, tzinfo=UTC).timestamp())
    topic = topic_name(TOPIC_TURNS, s.topic_prefix)
    records = [
        Record(topic, conversation_key(t.tenant, t.conversation), encode(t), i % 4, i)
        for i, t in enumerate(turns)
    ]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for b in range(batches):
            for label in labels:
                times[label].append(0.0)
            batch = records[b * size : (b + 1) * size]
            t0 = time.perf_counter()
            for r in batch:
                validate_turn(r, s)
            times["decode"][-1] = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = await handle(batch, deps)
            await result.make_writes()  # the appends, made behind the next batch in the service
            times["handler"][-1] = time.perf_counter() - t0
            t0 = time.perf_counter()
            await durable.wait()
            times["fsync"][-1] = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = topic_name("gaama.episodes.v1", s.topic_prefix)
            futs = [await producer.send(out, encode(o.event), key=o.key) for o in result.out]
            await producer.flush()
            await asyncio.gather(*futs)
            times["publish"][-1] = time.perf_counter() - t0
        texts = [episode_node(t).text for t in turns[:size]]
        t0 = time.perf_counter()
        rounds = 3
        for _ in range(rounds):
            embedder.embed_sync(texts)  # type: ignore[attr-defined]
        embed_only = rounds * size / (time.perf_counter() - t0)
    finally:
        await producer.stop()
        for tenant in {c.tenant for c in convs}:
            await GraphStore(client, keys).delete_tenant(tenant)
        await VectorIndex(client, s.index_name, s.embed_dim, keys).drop()
        await client.aclose()
        await own.aclose()
    print(f"{batches} batches of {size} turns; median ms per batch (first batch dropped):")
    total = 0.0
    for label in labels:
        med = statistics.median(times[label][1:]) * 1000
        if label in ("handler", "fsync", "publish"):
            total += med
        print(f"  {label:9s} {med:8.1f}")
    other = statistics.median(
        h - e - a - x
        for h, e, a, x in zip(
            times["handler"][1:],
            times["embed"][1:],
            times["append"][1:],
            times["existing"][1:],
            strict=True,
        )
    )
    print(f"  handler other (decode, episode nodes, events) {other * 1000:.1f}")
    print(f"  handler + fsync + publish {total:.1f} ms = {size / total * 1000:.0f} turns/s")
    emb = statistics.median(times["embed"][1:])
    print(f"  embed in handler: {size / emb:.0f} texts/s; embed only, same texts: {embed_only:.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args()
    with servers(None, None, need_kafka=True) as (redis_url, bootstrap):
        asyncio.run(profile(redis_url, bootstrap, args.batches, args.batch))


if __name__ == "__main__":
    main()
