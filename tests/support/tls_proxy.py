"""A TLS-terminating TCP proxy for tests: clients speak TLS to it, it forwards the plain bytes
to a server that has no TLS of its own (the embedded Redis is built without it)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator


class TlsProxy:
    """Listens on ``127.0.0.1:port`` with ``tls`` and forwards each connection to ``upstream``
    (``host:port``), on a thread of its own. ``handshakes`` counts completed TLS handshakes."""

    def __init__(self, upstream: str, port: int, tls: ssl.SSLContext) -> None:
        host, _, p = upstream.rpartition(":")
        self.upstream = (host, int(p))
        self.port = port
        self.tls = tls
        self.handshakes = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError, ConnectionError):
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1  # the server's ssl context completed the handshake to get here
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def start(self) -> TlsProxy:
        self._thread.start()

        async def serve() -> asyncio.AbstractServer:
            return await asyncio.start_server(self._client, "127.0.0.1", self.port, ssl=self.tls)

        self._server = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@contextlib.contextmanager
def tls_proxy(upstream: str, port: int, tls: ssl.SSLContext) -> Iterator[TlsProxy]:
    proxy = TlsProxy(upstream, port, tls).start()
    try:
        yield proxy
    finally:
        proxy.stop()
