"""Start the extract service: ``python -m services.extract.main``."""

from __future__ import annotations

import sys

from gaama import coalesce
from gaama.extract.factory import build_extractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.metrics import llm_metrics
from gaama.store.chunks import ChunkStore
from gaama.store.outbox import Outbox
from services.extract.app import build_app
from services.runtime.bootstrap import Service, serve
from services.runtime.worker import StageApp


def wire(svc: Service) -> StageApp:
    settings, stores = svc.settings, svc.stores
    lm = llm_metrics("extract", svc.registry)
    extractor, _client = build_extractor(settings, lm)
    outbox = Outbox(stores.redis, stores.graph.keys)
    pipeline = ExtractionPipeline(
        ExtractDeps(
            settings=settings,
            graph=stores.graph,
            index=stores.index,
            chunks=ChunkStore(stores.redis, stores.graph.keys),
            # Chunks that close side by side (their LLM calls return together) embed their
            # facts and labels in one batch (GAAMA_EMBED_COALESCE_MS; 0 = off).
            embedder=coalesce.for_queries(svc.embedder, settings),
            extractor=extractor,
            llm_metrics=lm,
            outbox=outbox,
        )
    )
    return build_app(svc, pipeline, outbox=outbox)


def main() -> int:
    return serve("extract", wire, tasks=("consumer_lag", "progress", "idle_chunks", "outbox"))


if __name__ == "__main__":
    sys.exit(main())
