"""``python -m benchmarks query``, ``ingest`` and ``embed`` at tiny sizes against the session
stack.

They run as the real command (a subprocess, as ``make bench-*`` runs them) and start the real
query/ingest service themselves; the assertions are on the JSON they write and the docs section.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.query import DOCS_BEGIN, DOCS_END, STAGES, write_section
from tests.conftest import StackInfo

pytestmark = pytest.mark.requires_stack
ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str, timeout: float = 240) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAAMA_")}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if os.environ.get("GAAMA_TEST_REDIS_CLUSTER"):  # the session's Redis is a cluster
        env["GAAMA_REDIS_CLUSTER"] = "true"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"benchmarks {' '.join(args)} failed:\n{done.stderr[-3000:]}"


def _positive(d: dict[str, Any], *names: str) -> None:
    for n in names:
        assert d[n] > 0, f"{n} = {d[n]!r}"


def test_bench_query_smoke(stack: StackInfo, tmp_path: Path) -> None:
    out, docs = tmp_path / "query.json", tmp_path / "performance.md"
    docs.write_text("# Benchmarks\n\n<!-- locomo:begin -->\nkeep me\n<!-- locomo:end -->\n")
    _bench(
        "query",
        "--sizes",
        "300",
        "--requests",
        "10",
        "--warmup",
        "2",
        "--redis-url",
        stack.redis_url,
        "--json",
        str(out),
        "--write-docs",
        "--docs",
        str(docs),
        "--no-progress",
        "--backends",
        "onnx,torch",
        timeout=360,
    )
    doc = json.loads(out.read_text())
    assert {(r["backend"], r["concurrency"], r["mode"]) for r in doc["runs"]} == {
        (b, c, m) for b in ("onnx", "torch") for c in (1, 16) for m in ("gaama", "semantic")
    }
    assert doc["backends"] == ["onnx", "torch"]
    for r in doc["runs"]:
        assert r["nodes"] == 300 and r["errors"] == 0
        _positive(r, "p50_ms", "p95_ms", "p99_ms", "qps")
        assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
        assert set(r["stage_p50_ms"]) == set(STAGES)
        assert r["stage_p50_ms"]["embed"] > 0 and r["stage_p50_ms"]["knn"] > 0
        assert r["requests"] == 12  # 10 asked for, in 4 interleaved rounds of 3
        assert (r["stage_p50_ms"]["expand"] > 0) == (r["mode"] == "gaama")
    assert doc["redis_bytes_per_node"]["300"] > 0 and doc["load_seconds"]["300"] > 0
    assert doc["machine"]["cpus"] >= 1 and doc["date"] and doc["command"]
    assert any("1M" in t["target"] and t["holds"] is None for t in doc["targets"])
    # issue 18's targets against torch, judged on the runs of this size
    assert any(t["target"].startswith("embed stage p50 ≤ ⅓ torch's (300") for t in doc["targets"])
    assert any(t["target"].startswith("QPS at c=16 ≥ 2 × torch's (300") for t in doc["targets"])
    text = docs.read_text()
    assert DOCS_BEGIN in text and DOCS_END in text and "keep me" in text
    assert "| onnx | 300 | 1 | gaama |" in text and "| torch | 300 | 1 | gaama |" in text


def test_bench_ingest_smoke(stack: StackInfo, tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    _bench(
        "ingest",
        "--turns",
        "50",
        "--tenants",
        "2",
        "--conversations",
        "2",
        "--redis-url",
        stack.redis_url,
        "--kafka-bootstrap",
        stack.kafka_bootstrap,
        "--json",
        str(out),
        "--no-progress",
        timeout=360,
    )
    doc = json.loads(out.read_text())
    # two runs per backend by default (onnx torch torch onnx), the figures their totals
    assert doc["turns"] == 100 and doc["conversations"] == 4 and doc["rounds"] == 2
    assert doc["backend"] == "onnx"  # the top-level figures are the default backend's
    assert set(doc["backends"]) == {"onnx", "torch"}  # both by default, in one run
    for b in doc["backends"].values():
        _positive(b, "turns_per_s", "embed_texts_per_s", "embed_only_texts_per_s")
        share = b["turns_per_s"] / b["embed_only_texts_per_s"]  # both rounded: within 0.02
        assert abs(b["share_of_embed_only"] - share) < 0.02
        assert len(b["rounds_turns_per_s"]) == 2
    assert doc["backends"]["onnx"]["turns_per_s"] == doc["turns_per_s"]
    _positive(doc, "seconds", "turns_per_s", "embedding_seconds", "batches", "batch_p50_ms")
    assert 0 < doc["embedding_share"] <= 1
    assert doc["embedded_texts"] == 100
    assert doc["chains_in_order"] is True


@pytest.mark.slow
def test_bench_forget_smoke(stack: StackInfo, tmp_path: Path) -> None:
    out = tmp_path / "forget.json"
    _bench(
        "forget",
        "--turns",
        "20",
        "--subject-conversations",
        "2",
        "--subject-turns",
        "6",
        "--redis-url",
        stack.redis_url,
        "--kafka-bootstrap",
        stack.kafka_bootstrap,
        "--json",
        str(out),
        timeout=400,
    )
    doc = json.loads(out.read_text())
    conv, subject = doc["conversation"], doc["subject"]
    assert conv["removed"]["episode"] == 20 and subject["removed"]["episode"] == 12
    assert conv["keys_after"] < conv["keys_before"] and subject["keys_after"] < 10
    _positive(conv, "done_s")


def test_bench_embed_smoke(tmp_path: Path) -> None:
    out, docs = tmp_path / "embed.json", tmp_path / "performance.md"
    docs.write_text("# Benchmarks\n")
    _bench(
        "embed",
        "--texts",
        "32",
        "--queries",
        "16",
        "--json",
        str(out),
        "--write-docs",
        "--docs",
        str(docs),
    )
    doc = json.loads(out.read_text())
    assert doc["default"] == "onnx"
    assert set(doc["backends"]) == {"onnx", "onnx-1lane", "onnx-2t", "onnx-int8", "torch"}
    for b in doc["backends"].values():
        _positive(b, "batch_texts_per_s", "query_p50_ms", "c16_coalesced_queries_per_s")
    assert "## Embedding backends" in docs.read_text()


def test_write_section_keeps_other_sections(tmp_path: Path) -> None:
    p = tmp_path / "b.md"
    write_section(p, DOCS_BEGIN, DOCS_END, "one")
    p.write_text(p.read_text() + "\n<!-- ingest:begin -->\nx\n<!-- ingest:end -->\n")
    write_section(p, DOCS_BEGIN, DOCS_END, "two")
    text = p.read_text()
    assert "two" in text and "one" not in text and "<!-- ingest:begin -->\nx" in text
