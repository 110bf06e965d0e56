"""Forgetting through the real handlers of every stage (component tier: in-process, real Redis,
no broker): zero residue, the surviving graph equal to a run that never saw the forgotten
turns, shared facts pruned not lost, turns after the request kept, the other tenant untouched,
and in-flight results of forgotten episodes never written."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from gaama import ids
from gaama.config import Settings
from gaama.embed import MiniLMEmbedder
from gaama.events import TOPIC_TURNS, ForgetRequested, TurnReceived, conversation_key
from gaama.metrics import forget_dropped_metric
from gaama.model import NodeKind
from gaama.retrieval.search import Retriever
from gaama.store.codecs import VECTOR_FIELD
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from tests.support.redis_state import tenant_keys
from tests.support.stream import Stream, record

pytestmark = pytest.mark.requires_stack

START = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
C1 = [
    ("Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "I painted a lake sunrise last year, painting relaxes me."),
    ("Caroline", "I'm thinking about adopting a child from the agency in Boston."),
]
C2 = [
    ("Melanie", "My kids love camping. We went camping at the beach last week."),
    ("Caroline", "I started learning the violin in March and practise every evening."),
    ("Melanie", "Pottery is my favourite hobby; I made a blue bowl in class."),
]


def turns(tenant: str, conv: str, lines, *, subject: str = "", first: int = 0, eos: bool = True):
    out = []
    for i, (speaker, text) in enumerate(lines):
        out.append(
            TurnReceived(
                tenant=tenant,
                conversation=conv,
                turn_id=f"D1:{first + i + 1}",
                speaker=speaker,
                text=text,
                timestamp=START + timedelta(minutes=first + i),
                subject=subject,
                end_of_session=eos and i == len(lines) - 1,
            )
        )
    return out


def as_records(events):
    return [record(TOPIC_TURNS, conversation_key(e.tenant, e.conversation), e) for e in events]


async def forget(stream: Stream, tenant: str, scope: str, scope_id: str) -> ForgetRequested:
    ev = ForgetRequested(
        request_id=uuid.uuid4().hex, tenant=tenant, scope=scope, scope_id=scope_id, partition=0
    )
    lanes = ["c"] if scope == "conversation" else ["p0"]
    await stream.forgets.accept(
        tenant, ev.request_id, scope, scope_id, lanes=lanes, requester="test", now=time.time()
    )
    return ev


async def dump(graph: GraphStore, tenant: str) -> dict[str, object]:
    """Every key of the tenant with its content, as text."""
    out: dict[str, object] = {}
    r = graph.redis
    for pattern in graph.keys.tenant_patterns(tenant):
        async for raw in r.scan_iter(match=pattern, count=500):
            key = raw.decode()
            kind = (await r.type(key)).decode()
            if kind == "hash":
                value: object = {
                    k.decode(errors="replace"): v for k, v in (await r.hgetall(key)).items()
                }
            elif kind == "zset":
                value = [m.decode() for m in await r.zrange(key, 0, -1)]
            elif kind == "list":
                value = [m.decode() for m in await r.lrange(key, 0, -1)]
            elif kind == "set":
                value = sorted(m.decode() for m in await r.smembers(key))
            else:
                value = await r.get(key)
            out[key] = value
    return out


def residue(snapshot: dict[str, object], needles: list[str], vectors: list[bytes]) -> list[str]:
    found = []
    for key, value in snapshot.items():
        text = key + " " + repr(value)
        found += [f"{n!r} in {key}" for n in needles if n in text]
        if isinstance(value, dict):
            found += [f"a forgotten vector in {key}" for v in vectors if v in value.values()]
    return found


async def graph_of(graph: GraphStore, index: VectorIndex, tenant: str):
    """Episodes and facts with their edges, by content (ids are content hashes already)."""
    prefix = graph.keys.node(tenant, "")
    nodes = {}
    async for raw in graph.redis.scan_iter(match=f"{prefix}*", count=500):
        node_id = raw.decode()[len(prefix) :]
        nodes[node_id] = (await graph.get_nodes(tenant, [node_id]))[node_id]
    adj = await graph.neighbours(tenant, list(nodes))
    edges = {(n, nb.node, nb.kind.value) for n in nodes for nb in adj.get(n, []) if nb.outgoing}
    return nodes, edges


@pytest.fixture
def stream(settings: Settings, graph: GraphStore, index: VectorIndex, embedder) -> Stream:
    return Stream(settings, graph, index, embedder)


@pytest.fixture
async def clean(settings: Settings, graph: GraphStore, embedder: MiniLMEmbedder):
    """A second world (own key prefix and index) for the run that never saw the turns."""
    keys = Keys(settings.key_prefix + "clean")
    s = settings.model_copy(update={"key_prefix": keys.prefix})
    index = VectorIndex(graph.redis, settings.index_name + "-clean", embedder.dim, keys)
    await index.ensure()
    other = GraphStore(graph.redis, keys)
    yield Stream(s, other, index, embedder), other, index
    await index.drop()


async def test_forgotten_conversation_leaves_nothing_and_the_rest_is_a_clean_run(
    stream: Stream, graph: GraphStore, index: VectorIndex, clean
) -> None:
    await stream.run(as_records(turns("acme", "c1", C1) + turns("acme", "c2", C2)))
    await stream.run(as_records(turns("other", "c1", C1)))  # another tenant, same content
    before_other = await dump(graph, "other")
    forgotten, _ = await graph_of(graph, index, "acme")
    eps = [n for n in forgotten.values() if n.kind is NodeKind.EPISODE and n.conversation == "c1"]
    vectors = [(await graph.redis.hget(graph.keys.node("acme", e.id), VECTOR_FIELD)) for e in eps]
    assert len(eps) == 3 and all(vectors)

    ev = await forget(stream, "acme", "conversation", "c1")
    assert (await stream.forgets.hidden("acme")).covers("c1", "")
    await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
    assert not stream.failures

    status = await stream.forgets.status("acme", ev.request_id)
    assert status is not None and status.status == "done"
    assert status.removed["episode"] == 3 and status.removed["fact"] >= 1
    assert not await stream.forgets.hidden("acme")
    needles = [e.id for e in eps] + [text for _, text in C1] + ["D1:1\x00"]
    assert residue(await dump(graph, "acme"), needles, vectors) == []
    assert await dump(graph, "other") == before_other  # the other tenant is untouched

    # The survivors are exactly what a run that never saw c1 produces.
    cs, cgraph, cindex = clean
    await cs.run(as_records(turns("acme", "c2", C2)))
    got_nodes, got_edges = await graph_of(graph, index, "acme")
    want_nodes, want_edges = await graph_of(cgraph, cindex, "acme")
    keep = (NodeKind.EPISODE, NodeKind.FACT)
    assert {i for i, n in got_nodes.items() if n.kind in keep} == {
        i for i, n in want_nodes.items() if n.kind in keep
    }
    core = {(a, b, k) for a, b, k in want_edges if k in ("NEXT", "DERIVED_FROM")}
    assert {(a, b, k) for a, b, k in got_edges if k in ("NEXT", "DERIVED_FROM")} == core
    for n in got_nodes.values():  # no concept without an edge, no reflection citing nothing
        if n.kind in (NodeKind.CONCEPT, NodeKind.REFLECTION):
            assert any(a == n.id or b == n.id for a, b, _ in got_edges), n


async def test_a_shared_fact_survives_with_pruned_provenance(
    stream: Stream, graph: GraphStore
) -> None:
    shared = ("Melanie", "Pottery is my favourite hobby; I made a blue bowl in class.")
    await stream.run(as_records(turns("acme", "c1", [*C1, shared]) + turns("acme", "c2", C2)))
    ev = await forget(stream, "acme", "conversation", "c1")
    await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
    nodes = await tenant_keys(graph, "acme", graph.keys.node("acme", "fa_*"))
    facts = [await graph.redis.hgetall(k) for k in nodes]
    bowl = [f for f in facts if b"blue bowl" in f[b"text"]]
    assert bowl, "the fact both conversations support must survive"
    eps = await graph.redis.zrange(graph.keys.chain("acme", "c2"), 0, -1)
    for f in bowl:
        sources = f[b"sources"].decode().split(",")
        assert sources and {s.encode() for s in sources} <= set(eps)


async def test_turns_after_the_request_are_kept(stream: Stream, graph: GraphStore) -> None:
    await stream.run(as_records(turns("acme", "c1", C1)))
    ev = await forget(stream, "acme", "conversation", "c1")
    later = turns("acme", "c1", C2, first=10)  # the conversation id is reused after the request
    await stream.run([record(TOPIC_TURNS, ev.key(), ev), *as_records(later)])
    assert not stream.failures
    chain = [m.decode() for m in await graph.redis.zrange(graph.keys.chain("acme", "c1"), 0, -1)]
    kept = await graph.get_nodes("acme", chain)
    assert sorted(n.turn_id for n in kept.values()) == [f"D1:{i}" for i in (11, 12, 13)]
    nxt = await graph.neighbours("acme", chain[:1])
    assert all(nb.node in chain for nb in nxt[chain[0]] if nb.kind.value == "NEXT")


async def test_forgetting_a_subject_spans_conversations(stream: Stream, graph: GraphStore) -> None:
    await stream.run(
        as_records(
            turns("acme", "c1", C1[:2], subject="u1", eos=False)
            + turns("acme", "c1", C1[2:], subject="u2", first=2)
            + turns("acme", "c2", C2, subject="u1")
        )
    )
    ev = await forget(stream, "acme", "subject", "u1")
    await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
    status = await stream.forgets.status("acme", ev.request_id)
    assert status is not None and status.status == "done" and status.removed["episode"] == 5
    snapshot = await dump(graph, "acme")
    gone = [t for _, t in C1[:2] + C2]
    assert residue(snapshot, gone, []) == []
    left = [m.decode() for m in await graph.redis.zrange(graph.keys.chain("acme", "c1"), 0, -1)]
    assert [n.turn_id for n in (await graph.get_nodes("acme", left)).values()] == ["D1:3"]


async def test_extraction_of_forgotten_episodes_is_dropped(
    stream: Stream, graph: GraphStore
) -> None:
    """A chunk whose episodes are removed while it is being extracted writes nothing from them
    (the write is conditional on its sources)."""
    await stream.run(as_records(turns("acme", "c1", C1, eos=False)))
    episodes = await stream.chunks.episodes("acme", "c1")
    real_extract = stream.extract.d.extractor.extract

    async def slow_extract(chunk, context):
        result = await real_extract(chunk, context)
        ev = await forget(stream, "acme", "conversation", "c1")  # lands mid-extraction
        await stream.forgets.cut("acme", ev.request_id, "c")
        doomed = await stream.forgets.doomed_episodes("acme", "conversation", "c1", {"c": 10**9})
        await stream.forgets.remove_episodes("acme", doomed)
        return result

    stream.extract.d.extractor.extract = slow_extract  # type: ignore[method-assign]
    assert await stream.extract.close("acme", "c1", "idle") is None
    assert episodes and not await tenant_keys(graph, "acme", graph.keys.node("acme", "fa_*"))
    assert not await graph.existing("acme", episodes)


def dropped(registry: CollectorRegistry, reason: str) -> float:
    value = registry.get_sample_value(
        "gaama_reflect_forget_events_dropped_total", {"reason": reason}
    )
    return value or 0.0


async def test_an_abandoned_forget_changes_nothing_on_any_lane(
    stream: Stream, graph: GraphStore
) -> None:
    """A request accepted on four lanes, then abandoned (its publication failed after lane p0
    was sent): lane p0 reaching every stage, twice, removes nothing, never re-creates the
    record and is counted as dropped."""
    registry = CollectorRegistry()
    stream.forgetting.dropped = forget_dropped_metric("reflect", registry)
    await stream.run(
        as_records(
            turns("acme", "c1", C1[:2], subject="u1", eos=False)
            + turns("acme", "c1", C1[2:], subject="u2", first=2)
            + turns("acme", "c2", C2, subject="u1")
        )
    )
    before = await dump(graph, "acme")
    ev = ForgetRequested(
        request_id=uuid.uuid4().hex, tenant="acme", scope="subject", scope_id="u1", partition=0
    )
    lanes = ["p0", "p1", "p2", "p3"]
    f = stream.forgets
    await f.accept("acme", ev.request_id, "subject", "u1", lanes=lanes, requester="t", now=1.0)
    await f.abandon("acme", ev.request_id, "subject", "u1")
    req = graph.keys.state("acme", "forget", ev.request_id)
    tombstone = await graph.redis.hgetall(req)
    for _ in range(2):  # a redelivery changes nothing either
        await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
        assert not stream.failures
        status = await f.status("acme", ev.request_id)
        assert status is not None and status.status == "abandoned"
        assert await graph.redis.hgetall(req) == tombstone  # no cut, no lane, no "done"
    after = await dump(graph, "acme")
    assert {k: v for k, v in after.items() if ":forget:" not in k and ":audit" not in k} == {
        k: v for k, v in before.items() if ":forget:" not in k and ":audit" not in k
    }
    assert not await f.hidden("acme")
    assert dropped(registry, "abandoned") == 6  # each delivery, at ingest, extract, reflect
    assert [e["event"] for e in await f.audit("acme")] == ["abandoned", "accepted"]

    # A request nobody accepted: dropped the same way, and no record appears.
    stray = ev.model_copy(update={"request_id": uuid.uuid4().hex})
    await stream.run([record(TOPIC_TURNS, stray.key(), stray)])
    assert not await graph.redis.exists(graph.keys.state("acme", "forget", stray.request_id))
    assert dropped(registry, "unknown") == 3
    assert len(await tenant_keys(graph, "acme", graph.keys.node("acme", "ep_*"))) == 6


async def test_a_surviving_fact_takes_the_scopes_and_time_of_its_remaining_sources(
    stream: Stream, graph: GraphStore, index: VectorIndex, embedder
) -> None:
    """A fact merged from two conversations, one forgotten: it reads the other conversation
    (field and index tag), is found by a list and a search scoped to it and not by either scoped
    to the forgotten one, and its time is its earliest remaining source's."""
    shared = ("Melanie", "Pottery is my favourite hobby; I made a blue bowl in class.")
    await stream.run(as_records(turns("acme", "c1", [*C1, shared]) + turns("acme", "c2", C2)))

    async def bowl() -> tuple[str, dict[bytes, bytes]]:
        keys = await tenant_keys(graph, "acme", graph.keys.node("acme", "fa_*"))
        facts = [(k.decode().rsplit(":", 1)[1], await graph.redis.hgetall(k)) for k in keys]
        (found,) = [(n, f) for n, f in facts if b"blue bowl" in f[b"text"]]
        return found

    fid, fact = await bowl()
    sources = fact[b"sources"].decode().split(",")
    convs = await graph.get_fields("acme", sources, ["conversation"])
    assert {v[0] for v in convs.values()} == {b"c1", b"c2"}  # merged across conversations
    assert fact[b"conversation"] == b"c1"  # the first chunk's

    ev = await forget(stream, "acme", "conversation", "c1")
    await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
    assert not stream.failures
    _, fact = await bowl()
    left = fact[b"sources"].decode().split(",")
    eps = await graph.get_nodes("acme", left)
    assert left and {e.conversation for e in eps.values()} == {"c2"}
    assert fact[b"conversation"] == b"c2"
    assert fact[b"conversation_tag"].decode() == ids.tag("c2")
    assert float(fact[b"time"]) == min(e.time for e in eps.values())

    def listed(conversation: str) -> list[str]:
        return [n for n, _, _ in rows[conversation]]

    rows = {
        c: await index.scan("acme", kinds=[NodeKind.FACT], conversation=c, limit=None)
        for c in ("c1", "c2")
    }
    assert fid in listed("c2") and fid not in listed("c1")
    retriever = Retriever(graph, index, embedder, stream.settings)
    for conv, found in (("c2", True), ("c1", False)):
        res = await retriever.search("acme", shared[1], k=20, conversation=conv)
        assert (fid in {i.id for i in res.ranked + res.memory}) is found, conv


async def test_a_turn_appended_during_the_tenant_sweep_is_kept(
    stream: Stream, graph: GraphStore
) -> None:
    """A whole-tenant forget finds the tenant empty; a turn sent after the request is appended
    right then, before the sweep: it is kept, with its chain."""
    await stream.run(as_records(turns("acme", "c1", C1)))
    ev = await forget(stream, "acme", "tenant", "")
    f = stream.forgets
    empty = f.has_episodes
    late = turns("acme", "c9", C2[:1], first=30, eos=False)

    async def then_a_turn(tenant: str) -> bool:
        found = await empty(tenant)
        if tenant == "acme" and not found:
            await stream.ingest(as_records(late))  # lands between the check and the sweep
        return found

    f.has_episodes = then_a_turn  # type: ignore[method-assign]
    await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
    assert not stream.failures
    status = await f.status("acme", ev.request_id)
    assert status is not None and status.status == "done" and status.removed["episode"] == 3
    chain = [m.decode() for m in await graph.redis.zrange(graph.keys.chain("acme", "c9"), 0, -1)]
    kept = await graph.get_nodes("acme", chain)
    assert [n.turn_id for n in kept.values()] == ["D1:31"] and C2[0][1] in kept[chain[0]].text
    assert residue(await dump(graph, "acme"), [t for _, t in C1], []) == []


async def test_a_surviving_fact_drops_a_forgotten_subject(
    stream: Stream, graph: GraphStore, index: VectorIndex
) -> None:
    """A fact whose subject is the forgotten subject's id, also derived from another subject's
    turn: it takes that subject (field and index tag), so a read scoped to the forgotten subject
    no longer finds it."""
    shared = ("Melanie", "Pottery is my favourite hobby; I made a blue bowl in class.")
    await stream.run(
        as_records(
            turns("acme", "c1", [*C1, shared], subject="Melanie")
            + turns("acme", "c2", C2, subject="u2")
        )
    )
    keys = await tenant_keys(graph, "acme", graph.keys.node("acme", "fa_*"))
    (key,) = [k for k in keys if b"blue bowl" in (await graph.redis.hget(k, "text") or b"")]
    fid = key.decode().rsplit(":", 1)[1]
    assert await graph.redis.hget(key, "subject") == b"Melanie"  # who it is about: the speaker
    ev = await forget(stream, "acme", "subject", "Melanie")
    await stream.run([record(TOPIC_TURNS, ev.key(), ev)])
    assert not stream.failures
    fact = await graph.redis.hgetall(key)
    assert fact[b"subject"] == b"u2" and fact[b"subject_tag"].decode() == ids.tag("u2")
    assert fact[b"conversation"] == b"c2"
    for subject, found in (("u2", True), ("Melanie", False)):
        rows = await index.scan("acme", kinds=[NodeKind.FACT], subject=subject, limit=None)
        assert (fid in {n for n, _, _ in rows}) is found, subject
