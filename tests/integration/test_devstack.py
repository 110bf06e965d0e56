"""The embedded stack gives clear messages instead of tracebacks."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from gaama import devstack
from gaama.cli import main
from gaama.devstack import processes


def test_taken_port_is_reported(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(devstack.StackError, match=f"port {port} for Redis is taken"):
            devstack.start_stack(tmp_path, port, devstack.free_port())


def test_server_that_exits_at_start_shows_its_log(tmp_path: Path):
    log = tmp_path / "redis.log"
    log.write_text("FATAL: cannot load module\n")
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(devstack.StackError, match=r"(?s)exited at start.*cannot load module"):
        processes.wait_redis(devstack.free_port(), proc.pid, log, timeout=5)


def test_cli_turns_errors_into_messages(tmp_path: Path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(
            [
                "dev",
                "up",
                "--dir",
                str(tmp_path),
                "--redis-port",
                str(port),
                "--kafka-port",
                str(devstack.free_port()),
            ]
        )
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("gaama: error: port") and "Traceback" not in err


@pytest.mark.requires_stack
def test_dev_up_prints_shell_settings_and_status(tmp_path: Path, capsys):
    rp, kp = devstack.free_port(), devstack.free_port()
    try:
        assert (
            main(
                [
                    "dev",
                    "up",
                    "--dir",
                    str(tmp_path),
                    "--redis-port",
                    str(rp),
                    "--kafka-port",
                    str(kp),
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert (
            out
            == f"GAAMA_REDIS_URL=redis://127.0.0.1:{rp}/0\nGAAMA_KAFKA_BOOTSTRAP=127.0.0.1:{kp}\n"
        )
        assert main(["dev", "status", "--dir", str(tmp_path)]) == 0
        assert "redis" in capsys.readouterr().out
    finally:
        main(["dev", "down", "--dir", str(tmp_path)])
    assert main(["dev", "status", "--dir", str(tmp_path)]) == 1


def test_dev_up_redis_cluster_forms_a_cluster_and_restarts_it(tmp_path: Path, capsys):
    """``gaama dev up --redis-cluster 2``: two cluster primaries holding every slot, the setting
    printed; after ``down``, ``up`` starts the same cluster again from the nodes' own state."""
    import redis

    port = devstack.free_port()
    while not devstack.port_free(port + 1):
        port = devstack.free_port()
    args = ["dev", "up", "--dir", str(tmp_path), "--redis-cluster", "2", "--redis-port", str(port)]
    args += ["--kafka-port", str(devstack.free_port())]
    try:
        for _ in range(2):
            assert main(args) == 0
            out = capsys.readouterr().out
            assert "GAAMA_REDIS_CLUSTER=true" in out and f"redis://127.0.0.1:{port}/0" in out
            client = redis.RedisCluster(host="127.0.0.1", port=port)
            assert len(client.get_primaries()) == 2
            slots = client.cluster_slots()
            assert sum(hi - lo + 1 for lo, hi in slots) == devstack.SLOTS
            client.close()
            assert main(["dev", "down", "--dir", str(tmp_path)]) == 0
    finally:
        main(["dev", "down", "--dir", str(tmp_path)])
