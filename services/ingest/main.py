"""Start the ingest service: ``python -m services.ingest.main``."""

from __future__ import annotations

import logging
import sys

from prometheus_client import CollectorRegistry

from gaama.config import load_settings
from gaama.embed import build_embedder
from gaama.errors import ConfigError
from gaama.metrics import embed_metrics, stage_metrics
from services.ingest.app import build_app
from services.ingest.handlers import IngestDeps
from services.runtime.bootstrap import connect_stores, run_worker
from services.runtime.producer import EventProducer


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"ingest: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    registry = CollectorRegistry()
    metrics = stage_metrics("ingest", registry)
    embedder = build_embedder(settings, embed_metrics("ingest", registry))
    stores = connect_stores(settings, embedder.dim)
    deps = IngestDeps(
        settings=settings,
        graph=stores.graph,
        embedder=embedder,
        forgetting=stores.forgetting(settings),
    )
    app = build_app(deps, registry, metrics, stores.ready, EventProducer(settings))
    logging.getLogger("gaama.ingest").info("ingest service: embedder=%s", embedder.name)
    return run_worker(app, stores, warm=getattr(embedder, "warm_up", None))


if __name__ == "__main__":
    sys.exit(main())
