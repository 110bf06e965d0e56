"""The dev stack as a whole: the :class:`Stack` record (saved as ``stack.json`` in its
directory, so ``gaama dev down`` finds what ``up`` started), starting one Redis or a cluster and
the broker, creating the topics, and the health check ``gaama dev status`` prints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gaama.devstack import processes, redis_cluster
from gaama.devstack.processes import StackError
from gaama.errors import ConfigError
from gaama.events import TOPICS, dlq, topic_name

DEFAULT_REDIS_PORT = 6390


DEFAULT_KAFKA_PORT = 9093


@dataclass
class Stack:
    """A running embedded stack; ``stop()`` ends what this process started."""

    directory: Path
    redis_port: int
    kafka_port: int
    redis_pid: int | None = None
    kafka_pid: int | None = None
    # The other primaries of a cluster (the first is redis_port / redis_pid): (port, pid).
    cluster_peers: list[tuple[int, int | None]] = field(default_factory=list)
    cluster: bool = False
    #: Tansu's storage engine URL and extra environment (an ``s3://`` engine needs its endpoint).
    broker_storage: str = "memory://tansu/"
    broker_env: dict[str, str] | None = None

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_ports(self) -> list[int]:
        return [self.redis_port, *(port for port, _ in self.cluster_peers)]

    def env_lines(self) -> str:
        lines = f"GAAMA_REDIS_URL={self.redis_url}\nGAAMA_KAFKA_BOOTSTRAP={self.kafka_bootstrap}\n"
        return lines + ("GAAMA_REDIS_CLUSTER=true\n" if self.cluster else "")

    def save(self) -> None:
        (self.directory / "stack.json").write_text(
            json.dumps(
                {
                    "redis_port": self.redis_port,
                    "kafka_port": self.kafka_port,
                    "redis_pid": self.redis_pid,
                    "kafka_pid": self.kafka_pid,
                    "cluster_peers": self.cluster_peers,
                    "cluster": self.cluster,
                }
            )
        )

    @classmethod
    def load(cls, directory: Path) -> Stack | None:
        f = directory / "stack.json"
        if not f.exists():
            return None
        d = json.loads(f.read_text())
        peers = [(int(port), pid) for port, pid in d.get("cluster_peers", [])]
        return cls(
            directory,
            d["redis_port"],
            d["kafka_port"],
            d["redis_pid"],
            d["kafka_pid"],
            peers,
            bool(d.get("cluster", False)),
        )

    def stop(self) -> None:
        pids = (self.kafka_pid, self.redis_pid, *(pid for _, pid in self.cluster_peers))
        for pid in pids:
            if pid and processes.alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for pid in pids:
            while pid and processes.alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid and processes.alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        (self.directory / "stack.json").unlink(missing_ok=True)

    def start_redis(self) -> None:
        """Start Redis again on the same port and directory (it reloads its AOF); wait for it."""
        self.redis_pid = processes.start_redis(self.directory, self.redis_port)
        self.save()
        processes.wait_redis(
            self.redis_port, self.redis_pid, self.directory / "redis.log", timeout=120
        )

    def start_broker(self) -> None:
        """Start the broker again on the same port and storage; wait until it listens."""
        self.kafka_pid = processes.start_tansu(
            self.directory, self.kafka_port, self.broker_storage, self.broker_env
        )
        self.save()
        processes.wait_tcp(
            self.kafka_port, self.kafka_pid, self.directory / "tansu.log", "the broker"
        )


async def create_topics(
    bootstrap: str,
    partitions: int,
    prefix: str = "",
    request_timeout: float = 30,
    client_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Create every GAAMA topic and its DLQ twin (idempotent); returns the names.
    ``client_options`` are the admin client's security arguments (aiokafka's names)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    names = []
    for base in TOPICS:
        names += [topic_name(base, prefix), topic_name(dlq(base), prefix)]
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=int(request_timeout * 1000),
        **(client_options or {}),
    )
    await asyncio.wait_for(admin.start(), request_timeout)
    try:
        existing = set(await asyncio.wait_for(admin.list_topics(), request_timeout))
        wanted = [
            NewTopic(
                n, num_partitions=partitions if not n.endswith(".dlq") else 1, replication_factor=1
            )
            for n in names
            if n not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                await asyncio.wait_for(admin.create_topics(wanted), request_timeout)
    finally:
        await admin.close()
    return names


def start_redis_cluster(directory: Path, ports: list[int], stack: Stack) -> None:
    """Start one cluster-enabled primary per port (each in ``directory/redis-<port>``), recorded
    in ``stack`` as they start, and form the cluster."""
    stack.cluster = True
    buses = [processes.free_port() for _ in ports]
    for i, port in enumerate(ports):
        node_dir = directory / f"redis-{port}"
        node_dir.mkdir(parents=True, exist_ok=True)
        pid = processes.start_redis(node_dir, port, cluster_bus=buses[i])
        if i == 0:
            stack.redis_pid = pid
        else:
            stack.cluster_peers.append((port, pid))
        stack.save()
        processes.wait_redis(port, pid, node_dir / "redis.log")
    redis_cluster.form_cluster(ports, buses[0])


def start_stack(
    directory: Path,
    redis_port: int,
    kafka_port: int,
    partitions: int = 4,
    topic_prefix: str = "",
    broker_storage: str = "memory://tansu/",
    broker_env: dict[str, str] | None = None,
    *,
    redis_cluster: int = 1,
    cluster_ports: list[int] | None = None,
) -> Stack:
    """Start both servers in ``directory`` and create the topics; raise StackError on failure.

    ``redis_cluster`` > 1 starts that many cluster primaries instead of one Redis, on
    ``cluster_ports`` (default: consecutive ports from ``redis_port``)."""
    directory.mkdir(parents=True, exist_ok=True)
    if redis_cluster < 1:
        raise ConfigError("--redis-cluster must be ≥ 1")
    redis_ports = [redis_port]
    if redis_cluster > 1:
        redis_ports = cluster_ports or [redis_port + i for i in range(redis_cluster)]
    for port, what in (*((p, "Redis") for p in redis_ports), (kafka_port, "the broker")):
        if not processes.port_free(port):
            raise StackError(
                f"port {port} for {what} is taken on 127.0.0.1; stop what uses it "
                f"or choose another with --redis-port/--kafka-port"
            )
    stack = Stack(
        directory,
        redis_ports[0],
        kafka_port,
        broker_storage=broker_storage,
        broker_env=broker_env,
    )
    try:
        if redis_cluster > 1:
            start_redis_cluster(directory, redis_ports, stack)
        else:
            stack.redis_pid = processes.start_redis(directory, redis_port)
            stack.save()
            processes.wait_redis(redis_port, stack.redis_pid, directory / "redis.log")
        stack.start_broker()
        asyncio.run(create_topics(stack.kafka_bootstrap, partitions, topic_prefix))
    except BaseException:
        stack.stop()
        raise
    return stack


def stack_healthy(stack: Stack) -> dict[str, bool]:
    import redis

    ok = {"redis": False, "kafka": False}
    try:
        answers = []
        for port in stack.redis_ports:
            r = redis.Redis(port=port, socket_timeout=1)
            answers.append(bool(r.ping()))
            if stack.cluster:
                answers.append(redis_cluster.cluster_info(r).get("cluster_state") == "ok")
            r.close()
        ok["redis"] = all(answers)
    except redis.exceptions.RedisError:
        pass
    with socket.socket() as s:
        s.settimeout(1)
        ok["kafka"] = s.connect_ex(("127.0.0.1", stack.kafka_port)) == 0
    return ok


def default_dir() -> Path:
    return Path(os.environ.get("GAAMA_DEV_DIR", ".gaama/dev")).resolve()


def up(
    directory: Path, redis_port: int, kafka_port: int, partitions: int, redis_cluster: int = 1
) -> Stack:
    existing = Stack.load(directory)
    if existing is not None:
        health = stack_healthy(existing)
        shape = len(existing.redis_ports) if existing.cluster else 1
        if all(health.values()) and shape == redis_cluster:
            asyncio.run(create_topics(existing.kafka_bootstrap, partitions))
            return existing
        existing.stop()
    if partitions < 1:
        raise ConfigError("--partitions must be ≥ 1")
    return start_stack(directory, redis_port, kafka_port, partitions, redis_cluster=redis_cluster)
