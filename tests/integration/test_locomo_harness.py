"""The LoCoMo harness end to end on a tiny synthetic conversation in LoCoMo format.

Covers: the CLI path against the real Redis (JSON, table, docs section, clean-up of the run's
keys); that the dataset's annotations (observation, session_summary, event_summary) are never
read — neither touched by the loader nor reaching the graph or the results; the LLM answer/judge
path against the fake OpenAI-compatible server; and the broker path (slow).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tqdm import tqdm

from benchmarks import locomo, locomo_report
from benchmarks.locomo_data import load_locomo, parse_samples, parse_session_time
from gaama.config import Settings
from gaama.errors import ValidationError
from gaama.extract.offline import OfflineExtractor
from gaama.llm.client import LLMClient
from gaama.llm.extractor import LLMExtractor
from gaama.store.chunks import ChunkStore
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.requires_stack

POISON = "ANNOTATIONPOISON"

SESSION_1 = [
    ("Caroline", "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "That's great! I painted a lake sunrise last year, painting relaxes me."),
    ("Caroline", "I'm thinking about adopting a child. The adoption agency interviews are soon."),
    ("Melanie", "My kids love camping. We went camping at the beach last week."),
    ("Caroline", "The support group helped me a lot with my transition."),
    ("Melanie", "Pottery is my favourite hobby; I did a pottery class on Saturday."),
]
SESSION_2 = [
    ("Melanie", "Look at the bowl I made in my pottery class!"),
    ("Caroline", "Wow, lovely. I started counseling courses to work in mental health."),
    ("Melanie", "Counseling suits you. We also went to a Matt Patterson concert in Boston."),
    ("Caroline", "I ran a charity race for mental health last Sunday."),
    ("Melanie", "The kids and I are planning another camping trip to the mountains."),
    ("Caroline", "My grandma's necklace from Sweden reminds me of home."),
]


def _session(n: int, turns: list[tuple[str, str]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, (speaker, text) in enumerate(turns, start=1):
        turn: dict[str, Any] = {"speaker": speaker, "dia_id": f"D{n}:{i}", "text": text}
        if (n, i) == (2, 1):
            turn["img_url"] = ["https://example.invalid/bowl.jpg"]
            turn["blip_caption"] = "a photo of a black and white bowl"
        out.append(turn)
    return out


def sample(poisoned: Any = None) -> dict[str, Any]:
    """One LoCoMo sample; ``poisoned`` (default: strings with the marker) fills the annotations."""
    ann = (
        poisoned
        if poisoned is not None
        else {
            "observation": {"session_1_observation": {"Caroline": [[f"{POISON} obs", "D1:1"]]}},
            "session_summary": {"session_1_summary": f"{POISON} summary"},
            "event_summary": {"events_session_1": {"Caroline": [f"{POISON} event"], "date": "x"}},
        }
    )
    return {
        "sample_id": "conv-t1",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": _session(1, SESSION_1),
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": _session(2, SESSION_2),
            "session_3_date_time": "",
            "session_3": [],
        },
        "qa": [
            {
                "question": "When did Caroline go to the LGBTQ support group?",
                "answer": "7 May 2023",
                "evidence": ["D1:1"],
                "category": 2,
            },
            {
                "question": "What does Melanie do to relax and what did she make in class?",
                "answer": "painting; a bowl",
                "evidence": ["D1:2; D2:1"],
                "category": 1,
            },
            {
                "question": "What is Caroline studying?",
                "answer": "counseling",
                "evidence": ["D2:2"],
                "category": 4,
            },
            {
                "question": "Would Caroline move back to Sweden?",
                "answer": "maybe",
                "evidence": ["D2:6"],
                "category": 3,
            },
            {
                "question": "Where did Melanie see a concert?",
                "answer": 2022,
                "evidence": ["D9:9"],
                "category": 4,
            },  # names no turn: skipped
            {
                "question": "What did Caroline paint?",
                "adversarial_answer": "a lake sunrise",
                "evidence": ["D1:2"],
                "category": 5,
            },  # left out, like the paper
        ],
        **ann,
    }


class Poison:
    """Raises on any use: a loader that touches an annotation fails loudly."""

    def _boom(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("an annotation field was read")

    __getitem__ = __iter__ = __len__ = __bool__ = __contains__ = __str__ = _boom
    __eq__ = __hash__ = __format__ = keys = items = values = get = _boom  # type: ignore[assignment]

    def __repr__(self) -> str:  # for pytest's own messages
        return "<Poison>"


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    p = tmp_path / "locomo_tiny.json"
    p.write_text(json.dumps([sample()]), encoding="utf-8")
    return p


def test_session_time_and_turn_events() -> None:
    [conv] = parse_samples([sample()])
    assert [s.number for s in conv.sessions] == [1, 2]  # the empty session 3 is dropped
    assert parse_session_time("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08T13:56:00+00:00"
    events = conv.turn_events("acme")
    assert [e.turn_id for e in events[:2]] == ["D1:1", "D1:2"]
    assert all(a.timestamp < b.timestamp for a, b in itertools.pairwise(events))
    assert [e.end_of_session for e in events].count(True) == 2
    assert events[5].end_of_session and events[11].end_of_session
    assert events[6].said().endswith("[shares a photo of a black and white bowl]")
    assert events[0].episode_text().startswith("[1:56 PM on 8 May, 2023] Caroline: ")
    assert [q.category for q in conv.questions] == [2, 1, 4, 3, 4, 5]


def test_loader_never_touches_annotations() -> None:
    poisoned = {"observation": Poison(), "session_summary": Poison(), "event_summary": Poison()}
    [conv] = parse_samples([sample(poisoned)])
    assert conv.n_turns == 12 and len(conv.questions) == 6


@pytest.fixture
def env_stack(monkeypatch: pytest.MonkeyPatch, stack: Any) -> Iterator[None]:
    monkeypatch.setenv("GAAMA_REDIS_URL", stack.redis_url)
    monkeypatch.setenv("GAAMA_KAFKA_BOOTSTRAP", stack.kafka_bootstrap)
    monkeypatch.setenv("GAAMA_REDIS_CLUSTER", "true" if stack.redis_cluster else "false")
    for var in ("GAAMA_LLM_BASE_URL", "GAAMA_LLM_MODEL", "GAAMA_LLM_CASSETTE_MODE"):
        monkeypatch.delenv(var, raising=False)
    yield


def test_cli_end_to_end(
    data_file: Path, tmp_path: Path, env_stack: None, stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import redis

    docs = tmp_path / "docs" / "performance.md"
    docs.parent.mkdir()
    docs.write_text("# Benchmarks\n\n<!-- query:begin -->\nother\n<!-- query:end -->\n")
    out_json = tmp_path / "out.json"
    rc = _cli(
        [
            "locomo",
            "--data",
            str(data_file),
            "--json",
            str(out_json),
            "--write-docs",
            "--docs",
            str(docs),
            "--budget",
            "60",
            "--ranks",
            str(tmp_path / "ranks.json"),
            "--no-progress",
        ]
    )
    assert rc == 0
    doc = json.loads(out_json.read_text())
    ranks = json.loads((tmp_path / "ranks.json").read_text())
    assert len(ranks) == 4 and all(set(doc["modes"]) <= set(row) for row in ranks)
    assert set(doc["modes"]) == {"flat", "semantic", "gaama", "entity-ppr"}
    assert doc["budget"] == 60 and doc["conversations"] == ["conv-t1"]
    assert doc["questions"] == 4 and doc["skipped_no_evidence"] == 1
    assert doc["extractor"] == "offline"
    g = doc["graph"]
    assert g["episodes"] == 12 and g["facts"] > 0 and g["concepts"] > 0
    assert g["edges"]["NEXT"] == 11 and g["edges"]["DERIVED_FROM"] > 0
    assert set(g["edges"]) == {
        "NEXT",
        "DERIVED_FROM",
        "DERIVED_FROM_FACT",
        "HAS_CONCEPT",
        "ABOUT_CONCEPT",
        "SUPERSEDES",
    }
    cd = doc["concept_duplicates"]
    assert cd["after_canonicalisation"] == g["concepts"]
    assert cd["removed"] == cd["raw_labels"] - cd["after_canonicalisation"]
    for mode, rows in doc["modes"].items():
        assert set(rows) == {"overall", "cat1", "cat2", "cat3", "cat4"}, mode
        assert rows["overall"]["n"] == 4 and rows["cat4"]["n"] == 1
        for r in rows.values():
            for key in ("R@5", "R@10", "R@20", "R@budget", "R@500t", "R@1000t"):
                assert 0.0 <= r[key] <= 1.0
            assert r["R@5"] <= r["R@10"] <= r["R@20"]
            assert r["words"] <= 60 and r["latency_ms"] > 0
            # WordPiece gives more tokens than words, never fewer, on this English text.
            assert r["words"] <= r["tokens"] <= 3 * r["words"]
        assert rows["overall"]["reward"] is None  # no LLM configured
    # 12 turns of at most ~15 words each: 20 ranked episodes hold every turn.
    assert doc["modes"]["flat"]["overall"]["R@20"] == 1.0
    # ... and 1000 tokens hold every turn too.
    assert doc["modes"]["flat"]["overall"]["R@1000t"] == 1.0
    assert doc["token_budgets"] == [500, 1000]
    table = capsys.readouterr().out
    assert "| **gaama** | all 1–4 |" in table and "R@60w" in table
    assert "R@500t" in table and "R@1000t" in table and "tokens" in table
    text = docs.read_text()
    assert "<!-- query:begin -->\nother\n<!-- query:end -->" in text
    assert text.count(locomo_report.DOCS_BEGIN) == 1 and "| **flat** |" in text
    assert "python -m benchmarks locomo --data" in text
    # Someone else's Redis: the run leaves none of its keys behind.
    r = (redis.RedisCluster if stack.redis_cluster else redis.Redis).from_url(stack.redis_url)
    assert not list(r.scan_iter(match="locomo-*", count=1000))  # every primary of a cluster
    r.close()
    # Running again replaces the section instead of adding one.
    assert (
        _cli(
            [
                "locomo",
                "--data",
                str(data_file),
                "--modes",
                "flat",
                "--write-docs",
                "--docs",
                str(docs),
                "--no-progress",
            ]
        )
        == 0
    )
    assert docs.read_text().count(locomo_report.DOCS_BEGIN) == 1


def _cli(argv: list[str]) -> int:
    from benchmarks.cli import main

    return main(argv)


async def _run_in(
    settings: Settings,
    graph: Any,
    index: Any,
    embedder: Any,
    path: Path,
    judge: Any = None,
    extractor: Any = None,
) -> dict[str, Any]:
    convs = load_locomo(path)
    stores = locomo.Stores(settings, graph, index, ChunkStore(graph.redis, graph.keys), embedder)
    opts = locomo.Options(data=path, budget=200, progress=False)
    rec = locomo.RecordingExtractor(extractor or OfflineExtractor())
    result = await locomo.run(opts, stores, convs, {"conv-t1": "acme"}, rec, judge)
    return locomo.report(opts, result)


async def test_no_annotation_reaches_graph_or_results(
    data_file: Path, settings: Settings, graph: Any, index: Any, embedder: Any
) -> None:
    doc = await _run_in(settings, graph, index, embedder, data_file)
    assert doc["graph"]["episodes"] == 12
    assert POISON not in json.dumps(doc)
    seen = 0
    async for key in graph.redis.scan_iter(match=f"{settings.key_prefix}:*", count=1000):
        seen += 1
        kind = await graph.redis.type(key)
        if kind == b"hash":
            values = (await graph.redis.hgetall(key)).values()
        elif kind == b"list":
            values = await graph.redis.lrange(key, 0, -1)
        elif kind == b"string":
            values = [await graph.redis.get(key)]
        elif kind == b"set":
            values = list(await graph.redis.smembers(key))
        else:
            values = [m for m, _ in await graph.redis.zrange(key, 0, -1, withscores=True)]
        assert not any(POISON.encode() in v for v in values), key
    assert seen > 12
    # the photo's caption did reach the graph, the way the core renders it
    ids = await graph.chain("acme", "conv-t1")
    texts = [n.text for n in (await graph.get_nodes("acme", ids)).values()]
    assert any("[shares a photo of a black and white bowl]" in t for t in texts)


async def test_variants_ask_semantic_and_gaama_again_on_the_same_graph(
    data_file: Path, settings: Settings, graph: Any, index: Any, embedder: Any
) -> None:
    convs = load_locomo(data_file)
    stores = locomo.Stores(settings, graph, index, ChunkStore(graph.redis, graph.keys), embedder)
    opts = locomo.Options(
        data=data_file,
        modes=("flat", "gaama"),
        budget=200,
        variants={"off": {"w_lex": 0, "w_time": 0}, "bad": {"no_such_setting": 1}},
        progress=False,
    )
    rec = locomo.RecordingExtractor(OfflineExtractor())
    with pytest.raises(ValidationError, match="no_such_setting"):
        await locomo.run(opts, stores, convs, {"conv-t1": "acme"}, rec, None)
    opts.variants.pop("bad")
    result = await locomo.run(opts, stores, convs, {"conv-t1": "t2"}, rec, None)
    doc = locomo.report(opts, result)
    # flat takes no retrieval settings: only the retriever's modes are asked again.
    assert list(doc["modes"]) == ["flat", "gaama", "gaama:off"]
    assert doc["variants"] == {"off": {"w_lex": 0, "w_time": 0}}
    assert doc["modes"]["gaama:off"]["overall"]["n"] == doc["modes"]["gaama"]["overall"]["n"] == 4
    # Each question's evidence ranks say what the tallies count: R@10 and R@budget from them.
    assert len(result.ranks) == 4
    for label, rows in doc["modes"].items():
        at10 = [
            sum(1 for r in q[label]["rank"].values() if r is not None and r <= 10)
            / len(q["evidence"])
            for q in result.ranks
        ]
        packed = [sum(q[label]["memory"].values()) / len(q["evidence"]) for q in result.ranks]
        assert rows["overall"]["R@10"] == pytest.approx(sum(at10) / 4), label
        assert rows["overall"]["R@budget"] == pytest.approx(sum(packed) / 4), label
    assert locomo._variant('x={"w_lex": 0}') == ("x", {"w_lex": 0})
    for bad in ("x", "x=1", "={}", 'x={"a":'):
        with pytest.raises(argparse.ArgumentTypeError):
            locomo._variant(bad)


async def test_llm_answer_and_judge_against_fake_server(
    data_file: Path, settings: Settings, graph: Any, index: Any, embedder: Any
) -> None:
    with FakeOpenAIServer() as server:
        s = settings.model_copy(update={"llm_base_url": server.base_url, "llm_model": "fake-model"})
        assert s.llm_enabled
        client = LLMClient(s)
        try:
            llm = LLMExtractor(client)
            doc = await _run_in(s, graph, index, embedder, data_file, judge=llm, extractor=llm)
        finally:
            await client.aclose()
        reqs = server.chat_requests()
    names = [
        r["response_format"]["json_schema"]["name"]
        for r in reqs
        if r.get("response_format", {}).get("type") == "json_schema"
    ]
    modes = len(locomo.MODES)
    assert names.count("gaama_answer") == 4 * modes
    assert names.count("gaama_judge_reward") == names.count("gaama_judge_binary") == 4 * modes
    assert names.count("gaama_extraction") >= 2  # one chunk per session at least
    assert doc["extractor"] == "fake-model"
    for rows in doc["modes"].values():
        r = rows["overall"]
        assert r["reward"] is not None and 0.0 <= r["reward"] <= 1.0
        assert r["J"] is not None and 0.0 <= r["J"] <= 1.0
    # the answer prompt carries the packed memory
    answer_prompts = [
        str(r["messages"][-1]["content"])
        for r in reqs
        if "gaama_answer" in json.dumps(r.get("response_format", {}))
    ]
    assert any("Caroline" in p for p in answer_prompts)
    assert "reward" in locomo.markdown_table(doc).splitlines()[0]


@pytest.mark.slow
async def test_via_kafka_through_the_services(
    data_file: Path, settings: Settings, graph: Any, index: Any, embedder: Any, topics: list[str]
) -> None:
    convs = load_locomo(data_file)
    stores = locomo.Stores(settings, graph, index, ChunkStore(graph.redis, graph.keys), embedder)
    procs = await locomo.start_services(settings)
    try:
        with tqdm(total=12, disable=True) as bar:
            name = await locomo.ingest_via_kafka(
                settings, graph, stores.chunks, convs, {"conv-t1": "acme"}, bar
            )
    finally:
        for p in procs:
            p.stop()
    assert name == "offline"
    assert len(await graph.chain("acme", "conv-t1")) == 12
    assert await stores.chunks.episodes("acme", "conv-t1") == []
    stats = await locomo.graph_stats(stores, ["acme"])
    assert stats["episodes"] == 12 and stats["facts"] > 0 and stats["edges"]["NEXT"] == 11
