"""``python -m benchmarks chaos --short`` as CI runs it: a kill -9 of each consumer service and a
20 s Redis stop, each in its own run on a fresh embedded stack, against a clean reference run.

The command runs as ``make chaos`` runs it (a subprocess with its own stacks); the assertions
are on the report it writes, so a failed scenario names what it lost, duplicated or
dead-lettered.
"""

from __future__ import annotations

import json
import os
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
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "chaos", "--short", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUDGET_S,
        check=False,
    )
    assert out.exists(), f"no report; the command said:\n{done.stderr[-3000:]}"
    doc = json.loads(out.read_text())
    rows = {r["name"]: r for r in doc["scenarios"]}
    assert set(rows) == {"ingest-kill", "extract-kill", "reflect-kill", "redis-stop"}
    for name, r in rows.items():
        what = {k: r[k] for k in ("lost", "duplicated", "dlq_unexpected", "exited", "left_behind")}
        assert r["passed"], f"{name} failed: {what}; logs in {r['logs']}"
        assert r["turns_in"] > 0 and r["poison_injected"] == r["dlq_poison"] > 0
        assert r["faults"], f"{name}: no fault was carried out"
    assert done.returncode == 0, done.stderr[-3000:]
