"""Start the extract service: ``python -m services.extract.main``."""

from __future__ import annotations

import logging
import sys

from prometheus_client import CollectorRegistry

from gaama.config import load_settings
from gaama.embed import build_embedder
from gaama.errors import ConfigError
from gaama.extract.factory import build_extractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.metrics import embed_metrics, llm_metrics, stage_metrics
from gaama.store.chunks import ChunkStore
from gaama.store.outbox import Outbox
from services.extract.app import build_app
from services.runtime.bootstrap import connect_stores, run_worker


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"extract: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    registry = CollectorRegistry()
    metrics = stage_metrics("extract", registry, tasks=("consumer_lag", "idle_chunks", "outbox"))
    lm = llm_metrics("extract", registry)
    embedder = build_embedder(settings, embed_metrics("extract", registry))
    extractor, _client = build_extractor(settings, lm)
    stores = connect_stores(settings, embedder.dim)
    outbox = Outbox(stores.redis, stores.graph.keys)
    pipeline = ExtractionPipeline(
        ExtractDeps(
            settings=settings,
            graph=stores.graph,
            index=stores.index,
            chunks=ChunkStore(stores.redis, stores.graph.keys),
            embedder=embedder,
            extractor=extractor,
            llm_metrics=lm,
            outbox=outbox,
        )
    )
    app = build_app(
        settings,
        pipeline,
        registry,
        metrics,
        stores.ready,
        forgetting=stores.forgetting(settings),
        outbox=outbox,
    )
    return run_worker(app, stores, warm=getattr(embedder, "warm_up", None))


if __name__ == "__main__":
    sys.exit(main())
