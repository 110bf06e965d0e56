"""Where the extract stage's CPU goes: the pipeline benchmark's live turns run through the extract
handler in-process on a stack of its own (its Redis; the broker is not used), with the offline
extractor; CPU per turn of
the whole process, of the extractor's thread and of the embedding calls.

    PYTHONPATH=shared:. python scripts/extract-cpu-split.py [turns] [concurrency]

The first 100 turns warm up (models loaded, chunks of every conversation closed once) and are not
counted (docs/benchmarks.md, "Pipeline", reading notes). Thread CPU is ``time.thread_time`` of
the calls, so embedding threads of ONNX Runtime beyond the calling one would not be counted (the
default is one).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.pipeline import live_turns
from gaama import devstack
from gaama.config import load_settings
from gaama.embed import build_embedder
from gaama.episodes import episode_node, episode_stored
from gaama.events import conversation_key, encode
from gaama.extract.factory import build_extractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.store import connect
from gaama.store.chunks import ChunkStore
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.outbox import Outbox
from gaama.store.vectors import VectorIndex
from services.extract.handlers import handle
from services.runtime.records import Record

WARM = 100
BATCH = 64


def timed(obj: Any, name: str, spent: list[float]) -> None:
    """Wrap ``obj.name`` so that the thread CPU of its calls adds up in ``spent[0]``."""
    inner: Callable[..., Any] = getattr(obj, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.thread_time() - started

    setattr(obj, name, call)


async def run(redis_url: str, turns: int, concurrency: int) -> None:
    settings = load_settings(
        redis_url=redis_url,
        key_prefix="cpusplit",
        index_name="cpusplit-idx",
        llm_concurrency=concurrency,
    )
    redis = connect(settings.redis_url)
    keys = Keys(settings.key_prefix)
    graph = GraphStore(redis, keys)
    index = VectorIndex(redis, settings.index_name, settings.embed_dim, keys)
    await index.ensure()
    embedder = build_embedder(settings)
    embedder.warm_up()  # type: ignore[attr-defined]
    extractor, _ = build_extractor(settings, None)
    pipeline = ExtractionPipeline(
        ExtractDeps(
            settings=settings,
            graph=graph,
            index=index,
            chunks=ChunkStore(redis, keys),
            embedder=embedder,
            extractor=extractor,
            outbox=Outbox(redis, keys),
        )
    )
    records = []
    for turn in live_turns("cpusplit", turns + WARM, 10, 5):
        node = episode_node(turn)
        node.vector = (await embedder.embed([node.text]))[0].tolist()
        await graph.append_episode(node)
        key = conversation_key(turn.tenant, turn.conversation)
        records.append(Record("episodes", key, encode(episode_stored(turn, node)), 0, 0))
    for start in range(0, WARM, BATCH):
        await handle(records[start : min(WARM, start + BATCH)], pipeline, concurrency=concurrency)
    parse, embed = [0.0], [0.0]
    timed(extractor, "extract_sync", parse)
    timed(embedder, "embed_sync", embed)
    cpu = time.process_time()
    for start in range(WARM, len(records), BATCH):
        await handle(records[start : start + BATCH], pipeline, concurrency=concurrency)
    total = time.process_time() - cpu
    per = 1000 / turns
    print(
        f"{turns} turns, concurrency {concurrency}: {turns / total:.1f} turns per CPU s; "
        f"ms per turn: all {total * per:.2f}, extractor {parse[0] * per:.2f}, "
        f"embedding {embed[0] * per:.2f}, the rest {(total - parse[0] - embed[0]) * per:.2f}"
    )
    await index.drop()
    await redis.aclose()


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    directory = Path(tempfile.mkdtemp(prefix="gaama-cpu-split-"))
    stack = devstack.start_stack(directory, devstack.free_port(), devstack.free_port())
    try:
        asyncio.run(run(stack.redis_url, turns, concurrency))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
