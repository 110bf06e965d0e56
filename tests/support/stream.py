"""An in-process stream for component tests: records go through the real handlers of ingest,
extract and reflect in order, against the real Redis, with no broker. Each handler's output is
fed to the next stage as records (keys and partitions kept), the way the topics would."""

from __future__ import annotations

from dataclasses import dataclass, field

from gaama.config import Settings
from gaama.embed import Embedder
from gaama.events import Event, encode
from gaama.extract.offline import OfflineExtractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.extract.reflection import ReflectDeps, ReflectionPipeline
from gaama.forgetting import Forgetting
from gaama.store.chunks import ChunkStore
from gaama.store.forget import ForgetStore
from gaama.store.graph import GraphStore
from gaama.store.outbox import Outbox
from gaama.store.vectors import VectorIndex
from services.extract import handlers as extract
from services.ingest import handlers as ingest
from services.reflect import handlers as reflect
from services.runtime.records import BatchResult, Outgoing, Record


def record(topic: str, key: bytes, event: Event, partition: int | None = 0) -> Record:
    return Record(topic=topic, key=key, value=encode(event), partition=partition)


def _records(out: list[Outgoing]) -> list[Record]:
    return [record(o.topic, o.key, o.event, o.partition or 0) for o in out]


@dataclass
class Stream:
    settings: Settings
    graph: GraphStore
    index: VectorIndex
    embedder: Embedder
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        keys, redis = self.graph.keys, self.graph.redis
        self.chunks = ChunkStore(redis, keys)
        self.forgets = ForgetStore(redis, keys)
        self.forgetting = Forgetting(self.forgets, self.chunks)
        ex = OfflineExtractor()
        s, g, i, e = self.settings, self.graph, self.index, self.embedder
        self.outbox = Outbox(redis, keys)
        self.extract = ExtractionPipeline(
            ExtractDeps(s, g, i, self.chunks, e, ex, outbox=self.outbox)
        )
        self.reflect = ReflectionPipeline(ReflectDeps(s, g, i, e, ex, outbox=self.outbox))
        self.ingest_deps = ingest.IngestDeps(s, g, e, forgetting=self.forgetting)

    def _check(self, result: BatchResult) -> None:
        self.failures += [f"{f.reason}: {f.error}" for f in result.failed]

    async def ingest(self, records: list[Record]) -> BatchResult:
        """One ingest batch, its deferred writes made as the runtime makes them."""
        result = await ingest.handle(records, self.ingest_deps)
        await result.make_writes()
        return result

    async def run(self, records: list[Record]) -> None:
        """Every record through all three stages, stage by stage (a batch each)."""
        r1 = await self.ingest(records)
        self._check(r1)
        r2 = await extract.handle(_records(r1.out), self.extract, self.forgetting)
        self._check(r2)
        r3 = await reflect.handle(_records(r2.out), self.reflect, self.forgetting)
        self._check(r3)

    async def flush(self) -> None:
        """Close every idle chunk now and reflect what that produced."""
        produced = []
        for t, conv in await self.chunks.idle(float("inf")):
            if (done := await self.extract.close(t, conv, "idle")) is not None:
                produced.append(done)
        out = extract.facts_out(produced)
        self._check(await reflect.handle(_records(out), self.reflect, self.forgetting))
