"""A small Kafka producer for services that are not stream processors (the query service
publishes forget requests onto the turns topic, behind the turns produced before them).

Bounded: every send waits at most ``timeout_s`` for the broker's acknowledgement (acks=all); a
broker that cannot take the event surfaces as :class:`~gaama.errors.BrokerUnavailable`, which
the HTTP layer answers with 503 and ``Retry-After`` — never a hang, never a 500.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from gaama.config import Settings
from gaama.errors import BrokerUnavailable
from gaama.events import Event, encode, topic_name

log = logging.getLogger("gaama.producer")


class EventProducer:
    def __init__(self, settings: Settings, *, timeout_s: float = 10.0) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def _started(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.settings.kafka_bootstrap_servers,
                    acks="all",
                    request_timeout_ms=int(self.timeout_s * 1000),
                )
                try:
                    await asyncio.wait_for(producer.start(), self.timeout_s)
                except (KafkaError, OSError, TimeoutError) as exc:
                    await producer.stop()
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
        producer = await self._started()
        topic = topic_name(base_topic, self.settings.topic_prefix)
        try:
            await asyncio.wait_for(
                producer.send_and_wait(topic, encode(event), key=key, partition=partition),
                self.timeout_s,
            )
        except (KafkaError, OSError, TimeoutError) as exc:
            raise BrokerUnavailable(f"could not publish to {topic}: {exc!r}") from None

    async def aclose(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
