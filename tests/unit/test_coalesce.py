"""Micro-batching of concurrent query encodes (gaama.coalesce)."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import numpy as np
import pytest

from gaama.coalesce import CoalescingEmbedder, for_queries
from gaama.config import load_settings


def vector(text: str) -> np.ndarray:
    """A row that depends on the text alone: a mix-up between callers shows."""
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
    v = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    return v / np.linalg.norm(v)


class FakeEmbedder:
    name = "fake"
    dim = 8

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate: asyncio.Event | None = None  # set: calls wait for it
        self.hold: set[str] | None = None  # set: only calls with one of these texts wait
        self.fail_on: str | None = None
        self.cancelled = 0

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        try:
            if self.gate is not None and (self.hold is None or self.hold & set(texts)):
                await self.gate.wait()
            else:
                await asyncio.sleep(0.002)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError(f"model failed on {self.fail_on!r}")
        return np.stack([vector(t) for t in texts])


async def test_concurrent_callers_get_their_own_rows_from_shared_batches():
    inner = FakeEmbedder()
    emb = CoalescingEmbedder(inner, window_s=0.005, max_batch=64)
    asks = [[f"query {i}"] if i % 3 else [f"query {i}", f"again {i}"] for i in range(24)]
    outs = await asyncio.gather(*(emb.embed(t) for t in asks))
    for texts, out in zip(asks, outs, strict=True):
        assert out.shape == (len(texts), 8)
        assert np.array_equal(out, np.stack([vector(t) for t in texts]))
    assert len(inner.calls) < len(asks)  # coalesced
    assert sum(len(c) for c in inner.calls) == sum(len(t) for t in asks)


async def test_batches_respect_max_batch_and_never_overlap():
    inner = FakeEmbedder()
    inner.gate = asyncio.Event()
    emb = CoalescingEmbedder(inner, window_s=0.005, max_batch=4)
    tasks = [asyncio.create_task(emb.embed([f"q{i}"])) for i in range(10)]
    await asyncio.sleep(0.02)
    assert len(inner.calls) == 1  # the next batch waits for the running one
    inner.gate.set()
    outs = await asyncio.gather(*tasks)
    # the first call found the embedder idle and ran alone; the rest queued behind it
    assert [len(c) for c in inner.calls] == [1, 4, 4, 1]
    assert [o[0].tolist() for o in outs] == [vector(f"q{i}").tolist() for i in range(10)]


async def test_a_failing_batch_fails_only_its_callers():
    inner = FakeEmbedder()
    inner.fail_on = "boom"
    emb = CoalescingEmbedder(inner, window_s=0.005, max_batch=2)
    results = await asyncio.gather(
        *(emb.embed([t]) for t in ("a", "boom", "b", "c", "d")), return_exceptions=True
    )
    assert inner.calls == [["a"], ["boom", "b"], ["c", "d"]]
    assert np.array_equal(results[0], vector("a")[None])
    for r in results[1:3]:
        assert isinstance(r, RuntimeError) and "boom" in str(r)
    assert np.array_equal(results[3], vector("c")[None])
    assert np.array_equal(results[4], vector("d")[None])
    # and the embedder keeps serving
    assert np.array_equal(await emb.embed(["e"]), vector("e")[None])


async def test_cancelling_one_caller_does_not_cancel_the_batch():
    inner = FakeEmbedder()
    inner.gate, inner.hold = asyncio.Event(), {"y"}
    emb = CoalescingEmbedder(inner, window_s=0.005, max_batch=64)
    tasks = [asyncio.create_task(emb.embed([t])) for t in ("w", "x", "y", "z")]
    await asyncio.sleep(0.02)
    assert inner.calls == [["w"], ["x", "y", "z"]]  # the second batch is running, held
    tasks[2].cancel()
    await asyncio.sleep(0)
    inner.gate.set()
    x, z = await tasks[1], await tasks[3]
    with pytest.raises(asyncio.CancelledError):
        await tasks[2]
    assert inner.cancelled == 0
    assert np.array_equal(x, vector("x")[None]) and np.array_equal(z, vector("z")[None])


async def test_a_caller_cancelled_while_queued_is_left_out():
    inner = FakeEmbedder()
    inner.gate, inner.hold = asyncio.Event(), {"first"}
    emb = CoalescingEmbedder(inner, window_s=0.02, max_batch=64)
    first = asyncio.create_task(emb.embed(["first"]))
    keep = asyncio.create_task(emb.embed(["keep"]))
    drop = asyncio.create_task(emb.embed(["drop"]))
    await asyncio.sleep(0.005)  # "first" runs, the other two wait for it
    drop.cancel()
    inner.gate.set()
    await first
    assert np.array_equal(await keep, vector("keep")[None])
    assert inner.calls == [["first"], ["keep"]]


async def test_a_call_after_a_quiet_spell_runs_at_once():
    inner = FakeEmbedder()
    emb = CoalescingEmbedder(inner, window_s=0.5)
    t0 = asyncio.get_running_loop().time()
    await emb.embed(["alone"])
    assert asyncio.get_running_loop().time() - t0 < 0.25  # no half-second window at low load


async def test_calls_close_together_wait_for_the_window():
    inner = FakeEmbedder()
    emb = CoalescingEmbedder(inner, window_s=0.05)
    await emb.embed(["a"])  # idle: at once
    b = asyncio.create_task(emb.embed(["b"]))  # right after "a": the window opens
    await asyncio.sleep(0.02)
    c = asyncio.create_task(emb.embed(["c"]))  # inside the window: joins
    await asyncio.gather(b, c)
    assert inner.calls == [["a"], ["b", "c"]]


class LocalEmbedder(FakeEmbedder):
    """A fake with a blocking ``embed_sync``, like the local models: records the thread it ran
    on; its async ``embed`` (the worker-thread path) is the base class's."""

    def __init__(self) -> None:
        super().__init__()
        self.sync_threads: list[int] = []

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        self.sync_threads.append(threading.get_ident())
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError(f"model failed on {self.fail_on!r}")
        return np.stack([vector(t) for t in texts])


async def test_a_quiet_query_is_encoded_on_the_loop_thread():
    inner = LocalEmbedder()
    emb = CoalescingEmbedder(inner, window_s=0.05)
    out = await emb.embed(["alone"])
    assert np.array_equal(out, vector("alone")[None])
    assert inner.sync_threads == [threading.get_ident()] and inner.calls == []
    # right after it: busy, so it goes through a batch (the worker-thread path)
    await asyncio.gather(emb.embed(["b"]), emb.embed(["c"]))
    assert inner.calls == [["b", "c"]] and len(inner.sync_threads) == 1
    await asyncio.sleep(0.06)  # quiet again
    many = [f"t{i}" for i in range(CoalescingEmbedder.INLINE_MAX_TEXTS + 1)]
    assert np.array_equal(await emb.embed(many), np.stack([vector(t) for t in many]))
    assert inner.calls[-1] == many  # more than a query: never on the loop
    off = LocalEmbedder()
    await CoalescingEmbedder(off, window_s=0.05, inline=False).embed(["alone"])
    assert off.calls == [["alone"]] and off.sync_threads == []


async def test_a_failing_inline_encode_fails_only_its_caller():
    inner = LocalEmbedder()
    inner.fail_on = "boom"
    emb = CoalescingEmbedder(inner, window_s=0.01)
    with pytest.raises(RuntimeError, match="boom"):
        await emb.embed(["boom"])
    await asyncio.sleep(0.02)
    assert np.array_equal(await emb.embed(["fine"]), vector("fine")[None])
    assert len(inner.sync_threads) == 2


async def test_empty_input_needs_no_batch():
    inner = FakeEmbedder()
    out = await CoalescingEmbedder(inner, window_s=0.005).embed([])
    assert out.shape == (0, 8) and inner.calls == []


def test_window_zero_turns_coalescing_off():
    inner = FakeEmbedder()
    assert for_queries(inner, load_settings(embed_coalesce_ms=0)) is inner
    wrapped = for_queries(inner, load_settings(embed_coalesce_ms=3, embed_batch=32))
    assert isinstance(wrapped, CoalescingEmbedder)
    assert (wrapped.window_s, wrapped.max_batch, wrapped.dim) == (0.003, 32, 8)
    local = LocalEmbedder()
    assert for_queries(local, load_settings())._inline is not None  # type: ignore[attr-defined]
    off = for_queries(local, load_settings(embed_inline=False))
    assert off._inline is None  # type: ignore[attr-defined]
