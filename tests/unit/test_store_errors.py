"""Which Redis errors are an outage (StoreUnavailable, retried) and which are bugs."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    DataError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gaama.errors import StoreUnavailable
from gaama.store.errors import is_outage, store_errors


def parsed(reply: str) -> Exception:
    """The exception redis-py raises for an error reply (its own parser)."""
    from redis._parsers.base import BaseParser

    return BaseParser.parse_error(reply)


OUTAGES = [
    RedisConnectionError("Connection refused"),
    RedisTimeoutError("Timeout reading from 127.0.0.1:6379"),
    OSError(113, "No route to host"),
    TimeoutError(),  # asyncio.wait_for around a call
    ConnectionResetError(),
    parsed("LOADING Redis is loading the dataset in memory"),
    parsed("READONLY You can't write against a read only replica."),
    parsed(
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."
    ),
    parsed("TRYAGAIN Multiple keys request during rehashing of slot"),
    parsed("CLUSTERDOWN The cluster is down"),
    parsed("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
    parsed("OOM command not allowed when used memory > 'maxmemory'."),
    ClusterDownError("The cluster is down"),
    MasterDownError("Link with MASTER is down"),
    TryAgainError("Multiple keys request during rehashing"),
    ReadOnlyError("You can't write against a read only replica."),
    BusyLoadingError("Redis is loading the dataset in memory"),
    # a reply inside a pipeline, re-worded by redis-py
    ResponseError(
        "Command # 1 (EVALSHA abc 1 k) of pipeline caused error: "
        "('BUSY Redis is busy running a script.',)"
    ),
]
NOT_OUTAGES = [
    parsed("WRONGTYPE Operation against a key holding the wrong kind of value"),
    parsed("ERR syntax error"),
    parsed("NOSCRIPT No matching script."),
    ResponseError("Unknown index name"),
    DataError("Invalid input of type: 'dict'"),
    ValueError("not a Redis error"),
]


@pytest.mark.parametrize("exc", OUTAGES, ids=lambda e: f"{type(e).__name__}:{str(e)[:30]}")
def test_outages_become_store_unavailable(exc: Exception):
    assert is_outage(exc)
    with pytest.raises(StoreUnavailable) as info, store_errors():
        raise exc
    assert info.value.__cause__ is exc and info.value.retryable


@pytest.mark.parametrize("exc", NOT_OUTAGES, ids=lambda e: f"{type(e).__name__}:{str(e)[:30]}")
def test_other_errors_propagate_unchanged(exc: Exception):
    assert not is_outage(exc)
    with pytest.raises(type(exc)) as info, store_errors():
        raise exc
    assert info.value is exc


def test_auth_failure_is_a_connection_error_and_so_an_outage():
    """A wrong password after a credentials rotation stalls the consumer (readiness says why)
    instead of dead-lettering everything."""
    assert is_outage(AuthenticationError("invalid password"))


def test_store_unavailable_passes_through():
    original = StoreUnavailable("down")
    with pytest.raises(StoreUnavailable) as info, store_errors():
        raise original
    assert info.value is original
