"""Start the ingest service: ``python -m services.ingest.main``."""

from __future__ import annotations

import logging
import sys

from gaama.metrics import forget_dropped_metric
from services.ingest.app import build_app
from services.ingest.handlers import IngestDeps
from services.runtime.bootstrap import Service, serve
from services.runtime.producer import EventProducer
from services.runtime.worker import StageApp


def wire(svc: Service) -> StageApp:
    settings, stores = svc.settings, svc.stores
    deps = IngestDeps(
        settings=settings,
        graph=stores.graph,
        embedder=svc.embedder,
        forgetting=stores.forgetting(settings, forget_dropped_metric(svc.name, svc.registry)),
    )
    app = build_app(deps, svc.registry, svc.metrics, stores.state, EventProducer(settings))
    logging.getLogger("gaama.ingest").info("ingest service: embedder=%s", svc.embedder.name)
    return app


def main() -> int:
    return serve("ingest", wire)


if __name__ == "__main__":
    sys.exit(main())
