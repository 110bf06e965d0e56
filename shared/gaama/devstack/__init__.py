"""The embedded development stack: a real Redis 8.2 with the Query Engine and JSON, and the Tansu
Kafka-compatible broker, both from wheels, on loopback.

``gaama dev up`` starts them (or finds them running), waits until both answer, creates the topics
and prints ``GAAMA_REDIS_URL=...`` / ``GAAMA_KAFKA_BOOTSTRAP=...`` so ``eval "$(gaama dev up)"``
works. Tests use :func:`start_stack` with free ports and their own directory.

``--redis-cluster N`` (N > 1) starts N cluster-enabled primaries instead of one server, each with
the modules loaded, the 16384 slots split evenly between them, and adds
``GAAMA_REDIS_CLUSTER=true`` to the lines printed (docs/operations.md, "Redis Cluster").

The modules: :mod:`~gaama.devstack.processes` (binaries, ports, one server's start and wait),
:mod:`~gaama.devstack.stack` (the stack as a whole, its topics and health) and
:mod:`~gaama.devstack.redis_cluster` (forming a cluster, primaries joining and leaving, slot
moves).
"""

from gaama.devstack.processes import StackError, free_port, port_free
from gaama.devstack.redis_cluster import (
    SLOTS,
    add_primary,
    begin_slot_move,
    finish_slot_move,
    form_cluster,
    migrate_slot_keys,
    move_slot,
    remove_primary,
)
from gaama.devstack.stack import (
    DEFAULT_KAFKA_PORT,
    DEFAULT_REDIS_PORT,
    Stack,
    create_topics,
    default_dir,
    stack_healthy,
    start_redis_cluster,
    start_stack,
    up,
)

__all__ = [
    "DEFAULT_KAFKA_PORT",
    "DEFAULT_REDIS_PORT",
    "SLOTS",
    "Stack",
    "StackError",
    "add_primary",
    "begin_slot_move",
    "create_topics",
    "default_dir",
    "finish_slot_move",
    "form_cluster",
    "free_port",
    "migrate_slot_keys",
    "move_slot",
    "port_free",
    "remove_primary",
    "stack_healthy",
    "start_redis_cluster",
    "start_stack",
    "up",
]
