"""The lexical channel against the real Redis: query syntax escaped, rare names found that KNN
alone misses, tenants kept apart on the full-text path, the HTTP edge, and an index without the
full-text field refused at start and migrated, one with term offsets served and rebuilt without
them."""

from __future__ import annotations

import asyncio

import pytest

from gaama.config import Settings
from gaama.embed import MiniLMEmbedder
from gaama.errors import ConfigError
from gaama.ids import episode_id, fact_id
from gaama.model import Node, NodeKind
from gaama.retrieval.lexical import query_terms
from gaama.retrieval.search import Retriever
from gaama.store.forget import ForgetStore
from gaama.store.graph import GraphStore
from gaama.store.index_layout import LEXICAL_FIELD, has_index_options, index_schema
from gaama.store.migrate import migrate_index
from gaama.store.vectors import VectorIndex
from tests.integration.test_query_api import A, make_app, with_keys
from tests.integration.test_search import build_memory

pytestmark = pytest.mark.requires_stack

# Every character the Query Engine's syntax gives a meaning to, and then some.
SPECIALS = ",.<>{}[]\"':;!@#$%^&*()-+=~|/\\`?_"
# Many people's weekends: sentences closer to a question about weekends than the one fact that
# names the person asked about, so the name alone can find it.
PEOPLE = [
    "Anna", "Ben", "Carla", "Dev", "Ema", "Farid", "Gus", "Hana", "Ivo", "Jules", "Kira", "Leo",
    "Mona", "Nils", "Olga", "Pia", "Quinn", "Rosa", "Sami", "Tess",
]  # fmt: skip
PASTIMES = ["hiking in the hills", "baking bread", "at the beach", "playing chess", "with family"]


async def _facts(graph: GraphStore, embedder: MiniLMEmbedder, tenant: str, texts: list[str]):
    vectors = await embedder.embed(texts)
    nodes = [
        Node(
            id=fact_id(tenant, text),
            tenant=tenant,
            kind=NodeKind.FACT,
            text=text,
            time=1_683_500_000.0,
            conversation="c1",
            subject=text.split()[0],
            vector=vec.tolist(),
        )
        for text, vec in zip(texts, vectors, strict=True)
    ]
    await graph.write(tenant, nodes, [])
    return [n.id for n in nodes]


async def _indexed(index: VectorIndex, tenant: str, want: int) -> None:
    for _ in range(200):
        if sum((await index.count(tenant)).values()) >= want:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{tenant}: fewer than {want} nodes indexed")


def _weekends(rare: str) -> list[str]:
    texts = [f"{p} spends weekends {what}." for p in PEOPLE for what in PASTIMES]
    return [*texts, f"{rare} repairs vintage radios."]


def test_query_terms_drop_syntax_function_and_question_words() -> None:
    assert query_terms("When did Zoltan's band play in 2023?") == ["zoltan", "band", "play", "2023"]
    assert query_terms(SPECIALS * 3) == []
    assert query_terms("what-is @pottery|{class} ~kiln*") == ["pottery", "class", "kiln"]


async def test_rare_name_found_that_knn_alone_misses(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder, settings: Settings
) -> None:
    ids = await _facts(graph, embedder, "t1", _weekends("Zoltan"))
    await _indexed(index, "t1", len(ids))
    retriever = Retriever(graph, index, embedder, settings)
    query = "What does Zoltan like to do at the weekend?"
    small = {"pool_min": 10, "graph_pool_min": 10, "seeds": 10}
    knn_only = await retriever.search("t1", query, k=10, budget=200, params={**small, "w_lex": 0})
    assert ids[-1] not in [i.id for i in knn_only.ranked]
    for mode in ("gaama", "semantic"):
        res = await retriever.search("t1", query, mode=mode, k=10, budget=200, params=small)
        assert ids[-1] in [i.id for i in res.ranked], mode


async def test_every_special_character_is_escaped(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    ids = await _facts(graph, embedder, "t1", ["Zoltan plays the theremin at night."])
    await _indexed(index, "t1", 1)
    for c in SPECIALS:
        # Straight to the index, past query_terms: each character inside, around and alone.
        for term in (f"zol{c}tan", f"{c}theremin{c}", c, c * 3):
            await index.lexical("t1", [term, "theremin"], 5)
    hits = await index.lexical("t1", ["theremin", "@kind:{fact}", "-zoltan"], 5)
    assert [h.id for h in hits] == ids


async def test_tenants_are_kept_apart_on_the_lexical_path(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder, settings: Settings
) -> None:
    mine = await _facts(graph, embedder, "t1", ["Zoltan plays the theremin at night."])
    theirs = await _facts(graph, embedder, "T1", ["Zoltan plays the theremin at dawn."])
    other = await _facts(graph, embedder, "t2", ["Zoltan sells theremin strings."])
    for tenant in ("t1", "T1", "t2"):
        await _indexed(index, tenant, 1)
    for tenant, own in (("t1", mine), ("T1", theirs), ("t2", other)):
        hits = await index.lexical(tenant, ["zoltan", "theremin"], 10)
        assert [h.id for h in hits] == own
        retriever = Retriever(graph, index, embedder, settings)
        for mode in ("gaama", "semantic", "ppr"):
            res = await retriever.search(tenant, "Zoltan theremin", mode=mode)
            assert {i.id for i in res.ranked + res.memory} <= set(own), (tenant, mode)


async def test_lexical_scores_depend_on_the_tenants_own_data_only(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    """Another tenant's documents change neither which of this tenant's nodes match best nor
    by how much: no index-wide statistic (document frequency, mean length) enters a score."""
    mine = [
        "Zoltan plays the theremin at night.",
        "Zoltan repairs vintage radios on weekends.",
        "The theremin needs no touch to play.",
        "Mona bakes bread with Zoltan every Sunday morning before the market opens.",
    ]
    await _facts(graph, embedder, "t1", mine)
    await _indexed(index, "t1", len(mine))
    terms = ["zoltan", "theremin", "radios", "bread"]

    async def scores() -> list[tuple[str, float]]:
        return [(h.id, h.score) for h in await index.lexical("t1", terms, 10)]

    before = await scores()
    assert len(before) == len(mine)
    # Another tenant writes many long documents holding the same words, and more of one word
    # than of another: index-wide frequencies and the mean length both move.
    theirs = [
        f"Zoltan {'theremin ' * (i % 3)}and friends talk at length about radios number {i}, "
        "then about nothing in particular for a very long while, and then again about radios."
        for i in range(120)
    ]
    await _facts(graph, embedder, "t2", theirs)
    await _indexed(index, "t2", len(theirs))
    assert await scores() == before


async def test_a_query_of_only_special_characters_is_answered(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    await build_memory(graph, embedder, "tenant-a")
    await _indexed(index, "tenant-a", 18)
    client, _ = make_app(with_keys(settings), graph, index, embedder)
    async with client as c:
        for query in (SPECIALS, "@text:{*}|-(", "pottery | -kiln @kind:{fact} \\"):
            r = await c.post("/v1/search", headers=A, json={"query": query, "k": 5})
            assert r.status_code == 200, (query, r.text)
            assert r.json()["ranked"], query
        off = {"query": "pottery", "params": {"w_lex": 0}}
        assert (await c.post("/v1/search", headers=A, json=off)).status_code == 200


@pytest.mark.single_redis  # an index without the field was never written on a cluster
async def test_index_without_the_text_field_is_refused_then_migrated(
    graph: GraphStore, embedder: MiniLMEmbedder, settings: Settings
) -> None:
    redis, keys = graph.redis, graph.keys
    name = f"{settings.index_name}-notext"
    old = index_schema(name, keys, embedder.dim)
    old.remove_field(LEXICAL_FIELD)
    await redis.execute_command("FT.CREATE", name, *_schema_args(old))
    index = VectorIndex(redis, name, embedder.dim, keys)
    try:
        ids = await _facts(graph, embedder, "t1", _weekends("Zoltan"))
        await _indexed(index, "t1", len(ids))
        with pytest.raises(ConfigError, match="gaama migrate index"):
            await index.ensure()
        assert await index.lexical("t1", ["zoltan"], 5) == []  # no text field: no match
        lines: list[str] = []
        report = await migrate_index(redis, index, progress=lines.append)
        assert report.dropped_old_index
        assert report.indexed == len(ids) and lines
        await index.ensure()  # accepted now
        assert [h.id for h in await index.lexical("t1", ["zoltan"], 5)] == ids[-1:]
        again = await migrate_index(redis, index)
        assert not again.dropped_old_index
    finally:
        await index.drop()


@pytest.mark.single_redis  # the old FT.CREATE below is sent to one server
async def test_index_with_term_offsets_serves_then_is_rebuilt_without_them(
    graph: GraphStore, embedder: MiniLMEmbedder, settings: Settings
) -> None:
    """An index made before INDEX_OPTIONS (RedisVL's FT.CREATE: term offsets and field masks
    kept) answers the same as one without them, and the migration rebuilds it with them."""
    redis, keys = graph.redis, graph.keys
    name = f"{settings.index_name}-offsets"
    await redis.execute_command(
        "FT.CREATE", name, *_schema_args(index_schema(name, keys, embedder.dim))
    )
    index = VectorIndex(redis, name, embedder.dim, keys)
    try:
        ids = await _facts(graph, embedder, "t1", _weekends("Zoltan"))
        await _indexed(index, "t1", len(ids))
        assert not has_index_options(await redis.execute_command("FT.INFO", name))
        await index.ensure()  # served as it is
        terms = ["zoltan", "weekends", "chess", "radios"]
        before = [(h.id, h.score) for h in await index.lexical("t1", terms, 20)]
        assert [i for i, _ in before[:1]] == ids[-1:] and len(before) == 20
        report = await migrate_index(redis, index)
        assert report.dropped_old_index and report.indexed == len(ids)
        assert has_index_options(await redis.execute_command("FT.INFO", name))
        assert [(h.id, h.score) for h in await index.lexical("t1", terms, 20)] == before
        assert not (await migrate_index(redis, index)).dropped_old_index
    finally:
        await index.drop()


def _schema_args(schema) -> list[object]:
    """FT.CREATE arguments of a RedisVL schema (through RedisVL's own field conversion)."""
    args: list[object] = ["ON", "HASH", "PREFIX", 1, schema.index.prefix, "SCHEMA"]
    for f in schema.fields.values():
        args += list(f.as_redis_field().redis_args())
    return args


async def test_counts_are_read_again_only_when_the_tenants_nodes_change(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    """The scope's counts (store/fulltext.py, step 1) are kept per version of the tenant's
    documents: a second search reads none and scores the same; another tenant's write keeps
    them; a write of the tenant's nodes, an appended episode and a forget each make the next
    search read them again, and it scores as an index that kept nothing does."""
    ids = await _facts(graph, embedder, "t1", _weekends("Zoltan"))
    await _indexed(index, "t1", len(ids))
    counted: list[str] = []
    run = index._execute_all

    async def spy(tenant: str, tails: list[list[object]]) -> list[list[object]]:
        counted.extend(str(t[0]) for t in tails if "$weight" in str(t[0]))  # step 1's terms
        return await run(tenant, tails)

    index._execute_all = spy  # type: ignore[method-assign]
    terms = ["zoltan", "weekends", "chess", "radios"]

    async def search(idx: VectorIndex) -> list[tuple[str, float]]:
        return [(h.id, h.score) for h in await idx.lexical("t1", terms, 20)]

    async def fresh() -> list[tuple[str, float]]:
        return await search(VectorIndex(graph.redis, index.name, embedder.dim, graph.keys))

    first = await search(index)
    assert len(counted) == len(terms) and first == await fresh()
    counted.clear()
    assert await search(index) == first and counted == []
    await _facts(graph, embedder, "t2", ["Zoltan plays chess on weekends."])
    assert await search(index) == first and counted == []

    new = await _facts(graph, embedder, "t1", ["Zoltan plays chess on weekends."])
    await _indexed(index, "t1", len(ids) + 1)
    after_write = await search(index)
    assert len(counted) == len(terms) and after_write == await fresh() != first
    assert new[0] in {i for i, _ in after_write}

    [vec] = await embedder.embed(["Zoltan repairs radios for chess players."])
    episode = Node(
        id=episode_id("t1", "c9", "1"),
        tenant="t1",
        kind=NodeKind.EPISODE,
        text="Zoltan repairs radios for chess players.",
        time=1_683_600_000.0,
        conversation="c9",
        turn_id="1",
        vector=vec.tolist(),
    )
    assert await graph.append_episode(episode)
    await _indexed(index, "t1", len(ids) + 2)
    counted.clear()
    after_append = await search(index)
    assert counted and after_append == await fresh() != after_write
    assert episode.id in {i for i, _ in after_append}

    await ForgetStore(graph.redis, graph.keys).remove_episodes("t1", [episode.id])
    counted.clear()
    after_forget = await search(index)
    assert counted and after_forget == await fresh() == after_write


async def test_concurrent_first_searches_of_a_scope_share_its_counts(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    """Searches of one tenant running at once, before its counts are kept, each read them and
    score alike: the count of the scope one of them asked for must not be taken as filled in
    by another meanwhile (a burst of one tenant's searches used to fail with a ValueError: the
    fairness test's burst found it)."""
    import asyncio

    ids = await _facts(graph, embedder, "t1", _weekends("Zoltan"))
    await _indexed(index, "t1", len(ids))
    fresh = VectorIndex(graph.redis, index.name, embedder.dim, graph.keys)
    terms = ["zoltan", "weekends", "chess", "radios"]
    want = [(h.id, h.score) for h in await fresh.lexical("t1", terms, 20)]
    shared = VectorIndex(graph.redis, index.name, embedder.dim, graph.keys)
    run = shared._execute_all

    async def slow(tenant: str, tails: list[list[object]]) -> list[list[object]]:
        await asyncio.sleep(0.05)  # a busy Redis: the searches' round trips overlap
        return await run(tenant, tails)

    shared._execute_all = slow  # type: ignore[method-assign]
    subsets = [terms, terms[:2], terms[1:], terms, terms[2:], terms[:1]] * 3
    got = await asyncio.gather(*(shared.lexical("t1", t, 20) for t in subsets))
    for t, hits in zip(subsets, got, strict=True):
        alone = await VectorIndex(graph.redis, index.name, embedder.dim, graph.keys).lexical(
            "t1", t, 20
        )
        assert [(h.id, h.score) for h in hits] == [(h.id, h.score) for h in alone]
    assert [(h.id, h.score) for h in got[0]] == want
