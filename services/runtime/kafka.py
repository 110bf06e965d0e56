"""Every Kafka client of a service, built from one place: security (``GAAMA_KAFKA__*``), the
consumers' isolation level, and undecodable batches salvaged (:mod:`services.runtime.salvage`).

- :func:`client_options`: aiokafka keyword arguments (producers, admin clients).
- :func:`faust_credentials`: the same for a faust app (``broker_credentials``), which passes
  them to its consumer, its producer and the lag reader (the consumer's own client).
- :class:`Transport`: faust's aiokafka transport whose consumer reads committed records only
  (``isolation_level=read_committed``: turns of an aborted transaction are never stored).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Any

import faust
from aiokafka.abc import AbstractTokenProvider
from faust.transport.drivers import aiokafka as faust_aiokafka

from gaama.connections import KafkaConnection
from gaama.errors import ConfigError
from services.runtime import salvage

#: What every consumer reads: records of committed transactions and non-transactional ones.
ISOLATION_LEVEL = "read_committed"


def load_callable(spec: str, var: str) -> Callable[[], Any]:
    """The callable ``module:function`` names.

    Raises:
        ConfigError: naming ``var`` when the module or the attribute cannot be loaded.
    """
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{var} {spec!r}: {exc}") from None
    if not callable(obj):
        raise ConfigError(f"{var} {spec!r} is not callable")
    return obj  # type: ignore[no-any-return]


class TokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """OAUTHBEARER tokens from a configured callable, sync or async, returning the token or a
    ``(token, expiry)`` tuple (as AWS's MSK IAM signer does); called on every authentication."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn

    async def token(self) -> str:
        result = self._fn()
        if asyncio.iscoroutine(result):
            result = await result
        if isinstance(result, tuple):
            result = result[0]
        if not isinstance(result, str) or not result:
            raise ConfigError("GAAMA_KAFKA__OAUTH_TOKEN_PROVIDER returned no token")
        return result


def token_provider(conn: KafkaConnection) -> TokenProvider | None:
    if conn.sasl and conn.sasl_mechanism == "OAUTHBEARER" and conn.oauth_token_provider:
        fn = load_callable(conn.oauth_token_provider, "GAAMA_KAFKA__OAUTH_TOKEN_PROVIDER")
        return TokenProvider(fn)
    return None


def client_options(conn: KafkaConnection) -> dict[str, Any]:
    """aiokafka keyword arguments for ``conn``: the protocol, SASL and the TLS context."""
    options: dict[str, Any] = {"security_protocol": conn.security_protocol}
    ctx = conn.ssl_context()
    if ctx is not None:
        options["ssl_context"] = ctx
    if conn.sasl:
        options["sasl_mechanism"] = conn.sasl_mechanism
        if conn.sasl_mechanism == "OAUTHBEARER":
            options["sasl_oauth_token_provider"] = token_provider(conn)
        else:
            options["sasl_plain_username"] = conn.sasl_username
            assert conn.sasl_password is not None  # checked by KafkaConnection
            options["sasl_plain_password"] = conn.sasl_password.get_secret_value()
    return options


def faust_credentials(conn: KafkaConnection) -> faust.types.auth.CredentialsT | None:
    """faust's ``broker_credentials`` for ``conn`` (None: plaintext)."""
    ctx = conn.ssl_context()
    if conn.sasl:
        if conn.sasl_mechanism == "OAUTHBEARER":
            return faust.OAuthCredentials(oauth_cb=token_provider(conn), ssl_context=ctx)
        assert conn.sasl_password is not None  # checked by KafkaConnection
        return faust.SASLCredentials(
            username=conn.sasl_username,
            password=conn.sasl_password.get_secret_value(),
            ssl_context=ctx,
            mechanism=conn.sasl_mechanism,
        )
    if ctx is not None:
        return faust.SSLCredentials(ctx)
    return None


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # faust reads committed records only under exactly-once processing, which also makes
        # its producer transactional; the stages need the first without the second. The
        # consumer's fetcher, made on start, takes the level from here.
        consumer._isolation_level = ISOLATION_LEVEL
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    """faust's aiokafka transport with a read-committed consumer that salvages undecodable
    batches (:mod:`services.runtime.salvage`)."""

    Consumer = _Consumer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        salvage.install()
        super().__init__(*args, **kwargs)
