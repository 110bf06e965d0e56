"""Ingest service wiring: the faust agent on ``gaama.turns.v1`` and ``POST /v1/turns``."""

from __future__ import annotations

from functools import partial
from typing import Any

import faust
from faust.web import Request, Response, View
from prometheus_client import CollectorRegistry

from gaama.episodes import episode_node
from gaama.errors import GaamaError, ValidationError
from gaama.events import TOPIC_TURNS, conversation_key, encode
from gaama.metrics import StageMetrics
from services.ingest.handlers import IngestDeps, handle, parse_json, parse_turns_request
from services.runtime.auth import Authenticator, AuthError
from services.runtime.worker import Publisher, ReadyCheck, add_ops_pages, consume, make_app


def build_app(
    deps: IngestDeps, registry: CollectorRegistry, metrics: StageMetrics, ready: ReadyCheck
) -> faust.App:
    s = deps.settings
    app = make_app("ingest", s, s.ingest_port)
    publisher = Publisher(app, s, "ingest")
    consume(
        app,
        service="ingest",
        source_base=TOPIC_TURNS,
        settings=s,
        handler=partial(handle, deps=deps),
        metrics=metrics,
        publisher=publisher,
        batch_size=s.ingest_batch,
        window_s=s.ingest_batch_window_s,
    )
    add_ops_pages(app, registry, ready, s)
    turns_topic = publisher.topic(TOPIC_TURNS)
    auth = Authenticator(s)

    @app.page("/v1/turns")
    class Turns(View):
        async def post(self, request: Request) -> Response:
            try:
                address = str(getattr(request, "remote", "") or "")  # aiohttp underneath
                tenant = auth.tenant(request.headers, address)
            except AuthError as exc:
                return self.json({"error": exc.message}, status=exc.status, headers=exc.headers())
            try:
                body: Any = parse_json(await request.read())
            except ValidationError as exc:
                return self.json({"error": str(exc)}, status=400)
            try:
                turns = parse_turns_request(body, tenant, s)
            except ValidationError as exc:
                status = 413 if exc.reason == "too_large" else 422
                return self.json({"error": str(exc)}, status=status)
            futures = []
            try:
                for t in turns:
                    futures.append(
                        await turns_topic.send(
                            key=conversation_key(t.tenant, t.conversation), value=encode(t)
                        )
                    )
                await app.producer.flush()
                for f in futures:
                    await f
            except (GaamaError, OSError) as exc:
                return self.json({"error": f"could not enqueue the turns: {exc}"}, status=503)
            ids = [episode_node(t).id for t in turns]
            return self.json({"accepted": len(ids), "episode_ids": ids}, status=202)

    return app
