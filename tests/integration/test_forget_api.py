"""Forget, list, export and audit over HTTP (query service in-process) with the real broker:
requests are published onto the turns topic and the stages are the real handlers, fed with
exactly the records the broker holds."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from gaama import ids
from gaama.config import ApiKey, Settings, hash_api_key
from gaama.embed import MiniLMEmbedder
from gaama.errors import BrokerUnavailable
from gaama.events import TOPIC_TURNS, topic_name
from gaama.metrics import forget_dropped_metric, forget_metrics, query_metrics
from gaama.retrieval.search import Retriever
from gaama.store.forget import ForgetStore
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from services.query.app import create_app
from services.query.handlers import QueryDeps
from services.query.memories import ForgetDeps
from services.runtime.producer import EventProducer
from services.runtime.records import Record
from tests.component.test_forget_cascade import C1, C2, as_records, turns
from tests.support.stream import Stream

pytestmark = pytest.mark.requires_stack

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
ADMIN = "the-admin-key"


def app_for(settings: Settings, graph: GraphStore, index: VectorIndex, embedder, producer):
    s = settings.model_copy(
        update={
            "api_keys": [
                ApiKey(key_sha256=hash_api_key("key-a"), tenant="acme"),
                ApiKey(key_sha256=hash_api_key("key-b"), tenant="other"),
            ],
            "admin_keys": [hashlib.sha256(ADMIN.encode()).hexdigest()],
        }
    )
    registry = CollectorRegistry()
    metrics = query_metrics(registry)
    forgets = ForgetStore(graph.redis, graph.keys)
    deps = QueryDeps(
        settings=s,
        graph=graph,
        index=index,
        retriever=Retriever(graph, index, embedder, s, metrics=metrics),
        metrics=metrics,
        forgets=forgets,
        forget=ForgetDeps(forgets, producer, forget_metrics("query", registry)),
    )
    transport = httpx.ASGITransport(app=create_app(deps, registry))
    return httpx.AsyncClient(transport=transport, base_url="http://q"), registry


class Broker:
    """Reads what the query service published, from the offsets where the test started."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = topic_name(TOPIC_TURNS, settings.topic_prefix)
        self.seen: set[tuple[int, int]] = set()

    async def records(self, expect: int) -> list[Record]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            group_id=None,
        )
        await consumer.start()
        out: list[Record] = []
        try:
            await consumer.topics()
            parts = sorted(consumer.partitions_for_topic(self.topic) or ())
            consumer.assign([TopicPartition(self.topic, p) for p in parts])
            for _ in range(100):
                batch = await consumer.getmany(timeout_ms=200)
                for msgs in batch.values():
                    for m in msgs:
                        if (m.partition, m.offset) in self.seen:
                            continue
                        self.seen.add((m.partition, m.offset))
                        out.append(Record(m.topic, m.key, m.value, m.partition, m.offset))
                if len(out) >= expect:
                    break
        finally:
            await consumer.stop()
        return out


@pytest.fixture
async def world(settings, graph, index, embedder: MiniLMEmbedder, topics):
    producer = EventProducer(settings, timeout_s=10)
    stream = Stream(settings, graph, index, embedder)
    await stream.run(as_records(turns("acme", "c1", C1, subject="u1") + turns("acme", "c2", C2)))
    await stream.run(as_records(turns("other", "c1", C1, subject="u1")))
    client, registry = app_for(settings, graph, index, embedder, producer)
    yield client, stream, Broker(settings), registry
    await client.aclose()
    await producer.aclose()


def texts(body: dict[str, Any]) -> str:
    return " ".join(i["text"] for i in body["memory"] + body["ranked"])


async def test_forget_a_conversation_end_to_end(world, graph: GraphStore) -> None:
    c, stream, broker, _ = world
    r = await c.post("/v1/search", headers=A, json={"query": "support group adoption"})
    assert "support group" in texts(r.json())
    episode = next(
        i for i in r.json()["ranked"] if i["kind"] == "episode" and i["conversation"] == "c1"
    )

    r = await c.delete("/v1/conversations/c1", headers=A)
    assert r.status_code == 202, r.text
    rid = r.json()["request_id"]
    # Hidden at once, before any stage ran: search, answer's memory, node reads, lists.
    r = await c.post("/v1/search", headers=A, json={"query": "support group adoption"})
    assert all(i["conversation"] != "c1" for i in r.json()["memory"] + r.json()["ranked"])
    assert "support group" not in texts(r.json())
    assert (await c.get(f"/v1/nodes/{episode['id']}", headers=A)).status_code == 404
    listed = (await c.get("/v1/memories", headers=A, params={"limit": 200})).json()["items"]
    assert listed and all(i["conversation"] != "c1" for i in listed)
    assert (await c.get(f"/v1/forget/{rid}", headers=A)).json()["status"] == "pending"
    # The other tenant still sees its own c1 and cannot see acme's request.
    r = await c.post("/v1/search", headers=B, json={"query": "support group adoption"})
    assert "support group" in texts(r.json())
    assert (await c.get(f"/v1/forget/{rid}", headers=B)).status_code == 404

    records = await broker.records(1)
    assert len(records) == 1 and records[0].key == b"acme/c1"
    await stream.run(records)
    assert not stream.failures
    done = (await c.get(f"/v1/forget/{rid}", headers=A)).json()
    assert done["status"] == "done" and done["removed"]["episode"] == 3, done
    audit = (await c.get("/v1/audit", headers=A)).json()
    assert [e["event"] for e in audit] == ["done", "accepted"]
    # The scope id is kept only as its digest.
    assert all("c1" not in e.values() and e["scope_hash"] == ids.tag("c1") for e in audit)
    assert not await graph.redis.zrange(graph.keys.chain("acme", "c1"), 0, -1)
    metrics = (await c.get("/metrics")).text
    assert (
        'gaama_query_forget_requests_total{outcome="accepted",scope="conversation"} 1.0' in metrics
    )


async def test_forget_a_subject_fans_out_to_every_partition(world, settings: Settings) -> None:
    c, stream, broker, _ = world
    r = await c.delete("/v1/subjects/u1", headers=A)
    assert r.status_code == 202
    rid = r.json()["request_id"]
    records = await broker.records(settings.topic_partitions)
    assert sorted(r.partition for r in records) == list(range(settings.topic_partitions))
    for rec in records[:-1]:  # lanes arrive one by one: nothing is removed until the last
        await stream.run([rec])
        assert (await c.get(f"/v1/forget/{rid}", headers=A)).json()["status"] == "pending"
    await stream.run(records[-1:])
    done = (await c.get(f"/v1/forget/{rid}", headers=A)).json()
    assert done["status"] == "done" and done["removed"]["episode"] == 3
    lines = [x async for x in _export(c, "u1")]
    assert lines == []
    assert [x async for x in _export(c, "u1", B)]  # the other tenant's u1 is untouched


async def _export(c: httpx.AsyncClient, subject: str, headers=A):
    async with c.stream("GET", "/v1/export", headers=headers, params={"subject": subject}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line:
                yield line


async def test_export_lists_a_subject_with_provenance(world) -> None:
    c, *_ = world
    lines = [json.loads(x) async for x in _export(c, "u1")]
    nodes = {x["id"]: x for x in lines if x["type"] == "node"}
    edges = [x for x in lines if x["type"] == "edge"]
    kinds = {x["kind"] for x in nodes.values()}
    assert {"episode", "fact"} <= kinds
    assert all(x["subject"] == "u1" for x in nodes.values() if x["kind"] == "episode")
    facts = [x for x in nodes.values() if x["kind"] == "fact"]
    assert facts and all(set(f["sources"]) <= set(nodes) for f in facts)
    assert edges and all(e["src"] in nodes and e["dst"] in nodes for e in edges)
    assert not any("camping" in x.get("text", "") for x in nodes.values())  # c2 has no subject


async def test_list_pages_are_stable_and_complete(world) -> None:
    c, *_ = world
    seen, cursor, pages = [], None, 0
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await c.get("/v1/memories", headers=A, params=params)).json()
        seen += [(i["time"], i["id"]) for i in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    everything = (await c.get("/v1/memories", headers=A, params={"limit": 200})).json()
    assert seen == [(i["time"], i["id"]) for i in everything["items"]]
    assert seen == sorted(seen) and len(set(seen)) == len(seen) and pages > 3
    bad = await c.get("/v1/memories", headers=A, params={"cursor": "!!"})
    assert bad.status_code == 422 and "cursor" in bad.json()["error"]
    r = await c.get("/v1/memories", headers=A, params={"kind": "episode", "conversation": "c2"})
    assert {i["conversation"] for i in r.json()["items"]} == {"c2"}


async def test_unknown_scopes_and_bad_input(world) -> None:
    c, stream, broker, _ = world
    r = await c.delete("/v1/conversations/never-written", headers=A)
    assert r.status_code == 202
    await stream.run(await broker.records(1))
    done = (await c.get(f"/v1/forget/{r.json()['request_id']}", headers=A)).json()
    assert done["status"] == "done" and sum(done["removed"].values()) == 0
    assert (await c.get("/v1/forget/" + "0" * 32, headers=A)).status_code == 404
    assert (await c.delete("/v1/conversations/a%00b", headers=A)).status_code == 422
    slash = await c.delete("/v1/subjects/user%2F42", headers=A)  # subjects may hold '/'
    assert slash.status_code == 202, slash.text
    (rec, *_) = await broker.records(4)
    assert b'"scope_id":"user/42"' in rec.value
    assert (await c.delete("/v1/conversations/c1")).status_code == 401


async def test_forgetting_a_tenant_needs_an_admin_key(world, graph: GraphStore) -> None:
    c, stream, broker, _ = world
    assert (await c.delete("/v1/tenant", headers=A)).status_code == 403
    wrong = {**A, "X-Admin-Key": "not-it"}
    assert (await c.delete("/v1/tenant", headers=wrong)).status_code == 403
    r = await c.delete("/v1/tenant", headers={**A, "X-Admin-Key": ADMIN})
    assert r.status_code == 202
    await stream.run(await broker.records(4))
    done = (await c.get(f"/v1/forget/{r.json()['request_id']}", headers=A)).json()
    assert done["status"] == "done" and done["removed"]["episode"] == 6
    left = [k async for k in graph.redis.scan_iter(match=f"{graph.keys.prefix}:*{{acme}}*")]
    assert all(b":forget:" in k or k.endswith(b":audit") for k in left), left
    r = await c.post("/v1/search", headers=B, json={"query": "support group"})
    assert "support group" in texts(r.json())


async def test_broker_down_answers_503_and_leaves_nothing(settings, graph, index, embedder) -> None:
    dead = settings.model_copy(update={"kafka_bootstrap": "127.0.0.1:9"})
    producer = EventProducer(dead, timeout_s=1)
    c, _ = app_for(dead, graph, index, embedder, producer)
    async with c:
        r = await c.delete("/v1/subjects/u1", headers=A)
        assert r.status_code == 503 and r.headers["Retry-After"], r.text
    assert not await ForgetStore(graph.redis, graph.keys).hidden("acme")
    await producer.aclose()


async def test_redis_down_answers_503_and_publishes_nothing(world, settings: Settings) -> None:
    from gaama.store import connect

    c, _, broker, _ = world
    app = c._transport.app  # type: ignore[attr-defined]
    deps = app.state.deps
    dead = connect("redis://127.0.0.1:9/0", socket_connect_timeout=1)
    live = deps.forget.forgets
    deps.forget.forgets = ForgetStore(dead, live.keys)
    try:
        r = await c.delete("/v1/conversations/c1", headers=A)
        assert r.status_code == 503 and r.headers["Retry-After"], r.text
        assert "Redis" in r.json()["error"] or "redis" in r.json()["error"]
    finally:
        deps.forget.forgets = live
        await dead.aclose()
    assert await broker.records(0) == []  # nothing was published
    assert not await live.hidden("acme")


class PublishesOnly(EventProducer):
    """The real producer, whose sends fail once ``ok`` of them went through: a publication that
    fails part way, as when the broker goes away between two lanes."""

    def __init__(self, settings: Settings, ok: int) -> None:
        super().__init__(settings, timeout_s=10)
        self.ok = ok

    async def send(self, base_topic: str, key: bytes, event: Any, partition: int | None = None):
        if self.ok <= 0:
            raise BrokerUnavailable("the broker went away (test)")
        self.ok -= 1
        await super().send(base_topic, key, event, partition)


async def test_a_forget_answered_503_after_partial_publication_changes_nothing(
    world, settings: Settings, graph: GraphStore
) -> None:
    c, stream, broker, _ = world
    deps = c._transport.app.state.deps  # type: ignore[attr-defined]
    registry = CollectorRegistry()
    stream.forgetting.dropped = forget_dropped_metric("reflect", registry)
    partial = PublishesOnly(settings, ok=1)
    live, deps.forget.producer = deps.forget.producer, partial
    try:
        r = await c.delete("/v1/subjects/u1", headers=A)
        assert r.status_code == 503 and r.headers["Retry-After"], r.text
    finally:
        deps.forget.producer = live
        await partial.aclose()
    before = [x async for x in _export(c, "u1")]
    assert before and not await deps.forgets.hidden("acme")
    (published,) = await broker.records(1)  # lane p0 went out before the failure
    rid = json.loads(published.value)["request_id"]
    for _ in range(2):  # delivered, then redelivered
        await stream.run([published])
        assert not stream.failures
    assert [x async for x in _export(c, "u1")] == before  # nothing removed
    assert (await c.get(f"/v1/forget/{rid}", headers=A)).status_code == 404
    sample = registry.get_sample_value(
        "gaama_reflect_forget_events_dropped_total", {"reason": "abandoned"}
    )
    assert sample == 6  # ingest, extract and reflect, each delivery
    assert [e["event"] for e in (await c.get("/v1/audit", headers=A)).json()] == [
        "abandoned",
        "accepted",
    ]


async def test_a_pending_subject_forget_hides_derived_memory_from_every_read(
    world, graph: GraphStore
) -> None:
    """Facts and reflections derived only from the forgotten subject's turns are hidden by
    provenance (their own subject is who they are about, not the subject forgotten)."""
    c, *_ = world
    prefix = graph.keys.node("acme", "")
    every = [k.decode()[len(prefix) :] async for k in graph.redis.scan_iter(match=f"{prefix}*")]
    derived = [n for n in every if not n.startswith(("ep_", "co_"))]
    provenance = await graph.provenance("acme", derived)
    episodes = [n for n in every if n.startswith("ep_")]
    subjects = {n: r[0] for n, r in (await graph.get_fields("acme", episodes, ["subject"])).items()}
    only_u1 = {
        n
        for n, turns in provenance.items()
        if turns and all(subjects[e] == b"u1" for e, _ in turns)
    }
    assert only_u1 and any(n.startswith("fa_") for n in only_u1)

    assert (await c.delete("/v1/subjects/u1", headers=A)).status_code == 202
    listed = (await c.get("/v1/memories", headers=A, params={"limit": 200})).json()["items"]
    assert listed and not only_u1 & {i["id"] for i in listed}
    assert {i["conversation"] for i in listed if i["kind"] != "concept"} == {"c2"}
    u1 = only_u1 | {e for e, subject in subjects.items() if subject == b"u1"}
    concepts = [i["id"] for i in listed if i["kind"] == "concept"]
    for concept, nbs in (await graph.neighbours("acme", concepts)).items():
        assert {nb.node for nb in nbs} - u1, concept  # labels some turn of c2 too
    assert len(concepts) < len([n for n in every if n.startswith("co_")])
    for node in only_u1:
        assert (await c.get(f"/v1/nodes/{node}", headers=A)).status_code == 404
    r = await c.post("/v1/search", headers=A, json={"query": "support group adoption"})
    assert not only_u1 & {i["id"] for i in r.json()["memory"] + r.json()["ranked"]}
    assert [x async for x in _export(c, "u1")] == []
