"""The one error boundary around Redis: an outage becomes :class:`StoreUnavailable`.

Every call the stores make to Redis runs inside :func:`store_errors`, so callers (the runtime
policy, timers, the query service) see either a result, a :class:`StoreUnavailable` (retry later:
the consumer stalls, nothing is dead-lettered) or a real bug. What counts as an outage:

- the connection failed, was lost or timed out (redis-py ``ConnectionError`` / ``TimeoutError``,
  and ``OSError`` — which includes the builtin ``TimeoutError`` — from the socket layer);
- the server answered "not now": ``LOADING`` (restarting from its AOF/RDB), ``READONLY`` (a
  replica during a failover), ``BUSY`` (a long script), ``TRYAGAIN`` / ``CLUSTERDOWN`` /
  ``MASTERDOWN`` (cluster resharding or failover), ``OOM`` (full under ``noeviction``);
- on Redis Cluster, redirections that did not settle (redis-py's ``ClusterError``, "TTL
  exhausted", while a slot is being migrated), a slot no primary holds yet, and no primary
  answering when the client reads the slot map.

Any other reply (a wrong type, a syntax error, an unknown index) is a bug or poison input and
propagates unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gaama.errors import StoreUnavailable

#: Reply codes that mean "not now" rather than "never".
TRANSIENT_REPLIES = frozenset(
    {"OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"}
)
_TRANSIENT_CLASSES = (OutOfMemoryError, ReadOnlyError, TryAgainError, ClusterDownError)
# A reply inside a pipeline is re-worded by redis-py as
# "Command # 3 (HSET ...) of pipeline caused error: ('BUSY Redis is busy ...',)".
_PIPELINE_REPLY = re.compile(r"of pipeline caused error: \(?['\"]?([A-Z]+)")


def reply_code(exc: ResponseError) -> str:
    """The error code of a Redis error reply (its first word), also when redis-py has stripped
    it (it keeps it as ``status_code``) or wrapped it in a pipeline's message."""
    code = getattr(exc, "status_code", None)
    if code:
        return str(code)
    text = str(exc)
    if m := _PIPELINE_REPLY.search(text):
        return m.group(1)
    return text.split(" ", 1)[0]


def transient_reply(exc: ResponseError) -> bool:
    """True for an error reply that a later retry can succeed on (see the module docstring)."""
    return isinstance(exc, _TRANSIENT_CLASSES) or reply_code(exc) in TRANSIENT_REPLIES


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` means Redis is unreachable or refusing for now, not that the call is
    wrong. ``BusyLoadingError`` (LOADING) is a connection error in redis-py."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | BusyLoadingError | OSError):
        return True
    if isinstance(exc, ClusterError):
        return True
    if isinstance(exc, RedisClusterException):
        # A slot no primary holds (yet), or no node reachable to read the slot map from; not
        # a command the client cannot route (a bug).
        cause = exc.__cause__ or exc.__context__
        return (
            isinstance(exc, SlotNotCoveredError)
            or "not covered" in str(exc)
            or (cause is not None and is_outage(cause))
        )
    return isinstance(exc, ResponseError) and transient_reply(exc)


@contextmanager
def store_errors() -> Iterator[None]:
    """Redis unreachable, timed out or answering a transient error (loading, busy, out of
    memory, read-only replica, cluster down…) raises :class:`StoreUnavailable`; any other error
    propagates."""
    try:
        yield
    except StoreUnavailable:
        raise
    except (
        RedisConnectionError,
        RedisTimeoutError,
        ResponseError,
        OSError,
        ClusterError,
        RedisClusterException,
    ) as exc:
        if not is_outage(exc):
            raise
        raise StoreUnavailable(f"Redis unavailable: {type(exc).__name__}: {exc}") from exc
