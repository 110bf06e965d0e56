"""A small Kafka producer for HTTP endpoints that publish events: ingest's ``POST /v1/turns``
and the query service's forget requests (onto the turns topic, behind the turns produced
before them).

Bounded: a publication waits at most ``GAAMA_PUBLISH_TIMEOUT_S`` for the broker's
acknowledgement (acks=all); a broker that cannot take the events — unreachable, refusing, or any
other Kafka error — surfaces as :class:`~gaama.errors.BrokerUnavailable`, which the HTTP layer
answers with 503 and ``Retry-After``: never a hang, never a 500. Failures are logged rate-limited
(:class:`~services.runtime.logs.OutageLog`); the producer reconnects by itself, and one that
never started is started again on the next call.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from gaama.config import Settings
from gaama.errors import BrokerUnavailable
from gaama.events import Event, encode, topic_name
from services.runtime.kafka import client_options
from services.runtime.logs import OutageLog
from services.runtime.tracing import carrier, publishing

log = logging.getLogger("gaama.producer")

#: One event to publish: base topic, key, event, partition (None: by key).
Publication = tuple[str, bytes, Event, int | None]


class EventProducer:
    def __init__(self, settings: Settings, *, timeout_s: float | None = None) -> None:
        self.settings = settings
        self.timeout_s = settings.publish_timeout_s if timeout_s is None else timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self.outage = OutageLog(log, "broker")

    async def _started(self, timeout_s: float | None = None) -> AIOKafkaProducer:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.settings.kafka_bootstrap_servers,
                    acks="all",
                    request_timeout_ms=int(self.timeout_s * 1000),
                    **client_options(self.settings.kafka),
                )
                try:
                    await asyncio.wait_for(producer.start(), timeout)
                except (KafkaError, OSError, TimeoutError) as exc:
                    await producer.stop()
                    self.outage.failed(repr(exc))
                    raise BrokerUnavailable(f"broker unreachable: {exc!r}") from None
                self._producer = producer
            return self._producer

    async def partitions(self, base_topic: str) -> list[int]:
        """Partitions of a topic (for events sent to every partition)."""
        producer = await self._started()
        topic = topic_name(base_topic, self.settings.topic_prefix)
        try:
            found = await asyncio.wait_for(producer.partitions_for(topic), self.timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            raise BrokerUnavailable(f"partitions of {topic} unknown: {exc!r}") from None
        return sorted(found)

    async def send(
        self, base_topic: str, key: bytes, event: Event, partition: int | None = None
    ) -> None:
        """Send one event and wait until the broker has it.

        Raises:
            BrokerUnavailable: not acknowledged within the timeout.
        """
        await self.send_many([(base_topic, key, event, partition)])

    async def send_many(self, items: list[Publication]) -> None:
        """Send events and wait until the broker has every one, within one timeout in all.

        Raises:
            BrokerUnavailable: not all acknowledged within the timeout (some may have been
                taken: the caller retries, and the consumers are idempotent).
        """
        prefix = self.settings.topic_prefix

        async def publish() -> None:
            producer = await self._started()
            # Each record carries the caller's trace context (the HTTP request's span), through
            # its publish span.
            parent = carrier()
            futures = []
            for base, key, event, partition in items:
                topic = topic_name(base, prefix)
                with publishing(topic, parent) as headers:
                    futures.append(
                        await producer.send(
                            topic,
                            encode(event),
                            key=key,
                            partition=partition,
                            headers=list(headers) or None,
                        )
                    )
            await asyncio.gather(*futures)

        try:
            await asyncio.wait_for(publish(), self.timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.outage.failed(repr(exc))
            raise BrokerUnavailable(
                f"the broker did not take the events within {self.timeout_s:g} s "
                f"(GAAMA_PUBLISH_TIMEOUT_S): {exc!r}"
            ) from None
        self.outage.ok()

    async def ready(self) -> str | None:
        """None when the broker answers a metadata request in time (2 s at most: a probe must
        answer quickly), else the reason."""
        timeout = min(self.timeout_s, 2.0)
        try:
            producer = await self._started(timeout)
            await asyncio.wait_for(producer.client.fetch_all_metadata(), timeout)
        except BrokerUnavailable as exc:
            return str(exc)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.outage.failed(repr(exc))
            return f"broker unreachable: {exc!r}"
        return None

    async def aclose(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
