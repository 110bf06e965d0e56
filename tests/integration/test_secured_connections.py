"""The services over secured connections, end to end: Kafka with TLS and SASL (a proxy in front
of the dev broker terminates both, as a managed cluster's listener would) and Redis over TLS
with an ACL user of its own (a TLS-terminating proxy in front of the embedded Redis, which is
built without TLS). Certificates are made by the test; secrets come from files."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from aiokafka.errors import KafkaConnectionError

from gaama.config import Settings
from gaama.connections import KafkaConnection, RedisConnection
from gaama.devstack import create_topics, processes
from gaama.events import TurnReceived
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from services.runtime.kafka import client_options
from tests.integration.test_pipeline_e2e import graph_summary, send_secured
from tests.support.broker import fronted_broker
from tests.support.certs import make_certs
from tests.support.kafka_proxy import SaslUsers
from tests.support.services import ServiceProcess, wait_for
from tests.support.tls_proxy import tls_proxy

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow, pytest.mark.single_redis]


def turns(tenant: str, conversation: str, n: int = 6) -> list[TurnReceived]:
    said = [
        "I moved to Lisbon last spring for a new job.",
        "How do you like the city so far?",
        "I love the trams and the food, and I adopted a dog named Pico.",
        "What kind of dog is Pico?",
        "Pico is a beagle and he loves the beach at Cascais.",
        "That sounds lovely.",
    ]
    return [
        TurnReceived(
            tenant=tenant,
            conversation=conversation,
            turn_id=str(i),
            speaker=("Ana", "Ben")[i % 2],
            text=said[i % len(said)],
            timestamp=f"2024-03-0{1 + i // 3}T10:{i:02d}:00Z",
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_the_pipeline_runs_over_sasl_ssl_kafka_and_tls_redis_with_an_acl_user(
    settings: Settings, redis_client: aioredis.Redis, index, tmp_path: Path, mechanism: str
):
    certs = make_certs(tmp_path / "certs")
    kafka_secret = tmp_path / "kafka-password"
    kafka_secret.write_text("kafka-pw\n")
    redis_secret = tmp_path / "redis-password"
    redis_secret.write_text("redis-pw\n")
    user = f"svc-{uuid.uuid4().hex[:8]}"
    # Least privilege: the namespace's keys, every command the services use.
    await redis_client.execute_command(
        "ACL", "SETUSER", user, "on", ">redis-pw", f"~{settings.key_prefix}*", "+@all"
    )
    users = SaslUsers(passwords={"gaama": "kafka-pw"}, mechanisms=(mechanism,))
    redis_port = int(settings.redis_url.rsplit(":", 1)[1].split("/")[0])
    try:
        with (
            fronted_broker(tmp_path / "broker", tls=certs.server_context(), sasl=users) as kafka,
            tls_proxy(
                f"127.0.0.1:{redis_port}", processes.free_port(), certs.server_context()
            ) as redis_tls,
        ):
            secured = settings.model_copy(
                update={
                    "kafka_bootstrap": kafka.address,
                    "kafka": KafkaConnection(
                        security_protocol="SASL_SSL",
                        sasl_mechanism=mechanism,
                        sasl_username="gaama",
                        sasl_password_file=kafka_secret,
                        ssl_cafile=certs.ca,
                    ),
                    "redis_url": f"rediss://127.0.0.1:{redis_tls.port}/0",
                    "redis": RedisConnection(
                        username=user, password_file=redis_secret, ssl_ca_certs=certs.ca
                    ),
                }
            )
            await create_topics(
                secured.kafka_bootstrap,
                secured.topic_partitions,
                secured.topic_prefix,
                client_options=client_options(secured.kafka),
            )
            procs = [ServiceProcess(n, secured, tmp_path).start() for n in ("ingest", "extract")]
            try:
                said = turns("acme", "c1")
                await send_secured(secured, said)
                graph = GraphStore(redis_client, Keys(settings.key_prefix))

                async def extracted():
                    s = await graph_summary(graph, "acme", "c1")
                    return s if len(s["episodes"]) == len(said) and s["facts"] else None

                summary = await wait_for(extracted, timeout=120)
            finally:
                for p in procs:
                    p.stop()
            assert len(summary["episodes"]) == len(said) and summary["facts"]
            # Every Kafka connection authenticated with the mechanism; none was refused.
            assert kafka.authenticated[mechanism] > 0 and not kafka.refused
            assert redis_tls.handshakes > 0
    finally:
        await redis_client.execute_command("ACL", "DELUSER", user)


async def test_a_wrong_kafka_password_is_refused_by_the_broker(
    settings: Settings, redis_client: aioredis.Redis, tmp_path: Path
):
    certs = make_certs(tmp_path / "certs")
    secret = tmp_path / "kafka-password"
    secret.write_text("not-the-password")
    users = SaslUsers(passwords={"gaama": "kafka-pw"}, mechanisms=("SCRAM-SHA-256",))
    with fronted_broker(tmp_path / "broker", tls=certs.server_context(), sasl=users) as kafka:
        secured = settings.model_copy(
            update={
                "kafka_bootstrap": kafka.address,
                "kafka": KafkaConnection(
                    security_protocol="SASL_SSL",
                    sasl_mechanism="SCRAM-SHA-256",
                    sasl_username="gaama",
                    sasl_password_file=secret,
                    ssl_cafile=certs.ca,
                ),
            }
        )
        with pytest.raises(KafkaConnectionError):
            await create_topics(
                secured.kafka_bootstrap,
                secured.topic_partitions,
                secured.topic_prefix,
                request_timeout=10,
                client_options=client_options(secured.kafka),
            )
        # The proxy records the refusal just after answering it, on its own thread.
        for _ in range(50):
            if kafka.refused:
                break
            await asyncio.sleep(0.1)
        assert kafka.refused and kafka.refused[0].startswith("SCRAM-SHA-256")
        assert not kafka.authenticated
