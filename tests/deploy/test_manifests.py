"""Offline checks of the deployment artefacts: Kubernetes manifests, docker-compose, Prometheus
rules and the Grafana dashboard.

CI has neither a cluster nor Docker, so everything here is static:

* every kustomize target (base, base + the KEDA component, overlays dev and prod) renders with
  ``kubectl kustomize`` and each object validates against the Kubernetes OpenAPI schemas
  bundled in ``kubernetes-validate``; CRDs (ServiceMonitor, PrometheusRule, ScaledObject) have no
  schema there, so a minimal structural schema of our own checks them;
* docker-compose.yml validates against the Compose Specification schema vendored in
  ``check-jsonschema`` (read from its package files; no network at test time);
* every metric named in the dashboard and the alert rules exists in a registry built by calling
  ``gaama.metrics`` the way each service does;
* consumer replicas never exceed the topic partitions; every container is hardened.

kubectl comes from ``scripts/install-kubectl.sh``. Tests that need it fail when it is missing,
unless ``GAAMA_ALLOW_SKIP_KUBECTL=1`` (for a laptop without it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from gaama import metrics as gm
from gaama.config import Settings, load_settings
from services.mcp.app import TOOLS as MCP_TOOLS
from services.mcp.settings import McpSettings
from services.runtime.admission import tenant_metrics

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "docker-compose.yml"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROM_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
PROM_RULE = K8S / "base" / "monitoring" / "prometheusrule.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "gaama.json"
OPERATIONS = ROOT / "docs" / "operations.md"

SERVICES = ("ingest", "extract", "reflect", "query")
#: Deployed beside the services, reaching the stack only through their REST API.
GATEWAYS = ("mcp",)
DEPLOYED = (*SERVICES, *GATEWAYS)
CONSUMERS = {  # service -> the topic it consumes (its consumer group is gaama-<service>)
    "ingest": "gaama.turns.v1",
    "extract": "gaama.episodes.v1",
    "reflect": "gaama.facts.v1",
}
TOPICS = tuple(t for base in CONSUMERS.values() for t in (base, f"{base}.dlq"))

# Oldest Kubernetes minor we support, and the newest the bundled schemas know.
K8S_VERSIONS = ("1.29.0", "1.37.0")
TARGETS = ("base", "base+keda", "dev", "prod")

# How each service wires gaama.metrics (its main.py). Names are never copied here: they come
# from calling these functions on a fresh registry.
SERVICE_METRICS: dict[str, list[Callable[[CollectorRegistry], object]]] = {
    "ingest": [
        lambda r: gm.stage_metrics("ingest", r),
        lambda r: gm.embed_metrics("ingest", r),
        lambda r: gm.gc_pause_metric("ingest", r),
        lambda r: gm.loop_metrics("ingest", r),
        lambda r: gm.http_error_metric("ingest", r),
        lambda r: gm.key_reload_metric("ingest", r),
        lambda r: tenant_metrics("ingest", r),
    ],
    "extract": [
        lambda r: gm.stage_metrics(
            "extract", r, tasks=("consumer_lag", "progress", "idle_chunks", "outbox")
        ),
        lambda r: gm.embed_metrics("extract", r),
        lambda r: gm.gc_pause_metric("extract", r),
        lambda r: gm.loop_metrics("extract", r),
        lambda r: gm.llm_metrics("extract", r),
    ],
    "reflect": [
        lambda r: gm.stage_metrics("reflect", r),
        lambda r: gm.embed_metrics("reflect", r),
        lambda r: gm.gc_pause_metric("reflect", r),
        lambda r: gm.loop_metrics("reflect", r),
        lambda r: gm.llm_metrics("reflect", r),
        lambda r: gm.forget_metrics("reflect", r),
    ],
    "query": [
        gm.query_metrics,
        lambda r: gm.embed_metrics("query", r),
        lambda r: gm.gc_pause_metric("query", r),
        lambda r: gm.loop_metrics("query", r),
        lambda r: gm.graph_size_gauge("query", r),
        lambda r: gm.forget_metrics("query", r),
        lambda r: tenant_metrics("query", r),
        lambda r: gm.key_reload_metric("query", r),
    ],
    "mcp": [
        lambda r: gm.mcp_metrics(r, MCP_TOOLS),
        lambda r: gm.loop_metrics("mcp", r),
        lambda r: gm.key_reload_metric("mcp", r),
    ],
}
# Series that do not come from our code, each with where it comes from.
EXTERNAL_METRICS = {
    "up": "Prometheus, per scrape target",
    "redis_memory_used_bytes": "redis_exporter (docs/operations.md#gaamaredismemoryhigh)",
    "redis_memory_max_bytes": "redis_exporter",
}


# --------------------------------------------------------------------------- helpers: yaml


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def env_of(config_maps: list[dict[str, Any]], secrets: list[dict[str, Any]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for cm in config_maps:
        env.update(cm.get("data") or {})
    for s in secrets:
        env.update(s.get("stringData") or {})
    return env


# --------------------------------------------------------------------------- helpers: kubectl


def find_kubectl() -> str | None:
    """The pinned kubectl beside this interpreter first (scripts/install-kubectl.sh puts it
    there), then $GAAMA_KUBECTL, then PATH."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "kubectl",
        Path(sys.executable).parent / "kubectl",
        os.environ.get("GAAMA_KUBECTL"),
        shutil.which("kubectl"),
    ]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


@pytest.fixture(scope="session")
def kubectl() -> str:
    exe = find_kubectl()
    if exe is None:
        msg = "kubectl not found: run scripts/install-kubectl.sh"
        if os.environ.get("GAAMA_ALLOW_SKIP_KUBECTL") == "1":
            pytest.skip(msg)
        pytest.fail(msg + " (or set GAAMA_ALLOW_SKIP_KUBECTL=1 to skip these tests)")
    return exe


@pytest.fixture(scope="session")
def render(kubectl: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[dict]]:
    """Render a kustomize target to its list of objects (cached per target)."""

    @cache
    def _render(target: str) -> list[dict[str, Any]]:
        if target == "base+keda":
            # Kustomize only takes relative paths, so the wrapper points back into the repo.
            d = tmp_path_factory.mktemp("base-keda")
            (d / "kustomization.yaml").write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "kustomize.config.k8s.io/v1beta1",
                        "kind": "Kustomization",
                        "resources": [os.path.relpath(K8S / "base", d)],
                        "components": [os.path.relpath(K8S / "components" / "keda", d)],
                    }
                )
            )
        else:
            d = K8S / target if target == "base" else K8S / "overlays" / target
        proc = subprocess.run(
            [kubectl, "kustomize", str(d)], capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, f"kubectl kustomize {target} failed:\n{proc.stderr}"
        return [o for o in yaml.safe_load_all(proc.stdout) if o]

    return _render


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def by_name(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in of_kind(objs, kind)}


def partitions(objs: list[dict[str, Any]]) -> int:
    (cm,) = [
        c for c in of_kind(objs, "ConfigMap") if c["metadata"]["name"].startswith("gaama-config")
    ]
    return int(cm["data"]["GAAMA_TOPIC_PARTITIONS"])


# --------------------------------------------------------------------------- CRD structure

_DURATION = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h|d|w|y))+$"}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "labels": _STR_MAP,
        "annotations": _STR_MAP,
    },
}
_LABEL_SELECTOR = {
    "type": "object",
    "minProperties": 1,
    "properties": {"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}},
    "additionalProperties": False,
}

CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": _LABEL_SELECTOR,
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["port"],
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string", "pattern": "^/"},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                                # The operator's SafeAuthorization: a Secret key selector.
                                "authorization": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["credentials"],
                                    "properties": {
                                        "type": {"type": "string"},
                                        "credentials": {
                                            "type": "object",
                                            "additionalProperties": False,
                                            "required": ["key"],
                                            "properties": {
                                                "name": {"type": "string"},
                                                "key": {"type": "string"},
                                                "optional": {"type": "boolean"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    ("monitoring.coreos.com/v1", "PrometheusRule"): {
        "type": "object",
        "required": ["metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "interval": _DURATION,
                                "rules": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "required": ["expr"],
                                        "additionalProperties": False,
                                        "oneOf": [
                                            {"required": ["alert"]},
                                            {"required": ["record"]},
                                        ],
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string", "minLength": 1},
                                            "for": _DURATION,
                                            "labels": _STR_MAP,
                                            "annotations": _STR_MAP,
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
    ("keda.sh/v1alpha1", "ScaledObject"): {
        "type": "object",
        "required": ["metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["scaleTargetRef", "triggers"],
                "properties": {
                    "scaleTargetRef": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}},
                    },
                    "minReplicaCount": {"type": "integer", "minimum": 0},
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "pollingInterval": {"type": "integer", "minimum": 1},
                    "cooldownPeriod": {"type": "integer", "minimum": 0},
                    "advanced": {"type": "object"},
                    "triggers": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["type", "metadata"],
                            # KEDA trigger metadata is a map of strings; a bare number fails there.
                            "properties": {"type": {"type": "string"}, "metadata": _STR_MAP},
                        },
                    },
                },
                "additionalProperties": False,
            },
        },
    },
}


def validate_object(obj: dict[str, Any], version: str) -> None:
    import kubernetes_validate

    key = (obj["apiVersion"], obj["kind"])
    if key in CRD_SCHEMAS:
        jsonschema.validate(obj, CRD_SCHEMAS[key])
    else:
        kubernetes_validate.validate(obj, version, strict=True)


# --------------------------------------------------------------------------- (a) render+validate


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_target_renders_and_validates(render: Callable[[str], list[dict]], target: str) -> None:
    objs = render(target)
    assert set(by_name(objs, "Deployment")) == {f"gaama-{s}" for s in DEPLOYED}
    assert set(by_name(objs, "Service")) == {f"gaama-{s}" for s in DEPLOYED}
    assert set(by_name(objs, "PodDisruptionBudget")) == {f"gaama-{s}" for s in DEPLOYED}
    assert of_kind(objs, "ServiceMonitor") and of_kind(objs, "PrometheusRule")
    errors = []
    for version in K8S_VERSIONS:
        for obj in objs:
            try:
                validate_object(obj, version)
            except Exception as exc:  # every failure, reported together below
                where = ".".join(str(p) for p in getattr(exc, "absolute_path", []))
                errors.append(
                    f"{version} {obj['kind']}/{obj['metadata']['name']} {where}: "
                    f"{getattr(exc, 'message', exc)}"
                )
    assert not errors, "\n".join(errors)


def test_crd_schemas_reject_broken_objects() -> None:
    """The hand-written CRD schemas are not vacuous."""
    rule = load_yaml(PROM_RULE)
    validate_object(rule, K8S_VERSIONS[-1])
    broken = json.loads(json.dumps(rule))
    broken["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    with pytest.raises(jsonschema.ValidationError):
        validate_object(broken, K8S_VERSIONS[-1])
    with (K8S / "components" / "keda" / "scaledobjects.yaml").open(encoding="utf-8") as f:
        so = next(d for d in yaml.safe_load_all(f) if d)
    validate_object(so, K8S_VERSIONS[-1])
    so["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 1000
    with pytest.raises(jsonschema.ValidationError):
        validate_object(so, K8S_VERSIONS[-1])


@pytest.mark.requires_kubectl
def test_keda_scaled_objects_match_the_consumers(render: Callable[[str], list[dict]]) -> None:
    objs = render("base+keda")
    scaled = by_name(objs, "ScaledObject")
    (cm,) = of_kind(objs, "ConfigMap")
    assert set(scaled) == {f"gaama-{s}" for s in CONSUMERS}
    for service, topic in CONSUMERS.items():
        so = scaled[f"gaama-{service}"]
        assert so["spec"]["scaleTargetRef"]["name"] == f"gaama-{service}"
        (trigger,) = so["spec"]["triggers"]
        assert trigger["type"] == "kafka"
        md = trigger["metadata"]
        assert md["topic"] == topic
        assert md["consumerGroup"] == f"gaama-{service}"
        assert md["bootstrapServers"] == cm["data"]["GAAMA_KAFKA_BOOTSTRAP"]
        assert so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"]


@pytest.mark.requires_kubectl
def test_prod_keeps_secrets_out_of_git(render: Callable[[str], list[dict]]) -> None:
    assert not of_kind(render("prod"), "Secret"), "prod must expect an external gaama-secrets"
    assert by_name(render("dev"), "Secret")["gaama-secrets"]["stringData"]["GAAMA_API_KEYS"]


# --------------------------------------------------------------------------- (d) partitions


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_consumer_replicas_within_partitions(
    render: Callable[[str], list[dict]], target: str
) -> None:
    objs = render(target)
    n = partitions(objs)
    deployments = by_name(objs, "Deployment")
    for service in CONSUMERS:
        replicas = deployments[f"gaama-{service}"]["spec"].get("replicas", 1)
        assert 1 <= replicas <= n, f"{target}: gaama-{service} has {replicas} > {n} partitions"
    for so in of_kind(objs, "ScaledObject"):
        assert so["spec"]["maxReplicaCount"] <= n, f"{target}: {so['metadata']['name']}"
    # query is scaled by its HPA only; a replicas field would fight it on every apply.
    assert "replicas" not in deployments["gaama-query"]["spec"]
    (hpa,) = of_kind(objs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "gaama-query"
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_shutdown_grace_matches_the_pod_grace(
    render: Callable[[str], list[dict]], target: str
) -> None:
    """Each service exits within GAAMA_SHUTDOWN_GRACE_S of SIGTERM; the kubelet sends SIGTERM
    after the preStop hook and kills at terminationGracePeriodSeconds from its start, so the
    setting must be the pod's grace less the preStop sleep."""
    deployments = by_name(render(target), "Deployment")
    for service in SERVICES:
        pod = deployments[f"gaama-{service}"]["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        sleep = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
        grace = float(pod["terminationGracePeriodSeconds"])
        where = f"{target} gaama-{service}"
        assert "GAAMA_SHUTDOWN_GRACE_S" in env, f"{where}: GAAMA_SHUTDOWN_GRACE_S not set"
        assert float(env["GAAMA_SHUTDOWN_GRACE_S"]) == grace - sleep, where


def test_compose_gives_the_shutdown_grace() -> None:
    """docker compose stop waits stop_grace_period before SIGKILL: the default grace."""
    service = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["x-gaama-service"]
    seconds = float(str(service["stop_grace_period"]).removesuffix("s"))
    assert seconds == Settings.model_fields["shutdown_grace_s"].default


# --------------------------------------------------------------------------- (e) hardening


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_every_container_is_hardened(render: Callable[[str], list[dict]], target: str) -> None:
    for dep in of_kind(render(target), "Deployment"):
        name = dep["metadata"]["name"]
        pod = dep["spec"]["template"]["spec"]
        psc = pod.get("securityContext", {})
        assert psc.get("runAsNonRoot") is True, name
        assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        assert pod.get("automountServiceAccountToken") is False, name
        tmp_volumes = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        for c in pod.get("initContainers", []) + pod["containers"]:
            where = f"{target} {name}/{c['name']}"
            sc = c.get("securityContext", {})
            assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert "ALL" in sc.get("capabilities", {}).get("drop", []), where
            assert sc.get("capabilities", {}).get("add") in (None, []), where
            assert sc.get("privileged") in (None, False), where
            seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {}))
            assert seccomp.get("type") == "RuntimeDefault", where
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert mounts.get("/tmp") in tmp_volumes, f"{where}: /tmp must be an emptyDir"
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{where} {kind}"
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", where
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", where


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_containers_run_their_service(render: Callable[[str], list[dict]], target: str) -> None:
    for service, dep in (
        (s, by_name(render(target), "Deployment")[f"gaama-{s}"]) for s in DEPLOYED
    ):
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        assert c["args"] == [f"services.{service}.main"]
        assert "command" not in c, "the image's ENTRYPOINT is python -m"
        assert {p["containerPort"] for p in c["ports"]} == {8080}


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_network_policy_allows_only_what_is_needed(
    render: Callable[[str], list[dict]], target: str
) -> None:
    policies = of_kind(render(target), "NetworkPolicy")
    deny = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert deny and set(deny[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny[0]["spec"] and "egress" not in deny[0]["spec"]
    egress_ports = {
        p["port"]
        for pol in policies
        for rule in pol["spec"].get("egress", [])
        for p in rule.get("ports", [])
    }
    ingress_ports = {
        p["port"]
        for pol in policies
        for rule in pol["spec"].get("ingress", [])
        for p in rule.get("ports", [])
    }
    assert egress_ports == {53, 6379, 9092, 443, 8080}
    assert ingress_ports == {8080}
    # Egress to our own 8080 only from the MCP gateway, and only to query and ingest.
    for pol in policies:
        for rule in pol["spec"].get("egress", []):
            if any(p["port"] == 8080 for p in rule.get("ports", [])):
                sel = pol["spec"]["podSelector"]["matchLabels"]
                assert sel["app.kubernetes.io/component"] == "mcp", pol["metadata"]["name"]
                (to,) = rule["to"]
                (expr,) = to["podSelector"]["matchExpressions"]
                assert set(expr["values"]) == {"query", "ingest"}


# --------------------------------------------------------------------------- config vs Settings


def _check_settings(env: dict[str, str], where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fields = {f"GAAMA_{name.upper()}" for name in Settings.model_fields}
    unknown = [k for k in env if k.startswith("GAAMA_") and k.split("__")[0] not in fields]
    assert not unknown, f"{where}: not settings (typo?): {unknown}"
    for k in list(os.environ):
        if k.startswith("GAAMA_"):
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = load_settings()
    assert s.http_host == "0.0.0.0"
    assert {s.ingest_port, s.extract_port, s.reflect_port, s.query_port} == {8080}


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_config_is_valid_settings(
    render: Callable[[str], list[dict]], target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = render(target)
    secrets = of_kind(objs, "Secret") or [load_yaml(K8S / "base" / "secret.yaml")]
    _check_settings(env_of(of_kind(objs, "ConfigMap"), secrets), target, monkeypatch)


def _compose_default(value: Any) -> str:
    """`${VAR:-default}` -> default, as compose resolves it when VAR is unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))


def test_compose_config_is_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = load_yaml(COMPOSE)
    for s in SERVICES:
        env = {k: _compose_default(v) for k, v in compose["services"][s]["environment"].items()}
        _check_settings(env, f"compose {s}", monkeypatch)


def _check_gateway_env(env: dict[str, str], where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The MCP gateway reads the core settings plus its own (services/mcp/settings.py)."""
    own = {f"GAAMA_{name.upper()}" for name in McpSettings.model_fields}
    core = {k: v for k, v in env.items() if k not in own}
    _check_settings(core, where, monkeypatch)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    mcp = McpSettings()
    assert mcp.mcp_port == 8080, where
    assert mcp.query_url.endswith(":8080") and mcp.ingest_url.endswith(":8080"), where


def test_compose_gateway_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    svc = load_yaml(COMPOSE)["services"]["mcp"]
    env = {k: _compose_default(v) for k, v in svc["environment"].items()}
    _check_gateway_env(env, "compose mcp", monkeypatch)
    assert env["GAAMA_QUERY_URL"] == "http://query:8080"
    assert env["GAAMA_INGEST_URL"] == "http://ingest:8080"


@pytest.mark.requires_kubectl
@pytest.mark.parametrize("target", TARGETS)
def test_k8s_gateway_config_is_valid(
    render: Callable[[str], list[dict]], target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = render(target)
    secrets = of_kind(objs, "Secret") or [load_yaml(K8S / "base" / "secret.yaml")]
    env = env_of(of_kind(objs, "ConfigMap"), secrets)
    (c,) = by_name(objs, "Deployment")["gaama-mcp"]["spec"]["template"]["spec"]["containers"]
    env |= {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
    _check_gateway_env(env, target, monkeypatch)
    services = set(by_name(objs, "Service"))
    for url in (env["GAAMA_QUERY_URL"], env["GAAMA_INGEST_URL"]):
        assert url.removeprefix("http://").split(":")[0] in services, url
    # The gateway checks keys itself: it must read the same key file as query.
    (q,) = by_name(objs, "Deployment")["gaama-query"]["spec"]["template"]["spec"]["containers"]
    query_env = {e["name"]: e.get("value") for e in q.get("env", [])}
    assert env["GAAMA_API_KEYS_FILE"] == query_env["GAAMA_API_KEYS_FILE"]


# --------------------------------------------------------------------------- (b) compose


def compose_schema() -> dict[str, Any]:
    """The Compose Specification schema vendored inside check-jsonschema. Found through the
    package's location without importing it (its CLI import chain is not needed here)."""
    spec = importlib.util.find_spec("check_jsonschema")
    assert spec and spec.submodule_search_locations, "check-jsonschema is a dev dependency"
    path = (
        Path(next(iter(spec.submodule_search_locations)))
        / "builtin_schemas"
        / "vendor"
        / "compose-spec.json"
    )
    return json.loads(path.read_text(encoding="utf-8"))


def test_compose_matches_the_compose_spec() -> None:
    schema = compose_schema()
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator_cls(schema).iter_errors(load_yaml(COMPOSE))
    ]
    assert not errors, "\n".join(errors)


def test_compose_stack_is_wired() -> None:
    services = load_yaml(COMPOSE)["services"]
    for name, svc in services.items():
        image = svc["image"]
        if name in GATEWAYS:
            assert "build" in svc and svc["command"] == [f"services.{name}.main"]
            assert svc["read_only"] is True and svc["user"] == "10001:10001"
            assert svc["cap_drop"] == ["ALL"]
            assert "healthcheck" in svc
            assert {k: v["condition"] for k, v in svc["depends_on"].items()} == {
                "query": "service_healthy",
                "ingest": "service_healthy",
            }
        elif name in SERVICES:
            assert "build" in svc and svc["command"] == [f"services.{name}.main"]
            assert svc["read_only"] is True and svc["user"] == "10001:10001"
            assert svc["cap_drop"] == ["ALL"]
            assert "healthcheck" in svc
            assert {k: v["condition"] for k, v in svc["depends_on"].items()} == {
                "redis": "service_healthy",
                "kafka": "service_healthy",
                "topics": "service_completed_successfully",
            }
        else:  # third-party images pinned to an exact release
            assert re.search(r":v?\d+\.\d+\.\d+", image), f"{name}: pin {image}"
        assert svc.get("restart") in ("unless-stopped", "always", "no"), name
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["redis"]["image"].startswith("redis:8.")
    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    script = "\n".join(services["topics"]["command"])
    for topic in CONSUMERS.values():
        assert topic in script
    assert '"$$topic.dlq"' in script and "--if-not-exists" in script


# --------------------------------------------------------------------------- prometheus


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"] if "alert" in r]


def test_prometheus_rule_equals_alerts_file() -> None:
    assert load_yaml(PROM_RULE)["spec"] == load_yaml(ALERTS), (
        "deploy/k8s/base/monitoring/prometheusrule.yaml spec.groups must be a copy of "
        "deploy/prometheus/alerts.yml"
    )


def test_required_alerts_exist_with_runbooks() -> None:
    names = {r["alert"] for r in alert_rules()}
    assert {
        "GaamaConsumerLagHigh",
        "GaamaDeadLetters",
        "GaamaLLMFailureRateHigh",
        "GaamaQueryLatencyHigh",
        "GaamaRedisMemoryHigh",
        "GaamaStageStalled",
        "GaamaConsumerNoProgress",
        "GaamaEventLoopSaturated",
    } <= names
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(encoding="utf-8"), re.M)
    }
    for r in alert_rules():
        anchor = r["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in headings, f"{r['alert']}: no runbook heading for #{anchor}"
        assert r["labels"]["severity"] in ("warning", "critical")


def test_operations_doc_names_real_settings() -> None:
    """docs/operations.md names only variables something reads: the services' Settings, the MCP
    gateway's, and the two the CLI reads for data subject requests (gaama/cli_memory.py)."""
    from services.mcp.settings import McpSettings

    fields = {f"GAAMA_{name.upper()}" for name in Settings.model_fields}
    fields |= {f"GAAMA_{name.upper()}" for name in McpSettings.model_fields}
    fields |= {"GAAMA_ADMIN_KEY"}  # the CLI's admin key (gaama forget tenant)
    documented = re.findall(
        r"`(GAAMA_[A-Z_]+?)(?:__<FIELD>)?`", OPERATIONS.read_text(encoding="utf-8")
    )
    unknown = sorted({v for v in documented if v.split("__")[0] not in fields})
    assert not unknown, f"documented but not in gaama.config.Settings: {unknown}"


def test_prometheus_scrapes_every_service() -> None:
    config = load_yaml(PROM_CONFIG)
    jobs = {
        j["job_name"]: [t for sc in j["static_configs"] for t in sc["targets"]]
        for j in config["scrape_configs"]
    }
    for s in DEPLOYED:
        assert jobs[f"gaama-{s}"] == [f"{s}:8080"]
    mounts = load_yaml(COMPOSE)["services"]["prometheus"]["volumes"]
    for rule_file in config["rule_files"]:
        assert any(m.split(":")[1] == rule_file for m in mounts), rule_file


# --------------------------------------------------------------------------- (c) metric names


@cache
def known_series(service: str | None = None) -> dict[str, dict[str, set[str]]]:
    """Every series name a GAAMA process (of ``service``, or any) exposes -> its pre-created
    label values."""
    registry = CollectorRegistry()
    for name, wiring in SERVICE_METRICS.items():
        if service in (None, name):
            for build in wiring:
                build(registry)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
        "gauge": ("",),
        "info": ("_info",),
    }
    series: dict[str, dict[str, set[str]]] = {}
    for family in registry.collect():
        for suffix in suffixes.get(family.type, ("",)):
            series.setdefault(family.name + suffix, {})
        for sample in family.samples:
            labels = series.setdefault(sample.name, {})
            for k, v in sample.labels.items():
                labels.setdefault(k, set()).add(v)
    return series


_GRAFANA_VARS = re.compile(r"\$\{?(\w+)\}?")
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_PROMQL_WORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}


def _plain(expr: str) -> str:
    """Grafana variables replaced by values PromQL accepts."""
    ranges = {"__rate_interval": "5m", "__range": "6h", "__interval": "1m"}
    return _GRAFANA_VARS.sub(lambda m: ranges.get(m.group(1), "1"), expr)


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression. Uses the promql-parser package when installed
    (which also proves the expression parses), else a tokenizer good enough for our rules."""
    expr = _plain(expr)
    try:
        import promql_parser  # type: ignore[import-not-found]
    except ImportError:
        promql_parser = None
    if promql_parser is not None:
        names: set[str] = set()

        def visit(node: Any) -> bool:
            if isinstance(node, promql_parser.VectorSelector):
                if node.name:
                    names.add(node.name)
                for m in node.matchers.matchers:
                    if m.name == "__name__":
                        names.add(m.value)
            return True

        promql_parser.walk(promql_parser.parse(expr), visit)
        return names
    assert expr.count("(") == expr.count(")"), f"unbalanced parentheses: {expr}"
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    names = {v for k, _, v in _MATCHER.findall(expr) if k == "__name__"}
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+\w+", " ", s)
    s = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", s)
    for token in re.finditer(r"([A-Za-z_:][\w:]*)(\s*\()?", s):
        if not token.group(2) and token.group(1).lower() not in _PROMQL_WORDS:
            names.add(token.group(1))
    return names


def dashboard_exprs() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    return [
        (p["title"], t["expr"])
        for p in panels(dash["panels"])
        for t in p.get("targets", [])
        if t.get("expr")
    ]


def all_exprs() -> list[tuple[str, str]]:
    rules = [(f"alerts.yml {r['alert']}", r["expr"]) for r in alert_rules()]
    crd = [
        (f"PrometheusRule {r.get('alert')}", r["expr"])
        for g in load_yaml(PROM_RULE)["spec"]["groups"]
        for r in g["rules"]
    ]
    return [(f"dashboard {t}", e) for t, e in dashboard_exprs()] + rules + crd


def test_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, mode) (rate(gaama_query_seconds_bucket"
        '{mode="ppr"}[$__rate_interval]))) * $price / 1e6 > bool 1 and on() up{job=~"x"}'
    )
    assert metric_names(expr) == {"gaama_query_seconds_bucket", "up"}


def test_every_metric_in_dashboard_and_rules_exists() -> None:
    known = known_series()
    assert "gaama_query_seconds_bucket" in known and "process_cpu_seconds_total" in known
    missing = []
    for where, expr in all_exprs():
        for name in metric_names(expr) - known.keys() - EXTERNAL_METRICS.keys():
            missing.append(f"{where}: {name}")
    assert not missing, "metrics not defined in shared/gaama/metrics.py:\n" + "\n".join(missing)


def test_every_alert_selects_series_its_service_registers() -> None:
    """Each alert expression selects only series that the service it is about registers (a
    registry built the way that service builds its own), e.g. the lag alerts
    ``gaama_<stage>_consumer_lag``. That the series are also populated (non-zero when it
    matters) is shown against the real broker and Redis: lag under a backlog in
    tests/integration/test_consumer_lag.py, the stalled gauge under a Redis pause in
    tests/integration/test_stall.py, the no-progress gauge of a wedged consumer in
    tests/integration/test_no_progress.py."""
    wrong = []
    for r in alert_rules():
        stage = r.get("labels", {}).get("stage")
        for name in metric_names(r["expr"]):
            if name in EXTERNAL_METRICS:
                continue
            service = name.split("_")[1] if name.startswith("gaama_") else None
            if service not in SERVICE_METRICS or name not in known_series(service):
                wrong.append(f"{r['alert']}: {name} is registered by no service")
            elif stage is not None and service != stage:
                wrong.append(f"{r['alert']} (stage {stage}) selects {service}'s {name}")
    assert not wrong, "\n".join(wrong)
    per_stage = {
        "GaamaConsumerLagHigh": "consumer_lag",
        "GaamaStageStalled": "stalled_since_timestamp_seconds",
        "GaamaConsumerNoProgress": "no_progress_seconds",
    }
    for alert, metric in per_stage.items():
        exprs = [r["expr"] for r in alert_rules() if r["alert"] == alert]
        assert {n for e in exprs for n in metric_names(e)} == {
            f"gaama_{s}_{metric}" for s in CONSUMERS
        }, f"{alert} must cover every consumer stage"


def test_label_values_in_queries_exist() -> None:
    """`{direction="in"}` and friends name label values that metrics.py creates up front."""
    known = known_series()
    wrong = []
    for where, expr in all_exprs():
        for name, body in _SELECTOR.findall(_plain(expr)):
            for label, op, value in _MATCHER.findall(body):
                values = known.get(name, {}).get(label)
                if op == "=" and values and value not in values:
                    wrong.append(f"{where}: {name}{{{label}={value!r}}} not in {sorted(values)}")
    assert not wrong, "\n".join(wrong)


def test_dashboard_is_well_formed() -> None:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dash["templating"]["list"]}
    for _, expr in dashboard_exprs():
        for var in _GRAFANA_VARS.findall(expr):
            assert var.startswith("__") or var in variables, f"undefined ${var}"
    exprs = " ".join(e for _, e in dashboard_exprs())
    for needle in (
        "gaama_query_graph_nodes",
        "gaama_query_seconds_bucket",
        "gaama_query_stage_seconds_bucket",
        "llm_tokens_total",
        "dead_lettered_total",
        "consumer_lag",
        "consumed_total",
    ):
        assert needle in exprs, needle


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_basics() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(froms) >= 2, "multi-stage build"
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, re.M)
    assert base and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base.group(1))
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert 'ENTRYPOINT ["python", "-m"]' in text
    # No torch in the image: the default embedder is ONNX Runtime; the model is built in the
    # builder stage with tools that stay out of the venv, and the image says where it is.
    assert "torch" not in re.sub(r"#.*", "", text).replace('"torch" not in', "")
    assert "python -m gaama.onnx_model --dir /opt/venv/share/gaama/onnx" in text
    assert "GAAMA_ONNX_MODEL_DIR=/opt/venv/share/gaama/onnx" in text


@pytest.mark.parametrize("service", DEPLOYED)
def test_service_module_named_by_the_manifests_exists(service: str) -> None:
    """Compose, the Deployments and the Dockerfile run `python -m services.<name>.main`."""
    assert (ROOT / "services" / service / "main.py").is_file()
