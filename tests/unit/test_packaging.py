"""What ships: the wheel and the image hold the core (``gaama``) and the services, never the
benchmarks or the tests, and the runtime code imports nothing that only benchmarks need."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Imported only by benchmarks/ (the ``bench`` extra), never by the runtime.
BENCH_ONLY = ("benchmarks", "tqdm")


def test_wheel_holds_no_benchmark_code(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    # A copy of the sources, so the build's build/ and *.egg-info stay out of the checkout (and
    # stale files there cannot leak into the wheel); benchmarks/ and tests/ are in the copy so
    # that only the packaging config keeps them out.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("shared", "services", "benchmarks", "tests"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        timeout=180,
    )
    [wheel] = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    assert "gaama/cli.py" in modules and "gaama/store/bulk.py" in modules
    assert "services/query/main.py" in modules
    tops = {n.split("/", 1)[0] for n in names}
    assert tops <= {"gaama", "services", *(t for t in tops if t.endswith(".dist-info"))}, tops
    assert not [n for n in names if "/bench/" in n]  # where benchmarks used to live


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", ["shared/gaama", "services"])
def test_runtime_imports_nothing_bench_only(package: str) -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & set(BENCH_ONLY))
        for p in sorted((ROOT / package).rglob("*.py"))
    }
    assert not {p: m for p, m in offenders.items() if m}


def test_image_holds_no_benchmark_code() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    sources = {
        src
        for line in re.findall(r"^COPY\s+(?!--from)(.+)$", dockerfile, re.M)
        for src in line.split()[:-1]
        if not src.startswith("--")
    }
    assert sources == {"pyproject.toml", "README.md", "shared", "services"}
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert "benchmarks" in ignored and "tests" in ignored
