"""The core package imports no service, no Kafka client and no HTTP framework.

``shared/gaama`` is a library: services bind it to faust and FastAPI, benchmarks drive it from
outside. Every import statement of every module is checked, those inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gaama

CORE = Path(gaama.__file__).parent
#: Top-level packages the core must not import.
FORBIDDEN = frozenset(
    {
        "services",
        "benchmarks",
        "tests",
        "faust",
        "mode",  # faust's service framework
        "aiokafka",
        "kafka",
        "confluent_kafka",
        "fastapi",
        "starlette",
        "uvicorn",
        "aiohttp",
        "mcp",
    }
)
#: (module, imported package) pairs allowed for now; this list only shrinks. The embedded dev
#: stack (``gaama dev up``) creates the topics on its broker with aiokafka's admin client.
EXEMPT = frozenset({("gaama.devstack.stack", "aiokafka")})


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def _module(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_core_imports_no_service_kafka_or_http_framework() -> None:
    found = {
        (_module(path), package)
        for path in sorted(CORE.rglob("*.py"))
        for package in _imports(path) & FORBIDDEN
    }
    assert found - EXEMPT == set()


def test_the_scan_sees_a_forbidden_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from services.runtime import policy\n    import faust.web\n")
    assert _imports(probe) & FORBIDDEN == {"services", "faust"}
