"""Record/replay of LLM calls in a JSONL cassette.

In ``record`` mode every successful call is appended as one JSON line::

    {"key": <sha256>, "stage": ..., "model": ..., "request": {...}, "response": {...},
     "recorded_at": <ISO time>}

The key is the SHA-256 of the canonical JSON (sorted keys, no spaces) of the *logical* request:
model, messages and the JSON-schema ``response_format`` the caller asked for. It deliberately
ignores the format actually sent after a fallback to JSON mode, so a cassette recorded against a
server without json_schema support replays on any client.

In ``replay`` mode the client answers from the cassette and never touches the network.

Several processes may record into one file: each record is a single ``os.write`` on a
descriptor opened with ``O_APPEND`` (the kernel positions every write at the end), followed by
``fsync`` so a crash never leaves a record half on disk but acknowledged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gaama.errors import CassetteMiss, ConfigError

log = logging.getLogger(__name__)


def canonical_json(obj: object) -> str:
    """Canonical JSON: sorted keys, no insignificant whitespace, UTF-8 kept as is."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: Mapping[str, object]) -> str:
    """SHA-256 hex digest of the canonical JSON of ``request``."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


class Cassette:
    """A JSONL file of recorded LLM requests and their parsed JSON answers.

    Args:
        path: The JSONL file. Created on the first record; must exist for replay.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._entries: dict[str, dict[str, Any]] | None = None
        self._models: set[str] = set()
        # Recording may happen from several tasks; the lock keeps the in-memory index in step
        # with the file (the file itself is protected by O_APPEND).
        self._lock = threading.Lock()

    # --- replay ---------------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, Any]]:
        entries: dict[str, dict[str, Any]] = {}
        models: set[str] = set()
        if not self.path.exists():
            raise ConfigError(f"GAAMA_LLM_CASSETTE: cassette {self.path} does not exist")
        with self.path.open("r", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    # A line cut short by a crash while recording: skip it, keep the rest.
                    log.warning("cassette %s line %d is not valid JSON; skipped", self.path, lineno)
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
                    log.warning("cassette %s line %d has no key; skipped", self.path, lineno)
                    continue
                # Last record wins: re-recording a request refreshes its answer.
                entries[rec["key"]] = rec
                if isinstance(rec.get("model"), str):
                    models.add(rec["model"])
        self._models = models
        return entries

    def entries(self) -> dict[str, dict[str, Any]]:
        """All records by key (loaded once, lazily)."""
        with self._lock:
            if self._entries is None:
                self._entries = self._load()
            return self._entries

    def models(self) -> set[str]:
        """The model names found in the cassette."""
        self.entries()
        return set(self._models)

    def lookup(self, key: str, *, stage: str) -> dict[str, Any]:
        """The recorded response for ``key``.

        Raises:
            CassetteMiss: no record has this key.
        """
        rec = self.entries().get(key)
        if rec is None:
            raise CassetteMiss(
                f"LLM cassette miss for stage {stage!r}: no record with key {key} in {self.path} "
                f"(re-record with GAAMA_LLM_CASSETTE_MODE=record after changing prompts, "
                f"model or schema)"
            )
        response = rec.get("response")
        if not isinstance(response, dict):
            raise CassetteMiss(f"LLM cassette record {key} (stage {stage!r}) has no JSON object")
        # A deep copy so callers mutating the answer cannot corrupt later replays.
        copied: dict[str, Any] = json.loads(json.dumps(response))
        return copied

    # --- record ---------------------------------------------------------------------------

    def record(
        self,
        key: str,
        *,
        stage: str,
        model: str,
        request: Mapping[str, object],
        response: Mapping[str, object],
    ) -> None:
        """Append one record; safe across processes (O_APPEND, one write, fsync)."""
        rec = {
            "key": key,
            "stage": stage,
            "model": model,
            "request": request,
            "response": response,
            "recorded_at": datetime.now(UTC).isoformat(),
        }
        data = (canonical_json(rec) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, data)
                if written != len(data):
                    # Regular files do not short-write short of a full disk; never leave half a
                    # record unnoticed.
                    raise OSError(f"short write to cassette {self.path}: {written}/{len(data)}")
                os.fsync(fd)
            finally:
                os.close(fd)
            if self._entries is not None:
                self._entries[key] = json.loads(canonical_json(rec))
                self._models.add(model)
