"""The embedding backends a benchmark can compare, by the name results are recorded under."""

from __future__ import annotations

from typing import Any

from gaama.errors import ConfigError

DEFAULT = "onnx"
#: Name → settings that build the backend (``GAAMA_*`` variables for a service process).
SETTINGS: dict[str, dict[str, Any]] = {
    "onnx": {"embedder": "onnx", "onnx_variant": "fp32"},
    # The default before batch lanes: one batch at a time, on one thread.
    "onnx-1lane": {"embedder": "onnx", "onnx_variant": "fp32", "onnx_lanes": 1},
    "onnx-2t": {
        "embedder": "onnx",
        "onnx_variant": "fp32",
        "onnx_threads": 2,
        "onnx_spin": True,
        "onnx_lanes": 1,
    },
    "onnx-int8": {"embedder": "onnx", "onnx_variant": "int8"},
    "torch": {"embedder": "minilm-torch"},
}


def env(name: str) -> dict[str, str]:
    """The environment that makes a service process use backend ``name``."""
    return {f"GAAMA_{k.upper()}": str(v) for k, v in settings(name).items()}


def settings(name: str) -> dict[str, Any]:
    if name not in SETTINGS:
        raise ConfigError(f"unknown embedding backend {name!r}; one of {', '.join(SETTINGS)}")
    return SETTINGS[name]


def parse(text: str) -> tuple[str, ...]:
    """``"onnx,torch"`` → ``("onnx", "torch")``, checked."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise ConfigError("no embedding backend named")
    for n in names:
        settings(n)
    return names
