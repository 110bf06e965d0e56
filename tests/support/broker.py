"""A broker of a test's own behind a :class:`~tests.support.kafka_proxy.KafkaProxy`: Tansu
advertises the proxy's address, so every client connection goes through the proxy."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
from collections.abc import Iterator
from pathlib import Path

from gaama.devstack import processes
from tests.support.kafka_proxy import KafkaProxy, SaslUsers


@contextlib.contextmanager
def fronted_broker(
    directory: Path, *, tls: ssl.SSLContext | None = None, sasl: SaslUsers | None = None
) -> Iterator[KafkaProxy]:
    directory.mkdir(parents=True, exist_ok=True)
    broker_port, proxy_port = processes.free_port(), processes.free_port()
    pid = processes.start_tansu(directory, broker_port, advertise=f"127.0.0.1:{proxy_port}")
    try:
        processes.wait_tcp(broker_port, pid, directory / "tansu.log", "the broker")
        proxy = KafkaProxy(f"127.0.0.1:{broker_port}", proxy_port, tls=tls, sasl=sasl)
        with contextlib.closing(_Stopper(proxy.start())):
            yield proxy
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


class _Stopper:
    def __init__(self, proxy: KafkaProxy) -> None:
        self.proxy = proxy

    def close(self) -> None:
        self.proxy.stop()
