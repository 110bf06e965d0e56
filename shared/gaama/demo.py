"""``gaama demo``: the whole pipeline on the embedded stack, shown working.

Starts (or reuses) the embedded Redis + broker, runs the four services as child processes with a
demo tenant and a fresh API key, posts a sample conversation written for the project through
``POST /v1/turns``, waits until episodes, facts, concepts and reflections are stored, asks a few
questions through ``POST /v1/search`` and prints the memories with scores and provenance. It keeps
serving until Ctrl-C, then stops what it started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import time
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from gaama import devstack
from gaama.config import ApiKey, hash_api_key, load_settings
from gaama.errors import GaamaError
from gaama.launch import SERVICES, ServiceProcess
from gaama.store import connect

PORTS = {"ingest": 8081, "extract": 8082, "reflect": 8083, "query": 8084}
TENANT = "demo"


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the whole pipeline on the embedded stack with a demo")
    p.add_argument("--no-wait", action="store_true", help="exit after the demo instead of serving")
    p.add_argument("--dir", default=None, help="state directory (default .gaama)")
    p.set_defaults(func=run)


def _log(msg: str) -> None:
    print(f"\033[1m==>\033[0m {msg}", flush=True)


def _sample() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("gaama").joinpath("data/sample_conversation.json").read_text()
    )
    return data


def _turns(sample: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s_no, sess in enumerate(sample["sessions"], start=1):
        start = datetime.fromisoformat(sess["time"].replace("Z", "+00:00"))
        for t_no, (speaker, text) in enumerate(sess["turns"], start=1):
            out.append(
                {
                    "conversation": sample["conversation"],
                    "turn_id": f"S{s_no}:{t_no}",
                    "speaker": speaker,
                    "text": text,
                    "timestamp": (start + timedelta(minutes=t_no)).isoformat(),
                    "end_of_session": t_no == len(sess["turns"]),
                }
            )
    return out


async def _counts(redis_url: str) -> dict[str, int]:

    from gaama.config import load_settings
    from gaama.store.chunks import ChunkStore
    from gaama.store.graph import GraphStore
    from gaama.store.keys import Keys
    from gaama.store.vectors import VectorIndex

    s = load_settings(redis_url=redis_url)
    client = connect(redis_url)
    try:
        keys = Keys(s.key_prefix)
        counts = await VectorIndex(client, s.index_name, s.embed_dim, keys).count(TENANT)
        open_eps = await ChunkStore(client, keys).episodes(TENANT, _sample()["conversation"])
        counts["open_chunk_episodes"] = len(open_eps)
        counts["chain"] = len(
            await GraphStore(client, keys).chain(TENANT, _sample()["conversation"])
        )
        return counts
    finally:
        await client.aclose()


def _show(result: dict[str, Any], question: str) -> None:
    print(
        f"\n\033[1mQ: {question}\033[0m  ({result['words']} words, "
        f"{sum(result['stats']['timings_ms'].values()):.0f} ms)"
    )
    for item in result["ranked"][:6]:
        turns = ",".join(p["turn_id"] for p in item["provenance"]) or "-"
        print(
            f"  {item['score']:.3f} (sim {item['sim']:.2f}, ppr {item['ppr']:.2f}) "
            f"[{item['kind']:<10}] {item['text'][:110]}  ← turns {turns}"
        )


def run(args: argparse.Namespace) -> int:
    base = Path(args.dir).resolve() if args.dir else Path(".gaama").resolve()
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    _log("starting the embedded stack (Redis 8.2 + Query Engine, Tansu broker)")
    stack = devstack.up(base / "dev", devstack.DEFAULT_REDIS_PORT, devstack.DEFAULT_KAFKA_PORT, 4)
    for name, port in PORTS.items():
        if not devstack.port_free(port):
            raise GaamaError(
                f"port {port} for the {name} service is taken; stop what uses it "
                f"(an earlier `make run`?)"
            )
    key = "gk_" + secrets.token_urlsafe(24)
    settings = load_settings(
        redis_url=stack.redis_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        api_keys=[ApiKey(key_sha256=hash_api_key(key), tenant=TENANT)],
        chunk_idle_s=5,
    )
    # inherit: GAAMA_LLM_* set by the user reach the services (an LLM instead of offline)
    procs = [
        ServiceProcess(name, settings, logs, port=PORTS[name], inherit=True) for name in SERVICES
    ]
    try:
        for p in procs:
            p.spawn()
        for p in procs:
            p.wait_ready(180)
            _log(f"{p.name:8s} ready on {p.url}  (/metrics /healthz /readyz; log {p.log_path})")
        _log(f"demo tenant {TENANT!r}, API key (keep it; new each run):\n    {key}")
        from gaama.client import GaamaClient

        client = GaamaClient(
            f"http://127.0.0.1:{PORTS['query']}",
            api_key=key,
            ingest_url=f"http://127.0.0.1:{PORTS['ingest']}",
        )
        sample = _sample()
        turns = _turns(sample)
        ids = client.add_turns(turns)
        _log(
            f"posted {len(turns)} turns of {sample['conversation']!r} to POST /v1/turns "
            f"→ {len(ids)} episode ids"
        )
        deadline = time.monotonic() + 180
        counts: dict[str, int] = {}
        while time.monotonic() < deadline:
            counts = asyncio.run(_counts(stack.redis_url))
            if (
                counts["chain"] == len(turns)
                and counts["open_chunk_episodes"] == 0
                and counts["reflection"] > 0
            ):
                break
            time.sleep(1)
        _log(
            "stored for tenant demo: "
            + ", ".join(
                f"{counts.get(k, 0)} {k}s" for k in ("episode", "fact", "concept", "reflection")
            )
        )
        for question in sample["questions"]:
            _show(client.search(question, k=6), question)
        print()
        _log(
            "try it yourself:\n    curl -s localhost:8084/v1/search -H 'X-API-Key: "
            + key
            + "' -H 'content-type: application/json' -d '{\"query\": \"Who is Ana?\"}'"
        )
        if args.no_wait:
            return 0
        _log("serving; press Ctrl-C to stop")
        while all(p.alive() for p in procs):
            time.sleep(1)
        dead = [p.name for p in procs if not p.alive()]
        raise GaamaError(f"service(s) {', '.join(dead)} stopped; see {logs}")
    except KeyboardInterrupt:
        print()
        _log("stopping")
        return 0
    finally:
        for p in procs:
            p.stop()
        stack.stop()
