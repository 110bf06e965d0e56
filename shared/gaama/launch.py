"""Run a GAAMA service as a child process: ``python -m services.<name>.main``.

Used by ``gaama demo``, the benchmarks and the tests. It starts processes by module name and
imports no service. The child gets the caller's settings as ``GAAMA_*`` environment variables
(namespace, servers, API keys), its own port, and a log file that errors point to.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
from pydantic import BaseModel, SecretStr

from gaama.config import Settings
from gaama.devstack import free_port
from gaama.errors import GaamaError

SERVICES = ("ingest", "extract", "reflect", "query")
#: Services that ``ServiceProcess`` can also start, but that ``gaama demo`` does not run.
GATEWAYS = ("mcp",)


class ServiceError(GaamaError):
    """A service did not start; the message names its log."""


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``GAAMA_*`` variables that put a child process in ``settings``' namespace."""
    return {
        "GAAMA_REDIS_URL": settings.redis_url,
        "GAAMA_REDIS_CLUSTER": "true" if settings.redis_cluster else "false",
        "GAAMA_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "GAAMA_KEY_PREFIX": settings.key_prefix,
        "GAAMA_INDEX_NAME": settings.index_name,
        "GAAMA_TOPIC_PREFIX": settings.topic_prefix,
        "GAAMA_TOPIC_PARTITIONS": str(settings.topic_partitions),
        "GAAMA_MAX_RETRIES": str(settings.max_retries),
        "GAAMA_RETRY_BACKOFF_S": str(settings.retry_backoff_s),
        "GAAMA_CHUNK_IDLE_S": str(settings.chunk_idle_s),
        "GAAMA_DURABILITY": settings.durability,
        "GAAMA_INGEST_BATCH": str(settings.ingest_batch),
        "GAAMA_API_KEYS": json.dumps([k.model_dump() for k in settings.api_keys]),
        "GAAMA_SIGNING_KEYS": json.dumps(
            [
                {**k.model_dump(), "secret": k.secret.get_secret_value()}
                for k in settings.signing_keys
            ]
        ),
        **_nested_env("GAAMA_KAFKA__", settings.kafka),
        **_nested_env("GAAMA_REDIS__", settings.redis),
    }


def _nested_env(prefix: str, model: BaseModel) -> dict[str, str]:
    """``model``'s fields that differ from their defaults, secrets in clear (the child needs
    them), as ``<prefix><FIELD>`` variables."""
    out = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if name in model.model_fields_set and value is not None:
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, bool):
                value = "true" if value else "false"
            out[f"{prefix}{name.upper()}"] = str(value)
    return out


class ServiceProcess:
    """One service on a port of its own (a free one unless given).

    Args:
        name: ``ingest``, ``extract``, ``reflect``, ``query`` or ``mcp``.
        settings: Whose namespace and servers the service uses.
        log_dir: Where ``<name>-<port>.log`` goes.
        port: The HTTP port; a free one by default.
        inherit: Pass the caller's own ``GAAMA_*`` variables through (the LLM settings of a
            benchmark run, say) under the namespace ones; tests pass False to stay hermetic.
        extra: More environment variables, applied last.
    """

    def __init__(
        self,
        name: str,
        settings: Settings,
        log_dir: Path,
        *,
        port: int | None = None,
        inherit: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        if name not in (*SERVICES, *GATEWAYS):
            known = ", ".join((*SERVICES, *GATEWAYS))
            raise ServiceError(f"unknown service {name!r}; one of {known}")
        self.name = name
        self.port = port or free_port()
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if inherit or not k.startswith("GAAMA_")}
        env |= settings_env(settings)
        env |= {
            f"GAAMA_{name.upper()}_PORT": str(self.port),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env |= dict(extra or {})
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> ServiceProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", f"services.{self.name}.main"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise ServiceError(
                f"the {self.name} service exited ({code}); its log "
                f"{self.log_path} ends:\n{self.log_tail()}"
            )

    def start(self, within_s: float = 120) -> ServiceProcess:
        """Spawn and wait (blocking) until ``/readyz`` answers 200."""
        return self.spawn().wait_ready(within_s)

    def wait_ready(self, within_s: float = 120) -> ServiceProcess:
        """Wait (blocking) until the spawned service's ``/readyz`` answers 200."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise ServiceError(
            f"the {self.name} service was not ready in {within_s:.0f}s; see {self.log_path}"
        )

    async def astart(self, within_s: float = 120) -> ServiceProcess:
        """Spawn and wait (without blocking the event loop) until ``/readyz`` answers 200."""
        self.spawn()
        deadline = time.monotonic() + within_s
        async with httpx.AsyncClient(timeout=1) as client:
            while time.monotonic() < deadline:
                self._check_alive()
                try:
                    if (await client.get(f"{self.url}/readyz")).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        self.stop()
        raise ServiceError(
            f"the {self.name} service was not ready in {within_s:.0f}s; see {self.log_path}"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (a graceful faust/uvicorn shutdown), then SIGKILL after 20 s."""
        if not self.alive():
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()
