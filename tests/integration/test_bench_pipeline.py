"""The pipeline benchmark's freshness measurement on a constructed run whose answer is known.

Turns are "sent" at known moments of a hand-driven clock; their episodes and facts are written
to the real Redis (and so to the real vector index) at other known moments; the measurement
lists each conversation through the index, as the query API does, at each poll. The freshness
figures must be exactly the differences the script wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from benchmarks.pipeline import Freshness, cpu_seconds, store_sources
from gaama import ids
from gaama.model import Node, NodeKind
from gaama.store.bulk import BulkLoader
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex

pytestmark = pytest.mark.requires_stack

T = "acme"
ROOT = Path(__file__).resolve().parents[2]
WHEN = datetime(2024, 1, 1, tzinfo=UTC).timestamp()


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def _lister(index: VectorIndex):
    async def list_conversation(conv: str) -> list[tuple[str, str]]:
        rows = await index.scan(
            T, kinds=[NodeKind.EPISODE, NodeKind.FACT], conversation=conv, limit=None
        )
        return [(node_id, kind.value) for node_id, kind, _ in rows]

    return list_conversation


def _episode(conv: str, turn: str) -> Node:
    return Node(
        id=ids.episode_id(T, conv, turn),
        tenant=T,
        kind=NodeKind.EPISODE,
        text=f"{conv} {turn}",
        time=WHEN,
        conversation=conv,
        turn_id=turn,
    )


def _fact(text: str, conv: str, sources: list[Node]) -> Node:
    return Node(
        id=ids.fact_id(T, text),
        tenant=T,
        kind=NodeKind.FACT,
        text=text,
        time=WHEN,
        conversation=conv,
        extra={"sources": ",".join(s.id for s in sources)},
    )


async def _write(graph: GraphStore, *nodes: Node) -> None:
    vecs = np.ones((len(nodes), 384), dtype=np.float32) / np.sqrt(384)
    await BulkLoader(graph).write_batch(T, list(nodes), list(vecs))


async def test_freshness_is_the_time_from_send_to_listed(graph, index, settings):
    clock = Clock()
    fresh = Freshness(_lister(index), store_sources(graph, T), clock=clock)
    a1, a2, b1 = _episode("a", "D1:1"), _episode("a", "D1:2"), _episode("b", "D1:1")
    fresh.sent(a1.id, "a", at=0.0)
    fresh.sent(a2.id, "a", at=0.5)
    fresh.sent(b1.id, "b", at=1.0)

    clock.now = 2.0
    await _write(graph, a1)
    await fresh.poll()
    clock.now = 3.0
    await _write(graph, a2, b1, _fact("Ann likes tea.", "a", [a1]))
    await fresh.poll()
    clock.now = 7.0  # a fact citing a1 again (seen already) and b1 (first time)
    await _write(graph, _fact("Bob likes tea too.", "b", [a1, b1]))
    await fresh.poll()
    assert fresh.all_episodes_seen()

    # episodes: a1 2.0 - 0.0, a2 3.0 - 0.5, b1 3.0 - 1.0; facts: a1 3.0 - 0.0, b1 7.0 - 1.0;
    # a2 has none
    assert fresh.episode_seen == {a1.id: 2.0, a2.id: 3.0, b1.id: 3.0}
    assert fresh.fact_seen == {a1.id: 3.0, b1.id: 7.0}
    figures = fresh.figures()
    assert figures["episode_fresh_p50_s"] == 2.0
    assert figures["episode_fresh_p99_s"] == pytest.approx(2.49)  # between 2.0 and 2.5
    assert figures["fact_fresh_p50_s"] == 4.5
    assert figures["turns_with_facts"] == 2


async def test_settled_conversations_stop_being_listed(graph, index, settings):
    clock = Clock()
    listed: list[str] = []
    inner = _lister(index)

    async def counting(conv: str) -> list[tuple[str, str]]:
        listed.append(conv)
        return await inner(conv)

    fresh = Freshness(counting, store_sources(graph, T), clock=clock)
    a1, b1 = _episode("a", "D1:1"), _episode("b", "D1:1")
    fresh.sent(a1.id, "a", at=0.0)
    fresh.sent(b1.id, "b", at=0.0)
    await _write(graph, a1)
    # "b" is settled by the caller's account but its episode is not listed yet: kept
    await fresh.poll(settled=["a", "b"])
    assert fresh.waiting() == ["b"]
    await _write(graph, b1)
    await fresh.poll(settled=["b"])
    assert fresh.waiting() == []
    listed.clear()
    await fresh.poll()
    assert listed == []


def test_cpu_seconds_counts_this_process() -> None:
    import os

    before = cpu_seconds(os.getpid())
    x = 0
    while cpu_seconds(os.getpid()) - before < 0.05:  # burns CPU until the counter moves
        x += 1
    assert cpu_seconds(os.getpid()) > before


def test_bench_pipeline_saturate_smoke(stack, tmp_path: Path) -> None:
    """``python -m benchmarks pipeline --saturate`` at a tiny size, as ``make`` runs it: the
    report has every field per extract-replica count and phase, and the docs section its table
    between the markers (other sections kept)."""
    from benchmarks.saturate import DOCS_BEGIN, DOCS_END

    out, docs = tmp_path / "sat.json", tmp_path / "performance.md"
    docs.write_text("# Performance\n\n<!-- other:begin -->\nkeep me\n<!-- other:end -->\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAAMA_")}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if os.environ.get("GAAMA_TEST_REDIS_CLUSTER"):
        env["GAAMA_REDIS_CLUSTER"] = "true"
    args = ["pipeline", "--saturate", "--turns", "40", "--seconds", "2", "--replicas", "1,2"]
    args += ["--redis-url", stack.redis_url, "--kafka-bootstrap", stack.kafka_bootstrap]
    args += ["--json", str(out), "--write-docs", "--docs", str(docs)]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "saturation" in done.stderr  # progress lines go to stderr
    doc = json.loads(out.read_text())
    assert [c["extract_replicas"] for c in doc["configs"]] == [1, 2]
    for config in doc["configs"]:
        sat = config["saturation"]
        assert sat["turns"] == 40 and sat["produce_rate"] is None
        assert sat["turns_per_s"] > 0 and sat["turns_per_cpu_s"] > 0
        assert set(sat["cpu_s_per_1k"]) == {"ingest", "extract", "reflect"}
        assert all(v > 0 for v in sat["cpu_s_per_1k"].values())
        assert all(0 <= v <= 1 for v in sat["embedding_share"].values())
        assert isinstance(sat["redis_bytes_per_turn"], int)  # noise at this size: any sign
        for phase in ("50pct", "80pct"):
            row = config[phase]
            assert row["produce_rate"] == round(
                {"50pct": 0.5, "80pct": 0.8}[phase] * sat["turns_per_s"], 1
            )
            assert 0 < row["fact_fresh_p50_s"] <= row["fact_fresh_p99_s"]
            assert 0 < row["episode_fresh_p50_s"] <= row["fact_fresh_p99_s"]
    assert set(doc["targets"]) == {"turns_per_cpu_s", "fact_fresh_p99_s_at_80pct"}
    text = docs.read_text()
    assert "keep me" in text
    section = text.split(DOCS_BEGIN, 1)[1].split(DOCS_END, 1)[0]
    assert "## Pipeline at saturation" in section
    assert section.count("\n| 1 |") == 1 and section.count("\n| 2 |") == 1
