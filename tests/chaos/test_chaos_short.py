"""``python -m benchmarks chaos --short`` as CI runs it: a kill -9 of each consumer service and a
20 s Redis stop, each in its own run on a fresh embedded stack, against a clean reference run.

The command runs as ``make chaos`` runs it (a subprocess with its own stacks); the assertions
are on the report it writes, so a failed scenario names what it lost, duplicated or
dead-lettered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 600


@pytest.mark.timeout(BUDGET_S + 30)
def test_chaos_short(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAAMA_")}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = tmp_path / "chaos.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks", "chaos", "--short", "--json", str(out)],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            code = proc.wait(timeout=BUDGET_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # it stops the services and stacks it started
            proc.wait(timeout=60)
            pytest.fail(f"over {BUDGET_S}s; its log {log} ends:\n{log.read_text()[-3000:]}")
    said = log.read_text(errors="replace")[-3000:]
    assert out.exists(), f"no report; the command said:\n{said}"
    doc = json.loads(out.read_text())
    rows = {r["name"]: r for r in doc["scenarios"]}
    assert set(rows) == {
        "ingest-kill",
        "extract-kill",
        "reflect-kill",
        "redis-stop",
    }
    for name, r in rows.items():
        what = {k: r[k] for k in ("lost", "duplicated", "dlq_unexpected", "exited", "left_behind")}
        assert r["passed"], f"{name} failed: {what}; logs in {r['logs']}"
        # Poison may be dead-lettered twice (a kill before ingest committed): at least once.
        assert r["turns_in"] > 0 and r["poison_injected"] > 0 and r["poison_missing"] == 0
        assert r["faults"], f"{name}: no fault was carried out"
    assert code == 0, said
