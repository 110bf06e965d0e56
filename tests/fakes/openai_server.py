"""A real, local, programmable OpenAI-compatible HTTP server for tests.

It serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` with uvicorn + Starlette in a
background thread on a free loopback port, so the code under test talks to it through the real
``openai`` SDK and a real socket (no monkeypatching).

Usage::

    with FakeOpenAIServer() as server:
        server.script(status(429, retry_after=0.1), good({"answer": "x"}))
        settings = Settings(llm_base_url=server.base_url, llm_model="fake-model")
        ...
        assert len(server.requests) == 2

Each chat request pops the next scripted behaviour; when the script is empty the ``responder``
computes a good answer from the request. :func:`default_responder` understands the GAAMA prompts
(extraction, reflection, answer, both judges), so pipeline tests can run many chunks unscripted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Responder = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Behaviour:
    """One scripted reaction to one chat request (build with the helpers below)."""

    kind: str
    payload: Any = None
    seconds: float = 0.0
    then: Behaviour | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def good(obj: dict[str, Any]) -> Behaviour:
    """Answer with ``obj`` as JSON content, finish_reason "stop"."""
    return Behaviour("good", payload=obj)


def good_text(text: str) -> Behaviour:
    """Answer with raw ``text`` as content (e.g. JSON inside Markdown fences)."""
    return Behaviour("text", payload=text)


def malformed() -> Behaviour:
    """Answer with content that is not JSON."""
    return Behaviour("text", payload='{"facts": [{"text": "unterminated')


def truncated() -> Behaviour:
    """Answer cut off by the token limit: partial JSON and finish_reason "length"."""
    return Behaviour("truncated", payload='{"facts": [{"text": "Caroline went')


def slow(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Wait ``seconds`` before acting as ``then`` (default: the responder)."""
    return Behaviour("slow", seconds=seconds, then=then)


def status(code: int, retry_after: float | None = None, message: str = "") -> Behaviour:
    """Fail with HTTP ``code`` and an OpenAI-style error body; optional Retry-After header."""
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
    return Behaviour("status", status=code, headers=headers, payload=message or f"fake {code}")


def refusal(text: str = "I can't help with that request.") -> Behaviour:
    """Answer with ``message.refusal`` set and no content."""
    return Behaviour("refusal", payload=text)


def reject_json_schema() -> Behaviour:
    """400 if the request uses ``response_format`` json_schema; otherwise the responder."""
    return Behaviour("reject_json_schema")


# --- the default responder -----------------------------------------------------------------

_CHUNK_EP = re.compile(r"^- episode_id: (\S+)\n  text: (.*)$", re.M)
_FACT = re.compile(r"^- id: (\S+)\n  text: (.*)$", re.M)
_TURN = re.compile(r"^\[(?P<time>[^\]]*)\]\s*(?P<speaker>[^:]+):\s*(?P<said>.*)$")
_WORD = re.compile(r"[A-Za-z]{5,}")
_FIELD = re.compile(r"^(QUESTION|REFERENCE ANSWER|CANDIDATE ANSWER): (.*)$", re.M)
_STOP = {"about", "there", "their", "would", "could", "should", "really", "thanks", "which"}


def _request_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.get("messages", []))


def _task(request: dict[str, Any]) -> str:
    fmt = request.get("response_format") or {}
    name = (fmt.get("json_schema") or {}).get("name") if isinstance(fmt, dict) else None
    text = _request_text(request)
    for task in ("extraction", "reflection", "judge_reward", "judge_binary", "answer"):
        if name == f"gaama_{task}" or f"named gaama_{task} " in text:
            return task
    return "unknown"


def _topic(said: str, speaker: str) -> str:
    words = [w.lower() for w in _WORD.findall(said)]
    words = [w for w in words if w not in _STOP and w != speaker.lower()]
    return f"{words[0]}_topic" if words else "everyday_matters"


def default_responder(request: dict[str, Any]) -> dict[str, Any]:
    """A deterministic good answer to any GAAMA prompt, computed from the request.

    Extraction: one fact per chunk episode citing it, and one concept per episode.
    Reflection: one reflection citing the first two facts. Answer: the first memory line.
    Judges: CORRECT / reward 1 when the reference occurs in the candidate.
    """
    task = _task(request)
    user = str(request.get("messages", [{}])[-1].get("content") or "")
    if task == "extraction":
        facts, episodes = [], []
        for ep_id, text in _CHUNK_EP.findall(user):
            m = _TURN.match(text.strip())
            speaker, said = (m["speaker"].strip(), m["said"]) if m else ("Someone", text)
            when = m["time"] if m else ""
            topic = _topic(said, speaker)
            facts.append(
                {
                    "text": f"{speaker} said on {when}: {said}".strip(),
                    "belief": 0.9,
                    "source_episode_ids": [ep_id],
                    "subject": speaker,
                    "concepts": [topic],
                }
            )
            episodes.append({"episode_id": ep_id, "concepts": [topic]})
        return {"facts": facts, "episodes": episodes}
    if task == "reflection":
        facts_part = user.split("EXISTING REFLECTIONS", 1)[0]
        found = _FACT.findall(facts_part)
        if len(found) < 2:
            return {"reflections": []}
        (id1, t1), (id2, t2) = found[0], found[1]
        return {
            "reflections": [
                {"text": f"Read together: {t1} / {t2}", "fact_ids": [id1, id2], "subject": ""}
            ]
        }
    fields = dict(_FIELD.findall(user))
    if task == "answer":
        memory = user.split("MEMORY NOTES:", 1)[-1].split("QUESTION:", 1)[0].strip()
        return {"answer": memory.splitlines()[0] if memory else "The memory does not say."}
    if task in ("judge_reward", "judge_binary"):
        ref = fields.get("REFERENCE ANSWER", "").strip().lower()
        hit = bool(ref) and ref in fields.get("CANDIDATE ANSWER", "").lower()
        if task == "judge_reward":
            return {"key_facts": [{"fact": ref, "present": hit}], "score": 1.0 if hit else 0.0}
        return {"reasoning": "fake judge", "label": "CORRECT" if hit else "WRONG"}
    return {"ok": True}


# --- the server ------------------------------------------------------------------------------


def _completion(
    request: dict[str, Any],
    content: str | None,
    *,
    finish_reason: str = "stop",
    refusal_text: str | None = None,
) -> dict[str, Any]:
    prompt_tokens = len(_request_text(request).split())
    completion_tokens = len((content or refusal_text or "").split())
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal_text},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _error(code: int, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake_error", "param": param, "code": None}}


class FakeOpenAIServer:
    """Programmable OpenAI-compatible server on ``127.0.0.1:<free port>``.

    Attributes:
        requests: Every chat/embeddings request body received, in order.
        responder: Computes the answer when no behaviour is scripted.
        reject_formats: ``response_format`` types always answered with a 400, like a server
            that does not support them (e.g. ``{"json_schema"}``).
        latency_s: How long every unscripted chat answer takes (a model's fixed latency).
    """

    def __init__(self, responder: Responder = default_responder, latency_s: float = 0.0) -> None:
        self.responder = responder
        self.latency_s = latency_s
        self.reject_formats: set[str] = set()
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # highest number of chat requests served at once
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """The URL to give the OpenAI client (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- programming ---------------------------------------------------------------------

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next chat requests, in order."""
        with self._lock:
            self._script.extend(behaviours)

    def reset(self) -> None:
        """Forget the script, the recorded requests and rejected formats; default responder."""
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.reject_formats.clear()
            self.responder = default_responder
            self.max_in_flight = 0

    def pending(self) -> int:
        """Scripted behaviours not yet used."""
        with self._lock:
            return len(self._script)

    def chat_requests(self) -> list[dict[str, Any]]:
        """The chat-completion requests received so far."""
        with self._lock:
            return [r for r in self.requests if "messages" in r]

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Start serving; returns once the port accepts connections."""
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            ]
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="fake-openai"
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- handlers ------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        fmt = (body.get("response_format") or {}).get("type")
        with self._lock:
            self.requests.append(body)
            if fmt in self.reject_formats:
                # A server-wide limitation: answered before, and without using up, the script.
                return self._reject(fmt)
            behaviour = self._script.popleft() if self._script else None
            if behaviour is None and self.latency_s > 0:
                behaviour = slow(self.latency_s)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._act(body, behaviour, request)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _reject(self, fmt: str) -> Response:
        msg = f"Invalid parameter: 'response_format' of type '{fmt}' is not supported."
        return JSONResponse(_error(400, msg, "response_format"), status_code=400)

    async def _act(self, body: dict[str, Any], b: Behaviour | None, request: Request) -> Response:
        if b is None:
            return JSONResponse(_completion(body, json.dumps(self.responder(body))))
        if b.kind == "good":
            return JSONResponse(_completion(body, json.dumps(b.payload)))
        if b.kind == "text":
            return JSONResponse(_completion(body, str(b.payload)))
        if b.kind == "truncated":
            return JSONResponse(_completion(body, str(b.payload), finish_reason="length"))
        if b.kind == "refusal":
            return JSONResponse(_completion(body, None, refusal_text=str(b.payload)))
        if b.kind == "status":
            return JSONResponse(
                _error(b.status, str(b.payload)), status_code=b.status, headers=b.headers
            )
        if b.kind == "slow":
            # Stop waiting when the client gives up, as a real server would, so an abandoned
            # request does not linger into the next test.
            deadline = time.monotonic() + b.seconds
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    return Response(status_code=499)
                await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
            return await self._act(body, b.then, request)
        if b.kind == "reject_json_schema":
            if (body.get("response_format") or {}).get("type") == "json_schema":
                return self._reject("json_schema")
            return await self._act(body, None, request)
        raise ValueError(f"unknown behaviour {b.kind!r}")

    async def _embeddings(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
        inputs = body.get("input", [])
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        dim = int(body.get("dimensions") or 16)
        data = []
        for i, text in enumerate(inputs):
            data.append({"object": "embedding", "index": i, "embedding": _vector(str(text), dim)})
        tokens = sum(len(str(t).split()) for t in inputs)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "fake-embed"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


def _vector(text: str, dim: int) -> list[float]:
    """A unit vector that depends only on ``text`` (SHA-256 stretched to ``dim`` values)."""
    raw: list[float] = []
    counter = 0
    while len(raw) < dim:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        raw.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    raw = raw[:dim]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [v / norm for v in raw]


@contextmanager
def fake_openai_server(responder: Responder = default_responder) -> Iterator[FakeOpenAIServer]:
    """Context manager: a started :class:`FakeOpenAIServer`, stopped on exit."""
    server = FakeOpenAIServer(responder)
    server.start()
    try:
        yield server
    finally:
        server.stop()
