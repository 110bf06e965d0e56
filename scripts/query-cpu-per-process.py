"""CPU per search of each process on the query path, per mode and concurrency: the query
service, Redis and the load generator (this process), read from ``/proc`` around each run.

    PYTHONPATH=shared:. python scripts/query-cpu-per-process.py [nodes] [requests]

One synthetic tenant (``benchmarks.synthetic``, as ``python -m benchmarks query`` loads it) on a
Redis of its own, one query service process on the default (ONNX) embedder, the benchmark's own
HTTP load generator. For c = 1 and 16, gaama and semantic run in two rounds in the order A B B A;
each line is one run: p50, QPS, the CPU milliseconds per search of each process (user +
system), of the service's event-loop thread alone (``loop``, with the share of the run's wall
time it was busy), and the service's garbage collections in the run
(``gaama_query_gc_pause_seconds``: their count and milliseconds per search). At c=16 one
service process and Redis share the machine's cores, so the ratio of the modes' total CPU per
search bounds the ratio of their throughput; a loop busy near 100 % bounds it sooner (the loop
runs everything of a request but the embedding's onnxruntime threads).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import backends
from benchmarks.query import QUOTAS_OFF, RunSpec, load_tenant, run_queries
from benchmarks.synthetic import query_texts
from gaama.config import ApiKey, hash_api_key, load_settings
from gaama.devstack import processes
from gaama.launch import ServiceProcess
from gaama.store import connect
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex

MODES = ("gaama", "semantic")
KEY = "cpu-per-process-key"


async def gc_pauses(url: str) -> tuple[float, float]:
    """The query service's garbage collections so far: count and total seconds, all
    generations."""
    import httpx

    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{url}/metrics")).text
    count = total = 0.0
    for line in text.splitlines():
        if line.startswith("gaama_query_gc_pause_seconds_count"):
            count += float(line.rsplit(" ", 1)[1])
        elif line.startswith("gaama_query_gc_pause_seconds_sum"):
            total += float(line.rsplit(" ", 1)[1])
    return count, total


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU of a process so far (``/proc/<pid>/stat``, fields 14 and 15), or of one
    of its threads (``/proc/<pid>/task/<thread>/stat``)."""
    path = f"/proc/{pid}/task/{thread}/stat" if thread is not None else f"/proc/{pid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(url: str, redis_pid: int, directory: Path, nodes: int, requests: int) -> None:
    tenant = f"cpu-{nodes}"
    settings = load_settings(
        redis_url=url,
        key_prefix="cpu",
        index_name="cpu-idx",
        api_keys=[ApiKey(key_sha256=hash_api_key(KEY), tenant=tenant)],
    )
    client = connect(url, socket_timeout=600)
    index = VectorIndex(client, settings.index_name, settings.embed_dim, Keys("cpu"))
    await index.ensure()
    await load_tenant(client, Keys("cpu"), tenant, nodes, seed=nodes, progress=False)
    await client.aclose()
    env = {**backends.env(backends.DEFAULT), **QUOTAS_OFF}
    service = await ServiceProcess("query", settings, directory, inherit=True, extra=env).astart(
        180
    )
    assert service.proc is not None
    pids = {"service": service.proc.pid, "redis": redis_pid, "load generator": os.getpid()}
    texts = query_texts(4096)
    try:
        for mode in MODES:  # warm-up
            await run_queries(service.url, KEY, RunSpec(nodes, 4, mode, 100), texts, False)
        print(f"{nodes:,} nodes, {requests} searches per run; CPU ms per search")
        first = 0
        for concurrency in (1, 16):
            for mode in (*MODES, *reversed(MODES)):
                collections, paused = await gc_pauses(service.url)
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                loop_before = cpu_seconds(pids["service"], pids["service"])  # the main thread
                spec = RunSpec(nodes, concurrency, mode, requests)
                observed, wall = await run_queries(
                    service.url, KEY, spec, texts, False, first_text=first
                )
                first += requests
                cpu = {n: (cpu_seconds(p) - before[n]) * 1000 / requests for n, p in pids.items()}
                loop = cpu_seconds(pids["service"], pids["service"]) - loop_before
                collections_after, paused_after = await gc_pauses(service.url)
                latencies = sorted(observed.latencies_ms)
                print(
                    f"c={concurrency:<3d} {mode:9s} p50 {latencies[len(latencies) // 2]:6.1f} ms"
                    f"  {requests / wall:6.1f} qps  "
                    + "  ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
                    + f"  total {sum(cpu.values()):.2f}"
                    + f"  loop {loop * 1000 / requests:.2f} (busy {loop / wall:.0%})"
                    + f"  gc {collections_after - collections:.0f}x"
                    + f" {(paused_after - paused) * 1000 / requests:.2f}"
                    + (f"  errors {observed.errors}" if observed.errors else "")
                )
    finally:
        service.stop()


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    with tempfile.TemporaryDirectory(prefix="gaama-cpu-") as d:
        port = processes.free_port()
        pid = processes.start_redis(Path(d), port)
        try:
            processes.wait_redis(port, pid, Path(d) / "redis.log")
            asyncio.run(measure(f"redis://127.0.0.1:{port}", pid, Path(d), nodes, requests))
        finally:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):  # its files are removed with the directory once it has exited
                if not processes.alive(pid):
                    break
                time.sleep(0.1)


if __name__ == "__main__":
    main()
