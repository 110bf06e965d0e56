"""Redis Cluster in the dev stack: forming a cluster of primaries, a primary that joins or
leaves, and moving a slot the way ``redis-cli --cluster reshard`` does (tests and benchmarks
reshard with it). Every call is synchronous, on the nodes' loopback ports."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from gaama.devstack import processes
from gaama.devstack.processes import StackError

SLOTS = 16384


def form_cluster(ports: list[int], first_bus: int, timeout: float = 20) -> None:
    """Make the cluster-enabled servers on ``ports`` one cluster of primaries: the 16384 slots
    split into equal ranges in port order (CLUSTER ADDSLOTSRANGE), every node introduced to the
    first, whose cluster bus listens on ``first_bus`` (CLUSTER MEET); returns once every node
    reports ``cluster_state:ok``."""
    import redis

    clients = [redis.Redis(port=p, socket_timeout=2) for p in ports]
    try:
        n = len(ports)
        infos = [cluster_info(c) for c in clients]
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
        infos = [cluster_info(c) for c in clients]
        if all(
            i.get("cluster_state") == "ok" and i.get("cluster_known_nodes") == str(len(ports))
            for i in infos
        ):
            return
        time.sleep(0.05)
    raise StackError(f"the Redis cluster on ports {ports} did not form within {timeout:.0f}s")


def cluster_info(client: Any) -> dict[str, str]:
    raw = client.execute_command("CLUSTER", "INFO")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def add_primary(directory: Path, port: int, seed_port: int, timeout: float = 20) -> int:
    """Start a cluster-enabled primary on ``port`` (in ``directory/redis-<port>``) and join it to
    the cluster of the node on ``seed_port``; it holds no slot until some are moved to it. Its
    pid (the caller stops it)."""
    import redis

    node_dir = directory / f"redis-{port}"
    node_dir.mkdir(parents=True, exist_ok=True)
    bus = processes.free_port()
    pid = processes.start_redis(node_dir, port, cluster_bus=bus)
    processes.wait_redis(port, pid, node_dir / "redis.log")
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
            if cluster_info(node).get("cluster_state") == "ok" and _all_know(seed, new_id):
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
    while processes.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


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
