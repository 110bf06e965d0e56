"""A Kafka-protocol proxy in front of the dev broker, for tests: it records the (api_key,
api_version) of every request a client sends, and can terminate TLS and SASL (PLAIN,
SCRAM-SHA-256/512, OAUTHBEARER) for a broker that serves neither.

The broker must advertise the proxy's address (Tansu's ``--advertised-listener-url``), so every
connection a client opens after bootstrapping comes through the proxy too. Requests are
forwarded frame by frame; only SaslHandshake and SaslAuthenticate are answered here, and with
SASL on, nothing but ApiVersions reaches the broker before the client has authenticated.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import ssl
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

#: The lowest version of each API that Apache Kafka 4.0 still serves (KIP-896; the
#: "Versions ... were removed in Apache Kafka 4.0" notes of its request schemas). APIs absent
#: here lost no version.
KAFKA4_MIN_VERSIONS = {
    0: ("Produce", 3),
    1: ("Fetch", 4),
    2: ("ListOffsets", 1),
    8: ("OffsetCommit", 2),
    9: ("OffsetFetch", 1),
    19: ("CreateTopics", 2),
    20: ("DeleteTopics", 1),
    23: ("OffsetForLeaderEpoch", 2),
    27: ("WriteTxnMarkers", 1),
    30: ("CreateAcls", 1),
    32: ("DescribeConfigs", 1),
    35: ("DescribeLogDirs", 1),
}

_UNSUPPORTED_SASL_MECHANISM, _SASL_AUTHENTICATION_FAILED, _ILLEGAL_SASL_STATE = 33, 58, 34


@dataclass
class SaslUsers:
    """Who may authenticate: PLAIN and SCRAM users with their passwords, OAUTHBEARER tokens."""

    passwords: dict[str, str] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class KafkaProxy:
    """Listens on ``127.0.0.1:port`` and forwards to ``upstream`` (``host:port``), on a thread
    of its own (usable from sync and async tests alike)."""

    def __init__(
        self,
        upstream: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        sasl: SaslUsers | None = None,
    ) -> None:
        host, _, p = upstream.rpartition(":")
        self.upstream = (host, int(p))
        self.port = port
        self.tls = tls
        self.sasl = sasl
        self.seen: Counter[tuple[int, int]] = Counter()
        self.authenticated: Counter[str] = Counter()
        self.refused: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(
            self._client, "127.0.0.1", self.port, ssl=self.tls
        )

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def removed_versions(self) -> list[str]:
        """Every request seen whose version Apache Kafka 4.0 no longer serves."""
        out = []
        for (key, version), n in sorted(self.seen.items()):
            floor = KAFKA4_MIN_VERSIONS.get(key)
            if floor is not None and version < floor[1]:
                out.append(f"{floor[0]} (api {key}) v{version} x{n}; Kafka 4 serves v{floor[1]}+")
        return out

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        try:
            if self.sasl is not None and not await self._authenticate(
                reader, writer, up_reader, up_writer
            ):
                return
            pump = asyncio.ensure_future(_copy(up_reader, writer))
            try:
                while True:
                    frame = await _read_frame(reader)
                    if frame is None:
                        break
                    self._record(frame)
                    up_writer.write(frame)
                    await up_writer.drain()
            finally:
                pump.cancel()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()

    def _record(self, frame: bytes) -> tuple[int, int, int, int]:
        key, version, correlation = struct.unpack_from(">hhi", frame, 4)
        self.seen[(key, version)] += 1
        (client_len,) = struct.unpack_from(">h", frame, 12)
        body = 14 + max(client_len, 0)
        return key, version, correlation, body

    async def _authenticate(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> bool:
        """Run the SASL exchange here; True once the client is authenticated."""
        assert self.sasl is not None
        mechanism: str | None = None
        scram: _Scram | None = None
        while True:
            frame = await _read_frame(reader)
            if frame is None:
                return False
            key, version, correlation, body = self._record(frame)
            if key == API_VERSIONS:
                up_writer.write(frame)
                await up_writer.drain()
                reply = await _read_frame(up_reader)
                if reply is None:
                    return False
                writer.write(reply)
                await writer.drain()
                continue
            if key == SASL_HANDSHAKE:
                (n,) = struct.unpack_from(">h", frame, body)
                wanted = frame[body + 2 : body + 2 + n].decode()
                ok = wanted in self.sasl.mechanisms
                mechanism = wanted if ok else None
                mechs = b"".join(
                    struct.pack(">h", len(m)) + m.encode() for m in self.sasl.mechanisms
                )
                code = 0 if ok else _UNSUPPORTED_SASL_MECHANISM
                payload = struct.pack(">hi", code, len(self.sasl.mechanisms)) + mechs
                await _reply(writer, correlation, payload)
                if not ok:
                    self.refused.append(f"mechanism {wanted}")
                    return False
                continue
            if key == SASL_AUTHENTICATE and mechanism is not None:
                flexible = version >= 2
                token = _auth_bytes(frame, body, flexible)
                if mechanism.startswith("SCRAM-"):
                    if scram is None:
                        scram = _Scram(mechanism, self.sasl.passwords)
                    answer, done, error = scram.step(token)
                else:
                    answer, done, error = self._simple(mechanism, token)
                await _reply(writer, correlation, _auth_response(error, answer, version), flexible)
                if error:
                    self.refused.append(f"{mechanism}: {error}")
                    return False
                if done:
                    self.authenticated[mechanism] += 1
                    return True
                continue
            # Anything else before authentication: refused, the connection closed.
            self.refused.append(f"api {key} before authentication")
            return False

    def _simple(self, mechanism: str, token: bytes) -> tuple[bytes, bool, str | None]:
        assert self.sasl is not None
        if mechanism == "PLAIN":
            parts = token.split(b"\0")
            if len(parts) == 3:
                user, password = parts[1].decode(), parts[2].decode()
                if self.sasl.passwords.get(user) == password:
                    return b"", True, None
            return b"", False, "invalid username or password"
        # OAUTHBEARER (RFC 7628): "n,,\x01auth=Bearer <token>\x01\x01"
        for item in token.split(b"\x01"):
            bearer = item.removeprefix(b"auth=Bearer ")
            if bearer != item and bearer.decode() in self.sasl.tokens:
                return b"", True, None
        return b"", False, "invalid token"


class _Scram:
    """The server side of SCRAM (RFC 5802), iteration count 4096."""

    def __init__(self, mechanism: str, passwords: dict[str, str]) -> None:
        self.hash = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        self.passwords = passwords
        self.state = 0
        self.salt = os.urandom(16)
        self.iterations = 4096

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def step(self, token: bytes) -> tuple[bytes, bool, str | None]:
        if self.state == 0:
            first = token.decode()
            self.bare = first.split(",", 2)[2]
            attrs = dict(a.split("=", 1) for a in self.bare.split(","))
            self.user = attrs["n"]
            if self.user not in self.passwords:
                return b"", False, "unknown user"
            self.nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
            self.server_first = (
                f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"
            )
            self.state = 1
            return self.server_first.encode(), False, None
        final = token.decode()
        without_proof, _, proof_b64 = final.rpartition(",p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(","))
        if attrs.get("r") != self.nonce:
            return b"", False, "nonce mismatch"
        salted = hashlib.pbkdf2_hmac(
            self.hash, self.passwords[self.user].encode(), self.salt, self.iterations
        )
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash, client_key).digest()
        auth_message = f"{self.bare},{self.server_first},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = base64.b64decode(proof_b64)
        recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if hashlib.new(self.hash, recovered).digest() != stored_key:
            return b"", False, "invalid username or password"
        server_key = self._hmac(salted, b"Server Key")
        verifier = base64.b64encode(self._hmac(server_key, auth_message)).decode()
        return f"v={verifier}".encode(), True, None


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readexactly(4)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    (size,) = struct.unpack(">i", head)
    return head + await reader.readexactly(size)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(Exception):
        writer.close()


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _put_uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _auth_bytes(frame: bytes, body: int, flexible: bool) -> bytes:
    if flexible:
        tags, pos = _uvarint(frame, body)  # the request header's tagged fields
        for _ in range(tags):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
        n, pos = _uvarint(frame, pos)
        return frame[pos : pos + n - 1]
    (n,) = struct.unpack_from(">i", frame, body)
    return frame[body + 4 : body + 4 + n]


def _auth_response(error: str | None, answer: bytes, version: int) -> bytes:
    code = _SASL_AUTHENTICATION_FAILED if error else 0
    if version >= 2:
        msg = _put_uvarint(len(error.encode()) + 1) + error.encode() if error else b"\x00"
        out = struct.pack(">h", code) + msg + _put_uvarint(len(answer) + 1) + answer
        return out + struct.pack(">q", 0) + b"\x00"
    msg = struct.pack(">h", len(error)) + error.encode() if error else struct.pack(">h", -1)
    out = struct.pack(">h", code) + msg + struct.pack(">i", len(answer)) + answer
    if version >= 1:
        out += struct.pack(">q", 0)
    return out


async def _reply(
    writer: asyncio.StreamWriter, correlation: int, payload: bytes, flexible: bool = False
) -> None:
    header = struct.pack(">i", correlation) + (b"\x00" if flexible else b"")
    writer.write(struct.pack(">i", len(header) + len(payload)) + header + payload)
    await writer.drain()


@contextlib.contextmanager
def running(proxy: KafkaProxy) -> Iterator[KafkaProxy]:
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
