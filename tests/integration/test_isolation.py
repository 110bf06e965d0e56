"""Isolation that cannot be fooled, against the real Redis and Query Engine.

For every pair of distinct identifiers a caller can choose — case variants, Unicode look-alikes
and normalisation forms, the TAG separator and query syntax — nothing written under one is
returned by any search (every mode, every scope), node read or answer made under the other.
Properties run with hypothesis; the reproductions from the report are named tests; an index
built by the old layout is migrated and then passes the same checks.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gaama import ids
from gaama.config import Settings
from gaama.embed import MiniLMEmbedder
from gaama.errors import ConfigError
from gaama.ids import episode_id, fact_id
from gaama.model import Edge, EdgeKind, Node, NodeKind
from gaama.retrieval.search import MODES, Retriever
from gaama.store.codecs import TAG_FIELDS, node_mapping
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.migrate import migrate_index
from gaama.store.vectors import VectorIndex

pytestmark = pytest.mark.requires_stack

DIM = 384
QUERY = "pottery class on the weekend"


@dataclass(frozen=True)
class Owner:
    tenant: str
    conversation: str
    subject: str


class World:
    """What the test wrote: node id -> owner, so any result can be checked against its caller."""

    def __init__(self, vector: np.ndarray) -> None:
        self.owner: dict[str, Owner] = {}
        self.marker: dict[str, str] = {}  # node id -> a string only its text contains
        self.vector = vector
        self.turns = itertools.count()

    async def put(self, graph: GraphStore, o: Owner, *, mapping_hook=None) -> list[str]:
        """An episode and a fact derived from it under ``o``, both with the same vector as every
        other node here, so only the filters can keep them apart."""
        turn = f"turn{next(self.turns):06d}x"
        ep = Node(
            id=episode_id(o.tenant, o.conversation, turn),
            tenant=o.tenant,
            kind=NodeKind.EPISODE,
            text=f"[8 May 2023] Ann: pottery class {turn}",
            conversation=o.conversation,
            subject=o.subject,
            turn_id=turn,
            speaker="Ann",
            time=1_683_500_000.0,
            vector=self.vector.tolist(),
        )
        fact_text = f"Ann goes to pottery class ({turn})."
        fa = Node(
            id=fact_id(o.tenant, fact_text),
            tenant=o.tenant,
            kind=NodeKind.FACT,
            text=fact_text,
            conversation=o.conversation,
            subject=o.subject,
            time=1_683_500_000.0,
            vector=self.vector.tolist(),
        )
        if mapping_hook is None:
            await graph.write(o.tenant, [ep, fa], [Edge(fa.id, ep.id, EdgeKind.DERIVED_FROM, 1.0)])
        else:  # write the hashes as an older layout did
            for n in (ep, fa):
                await graph.redis.hset(
                    graph.keys.node(o.tenant, n.id), mapping=mapping_hook(node_mapping(n))
                )
        for n in (ep, fa):
            self.owner[n.id] = o
            self.marker[n.id] = turn
        return [ep.id, fa.id]


def _violations(world: World, asked: Owner, got: Iterable[str], scope: str) -> list[str]:
    bad = []
    for node in got:
        o = world.owner.get(node)
        if o is None:
            bad.append(f"{node}: not written by this test")
            continue
        wrong = o.tenant != asked.tenant
        wrong |= scope == "conversation" and o.conversation != asked.conversation
        wrong |= scope == "subject" and o.subject != asked.subject
        if wrong:
            bad.append(f"{node} of {o} returned to {asked} (scope {scope})")
    return bad


async def assert_isolated(
    world: World,
    graph: GraphStore,
    index: VectorIndex,
    retriever: Retriever | None,
    sides: list[Owner],
    query_vector: np.ndarray,
) -> None:
    """Every search, scope and node read of each side returns only that side's nodes."""
    problems: list[str] = []
    for me in sides:
        scopes = {"tenant": {}, "conversation": {"conversation": me.conversation}}
        if me.subject:
            scopes["subject"] = {"subject": me.subject}
        for scope, kw in scopes.items():
            hits = await index.knn(me.tenant, query_vector, 1000, **kw)
            problems += _violations(world, me, (h.id for h in hits), scope)
            if retriever is None:
                continue
            for mode in MODES:
                res = await retriever.search(me.tenant, QUERY, mode=mode, k=50, **kw)
                got = [i.id for i in res.ranked + res.memory]
                problems += _violations(world, me, got, f"{scope}/{mode}")
        others = [n for n, o in world.owner.items() if o.tenant != me.tenant]
        read = await graph.get_nodes(me.tenant, others)
        problems += [f"{n} of another tenant read as {me.tenant!r}" for n in read]
    assert not problems, "\n".join(problems[:20])


# --- identifiers a caller may choose ------------------------------------------------------------

LOOKALIKES = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "A": "Α", "B": "Β"}
SPECIAL = [",", "|", " ", "*", "-", "@", "{", "}", "\\", "é", "e\u0301", "ß", "ẞ", "ﬁ", "Ａ", ":"]


def _variants(a: str) -> list[str]:
    out = [
        a.swapcase(),
        a.upper(),
        a.lower(),
        a.casefold(),
        unicodedata.normalize("NFD", a),
        unicodedata.normalize("NFC", a),
        unicodedata.normalize("NFKC", a),
        a + ",x",
        a.split(",")[0],
        a + " ",
        a + "*",
        "".join(LOOKALIKES.get(ch, ch) for ch in a),
    ]
    return out


def _valid_ident(s: str, slash: bool = False) -> bool:
    try:
        (ids.check_subject if slash else ids.check_conversation)(s)
    except ValueError:
        return False
    return bool(s)


ident_text = st.lists(
    st.one_of(
        st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")),
        st.sampled_from(SPECIAL),
        st.sampled_from(list("aepcoABTfz1")),
    ),
    min_size=1,
    max_size=8,
).map("".join)


@st.composite
def ident_pairs(draw: st.DrawFn) -> tuple[str, str]:
    a = draw(ident_text.filter(_valid_ident))
    b = draw(st.one_of(st.sampled_from(_variants(a)), ident_text))
    b = b if _valid_ident(b) else a.swapcase()
    return a, b


tenant_text = st.from_regex(r"[A-Za-z0-9_.\-]{1,10}", fullmatch=True)


@st.composite
def tenant_pairs(draw: st.DrawFn) -> tuple[str, str]:
    a = draw(tenant_text)
    b = draw(st.one_of(st.sampled_from([a.swapcase(), a.upper(), a.lower(), a + "."]), tenant_text))
    return a, b


@pytest.fixture
async def world(embedder: MiniLMEmbedder) -> World:
    (vec,) = await embedder.embed([QUERY])
    return World(np.asarray(vec, dtype=np.float32))


@pytest.fixture
def retriever(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder, settings: Settings
) -> Retriever:
    return Retriever(graph, index, embedder, settings)


# --- properties ---------------------------------------------------------------------------------

_PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_PROPERTY
@given(tenants=tenant_pairs(), convs=ident_pairs(), subjects=ident_pairs())
async def test_distinct_ids_never_see_each_other(
    world: World,
    graph: GraphStore,
    index: VectorIndex,
    retriever: Retriever,
    tenants: tuple[str, str],
    convs: tuple[str, str],
    subjects: tuple[str, str],
) -> None:
    # Two nodes in one tenant differing by conversation only, by subject only, and a third
    # tenant: every pair of distinct strings drawn must stay apart.
    sides = [
        Owner(tenants[0], convs[0], subjects[0]),
        Owner(tenants[0], convs[1], subjects[0]),
        Owner(tenants[0], convs[0], subjects[1]),
        Owner(tenants[1], convs[0], subjects[0]),
    ]
    sides = list(dict.fromkeys(sides))
    for o in sides:
        await world.put(graph, o)
    await assert_isolated(world, graph, index, retriever, sides, world.vector)


@given(
    value=st.text(min_size=1, max_size=20).filter(
        lambda s: any(unicodedata.category(c) in ("Cc", "Cs") for c in s)
    )
)
def test_control_characters_are_refused_as_ids(value: str) -> None:
    for check in (ids.check_conversation, ids.check_subject):
        with pytest.raises(ValueError):
            check(value)


# --- the reproductions from the report ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        (Owner("T1", "c", ""), Owner("t1", "c", "")),  # tenants differing by case
        (Owner("t", "a", ""), Owner("t", "a,b", "")),  # the TAG separator
        (Owner("t", "FZ", ""), Owner("t", "fz", "")),  # conversations differing by case
        (Owner("t", "c", "FZ"), Owner("t", "c", "fz")),  # subjects differing by case
    ],
    ids=["tenant-T1-t1", "conversation-a-vs-a,b", "conversation-fz-FZ", "subject-fz-FZ"],
)
async def test_reported_leaks_are_closed(
    world: World,
    graph: GraphStore,
    index: VectorIndex,
    retriever: Retriever,
    mine: Owner,
    theirs: Owner,
) -> None:
    await world.put(graph, theirs)
    await world.put(graph, mine)
    await assert_isolated(world, graph, index, retriever, [mine, theirs], world.vector)


# --- migration from the old layout --------------------------------------------------------------

TRICKY = [
    Owner("t1", "a", "fz"),
    Owner("T1", "a", "fz"),
    Owner("t1", "a,b", "FZ"),
    Owner("t1", "A", "f z"),
    Owner("t1", "é", "u/1"),
    Owner("t1", "e\u0301", "u*1"),
    Owner("t1", "{x}", "@sub"),
]


def _old_schema(name: str, keys: Keys) -> list[object]:
    return [
        "FT.CREATE", name, "ON", "HASH", "PREFIX", 1, keys.node_prefix, "SCHEMA",
        "tenant", "TAG", "kind", "TAG", "conversation", "TAG", "subject", "TAG",
        "time", "NUMERIC",
        "embedding", "VECTOR", "HNSW", 6, "TYPE", "FLOAT32", "DIM", DIM,
        "DISTANCE_METRIC", "COSINE",
    ]  # fmt: skip


def _without_tags(mapping: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in mapping.items() if k not in TAG_FIELDS.values()}


async def _wait_indexed(index: VectorIndex, tenant: str, want: int) -> None:
    import asyncio

    for _ in range(100):
        if sum((await index.count(tenant)).values()) >= want:
            return
        await asyncio.sleep(0.05)


@pytest.mark.single_redis  # the old layout was never written on a cluster
async def test_old_layout_is_refused_then_migrated(
    world: World, graph: GraphStore, settings: Settings, embedder: MiniLMEmbedder
) -> None:
    redis, keys = graph.redis, graph.keys
    name = f"{settings.index_name}-old"
    await redis.execute_command(*_old_schema(name, keys))
    index = VectorIndex(redis, name, DIM, keys)
    try:
        for o in TRICKY:
            await world.put(graph, o, mapping_hook=_without_tags)
        # The old layout leaks exactly as reported: T1 counts t1's documents.
        import asyncio

        for _ in range(100):
            info = await redis.execute_command("FT.SEARCH", name, "@tenant:{T1}", "LIMIT", 0, 0)
            if info[0] >= 2 * len(TRICKY):
                break
            await asyncio.sleep(0.05)
        assert info[0] == 2 * len(TRICKY)

        with pytest.raises(ConfigError, match="gaama migrate index"):
            await index.ensure()
        lines: list[str] = []
        report = await migrate_index(redis, index, progress=lines.append)
        assert report.dropped_old_index and report.nodes_updated == 2 * len(TRICKY)
        assert report.indexed == 2 * len(TRICKY) and lines
        await index.ensure()  # accepted now
        again = await migrate_index(redis, index)
        assert not again.dropped_old_index and again.nodes_updated == 0

        retriever = Retriever(graph, index, embedder, settings)
        await assert_isolated(world, graph, index, retriever, TRICKY, world.vector)
        # New writes on the migrated index keep the property.
        fresh = [Owner("t1", "a b", "x"), Owner("T1", "a b", "X")]
        for o in fresh:
            await world.put(graph, o)
        await _wait_indexed(index, "t1", 2 * (len(TRICKY) - 1) + 2)
        await assert_isolated(world, graph, index, retriever, TRICKY + fresh, world.vector)
    finally:
        await index.drop()


async def test_migration_to_a_new_name_leaves_the_old_index_serving(
    world: World, graph: GraphStore, settings: Settings
) -> None:
    redis, keys = graph.redis, graph.keys
    old_name, new_name = f"{settings.index_name}-v1", f"{settings.index_name}-v2"
    await redis.execute_command(*_old_schema(old_name, keys))
    new = VectorIndex(redis, new_name, DIM, keys)
    try:
        for o in TRICKY[:3]:
            await world.put(graph, o, mapping_hook=_without_tags)
        report = await migrate_index(redis, new)
        assert not report.dropped_old_index and report.indexed == 6
        info = await redis.execute_command("FT.INFO", old_name)  # still there, still serving
        assert info
        await assert_isolated(world, graph, new, None, TRICKY[:3], world.vector)
        # An old writer adds a node meanwhile; running the migration again picks it up.
        await world.put(graph, Owner("t1", "late", ""), mapping_hook=_without_tags)
        assert (await migrate_index(redis, new)).nodes_updated == 2
        await assert_isolated(
            world, graph, new, None, [*TRICKY[:3], Owner("t1", "late", "")], world.vector
        )
    finally:
        await new.drop()
        await redis.execute_command("FT.DROPINDEX", old_name)


async def test_answers_see_only_their_own_scope(
    world: World,
    graph: GraphStore,
    index: VectorIndex,
    retriever: Retriever,
    settings: Settings,
) -> None:
    """/v1/answer through the real OpenAI client (fake server): the memory it sends the LLM and
    returns holds only the caller's scope, for the reported look-alike scopes."""
    import httpx
    from prometheus_client import CollectorRegistry

    from gaama.config import ApiKey, hash_api_key
    from gaama.metrics import query_metrics
    from services.query.app import create_app
    from services.query.handlers import QueryDeps
    from services.query.main import answerer_factory
    from tests.fakes.openai_server import FakeOpenAIServer, good

    mine, others = Owner("t", "FZ", "u1"), [Owner("t", "fz", "u1"), Owner("t", "FZ,x", "U1")]
    for o in [*others, mine]:
        await world.put(graph, o)
    with FakeOpenAIServer() as server:
        s = settings.model_copy(
            update={
                "api_keys": [ApiKey(key_sha256=hash_api_key("k"), tenant="t")],
                "llm_base_url": server.base_url,
                "llm_model": "fake-model",
            }
        )
        registry = CollectorRegistry()
        metrics = query_metrics(registry)
        owned: list[object] = []
        deps = QueryDeps(
            settings=s,
            graph=graph,
            index=index,
            retriever=retriever,
            metrics=metrics,
            answerer_factory=answerer_factory(s, registry, owned),
        )
        transport = httpx.ASGITransport(app=create_app(deps, registry))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://q") as c:
                for scope in ({"conversation": "FZ"}, {"subject": "u1", "conversation": "FZ"}):
                    server.script(good({"answer": "pottery"}))
                    r = await c.post(
                        "/v1/answer",
                        headers={"X-API-Key": "k"},
                        json={"question": QUERY, "scope": scope},
                    )
                    assert r.status_code == 200, r.text
                    got = [i["id"] for i in r.json()["memory"]]
                    assert got and not _violations(world, mine, got, "conversation")
                    sent = str(server.chat_requests()[-1])
                    assert any(world.marker[n] in sent for n in got)  # the memory reached it
                    for node, o in world.owner.items():
                        if o != mine:
                            assert world.marker[node] not in sent
        finally:
            for client in owned:
                await client.aclose()  # type: ignore[attr-defined]
