"""The alert rules as Prometheus reads them: promtool checks their syntax and runs their unit
tests (deploy/prometheus/alerts_test.yml: two namespaces on one Prometheus, each alert firing
for the one at fault only, the SLO burn-rate pairs), and the runbook links take one base URL.
promtool comes from scripts/install-promtool.sh (make test runs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_manifests import K8S, find_kubectl

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    for c in (
        Path(sysconfig.get_path("scripts")) / "promtool",
        Path(sys.executable).parent / "promtool",
        shutil.which("promtool"),
    ):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(c)
    pytest.fail("promtool not found: run scripts/install-promtool.sh")


def test_promtool_accepts_the_rules(promtool: str) -> None:
    proc = subprocess.run(
        [promtool, "check", "rules", "--lint-fatal", str(ALERTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_alert_unit_tests_pass(promtool: str) -> None:
    proc = subprocess.run(
        [promtool, "test", "rules", str(ALERT_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ALERT_TESTS.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_unit_tests_can_fail(promtool: str, tmp_path: Path) -> None:
    """The same tests against rules that sum over every namespace must fail: they are what
    tells dev and prod apart."""
    text = ALERTS.read_text(encoding="utf-8").replace("by (namespace, cluster, ", "by (")
    text = text.replace("by (namespace, cluster)", "")
    (tmp_path / "alerts.yml").write_text(text, encoding="utf-8")
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yml")
    proc = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr


def test_every_runbook_link_is_absolute() -> None:
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    for r in rules:
        assert r["annotations"]["runbook_url"].startswith("https://"), r["alert"]


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_one_setting_moves_every_runbook_link(tmp_path: Path, overlay: str) -> None:
    """The overlay's `gaama-runbooks` base is the one place to change: every rendered
    runbook_url takes it, and the ConfigMap itself is not rendered."""
    kubectl = find_kubectl()
    if kubectl is None:
        pytest.fail("kubectl not found: run scripts/install-kubectl.sh")
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree)
    kust = tree / "overlays" / overlay / "kustomization.yaml"
    base = "https://wiki.internal.test/sre/gaama"
    text = kust.read_text(encoding="utf-8")
    assert "base=https://gaama.example.com/docs/operations.md" in text
    kust.write_text(
        text.replace("base=https://gaama.example.com/docs/operations.md", f"base={base}")
    )
    proc = subprocess.run(
        [kubectl, "kustomize", str(kust.parent)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    objects = [o for o in yaml.safe_load_all(proc.stdout) if o]
    assert not [o for o in objects if o["metadata"]["name"] == "gaama-runbooks"]
    [rule] = [o for o in objects if o["kind"] == "PrometheusRule"]
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert urls and all(u.startswith(base + "#gaama") for u in urls), urls
