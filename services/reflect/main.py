"""Start the reflect service: ``python -m services.reflect.main``."""

from __future__ import annotations

import sys

from gaama.extract.factory import build_extractor
from gaama.extract.reflection import ReflectDeps, ReflectionPipeline
from gaama.metrics import llm_metrics
from gaama.store.outbox import Outbox
from services.reflect.app import build_app
from services.runtime.bootstrap import Service, serve
from services.runtime.worker import StageApp


def wire(svc: Service) -> StageApp:
    settings, stores = svc.settings, svc.stores
    extractor, _client = build_extractor(settings, llm_metrics("reflect", svc.registry))
    pipeline = ReflectionPipeline(
        ReflectDeps(
            settings=settings,
            graph=stores.graph,
            index=stores.index,
            embedder=svc.embedder,
            extractor=extractor,
            outbox=Outbox(stores.redis, stores.graph.keys),
        )
    )
    return build_app(svc, pipeline)


def main() -> int:
    return serve("reflect", wire)


if __name__ == "__main__":
    sys.exit(main())
