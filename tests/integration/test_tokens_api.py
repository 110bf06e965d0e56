"""End-user tokens over HTTP against the real Redis and broker: the query service in-process
(search, answer, list, export, node reads, forgetting) and the ingest service's POST /v1/turns.
A token reads and writes its own subject's memory; forged, expired or other tenants' tokens are
401; another subject or conversation (body or query string) or a missing permission is 403, with
nothing read, hidden, published or written."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gaama import tokens
from gaama.config import Settings, SigningKeyEntry
from gaama.embed import MiniLMEmbedder
from gaama.events import TOPIC_TURNS, topic_name
from gaama.metrics import forget_metrics, query_metrics
from gaama.retrieval.search import Retriever
from gaama.store.forget import ForgetStore
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from gaama.tokens import SigningKey
from services.ingest.app import create_http_app as create_ingest_app
from services.ingest.handlers import IngestDeps
from services.query.app import create_app
from services.query.handlers import QueryDeps
from services.query.memories import ForgetDeps
from services.runtime.producer import EventProducer
from tests.integration.test_query_api import KEY_A, FakeAnswerer, with_keys
from tests.integration.test_search import Built, build_memory
from tests.support.services import read_topic

pytestmark = pytest.mark.requires_stack

SECRET_A, SECRET_B = tokens.new_secret(), tokens.new_secret()
SIGNING = [
    SigningKeyEntry(kid="a1", tenant="tenant-a", secret=SECRET_A),
    SigningKeyEntry(kid="b1", tenant="tenant-b", secret=SECRET_B),
]
KA = SigningKey.from_text("a1", "tenant-a", SECRET_A)
KB = SigningKey.from_text("b1", "tenant-b", SECRET_B)
ADMIN = "the-admin-key"
KEYED = {"Authorization": f"Bearer {KEY_A}"}
ME = "Caroline"


def bearer(
    subject: str = ME,
    perms: tuple[str, ...] = ("read",),
    *,
    conversation: str | None = None,
    key: SigningKey = KA,
    ttl: int = 600,
    now: float | None = None,
) -> dict[str, str]:
    t = tokens.mint(
        key, subject=subject, conversation=conversation, permissions=perms, ttl_s=ttl, now=now
    )
    return {"Authorization": f"Bearer {t}"}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _signed(header: dict[str, Any], payload: dict[str, Any], secret: bytes) -> dict[str, str]:
    import hmac

    head = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())
    sig = _b64(hmac.new(secret, head.encode(), hashlib.sha256).digest())
    return {"Authorization": f"Bearer {head}.{sig}"}


@dataclass
class World:
    c: httpx.AsyncClient
    graph: GraphStore
    forgets: ForgetStore
    a: Built
    b: Built
    answerer: FakeAnswerer
    settings: Settings


@pytest.fixture
async def world(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    topics: list[str],
) -> AsyncIterator[World]:
    s = with_keys(
        settings,
        signing_keys=SIGNING,
        admin_keys=[hashlib.sha256(ADMIN.encode()).hexdigest()],
        auth_fail_limit=8,
        llm_base_url="http://unused.invalid",
        llm_model="fake",
    )
    a = await build_memory(graph, embedder, "tenant-a")
    b = await build_memory(graph, embedder, "tenant-b")
    registry = CollectorRegistry()
    metrics = query_metrics(registry)
    producer = EventProducer(s, timeout_s=10)
    forgets = ForgetStore(graph.redis, graph.keys)
    answerer = FakeAnswerer()
    deps = QueryDeps(
        settings=s,
        graph=graph,
        index=index,
        retriever=Retriever(graph, index, embedder, s, metrics=metrics),
        metrics=metrics,
        answerer_factory=lambda: answerer,
        forgets=forgets,
        forget=ForgetDeps(forgets, producer, forget_metrics("query", registry)),
    )
    transport = httpx.ASGITransport(app=create_app(deps, registry))
    async with httpx.AsyncClient(transport=transport, base_url="http://q") as c:
        yield World(c, graph, forgets, a, b, answerer, s)
    await producer.aclose()


async def subjects(w: World, tenant: str, node_ids: list[str]) -> set[str]:
    rows = await w.graph.get_fields(tenant, node_ids, ["subject"])
    assert set(rows) == set(node_ids)
    return {(r[0] or b"").decode() for r in rows.values()}


def ranked_ids(r: httpx.Response) -> list[str]:
    assert r.status_code == 200, r.text
    body = r.json()
    return [i["id"] for i in body["ranked"] + body["memory"]]


async def test_a_token_reads_its_own_subject_and_nothing_else(world: World) -> None:
    w = world
    body = {"query": "pottery bowls", "k": 50}
    everyone = ranked_ids(await w.c.post("/v1/search", json=body, headers=KEYED))
    assert await subjects(w, "tenant-a", everyone) > {ME}  # the tenant key sees other subjects

    for mode in ("gaama", "semantic", "ppr"):
        mine = ranked_ids(
            await w.c.post("/v1/search", json={**body, "mode": mode}, headers=bearer())
        )
        assert mine and await subjects(w, "tenant-a", mine) == {ME}, mode
    assert w.a.facts[0] in mine  # Caroline's own pottery fact

    r = await w.c.post("/v1/answer", json={"question": "What pottery?"}, headers=bearer())
    assert r.status_code == 200, r.text
    answered = [i["id"] for i in r.json()["memory"]]
    assert answered and await subjects(w, "tenant-a", answered) == {ME}

    r = await w.c.get("/v1/memories", params={"limit": 200}, headers=bearer())
    assert r.status_code == 200, r.text
    listed = r.json()["items"]
    assert listed and {i["subject"] for i in listed} == {ME}
    r = await w.c.get("/v1/memories", params={"limit": 200}, headers=KEYED)
    assert {i["subject"] for i in r.json()["items"]} > {ME}

    r = await w.c.get("/v1/export", headers=bearer())
    assert r.status_code == 200, r.text
    lines = [json.loads(x) for x in r.text.splitlines()]
    episodes = [x for x in lines if x.get("kind") == "episode"]
    assert episodes and {x["subject"] for x in episodes} == {ME}

    mine_ep = w.a.episodes[("conv1", "D1:1")]
    r = await w.c.get(f"/v1/nodes/{mine_ep}", headers=bearer())
    assert r.status_code == 200, r.text
    near = [n["id"] for n in r.json()["neighbours"]]
    assert near and await subjects(w, "tenant-a", near) == {ME}
    assert r.json()["neighbours_total"] == len(near)
    r = await w.c.get(f"/v1/nodes/{mine_ep}", headers=KEYED)
    assert r.json()["neighbours_total"] > len(near)  # the concept is hidden from the token
    assert (await w.c.get(f"/v1/nodes/{w.a.facts[0]}", headers=bearer())).status_code == 200
    for other in (
        w.a.episodes[("conv2", "D1:1")],  # Jon's turn
        w.a.facts[3],  # a fact about Jon
        w.a.concepts["pottery_hobby"],
        w.b.episodes[("conv1", "D1:1")],  # the same turn in tenant b
    ):
        r = await w.c.get(f"/v1/nodes/{other}", headers=bearer())
        assert r.status_code == 404, (other, r.text)


async def test_widening_through_the_body_or_query_string_is_403(world: World) -> None:
    w = world
    q = {"query": "pottery", "k": 20}
    refused = [
        ("POST", "/v1/search", {**q, "scope": {"subject": "Jon"}}, None, bearer()),
        ("POST", "/v1/answer", {"question": "q", "scope": {"subject": "Jon"}}, None, bearer()),
        ("GET", "/v1/memories", None, {"subject": "Jon"}, bearer()),
        ("GET", "/v1/export", None, {"subject": "Jon"}, bearer()),
        ("GET", "/v1/memories", None, [("subject", ME), ("subject", "Jon")], bearer()),
    ]
    bound = bearer(conversation="conv1")
    refused += [
        ("POST", "/v1/search", {**q, "scope": {"conversation": "conv2"}}, None, bound),
        ("GET", "/v1/memories", None, {"conversation": "conv2"}, bound),
        ("GET", "/v1/memories", None, {"subject": "Melanie"}, bound),
    ]
    for method, path, body, params, headers in refused:
        r = await w.c.request(method, path, json=body, params=params, headers=headers)
        assert r.status_code == 403, (path, body, params, r.text)
        assert "bound to another" in r.json()["error"]
    assert w.answerer.calls == []  # nothing was read for the refused answer

    # Narrowing is fine: one conversation of the token's subject.
    r = await w.c.post(
        "/v1/search",
        json={**q, "scope": {"subject": ME, "conversation": "conv1"}},
        headers=bearer(),
    )
    assert await subjects(w, "tenant-a", ranked_ids(r)) == {ME}
    # A token bound to conv1 sees Caroline's conv1 memory only.
    r = await w.c.get("/v1/memories", params={"limit": 200}, headers=bound)
    items = r.json()["items"]
    assert items and {(i["subject"], i["conversation"]) for i in items} == {(ME, "conv1")}


async def test_forged_expired_and_other_tenants_tokens_are_401(world: World) -> None:
    w = world
    q = {"query": "pottery", "k": 20}
    good = bearer()["Authorization"].split()[1]
    head, _, sig = good.split(".")
    now = int(time.time())
    claims = {
        "aud": "gaama",
        "tenant": "tenant-a",
        "sub": "Jon",
        "perm": ["read"],
        "iat": now,
        "exp": now + 600,
    }
    wider = _b64(json.dumps(claims).encode())
    cases = {
        "forged payload": {"Authorization": f"Bearer {head}.{wider}.{sig}"},
        "another secret": _signed({"alg": "HS256", "kid": "a1"}, claims, KB.secret),
        "other tenant's kid": _signed({"alg": "HS256", "kid": "b1"}, claims, KB.secret),
        "unknown kid": _signed({"alg": "HS256", "kid": "zz"}, claims, KA.secret),
        "alg none": {
            "Authorization": "Bearer " + _b64(b'{"alg":"none","kid":"a1"}') + "." + wider + "."
        },
        "expired": bearer(ttl=60, now=now - 3600),
    }
    for name, headers in cases.items():
        r = await w.c.post("/v1/search", json=q, headers=headers)
        assert r.status_code == 401, (name, r.text)
        assert r.json()["error"].startswith("token refused"), name
    assert "expired" in r.json()["error"]

    # Tenant b's token reads tenant b's memory only, even for the same subject name.
    ids_b = ranked_ids(await w.c.post("/v1/search", json=q, headers=bearer(key=KB)))
    own_b = set(w.b.episodes.values()) | set(w.b.facts) | {w.b.reflection}
    assert ids_b and set(ids_b) <= own_b


async def test_failed_tokens_count_towards_the_throttle(world: World) -> None:
    w = world
    forged = _signed(
        {"alg": "HS256", "kid": "a1"},
        {"aud": "gaama", "tenant": "tenant-a", "sub": ME, "perm": ["read"], "iat": 1, "exp": 2},
        KB.secret,
    )
    for _ in range(8):  # GAAMA_AUTH_FAIL_LIMIT of the fixture
        assert (await w.c.get("/v1/memories", headers=forged)).status_code == 401
    assert (await w.c.get("/v1/memories", headers=forged)).status_code == 429
    assert (await w.c.get("/v1/memories", headers=bearer())).status_code == 200


async def test_permissions_and_forgetting_with_a_token(world: World) -> None:
    w = world
    writer = bearer(perms=("write",))
    for method, path in (
        ("GET", "/v1/memories"),
        ("GET", "/v1/export"),
        ("GET", f"/v1/nodes/{w.a.facts[0]}"),
    ):
        r = await w.c.request(method, path, headers=writer)
        assert r.status_code == 403 and "'read'" in r.json()["error"], (path, r.text)
    r = await w.c.post("/v1/search", json={"query": "q"}, headers=writer)
    assert r.status_code == 403

    forgetter = bearer(perms=("read", "forget"))
    refused = [
        ("DELETE", f"/v1/subjects/{ME}", bearer(perms=("read", "write"))),  # no forget
        ("DELETE", "/v1/subjects/Jon", forgetter),  # another subject
        ("DELETE", "/v1/conversations/conv1", forgetter),  # may hold others' turns
        ("DELETE", f"/v1/subjects/{ME}", bearer(perms=("forget",), conversation="conv1")),
        ("DELETE", "/v1/tenant", {**forgetter, "X-Admin-Key": ADMIN}),
        ("GET", "/v1/audit", forgetter),
        ("GET", "/v1/forget/" + "0" * 32, bearer(perms=("read",))),
    ]
    for method, path, headers in refused:
        r = await w.c.request(method, path, headers=headers)
        assert r.status_code == 403, (path, r.text)
    assert not await w.forgets.hidden("tenant-a")  # nothing was accepted
    topic = topic_name(TOPIC_TURNS, w.settings.topic_prefix)
    assert await read_topic(w.settings.kafka_bootstrap, topic, 1, timeout=2) == []

    r = await w.c.delete(f"/v1/subjects/{ME}", headers=forgetter)
    assert r.status_code == 202, r.text
    rid = r.json()["request_id"]
    assert (await w.c.get(f"/v1/forget/{rid}", headers=forgetter)).status_code == 200
    hidden = await w.forgets.hidden("tenant-a")
    assert hidden.covers("", ME) and not hidden.covers("", "Jon")
    published = await read_topic(w.settings.kafka_bootstrap, topic, 1, timeout=10)
    assert published and all(json.loads(v)["scope"] == "subject" for _, v in published)
    audit = (await w.c.get("/v1/audit", headers=KEYED)).json()
    assert audit[0]["requester"].startswith("token:a1:")


async def test_ingest_token_turns_carry_its_subject_and_cannot_widen(
    settings: Settings, graph: GraphStore, embedder: MiniLMEmbedder, topics: list[str]
) -> None:
    s = with_keys(settings, signing_keys=SIGNING)
    producer = EventProducer(s)

    async def ready() -> str | None:
        return None

    app = create_ingest_app(
        IngestDeps(settings=s, graph=graph, embedder=embedder), CollectorRegistry(), ready, producer
    )
    turn = {"conversation": "web", "speaker": "Caroline", "text": "hi", "timestamp": 1.7e9}
    writer, bound = bearer(perms=("write",)), bearer(perms=("write",), conversation="web")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ingest"
    ) as c:
        refused = [
            ({**turn, "turn_id": "r1", "subject": "Jon"}, writer),
            (
                {"turns": [{**turn, "turn_id": "r2"}, {**turn, "turn_id": "r3", "subject": "Jon"}]},
                writer,
            ),
            ({**turn, "turn_id": "r4"}, bearer(perms=("read",))),
            ({**turn, "turn_id": "r5", "conversation": "other"}, bound),
        ]
        for body, headers in refused:
            r = await c.post("/v1/turns", json=body, headers=headers)
            assert r.status_code == 403, (body, r.text)
        forged = _signed({"alg": "HS256", "kid": "a1"}, {"sub": ME}, KB.secret)
        assert (await c.post("/v1/turns", json=turn, headers=forged)).status_code == 401
        for body, headers in (
            ({**turn, "turn_id": "ok1"}, writer),
            ({**turn, "turn_id": "ok2", "subject": ME}, writer),
            ({**turn, "turn_id": "ok3"}, bound),
            ({**turn, "turn_id": "key", "subject": "Jon"}, KEYED),  # a tenant key keeps its rights
        ):
            r = await c.post("/v1/turns", json=body, headers=headers)
            assert r.status_code == 202, r.text
    await producer.aclose()
    topic = topic_name(TOPIC_TURNS, s.topic_prefix)
    records = await read_topic(s.kafka_bootstrap, topic, 5, timeout=5)
    got = {json.loads(v)["turn_id"]: json.loads(v) for _, v in records}
    assert set(got) == {"ok1", "ok2", "ok3", "key"}
    assert {got[t]["subject"] for t in ("ok1", "ok2", "ok3")} == {ME}
    assert got["key"]["subject"] == "Jon" and {g["tenant"] for g in got.values()} == {"tenant-a"}
