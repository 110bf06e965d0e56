"""Start the reflect service: ``python -m services.reflect.main``."""

from __future__ import annotations

import logging
import sys

from prometheus_client import CollectorRegistry

from gaama.config import load_settings
from gaama.embed import build_embedder
from gaama.errors import ConfigError
from gaama.extract.factory import build_extractor
from gaama.extract.reflection import ReflectDeps, ReflectionPipeline
from gaama.metrics import embed_metrics, forget_metrics, llm_metrics, stage_metrics
from gaama.store.outbox import Outbox
from services.reflect.app import build_app
from services.runtime.bootstrap import connect_stores, run_worker


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"reflect: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    registry = CollectorRegistry()
    metrics = stage_metrics("reflect", registry)
    embedder = build_embedder(settings, embed_metrics("reflect", registry))
    extractor, _client = build_extractor(settings, llm_metrics("reflect", registry))
    stores = connect_stores(settings, embedder.dim)
    pipeline = ReflectionPipeline(
        ReflectDeps(
            settings=settings,
            graph=stores.graph,
            index=stores.index,
            embedder=embedder,
            extractor=extractor,
            outbox=Outbox(stores.redis, stores.graph.keys),
        )
    )
    app = build_app(
        settings,
        pipeline,
        registry,
        metrics,
        stores.ready,
        forgetting=stores.forgetting(settings),
        forget_metrics=forget_metrics("reflect", registry),
    )
    return run_worker(app, stores, warm=getattr(embedder, "warm_up", None))


if __name__ == "__main__":
    sys.exit(main())
