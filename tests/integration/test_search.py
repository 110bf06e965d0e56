"""Retrieval against the real Redis: each mode, provenance, scope filters, tenant isolation."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gaama.config import Settings
from gaama.embed import MiniLMEmbedder
from gaama.errors import ValidationError
from gaama.ids import concept_id, episode_id, fact_id, reflection_id
from gaama.model import Edge, EdgeKind, Node, NodeKind
from gaama.retrieval.search import Retriever, resolve_params
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex

pytestmark = pytest.mark.requires_stack

DAY = 86400.0
T0 = 1_683_000_000.0  # a session in May 2023

TURNS = {
    "conv1": [
        ("D1:1", "Caroline", "I signed up for a pottery class last week, it is so relaxing."),
        ("D1:2", "Melanie", "That is lovely! What did you make?"),
        ("D1:3", "Caroline", "A small blue bowl for my mum, she loved it."),
        ("D1:4", "Melanie", "We went camping at the lake with the kids last weekend."),
        ("D1:5", "Caroline", "Camping sounds fun, did you see any wildlife?"),
        ("D1:6", "Melanie", "We saw a family of deer near our tent at dawn."),
    ],
    "conv2": [
        ("D1:1", "Jon", "I lost my job at the bank, so I am opening a dance studio."),
        ("D1:2", "Gina", "I started selling clothes from my online store."),
        ("D1:3", "Jon", "I took up pottery too, but my bowls keep cracking in the kiln."),
    ],
}
FACTS = [
    # text, conversation, subject, source turn ids, concepts
    (
        "Caroline attends a pottery class since early May 2023.",
        "conv1",
        "Caroline",
        ["D1:1"],
        ["pottery_hobby"],
    ),
    (
        "Caroline made a blue bowl for her mother in pottery class.",
        "conv1",
        "Caroline",
        ["D1:2", "D1:3"],
        ["pottery_hobby"],
    ),
    (
        "Melanie went camping at a lake with her children in late April 2023.",
        "conv1",
        "Melanie",
        ["D1:4", "D1:6"],
        ["camping_trip"],
    ),
    (
        "Jon is opening a dance studio after losing his bank job.",
        "conv2",
        "Jon",
        ["D1:1"],
        ["dance_studio"],
    ),
    ("Jon's pottery bowls crack in the kiln.", "conv2", "Jon", ["D1:3"], ["pottery_hobby"]),
]
REFLECTION = (
    "Caroline finds creative crafts like pottery relaxing and meaningful.",
    "conv1",
    "Caroline",
    [0, 1],
)
EPISODE_CONCEPTS = {
    ("conv1", "D1:1"): ["pottery_hobby"],
    ("conv1", "D1:3"): ["pottery_hobby"],
    ("conv1", "D1:4"): ["camping_trip"],
    ("conv1", "D1:6"): ["camping_trip"],
    ("conv2", "D1:3"): ["pottery_hobby"],
    ("conv2", "D1:1"): ["dance_studio"],
}


@dataclass
class Built:
    tenant: str
    episodes: dict[tuple[str, str], str] = field(default_factory=dict)  # (conv, turn) -> id
    facts: list[str] = field(default_factory=list)
    reflection: str = ""
    concepts: dict[str, str] = field(default_factory=dict)


async def build_memory(graph: GraphStore, embedder: MiniLMEmbedder, tenant: str) -> Built:
    """A small memory for ``tenant``: 9 episodes, 5 facts, 3 concepts, 1 reflection."""
    b = Built(tenant)
    for conv, turns in TURNS.items():
        texts = [f"[8 May 2023] {spk}: {txt}" for _, spk, txt in turns]
        vecs = await embedder.embed(texts)
        for n, ((turn, spk, _), text, vec) in enumerate(zip(turns, texts, vecs, strict=True)):
            eid = episode_id(tenant, conv, turn)
            b.episodes[(conv, turn)] = eid
            node = Node(
                id=eid,
                tenant=tenant,
                kind=NodeKind.EPISODE,
                text=text,
                time=T0 + (DAY if conv == "conv2" else 0.0),
                conversation=conv,
                subject=spk,
                turn_id=turn,
                speaker=spk,
                vector=vec.tolist(),
            )
            assert n >= 0 and await graph.append_episode(node)
    labels = sorted({c for f in FACTS for c in f[4]})
    label_vecs = await embedder.embed([lab.replace("_", " ") for lab in labels])
    nodes: list[Node] = []
    edges: list[Edge] = []
    for lab, vec in zip(labels, label_vecs, strict=True):
        b.concepts[lab] = concept_id(tenant, lab)
        nodes.append(
            Node(
                id=b.concepts[lab],
                tenant=tenant,
                kind=NodeKind.CONCEPT,
                text=lab,
                vector=vec.tolist(),
            )
        )
    for (conv, turn), labs in EPISODE_CONCEPTS.items():
        edges += [
            Edge(b.episodes[(conv, turn)], b.concepts[lab], EdgeKind.HAS_CONCEPT) for lab in labs
        ]
    fact_vecs = await embedder.embed([f[0] for f in FACTS])
    for (text, conv, subj, sources, labs), vec in zip(FACTS, fact_vecs, strict=True):
        fid = fact_id(tenant, text)
        b.facts.append(fid)
        srcs = [b.episodes[(conv, t)] for t in sources]
        nodes.append(
            Node(
                id=fid,
                tenant=tenant,
                kind=NodeKind.FACT,
                text=text,
                time=T0,
                conversation=conv,
                subject=subj,
                vector=vec.tolist(),
                extra={"sources": ",".join(srcs)},
            )
        )
        edges += [Edge(fid, s, EdgeKind.DERIVED_FROM, 0.9) for s in srcs]
        edges += [Edge(fid, b.concepts[lab], EdgeKind.ABOUT_CONCEPT) for lab in labs]
    text, conv, subj, idx = REFLECTION
    b.reflection = reflection_id(tenant, text)
    (rvec,) = await embedder.embed([text])
    nodes.append(
        Node(
            id=b.reflection,
            tenant=tenant,
            kind=NodeKind.REFLECTION,
            text=text,
            time=T0,
            conversation=conv,
            subject=subj,
            vector=rvec.tolist(),
        )
    )
    edges += [Edge(b.reflection, b.facts[i], EdgeKind.DERIVED_FROM_FACT) for i in idx]
    await graph.write(tenant, nodes, edges)
    return b


@pytest.fixture
async def retriever(
    graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder, settings: Settings
) -> Retriever:
    return Retriever(graph, index, embedder, settings)


async def test_gaama_mode_ranks_packs_and_explains(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    b = await build_memory(graph, embedder, "acme")
    res = await retriever.search("acme", "What did Caroline make in her pottery class?")
    assert res.mode == "gaama"
    # "made a blue bowl" answers it; "attends a pottery class" holds as many of its words in
    # fewer, so the lexical channel brings it level (without it the answer leads alone).
    assert b.facts[1] in [i.id for i in res.ranked[:2]]
    plain = await retriever.search(
        "acme", "What did Caroline make in her pottery class?", params={"w_lex": 0}
    )
    assert plain.ranked[0].id == b.facts[1]
    assert all(i.kind is not NodeKind.CONCEPT for i in res.ranked + res.memory)
    assert res.subgraph_nodes > 0 and res.ppr_iterations > 0
    assert set(res.timings_ms) == {"embed", "knn", "expand", "ppr", "pack"}
    assert all(v > 0 for v in res.timings_ms.values())
    assert 0 < res.words <= 1000
    # Scores combine both signals with the paper's weights, each normalised to [0, 1].
    assert max(i.sim for i in res.ranked) == pytest.approx(1.0)
    assert max(i.ppr for i in res.ranked) == pytest.approx(1.0)
    # The query names Caroline: her turns and what is about her gain the named-person prior.
    person = {b.episodes[(c, t)]: spk for c, turns in TURNS.items() for t, spk, _ in turns}
    person |= {fid: f[2] for fid, f in zip(b.facts, FACTS, strict=True)}
    person[b.reflection] = REFLECTION[2]
    assert {person[i.id] for i in res.ranked} > {"Caroline"}
    for i in res.ranked:
        prior = 0.1 if person[i.id] == "Caroline" else 0.0
        assert i.score == pytest.approx(0.1 * i.ppr + 1.0 * i.sim + prior)
    # Memory: facts, reflections, then episodes in conversation order.
    kinds = [i.kind for i in res.memory]
    assert kinds == sorted(kinds, key=[NodeKind.FACT, NodeKind.REFLECTION, NodeKind.EPISODE].index)
    eps = [i for i in res.memory if i.kind is NodeKind.EPISODE]
    assert [(e.time, e.conversation, e.seq) for e in eps] == sorted(
        (e.time, e.conversation, e.seq) for e in eps
    )
    assert "Facts:" in res.memory_text


async def test_provenance(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    b = await build_memory(graph, embedder, "acme")
    # Every item ranked (provenance is the point here, not which turns rank_distinct passes
    # over: whether the reflection carrying D1:1 ranks above its episode is a near tie).
    params = {"rank_distinct": False}
    res = await retriever.search(
        "acme", "Caroline pottery bowl relaxing crafts", k=50, params=params
    )
    by_id = {i.id: i for i in res.ranked}
    fact = by_id[b.facts[1]]
    assert [(p.episode_id, p.turn_id) for p in fact.provenance] == [
        (b.episodes[("conv1", "D1:2")], "D1:2"),
        (b.episodes[("conv1", "D1:3")], "D1:3"),
    ]
    ep = by_id[b.episodes[("conv1", "D1:1")]]
    assert [(p.episode_id, p.turn_id) for p in ep.provenance] == [(ep.id, "D1:1")]
    refl = by_id[b.reflection]
    assert {p.turn_id for p in refl.provenance} == {"D1:1", "D1:2", "D1:3"}
    assert {p.episode_id for p in refl.provenance} <= set(b.episodes.values())


async def test_semantic_mode_skips_the_graph(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    b = await build_memory(graph, embedder, "acme")
    res = await retriever.search("acme", "camping at the lake", mode="semantic")
    assert res.subgraph_nodes == 0 and res.ppr_iterations == 0
    assert res.timings_ms["expand"] == 0 and res.timings_ms["ppr"] == 0
    assert all(i.ppr == 0 and i.score == pytest.approx(i.sim) for i in res.ranked)
    assert res.ranked[0].id in {b.facts[2], b.episodes[("conv1", "D1:4")]}


async def test_ppr_mode_uses_graph_only(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    b = await build_memory(graph, embedder, "acme")
    # Every item ranked, even a fact whose turns its episodes above it already say.
    params = {"rank_distinct": False}
    res = await retriever.search("acme", "deer near the tent", mode="ppr", k=50, params=params)
    assert res.ppr_iterations > 0
    assert all(i.score == pytest.approx(res.params.w_ppr * i.ppr) for i in res.ranked)
    ranked = [i.score for i in res.ranked]
    assert ranked == sorted(ranked, reverse=True)
    # The graph reaches facts connected to the matching turn.
    assert b.facts[2] in {i.id for i in res.ranked if i.ppr > 0}


async def test_graph_lifts_a_connected_node(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    b = await build_memory(graph, embedder, "acme")
    q = "Who saw deer at dawn?"
    every = {"rank_distinct": False}  # scores of every item, whatever turns are above it
    sem = await retriever.search("acme", q, mode="semantic", k=50, params=every)
    gaama = await retriever.search("acme", q, k=50, params=every)
    s = {i.id: i.score for i in sem.ranked}
    g = {i.id: i for i in gaama.ranked}
    camping_fact = b.facts[2]  # DERIVED_FROM the deer turn
    assert g[camping_fact].ppr > 0
    assert g[camping_fact].score > s[camping_fact]


async def test_scope_filters_knn_and_expansion(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    b = await build_memory(graph, embedder, "acme")
    conv2 = {b.episodes[k] for k in b.episodes if k[0] == "conv2"} | {b.facts[3], b.facts[4]}
    # pottery_hobby links both conversations: expansion must not leak conv1 into a conv2 scope.
    res = await retriever.search("acme", "pottery bowls", conversation="conv2", k=100)
    assert res.ranked and {i.id for i in res.ranked + res.memory} <= conv2
    assert res.subgraph_nodes > 0
    res = await retriever.search("acme", "pottery", subject="Caroline", k=100)
    assert res.ranked
    assert all(
        i.id in {b.facts[0], b.facts[1], b.reflection}
        or i.id in {b.episodes[("conv1", t)] for t in ("D1:1", "D1:3", "D1:5")}
        for i in res.ranked
    )


async def test_tenants_never_see_each_other(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    a = await build_memory(graph, embedder, "tenant-a")
    b = await build_memory(graph, embedder, "tenant-b")
    a_ids = {*a.episodes.values(), *a.facts, a.reflection}
    b_ids = {*b.episodes.values(), *b.facts, b.reflection}
    assert not a_ids & b_ids
    for mode in ("gaama", "semantic", "ppr"):
        res = await retriever.search("tenant-a", "pottery", mode=mode, k=200)
        got = {i.id for i in res.ranked + res.memory}
        got |= {p.episode_id for i in res.ranked for p in i.provenance}
        assert got and got <= a_ids
    empty = await retriever.search("nobody", "pottery")
    assert empty.ranked == [] and empty.memory == [] and empty.words == 0


async def test_budget_and_caps(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    await build_memory(graph, embedder, "acme")
    res = await retriever.search("acme", "pottery camping dance", budget=40, k=5)
    assert res.words <= 40 and len(res.ranked) == 5
    res = await retriever.search("acme", "pottery", params={"cap_episodes": 0, "cap_facts": 1})
    assert [i.kind for i in res.memory].count(NodeKind.FACT) == 1
    assert NodeKind.EPISODE not in {i.kind for i in res.memory}


async def test_validation(retriever: Retriever) -> None:
    for kwargs in (
        {"k": 0},
        {"k": 201},
        {"budget": 5},
        {"mode": "flat"},
        {"params": {"alpha": 1.5}},
        {"params": {"tenant": "x"}},
    ):
        with pytest.raises(ValidationError):
            await retriever.search("acme", "q", **kwargs)
    with pytest.raises(ValidationError, match="query"):
        await retriever.search("acme", "   ")
    with pytest.raises(ValidationError, match="alpha"):
        resolve_params(retriever.settings.retrieval, {"alpha": 0.0})


async def test_fact_without_sources_field_uses_its_edges(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever
) -> None:
    b = await build_memory(graph, embedder, "acme")
    text = "Melanie's family saw deer at dawn while camping."
    (vec,) = await embedder.embed([text])
    fid = fact_id("acme", text)
    ep = b.episodes[("conv1", "D1:6")]
    node = Node(id=fid, tenant="acme", kind=NodeKind.FACT, text=text, time=T0,
                conversation="conv1", vector=vec.tolist())  # fmt: skip
    await graph.write("acme", [node], [Edge(fid, ep, EdgeKind.DERIVED_FROM)])
    res = await retriever.search("acme", "deer at dawn", k=50)
    item = next(i for i in res.ranked if i.id == fid)
    assert [(p.episode_id, p.turn_id) for p in item.provenance] == [(ep, "D1:6")]


async def test_a_bounded_walk_runs_in_the_request_thread_a_large_one_in_a_worker(
    graph: GraphStore, embedder: MiniLMEmbedder, retriever: Retriever, monkeypatch
) -> None:
    """PPR of a subgraph within ``ppr_inline_max`` runs in the event loop's thread (while Redis
    reads ahead); a larger walk runs in a worker thread. Either way the result is the same."""
    import threading

    from gaama.retrieval import search

    await build_memory(graph, embedder, "acme")
    threads: list[int] = []
    real = search.run_ppr

    def spy(*args: object) -> object:
        threads.append(threading.get_ident())
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(search, "run_ppr", spy)
    query = "What did Caroline make in her pottery class?"
    inline = await retriever.search("acme", query)
    offloaded = await retriever.search("acme", query, params={"ppr_inline_max": 0})
    assert threads[0] == threading.get_ident() and threads[1] != threading.get_ident()
    assert inline.subgraph_nodes == offloaded.subgraph_nodes > 0
    assert [(i.id, i.score) for i in inline.ranked] == [(i.id, i.score) for i in offloaded.ranked]
    assert [i.id for i in inline.memory] == [i.id for i in offloaded.memory]
