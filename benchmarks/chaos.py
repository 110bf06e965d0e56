"""``python -m benchmarks chaos``: the pipeline under crashes and outages, against a clean run.

Each scenario is its own run on a fresh embedded stack (Redis with AOF, the Tansu broker) with the
four services as real processes and the LLM extractor talking to the fake OpenAI-compatible
server of ``tests/fakes``. The same turns (``--tenants`` x ``--conversations`` x ``--turns``,
interleaved across conversations, every conversation ending its sessions) and three poison
records go to the turns topic at once; while the pipeline works through them, the scenario's
faults hit at seeded random moments; once it has drained, each tenant's graph is compared with
the reference run's (a clean run of the same turns): episodes and facts (ids), NEXT and
DERIVED_FROM edges, the chunk every episode was extracted in, indexed vectors of episodes and
facts — all exact. Concepts and reflections depend on the order in which chunks of different
conversations reach extract and reflect (docs/architecture.md, "Delivery guarantees"): they are
counted, every episode must have a concept, every chunk must be reflected, every node of every
kind must be indexed. The DLQ must hold the poison records and nothing else; no service may exit
by itself; after the run, no process it started may be left.

Scenarios: ``ingest-kill``, ``extract-kill``, ``reflect-kill``, ``query-kill`` (kill -9 twice at
random moments, restart), ``redis-stop`` (SIGSTOP 20 s, SIGCONT), ``redis-kill`` (kill -9,
restart from the AOF), ``broker-kill`` (kill -9, restart on durable storage: Tansu's s3 engine on
a local ``moto_server``), ``llm-faults`` (30 % of LLM calls answered 429, 500, too late or with
malformed JSON; its reference is the same fake LLM without faults). Several replicas of a
consumer stage run in one consumer group, each on a port of its own: ``scale-extract`` (extract
1 → 3 → 1 under a steady load, the turns spread over 60 s), ``kill-during-rebalance`` (extract
2 → 3, kill -9 an old replica as the new one joins the group, restart it), ``scale-during-forget``
(a subject forget through query's API, then extract and reflect 1 → 2 while it is in flight; its
reference run forgets the same subject) and ``scale-all`` (ingest, extract and reflect 1 → 2 → 1
at once). ``--short`` runs one kill per consumer service, one Redis stop and ``scale-extract`` on
fewer turns (the CI version, tests/chaos). Writes ``bench-results/chaos.json``; exits 1 if a
scenario failed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis.exceptions import RedisError

from benchmarks.query import machine_info, write_section
from benchmarks.synthetic import speakers, turn_texts
from gaama import devstack
from gaama.config import ApiKey, hash_api_key, load_settings
from gaama.devstack import free_port, processes
from gaama.errors import ConfigError
from gaama.events import (
    TOPIC_TURNS,
    TOPICS,
    TurnReceived,
    conversation_key,
    dlq,
    encode,
    topic_name,
)
from gaama.launch import SERVICES, ServiceProcess
from gaama.model import EdgeKind, NodeKind
from gaama.store import connect
from gaama.store.codecs import parse_adjacency
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from tests.fakes.openai_server import FakeOpenAIServer, malformed, slow, status

if TYPE_CHECKING:
    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- chaos:begin -->", "<!-- chaos:end -->"
PREFIX = "chaos"
LLM_TIMEOUT_S = 3.0
#: What must equal the reference exactly: episodes, facts, the NEXT chain and provenance. Concepts
#: and reflections depend on the order in which chunks of different conversations of a tenant are
#: extracted and reflected (concept labels are reused, reflections see the facts present):
#: docs/architecture.md, "Delivery guarantees". They are counted and checked for completeness.
EXACT_NODES = frozenset({NodeKind.EPISODE.value, NodeKind.FACT.value})
EXACT_EDGES = frozenset({EdgeKind.NEXT.value, EdgeKind.DERIVED_FROM.value})
#: Every conversation ends with an end-of-session turn, so no chunk needs the idle close; a close
#: that happens anyway moves a chunk boundary, so the idle time must be longer than a service's
#: outage the harness causes (two kills in a row, the second right as the restart is ready;
#: docs/decisions/0018-chaos-timings.md).
CHUNK_IDLE_S = 60.0
STABLE_POLLS = 3  # consecutive equal polls (2 s apart) after every chunk is reflected
#: How long the scale scenarios spread their turns over: long enough for a replica to start,
#: join the group and take partitions while turns still arrive, with each step in its own part.
PACE_S = 60.0


CONSUMERS = ("ingest", "extract", "reflect")
#: The subject a forget scenario forgets (tenant ``ct0``, the first speaker of conversation
#: ``c1``, whose turns carry it as their subject) and the API key that asks.
FORGET_TENANT, FORGET_CONVERSATION = "ct0", 1


@dataclass(frozen=True)
class Scale:
    """One scale step: each of ``services`` goes to ``replicas`` processes in its consumer group
    (a new one on a port of its own; one too many stopped with SIGTERM, as a scale-in does).
    With ``kill``, one of the replicas running before the step is killed (-9) as soon as a new
    one starts joining the group (the group rebalancing), and restarted once the new one is
    ready."""

    services: tuple[str, ...]
    replicas: int
    kill: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    hits: str  # what the scenario does, for the report
    kills: tuple[str, ...] = ()  # services killed (-9) and restarted, in order
    redis_stop_s: float = 0.0
    redis_kill: bool = False
    broker_kill: bool = False
    llm_fault_rate: float = 0.0
    poison: bool = True
    replicas: tuple[tuple[str, int], ...] = ()  # services that start with more than one
    scale: tuple[Scale, ...] = ()  # in order, spread over the load
    # The turns go out over this many seconds (a steady load the scale steps fall into), not
    # at once; 0: at once.
    pace_s: float = 0.0
    # A subject forget (the query service's HTTP API) right after the turns are produced; the
    # scale steps start once it is accepted. Compared with a reference run that forgets the same.
    forget: bool = False

    def initial(self, service: str) -> int:
        return dict(self.replicas).get(service, 1)


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("ingest-kill", "kill -9 ingest twice, restart", kills=("ingest", "ingest")),
        Scenario("extract-kill", "kill -9 extract twice, restart", kills=("extract", "extract")),
        Scenario("reflect-kill", "kill -9 reflect twice, restart", kills=("reflect", "reflect")),
        Scenario("query-kill", "kill -9 query twice, restart", kills=("query", "query")),
        Scenario("redis-stop", "Redis SIGSTOP 20 s, SIGCONT", redis_stop_s=20.0),
        Scenario("redis-kill", "Redis kill -9, restart from its AOF", redis_kill=True),
        Scenario("broker-kill", "broker kill -9, restart on s3 (moto)", broker_kill=True),
        Scenario(
            "llm-faults", "30 % of LLM calls: 429, 500, timeout, bad JSON", llm_fault_rate=0.3
        ),
        Scenario(
            "scale-extract",
            "extract 1 → 3 → 1 replicas under a steady load",
            scale=(Scale(("extract",), 3), Scale(("extract",), 1)),
            pace_s=PACE_S,
        ),
        Scenario(
            "kill-during-rebalance",
            "extract 2 → 3 replicas, kill -9 an old one while the group rebalances, restart",
            replicas=(("extract", 2),),
            scale=(Scale(("extract",), 3, kill=True),),
            pace_s=PACE_S,
        ),
        Scenario(
            "scale-during-forget",
            "a subject forget, then extract and reflect 1 → 2 replicas while it is in flight",
            scale=(Scale(("extract", "reflect"), 2),),
            forget=True,
        ),
        Scenario(
            "scale-all",
            "ingest, extract and reflect 1 → 2 → 1 replicas at once under a steady load",
            scale=(Scale(CONSUMERS, 2), Scale(CONSUMERS, 1)),
            pace_s=PACE_S,
        ),
    )
}
SHORT = (
    Scenario("ingest-kill", "kill -9 ingest, restart", kills=("ingest",)),
    Scenario("extract-kill", "kill -9 extract, restart", kills=("extract",)),
    Scenario("reflect-kill", "kill -9 reflect, restart", kills=("reflect",)),
    Scenario("redis-stop", "Redis SIGSTOP 20 s, SIGCONT", redis_stop_s=20.0),
)
# The scale scenarios run in `make chaos`, not in the CI set: on the dev broker (Tansu) a
# consumer group that loses members can stop assigning partitions (docs/decisions/0151).


@dataclass
class Options:
    tenants: int
    conversations: int
    turns: int
    scenarios: list[Scenario]
    seed: int
    json_path: Path | None
    docs: Path | None
    command: str
    timeout_s: float = 1800.0
    progress: Callable[[str], None] = field(
        default=lambda line: print(f"# {line}", file=sys.stderr, flush=True)
    )


# --- the load ----------------------------------------------------------------------------------


def tenants(opts: Options) -> list[str]:
    return [f"ct{t}" for t in range(opts.tenants)]


def make_turns(opts: Options, subjects: bool = False) -> list[TurnReceived]:
    """Every conversation's turns, interleaved round-robin; a session ends every 25 turns.

    Each conversation of a tenant has speakers of its own: facts are deduplicated per subject
    (the speaker, here), so no fact merges into one of another conversation — which one would
    survive depends on the order the conversations are extracted in, like concept labels.
    With ``subjects``, the turns of the forget scenarios' conversation carry their speaker as
    their subject."""
    texts = turn_texts(opts.tenants * opts.conversations * opts.turns, seed=opts.seed)
    base = datetime(2024, 3, 1, tzinfo=UTC)
    out, k = [], 0
    for i in range(opts.turns):
        for tenant in tenants(opts):
            for c in range(opts.conversations):
                out.append(
                    TurnReceived(
                        tenant=tenant,
                        conversation=f"c{c}",
                        turn_id=f"T:{i}",
                        speaker=speakers(c)[i % 2],
                        text=texts[k],
                        timestamp=base + timedelta(minutes=i),
                        end_of_session=(i + 1) % 25 == 0 or i == opts.turns - 1,
                        subject=speakers(c)[i % 2] if subjects and forgotten(tenant, c) else "",
                    )
                )
                k += 1
    return out


def forgotten(tenant: str, conversation: int) -> bool:
    """Whether the forget scenarios' subject speaks in this conversation."""
    return tenant == FORGET_TENANT and conversation == FORGET_CONVERSATION


def forget_subject() -> str:
    return speakers(FORGET_CONVERSATION)[0]


def chain_length(opts: Options, tenant: str, conversation: int, forget: bool) -> int:
    """Episodes the conversation's NEXT chain holds once drained: every turn, less the forgotten
    subject's (the first speaker's: every other turn from the first)."""
    if forget and forgotten(tenant, conversation):
        return opts.turns // 2
    return opts.turns


def poison_records() -> list[tuple[bytes, bytes]]:
    """Records ingest must dead-letter: not JSON, an invalid tenant, an empty text."""
    bad_tenant = {
        "type": "TurnReceived",
        "tenant": "no spaces allowed",
        "conversation": "c0",
        "turn_id": "P:1",
        "speaker": "Ann",
        "text": "poison",
        "timestamp": "2024-03-01T00:00:00Z",
    }
    empty_text = {**bad_tenant, "tenant": "ct0", "turn_id": "P:2", "text": ""}
    return [
        (b"ct0/c0", b"this is not json {"),
        (b"ct0/c0", json.dumps(bad_tenant).encode()),
        (b"ct0/c0", json.dumps(empty_text).encode()),
    ]


async def produce(
    boot: str, topic: str, records: list[tuple[bytes, bytes]], over_s: float = 0.0
) -> None:
    """Send ``records`` in order: at once, or in one-second slices spread over ``over_s``."""
    p = AIOKafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5)
    await p.start()
    try:
        slices = max(1, int(over_s))
        per = -(-len(records) // slices)
        t0 = time.monotonic()
        for n in range(slices):
            for key, value in records[n * per : (n + 1) * per]:
                await p.send(topic, value, key=key)
            await p.flush()
            if over_s:
                await asyncio.sleep(max(0.0, t0 + (n + 1) * over_s / slices - time.monotonic()))
    finally:
        await p.stop()


async def dead_letters(boot: str) -> list[tuple[str, bytes]]:
    """Every record of every DLQ topic: (source topic, original value)."""
    c = AIOKafkaConsumer(bootstrap_servers=boot, group_id=None, auto_offset_reset="earliest")
    await c.start()
    out: list[tuple[str, bytes]] = []
    try:
        await c.topics()
        source = {topic_name(dlq(base), f"{PREFIX}."): base for base in TOPICS}
        tps = [TopicPartition(n, p) for n in source for p in c.partitions_for_topic(n) or ()]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        # Read until the topics stay quiet: the dev broker's end offsets can read short.
        quiet = 0
        while tps and quiet < 3:
            batch = await c.getmany(timeout_ms=1000)
            quiet = 0 if batch else quiet + 1
            for tp, msgs in batch.items():
                for m in msgs:
                    letter = json.loads(m.value)
                    out.append((source[tp.topic], base64.b64decode(letter["value_b64"])))
    finally:
        await c.stop()
    return out


# --- the graph ---------------------------------------------------------------------------------


@dataclass
class TenantGraph:
    nodes: dict[str, str]  # id -> kind
    edges: set[tuple[str, str, str]]  # (from, to, kind), outgoing direction
    vectors: dict[str, int]  # indexed nodes by kind
    chains: dict[str, int]  # conversation -> episodes in its NEXT chain
    chunks: dict[str, str]  # episode -> the chunk it was extracted in

    def exact(self) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]], dict[str, int]]:
        """Nodes, edges and indexed vectors of the kinds that must equal the reference's."""
        nodes = {(n, k) for n, k in self.nodes.items() if k in EXACT_NODES}
        edges = {e for e in self.edges if e[2] in EXACT_EDGES}
        vectors = {k: v for k, v in self.vectors.items() if k in EXACT_NODES}
        return nodes, edges, vectors

    def count(self, kind: NodeKind) -> int:
        return sum(1 for k in self.nodes.values() if k == kind.value)

    def unindexed(self) -> int:
        """Nodes without their vector document, or documents without their node, all kinds."""
        return sum(abs(self.count(k) - self.vectors.get(k.value, 0)) for k in NodeKind)

    def without_concept(self) -> int:
        """Episodes with no HAS_CONCEPT edge (an extraction that was cut short)."""
        tagged = {e[0] for e in self.edges if e[2] == EdgeKind.HAS_CONCEPT.value}
        return sum(1 for n, k in self.nodes.items() if k == "episode" and n not in tagged)


async def read_graph(redis: Any, index: VectorIndex, keys: Keys, tenant: str) -> TenantGraph:
    nodes: dict[str, str] = {}
    node_keys = [k async for k in redis.scan_iter(match=f"{keys.prefix}:node:{{{tenant}}}:*")]
    chunks: dict[str, str] = {}
    pipe = redis.pipeline(transaction=False)
    for k in node_keys:
        pipe.hmget(k, ["kind", "chunk"])
    for k, (kind, chunk) in zip(node_keys, await pipe.execute(), strict=True):
        node = keys.id_from_node_key(k.decode())
        nodes[node] = (kind or b"").decode()
        if nodes[node] == NodeKind.EPISODE.value:
            chunks[node] = (chunk or b"").decode()
    edges = set()
    adj_keys = [k async for k in redis.scan_iter(match=f"{keys.adj_prefix(tenant)}*")]
    pipe = redis.pipeline(transaction=False)
    for k in adj_keys:
        pipe.hgetall(k)
    for k, row in zip(adj_keys, await pipe.execute(), strict=True):
        src = keys.id_from_node_key(k.decode())
        for nb, val in row.items():
            edge = parse_adjacency(val, nb.decode())
            if edge.outgoing:
                edges.add((src, edge.node, edge.kind.value))
    chains = {}
    async for k in redis.scan_iter(match=f"{keys.prefix}:chain:{{{tenant}}}:*"):
        chains[k.decode().rsplit(":", 1)[1]] = int(await redis.zcard(k))
    return TenantGraph(nodes, edges, await index.count(tenant), chains, chunks)


async def settled(
    redis: Any, keys: Keys, opts: Options, forget: bool = False
) -> tuple[bool, tuple[Any, ...]]:
    """Whether every turn is stored and extracted and every chunk reflected; and a cheap
    signature of the graph (degrees) to see it stop changing."""
    done, sig = True, []
    for tenant in tenants(opts):
        for c in range(opts.conversations):
            ids = await redis.zrange(keys.chain(tenant, f"c{c}"), 0, -1)
            done &= len(ids) >= chain_length(opts, tenant, c, forget)
            if done:
                pipe = redis.pipeline(transaction=False)
                for i in ids:
                    pipe.hget(keys.node(tenant, i.decode()), "chunk")
                done &= all(await pipe.execute())
        done &= not await redis.zcard(keys.state(tenant, "outbox-index"))
        degrees = await redis.hvals(keys.degrees(tenant))
        sig.append((len(degrees), sum(int(d) for d in degrees)))
    return done, tuple(sig)


# --- one run -----------------------------------------------------------------------------------

#: What the current run started, for :func:`_reap` when the run is interrupted (SIGTERM, Ctrl-C)
#: before its own clean-up could finish.
_STARTED: dict[str, Any] = {}


def _reap() -> None:
    procs: list[ServiceProcess] = _STARTED.pop("procs", [])
    for p in procs:
        if p.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.proc.wait(timeout=10)
    for what in ("llm", "stack", "moto"):
        if (thing := _STARTED.pop(what, None)) is not None:
            with contextlib.suppress(Exception):
                thing.stop()


class Moto:
    """A local S3 (``moto_server``) with the bucket ``tansu``, for the broker's durable storage."""

    def __init__(self, directory: Path) -> None:
        exe = shutil.which(
            "moto_server", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}"
        )
        if exe is None:
            raise devstack.StackError(
                "moto_server not found (the broker-kill scenario needs a local S3): "
                "pip install 'moto[server]' (in the bench extra: make install)"
            )
        self.port = free_port()
        log = (directory / "moto.log").open("ab")
        self.proc = subprocess.Popen(
            [exe, "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.put(f"{self.url}/tansu", timeout=2).raise_for_status()
                break
            except httpx.HTTPError as exc:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise devstack.StackError(f"moto_server did not start; see {log.name}") from exc
                time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT": self.url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def fault_script(rate: float, seed: int, n: int = 200_000) -> list[tuple[bool, Any]]:
    """The fake LLM's answers in order, each with whether it is a fault: ``rate`` of them
    faults (429, 500, too late, malformed JSON), the rest computed answers."""
    rnd = random.Random(seed)
    faults = [
        lambda: status(429, retry_after=0.2),
        lambda: status(500),
        lambda: slow(LLM_TIMEOUT_S + 2),
        malformed,
    ]
    return [
        (True, rnd.choice(faults)()) if rnd.random() < rate else (False, slow(0.0))
        for _ in range(n)
    ]


@dataclass
class Run:
    scenario: Scenario | None
    graphs: dict[str, TenantGraph]
    dlq: list[tuple[str, bytes]]
    drain_s: float
    drained: bool
    exited: list[str]
    left_behind: list[str]
    faults_done: list[str]
    queries: Counter[str]
    log_dir: Path
    # Whether query answered a search (200) after its last restart; None when it was not killed.
    query_back: bool | None = None
    # Faults the fake LLM served (scenarios with an LLM fault rate).
    llm_faults_served: int = 0
    # Whether the run's forget was done by the end (None: no forget); whether it was still in
    # flight when every replica its scale steps added was ready.
    forget_done: bool | None = None
    forget_in_flight: bool | None = None
    # The most replicas of each consumer stage that ran at once.
    peak_replicas: dict[str, int] = field(default_factory=dict)


async def _query_load(
    url: str, opts: Options, stop: asyncio.Event, seen: Counter[str], last_ok: list[float]
) -> None:
    """Searches for every tenant in turn, as an agent would, through the kills of query.
    Counts the answers by status in ``seen``; ``last_ok`` holds the time of the latest 200."""
    i = 0
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        while not stop.is_set():
            tenant = tenants(opts)[i % opts.tenants]
            try:
                r = await c.post(
                    "/v1/search",
                    json={"query": "what did they plan for the weekend", "k": 5},
                    headers={"Authorization": f"Bearer key-{tenant}"},
                )
                seen[str(r.status_code)] += 1
                if r.status_code == 200:
                    last_ok[:] = [time.monotonic()]
            except httpx.HTTPError:
                seen["no answer"] += 1
            i += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)


async def _run(
    opts: Options, scenario: Scenario | None, ref_drain: float | None, forget: bool = False
) -> Run:
    """One run: the reference (``scenario`` None; with ``forget``, the forget scenarios' one) or
    a scenario, on a fresh stack."""
    name = scenario.name if scenario else ("reference-forget" if forget else "reference")
    forget = scenario.forget if scenario else forget
    work = Path(tempfile.mkdtemp(prefix=f"gaama-chaos-{name}-"))
    moto = _STARTED["moto"] = Moto(work) if scenario and scenario.broker_kill else None
    stack = await asyncio.to_thread(
        devstack.start_stack,
        work / "stack",
        free_port(),
        free_port(),
        partitions=4,
        topic_prefix=f"{PREFIX}.",
        broker_storage="s3://tansu/" if moto else "memory://tansu/",
        broker_env=moto.env() if moto else None,
    )
    _STARTED["stack"] = stack
    llm = _STARTED["llm"] = FakeOpenAIServer().start()
    plan = (
        fault_script(scenario.llm_fault_rate, opts.seed)
        if scenario and scenario.llm_fault_rate
        else []
    )
    if plan:
        llm.script(*(behaviour for _, behaviour in plan))
    settings = load_settings(
        redis_url=stack.redis_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        key_prefix=PREFIX,
        index_name=f"{PREFIX}-idx",
        topic_prefix=f"{PREFIX}.",
        chunk_idle_s=CHUNK_IDLE_S,
        api_keys=[ApiKey(key_sha256=hash_api_key(f"key-{t}"), tenant=t) for t in tenants(opts)],
    )
    extra = {
        "GAAMA_LLM_BASE_URL": llm.base_url,
        "GAAMA_LLM_MODEL": "fake-model",
        "GAAMA_LLM_API_KEY": "fake",
        "GAAMA_LLM_TIMEOUT_S": str(LLM_TIMEOUT_S),
        "GAAMA_CHUNK_LOCK_S": "5",
        "GAAMA_OUTBOX_RESEND_S": "20",
    }
    logs = work / "logs"
    # Every process the run started, for the clean-up and the check that none is left.
    everyone: list[ServiceProcess] = []
    _STARTED["procs"] = everyone

    def replica(svc: str, port: int | None = None) -> ServiceProcess:
        # A temporary directory of its own, as a pod has (faust keeps its data directory there).
        port = port or free_port()
        tmp = work / "tmp" / f"{svc}-{port}"
        tmp.mkdir(parents=True, exist_ok=True)
        p = ServiceProcess(svc, settings, logs, port=port, extra={**extra, "TMPDIR": str(tmp)})
        everyone.append(p)
        return p

    procs: dict[str, list[ServiceProcess]] = {
        n: [replica(n) for _ in range(scenario.initial(n) if scenario else 1)] for n in SERVICES
    }
    peak = {n: len(procs[n]) for n in CONSUMERS}
    redis = connect(stack.redis_url, socket_timeout=10)
    keys = Keys(PREFIX)
    index = VectorIndex(redis, settings.index_name, settings.embed_dim, keys)
    killed: set[int] = set()  # killed (-9) by the run
    retired: set[int] = set()  # stopped (SIGTERM) by a scale-in
    faults_done: list[str] = []
    queries: Counter[str] = Counter()
    last_ok: list[float] = []
    llm_faults = 0
    restarted: dict[str, float] = {}
    stop_load = asyncio.Event()
    rnd = random.Random(f"{opts.seed}:{name}")
    started = time.monotonic()
    forget_state: dict[str, Any] = {}
    forget_accepted = asyncio.Event()

    def say(line: str) -> None:
        opts.progress(f"{name} +{time.monotonic() - started:.0f}s: {line}")

    async def restart(svc: str, i: int = 0) -> None:
        # The same port, as a Service address outlives its pods: the query load keeps its URL.
        procs[svc][i] = replica(svc, procs[svc][i].port)
        await procs[svc][i].astart(300)

    def kill(p: ServiceProcess) -> None:
        assert p.proc is not None
        killed.add(p.proc.pid)
        p.kill(signal.SIGKILL)

    async def joining(p: ServiceProcess, within_s: float = 300) -> None:
        """Until the replica's consumer asks to join its group (a rebalance begins)."""
        deadline = time.monotonic() + within_s
        while "(Re-)joining group" not in _read(p.log_path):
            if time.monotonic() > deadline or not p.alive():
                raise devstack.StackError(f"{p.name} never joined its group; see {p.log_path}")
            await asyncio.sleep(0.05)

    async def settle(svc: str, synced: dict[ServiceProcess, int], within_s: float = 120) -> None:
        """Until every replica in ``synced`` has joined a new generation of its group."""
        deadline = time.monotonic() + within_s
        while any(_read(q.log_path).count(SYNCED) <= n for q, n in synced.items()):
            if time.monotonic() > deadline:
                say(f"{svc}: the group did not settle in {within_s:.0f}s after a replica left")
                return
            await asyncio.sleep(0.2)

    async def scale(step: Scale, at: float) -> None:
        grow = {svc: step.replicas - len(procs[svc]) for svc in step.services}
        new: list[ServiceProcess] = []
        for svc, n in grow.items():
            for _ in range(n):
                p = replica(svc)
                p.spawn()
                procs[svc].append(p)
                new.append(p)
        victims: list[tuple[str, int]] = []
        if step.kill:
            await asyncio.gather(*(joining(p) for p in new))
            for svc in step.services:
                old = [i for i, p in enumerate(procs[svc]) if p not in new]
                victims.append((svc, rnd.choice(old)))
            for svc, i in victims:
                kill(procs[svc][i])
                say(f"{svc} replica {i} killed (-9) while the group rebalances")
        await asyncio.gather(*(asyncio.to_thread(p.wait_ready, 300) for p in new))
        if forget:  # the first step's new replicas are what must meet the forget in flight
            forget_state.setdefault("in_flight", "done_at" not in forget_state)
        for svc, i in victims:
            await restart(svc, i)
            say(f"{svc} replica {i} restarted and ready")

        # A scale-in stops one replica of a stage at a time, each once the group has settled
        # after the one before (the stages in parallel): two members leaving the dev broker's
        # group together, the leader among them, leave it without a leader for good
        # (docs/decisions/0151).
        async def shrink(svc: str, n: int) -> None:
            for _ in range(n):
                p = procs[svc].pop(rnd.randrange(len(procs[svc])))
                assert p.proc is not None
                retired.add(p.proc.pid)
                synced = {q: _read(q.log_path).count(SYNCED) for q in procs[svc]}
                await asyncio.to_thread(p.stop)
                await settle(svc, synced)

        await asyncio.gather(*(shrink(svc, -n) for svc, n in grow.items() if n < 0))
        for svc in CONSUMERS:
            peak[svc] = max(peak[svc], len(procs[svc]))
        counts = ", ".join(f"{svc} {len(procs[svc])}" for svc in step.services)
        how = " (a replica killed -9 while the group rebalanced)" if step.kill else ""
        faults_done.append(f"at {at:.0f}s to {counts}{how}")
        say(f"scaled to {counts}{how}; every replica ready")

    async def faults() -> None:
        if scenario is None:
            return
        span = ref_drain or 60.0
        moments = sorted(rnd.uniform(0.1, 0.6) * span for _ in scenario.kills)
        for svc, at in zip(scenario.kills, moments, strict=True):
            await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
            kill(procs[svc][0])
            say(f"{svc} killed (-9)")
            await asyncio.sleep(1.0)
            await restart(svc)
            restarted[svc] = time.monotonic()
            faults_done.append(f"{svc} killed at {at:.0f}s")
            say(f"{svc} restarted and ready")
        # Each step in a part of the load of its own: step k of n early in part k.
        span = max(span, scenario.pace_s)
        if forget:
            await forget_accepted.wait()
        for k, step in enumerate(scenario.scale):
            lo = 0.0 if forget else 0.1
            at = span * (lo + 0.6 * k / len(scenario.scale) + 0.1 * rnd.random())
            if not (forget and k == 0):
                await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
            await scale(step, time.monotonic() - started)
        at = rnd.uniform(0.1, 0.5) * span
        if scenario.redis_stop_s or scenario.redis_kill or scenario.broker_kill:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
        if scenario.redis_stop_s:
            os.kill(stack.redis_pid, signal.SIGSTOP)  # type: ignore[arg-type]
            say(f"redis stopped for {scenario.redis_stop_s:.0f}s")
            await asyncio.sleep(scenario.redis_stop_s)
            os.kill(stack.redis_pid, signal.SIGCONT)  # type: ignore[arg-type]
            faults_done.append(f"redis stopped at {at:.0f}s for {scenario.redis_stop_s:.0f}s")
            say("redis continued")
        if scenario.redis_kill:
            await crash(stack.redis_pid, "redis", stack.start_redis, at, "from its AOF")
        if scenario.broker_kill:
            await crash(stack.kafka_pid, "broker", stack.start_broker, at, "on its s3 storage")

    async def crash(
        pid: int | None, what: str, start: Callable[[], None], at: float, how: str
    ) -> None:
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        say(f"{what} killed (-9)")
        await asyncio.sleep(1.0)
        await asyncio.to_thread(start)
        faults_done.append(f"{what} killed at {at:.0f}s")
        say(f"{what} restarted {how}")

    async def forgetting() -> None:
        """Ask for the forget through query's API, then follow it until it is done."""
        if not forget:
            return
        headers = {"Authorization": f"Bearer key-{FORGET_TENANT}"}
        async with httpx.AsyncClient(base_url=procs["query"][0].url, timeout=10) as c:
            r = await c.delete(f"/v1/subjects/{forget_subject()}", headers=headers)
            if r.status_code != 202:
                raise devstack.StackError(f"the forget was refused: {r.status_code} {r.text}")
            forget_state["id"] = rid = r.json()["request_id"]
            forget_accepted.set()
            say(f"forget of subject {forget_subject()} accepted")
            while True:
                await asyncio.sleep(0.5)
                with contextlib.suppress(httpx.HTTPError):
                    r = await c.get(f"/v1/forget/{rid}", headers=headers)
                    if r.status_code == 200 and r.json()["status"] == "done":
                        forget_state["done_at"] = time.monotonic() - started
                        say(f"forget done: {r.json()['removed']}")
                        return

    try:
        await asyncio.gather(*(p.astart(300) for ps in procs.values() for p in ps))
        say("services ready")
        records = poison_records() if (scenario is None or scenario.poison) else []
        records += [
            (conversation_key(t.tenant, t.conversation), encode(t))
            for t in make_turns(opts, subjects=forget)
        ]
        started = time.monotonic()
        producing = asyncio.create_task(
            produce(
                stack.kafka_bootstrap,
                topic_name(TOPIC_TURNS, f"{PREFIX}."),
                records,
                scenario.pace_s if scenario else 0.0,
            )
        )
        if not (scenario and scenario.pace_s):
            await producing
            say(f"{len(records)} records produced")
        else:
            say(f"{len(records)} records going out over {scenario.pace_s:.0f}s")
        load = asyncio.create_task(
            _query_load(procs["query"][0].url, opts, stop_load, queries, last_ok)
        )
        forgets = asyncio.create_task(forgetting())
        chaos = asyncio.create_task(faults())
        exited: list[str] = []
        drained, drain_s, last, same, polled = False, 0.0, None, 0, 0.0
        # A scenario that has not drained in four times the reference's drain has failed.
        span = max(ref_drain or 0.0, scenario.pace_s if scenario else 0.0)
        limit = opts.timeout_s if ref_drain is None else min(opts.timeout_s, 4 * span + 180)
        while time.monotonic() - started < limit:
            await asyncio.sleep(2.0)
            exited += [
                f"{p.name} (pid {p.proc.pid})"
                for p in everyone
                if p.proc and not p.alive() and p.proc.pid not in killed | retired
            ]
            if exited:
                say(f"exited by itself: {exited}")
                break
            for task in (producing, forgets, chaos):
                if task.done():
                    task.result()  # a fault that could not be carried out fails the run loudly
            try:
                done, sig = await settled(redis, keys, opts, forget)
            except RedisError:
                continue  # Redis is down (the scenario's own fault): look again
            if time.monotonic() - polled > 15:
                polled = time.monotonic()
                say(f"settled={done} degrees={sig}")
            ended = producing.done() and forgets.done() and chaos.done()
            if done and ended and sig == last:
                same += 1
                if same >= STABLE_POLLS:
                    drained = True
                    break
            else:
                same, last, drain_s = 0, sig, time.monotonic() - started
        for task in (producing, forgets, chaos):
            if task.done():
                task.result()
            else:
                task.cancel()
        stop_load.set()
        await load
        say(f"drained={drained} in {drain_s:.0f}s; reading the graph")
        graphs = {t: await read_graph(redis, index, keys, t) for t in tenants(opts)}
        letters = await dead_letters(stack.kafka_bootstrap)
        served = len(plan) - llm.pending() if plan else 0
        llm_faults = sum(1 for fault, _ in plan[:served] if fault)
        if plan:
            faults_done.append(f"{llm_faults} LLM faults served in {served} calls")
        if forget and "done_at" in forget_state:
            faults_done.append(f"forget done at {forget_state['done_at']:.0f}s")
    finally:
        stop_load.set()
        for p in everyone:  # all at once: each takes a few seconds to shut down
            if p.alive():
                assert p.proc is not None
                os.killpg(p.proc.pid, signal.SIGTERM)
        for p in everyone:
            p.stop()
        await redis.aclose()
        llm.stop()
        stack.stop()
        if moto:
            moto.stop()
        _STARTED.clear()
    left = [f"{p.name} (pgid {p.proc.pid})" for p in everyone if p.proc and _group_alive(p)]
    for pid, what in ((stack.redis_pid, "redis"), (stack.kafka_pid, "broker")):
        if pid and processes.alive(pid):
            left.append(f"{what} (pid {pid})")
    return Run(
        scenario,
        graphs,
        letters,
        round(drain_s, 1),
        drained,
        exited,
        left,
        faults_done,
        queries,
        logs,
        query_back=(bool(last_ok) and last_ok[0] > restarted["query"])
        if "query" in restarted
        else None,
        llm_faults_served=llm_faults,
        forget_done=("done_at" in forget_state) if forget else None,
        forget_in_flight=forget_state.get("in_flight") if scenario and scenario.forget else None,
        peak_replicas=peak,
    )


#: What a faust worker logs once it has joined a generation of its group and has its partitions.
SYNCED = "Successfully synced group"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _group_alive(p: ServiceProcess) -> bool:
    assert p.proc is not None
    try:
        os.killpg(p.proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


# --- the comparison ----------------------------------------------------------------------------


def compare(opts: Options, ref: Run, run: Run) -> dict[str, Any]:
    """The scenario's row of the report: what was lost or duplicated against the reference."""
    poison = (
        {v for _, v in poison_records()} if run.scenario is None or run.scenario.poison else set()
    )
    lost = duplicated = edges_missing = edges_extra = unindexed = untagged = rechunked = 0
    vectors_equal = True
    per_tenant = {}
    forget = run.forget_done is not None
    for tenant, want in ref.graphs.items():
        got = run.graphs[tenant]
        (wn, we, wv), (gn, ge, gv) = want.exact(), got.exact()
        chains = {f"c{c}": chain_length(opts, tenant, c, forget) for c in range(opts.conversations)}
        t_lost = len(wn - gn) + sum(max(0, n - got.chains.get(c, 0)) for c, n in chains.items())
        t_dup = len(gn - wn) + sum(max(0, got.chains.get(c, 0) - n) for c, n in chains.items())
        lost += t_lost
        duplicated += t_dup
        edges_missing += len(we - ge)
        edges_extra += len(ge - we)
        vectors_equal &= wv == gv
        unindexed += got.unindexed()
        t_moved = sum(1 for e, c in want.chunks.items() if got.chunks.get(e, c) != c)
        rechunked += t_moved
        untagged += max(0, got.without_concept() - want.without_concept())
        per_tenant[tenant] = {
            "nodes": len(got.nodes),
            "edges": len(got.edges),
            "vectors": got.vectors,
            "lost": t_lost,
            "duplicated": t_dup,
            "rechunked": t_moved,
            "chunks": len(set(got.chunks.values())),
            "chunks_reference": len(set(want.chunks.values())),
            "missing_sample": sorted(wn - gn)[:5],
            "extra_sample": sorted(gn - wn)[:5],
            "concepts": got.count(NodeKind.CONCEPT),
            "concepts_reference": want.count(NodeKind.CONCEPT),
            "reflections": got.count(NodeKind.REFLECTION),
            "reflections_reference": want.count(NodeKind.REFLECTION),
        }
    dead = Counter(v for _, v in run.dlq)
    unexpected = sum(n for v, n in dead.items() if v not in poison)
    poison_missing = len(poison - set(dead))
    # A search may go unanswered while query is down or answer 503 in an outage; never 500.
    server_errors = sum(
        n for code, n in run.queries.items() if code.startswith("5") and code != "503"
    )
    llm_faults_wanted = bool(run.scenario and run.scenario.llm_fault_rate)
    passed = (
        run.drained
        and not lost
        and not duplicated
        and not edges_missing
        and not edges_extra
        and vectors_equal
        and not unindexed
        and not rechunked
        and not untagged
        and not unexpected
        and not poison_missing
        and not run.exited
        and not run.left_behind
        and not server_errors
        and run.query_back is not False
        and (run.llm_faults_served > 0 or not llm_faults_wanted)
        and run.forget_done is not False
        and run.forget_in_flight is not False
    )
    return {
        "name": run.scenario.name if run.scenario else "reference",
        "hits": run.scenario.hits if run.scenario else "",
        "turns_in": opts.tenants * opts.conversations * opts.turns,
        "nodes_out": sum(len(g.nodes) for g in run.graphs.values()),
        "lost": lost,
        "duplicated": duplicated,
        "edges_missing": edges_missing,
        "edges_extra": edges_extra,
        "vectors_equal": vectors_equal,
        "unindexed": unindexed,
        "rechunked": rechunked,
        "episodes_without_concept": untagged,
        "dlq_unexpected": unexpected,
        "dlq_poison": sum(n for v, n in dead.items() if v in poison),
        "poison_injected": len(poison),
        "poison_missing": poison_missing,
        "drain_s": run.drain_s,
        "drained": run.drained,
        "exited": run.exited,
        "left_behind": run.left_behind,
        "faults": run.faults_done,
        "queries": dict(run.queries),
        "query_server_errors": server_errors,
        "query_back_after_restart": run.query_back,
        "llm_faults_served": run.llm_faults_served,
        "forget_done": run.forget_done,
        "forget_in_flight_at_scale": run.forget_in_flight,
        "peak_replicas": run.peak_replicas,
        "per_tenant": per_tenant,
        "logs": str(run.log_dir),
        "passed": passed,
    }


async def _main(opts: Options) -> dict[str, Any]:
    opts.progress(
        f"reference run: {opts.tenants} tenants x {opts.conversations} conversations x "
        f"{opts.turns} turns"
    )
    # One reference per load: the turns alone, and the turns with the forget scenarios' forget.
    refs: dict[bool, tuple[Run, dict[str, Any]]] = {}
    for forget in sorted({s.forget for s in opts.scenarios} or {False}):
        ref = await _run(opts, None, None, forget=forget)
        reference = compare(opts, ref, ref)
        refs[forget] = ref, reference
        opts.progress(
            f"reference{' (forget)' if forget else ''}: {reference['nodes_out']} nodes, "
            f"drained in {ref.drain_s:.0f}s, passed={reference['passed']}"
        )
    rows = []
    for scenario in opts.scenarios:
        opts.progress(f"scenario {scenario.name}: {scenario.hits}")
        ref = refs[scenario.forget][0]
        row = compare(opts, ref, await _run(opts, scenario, ref.drain_s))
        rows.append(row)
        opts.progress(
            f"{row['name']}: lost {row['lost']}, duplicated {row['duplicated']}, edges "
            f"-{row['edges_missing']}/+{row['edges_extra']}, rechunked {row['rechunked']}, "
            f"vectors equal {row['vectors_equal']}, unindexed {row['unindexed']}, "
            f"dlq unexpected {row['dlq_unexpected']} (poison "
            f"{row['dlq_poison']}/{row['poison_injected']}), drain {row['drain_s']:.0f}s, "
            f"passed={row['passed']}"
        )
    return {
        "scenarios": rows,
        "reference": refs[min(refs)][1],
        **({"reference_forget": refs[True][1]} if True in refs else {}),
        "turns": {"tenants": opts.tenants, "conversations": opts.conversations, "each": opts.turns},
        "seed": opts.seed,
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


def _runs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs a report covers: one, or those :func:`combine` joined."""
    return doc.get("runs") or [
        {"command": doc["command"], "date": doc["date"], "reference": doc["reference"]}
    ]


def combine(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several runs (each with its own reference), e.g. of scenarios split over
    runs with ``--scenario``."""
    return {
        "scenarios": [r for d in docs for r in d["scenarios"]],
        "runs": [run for d in docs for run in _runs(d)],
        "machine": docs[0]["machine"],
    }


def docs_section(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    runs = "; ".join(
        f"`{r['command']}` on {r['date']} (its reference: {r['reference']['nodes_out']:,} nodes, "
        f"drained in {r['reference']['drain_s']:.0f} s)"
        for r in _runs(doc)
    )
    rows = [
        f"| {r['name']} | {r['hits']} | {r['turns_in']:,} | {r['nodes_out']:,} | {r['lost']} | "
        f"{r['duplicated']} | {r['dlq_unexpected']} ({r['dlq_poison']} poison) | "
        f"{r['drain_s']:.0f} | {'yes' if r['passed'] else '**no**'} |"
        for r in doc["scenarios"]
    ]
    return "\n".join(
        [
            "## Chaos",
            "",
            f"Run with {runs} ({m['cpus']} CPUs, {m['cpu']}). Each scenario a fresh embedded "
            "stack, the four services as processes, the LLM extractor on the fake "
            "OpenAI-compatible server; the turns and 3 poison records produced at once, the "
            "faults at seeded random moments while the pipeline works through them; compared "
            "with the reference, a clean run of the same turns. Lost / duplicated: episodes and "
            "facts of the reference "
            "missing / not in it, per tenant; besides, the NEXT and DERIVED_FROM edges, each "
            "episode's chunk and the indexed vectors of episodes and facts must equal the "
            "reference's, every episode have a concept, every chunk be reflected and every node "
            "be indexed. Concepts and reflections depend on the order in which conversations "
            'reach extract and reflect (docs/architecture.md, "Delivery guarantees"), so '
            "their ids are not compared; every conversation has speakers of its own, so no "
            "fact merges with one of another conversation (where the survivor depends on that "
            "order too). DLQ unexpected: dead letters other than the poison. "
            "Drain: from the produce to the last change of the graph.",
            "",
            "| scenario | fault | turns in | nodes out | lost | duplicated | DLQ unexpected "
            "| drain, s | passed |",
            "|---|---|---:|---:|---:|---:|---|---:|---|",
            *rows,
        ]
    )


def main(opts: Options) -> dict[str, Any]:
    try:
        doc = asyncio.run(_main(opts))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not stop the reaping
        _reap()
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.docs:
        write_section(opts.docs, DOCS_BEGIN, DOCS_END, docs_section(doc))
    return doc


def options(args: argparse.Namespace) -> Options:
    if args.conversations and speakers(args.conversations - 1) == speakers(0):
        raise ConfigError(
            "--conversations: at most 9 (every conversation of a tenant needs its own speakers)"
        )
    if args.short:
        # --scenario picks among all scenarios; --short alone runs the CI set.
        scenarios = [SCENARIOS[n] for n in args.scenario] if args.scenario else list(SHORT)
        sizes = (args.tenants or 4, args.conversations or 2, args.turns or 50)
    else:
        chosen = args.scenario or list(SCENARIOS)
        scenarios = [SCENARIOS[n] for n in chosen]
        sizes = (args.tenants or 4, args.conversations or 5, args.turns or 250)
    argv = ["python", "-m", "benchmarks", "chaos"] + (["--short"] if args.short else [])
    for flag, v in (("--tenants", args.tenants), ("--conversations", args.conversations)):
        if v:
            argv += [flag, str(v)]
    if args.turns:
        argv += ["--turns", str(args.turns)]
    for n in args.scenario or ():
        argv += ["--scenario", n]
    if args.write_docs:
        argv.append("--write-docs")
    return Options(
        tenants=sizes[0],
        conversations=sizes[1],
        turns=sizes[2],
        scenarios=scenarios,
        seed=args.seed,
        json_path=Path(args.json) if args.json else None,
        docs=Path(args.docs) if args.write_docs else None,
        command=shlex.join(argv),
    )


def _cli(args: argparse.Namespace) -> int:
    if args.report:
        doc = combine([json.loads(Path(f).read_text(encoding="utf-8")) for f in args.report])
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        if args.write_docs:
            write_section(Path(args.docs), DOCS_BEGIN, DOCS_END, docs_section(doc))
    else:
        doc = main(options(args))
    failed = [r["name"] for r in doc["scenarios"] if not r["passed"]]
    print(json.dumps({r["name"]: r["passed"] for r in doc["scenarios"]}))
    if failed:
        print(f"chaos: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def register(sub: SubParsers) -> None:
    """Add the ``chaos`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "chaos",
        help="kill and pause the services, Redis, the broker and the LLM; compare with a clean run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--short", action="store_true", help="the CI version: fewer turns and faults")
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="repeatable")
    p.add_argument("--tenants", type=int, default=None, help="4 (default)")
    p.add_argument("--conversations", type=int, default=None, help="per tenant; 5 (short: 2)")
    p.add_argument("--turns", type=int, default=None, help="per conversation; 250 (short: 50)")
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--json", default="bench-results/chaos.json", metavar="PATH")
    p.add_argument("--docs", default="docs/performance.md", help="with --write-docs")
    p.add_argument("--write-docs", action="store_true", help="update docs/performance.md")
    p.add_argument(
        "--report",
        nargs="+",
        metavar="JSON",
        help="run nothing: join these reports (runs split with --scenario) into --json and, "
        "with --write-docs, the docs",
    )
    p.set_defaults(func=_cli)
