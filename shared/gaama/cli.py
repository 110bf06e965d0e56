"""The ``gaama`` command: ``gaama dev up|down|status``, ``gaama migrate index|vectors|graph``,
``gaama demo``, ``gaama forget|memories|export|audit``, ``gaama token mint|keygen|verify``,
``gaama mcp``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gaama.errors import GaamaError

if TYPE_CHECKING:
    from gaama.config import Settings


def _dev(args: argparse.Namespace) -> int:
    from gaama import devstack

    directory = Path(args.dir).resolve() if args.dir else devstack.default_dir()
    if args.action == "up":
        stack = devstack.up(
            directory, args.redis_port, args.kafka_port, args.partitions, args.redis_cluster
        )
        sys.stdout.write(stack.env_lines())
        print(
            f"# embedded stack up in {directory} (redis pid {stack.redis_pid}, "
            f"broker pid {stack.kafka_pid}); `gaama dev down` stops it",
            file=sys.stderr,
        )
        return 0
    recorded = devstack.Stack.load(directory)
    if args.action == "down":
        if recorded is None:
            print(f"# no embedded stack recorded in {directory}", file=sys.stderr)
            return 0
        recorded.stop()
        print("# embedded stack stopped", file=sys.stderr)
        return 0
    if recorded is None:
        print(f"down (nothing recorded in {directory})")
        return 1
    health = devstack.stack_healthy(recorded)
    for name, ok in health.items():
        port = recorded.redis_port if name == "redis" else recorded.kafka_port
        print(f"{name:6s} 127.0.0.1:{port}  {'up' if ok else 'DOWN'}")
    return 0 if all(health.values()) else 1


def _migrate(args: argparse.Namespace) -> int:
    import asyncio

    from gaama.config import load_settings
    from gaama.store import connect
    from gaama.store.keys import Keys
    from gaama.store.migrate import migrate_index
    from gaama.store.vectors import VectorIndex

    settings = load_settings()
    if args.what == "graph":
        return _migrate_graph(settings)

    async def run() -> None:
        redis = connect(settings.redis_url, cluster=settings.redis_cluster, auth=settings.redis)
        try:
            name = args.to or settings.index_name
            index = VectorIndex(redis, name, settings.embed_dim, Keys(settings.key_prefix))
            report = await migrate_index(
                redis, index, progress=lambda line: print(f"# {line}", file=sys.stderr)
            )
        finally:
            await redis.aclose()
        print(
            f"index {args.to or settings.index_name!r}: old definition dropped: "
            f"{'yes' if report.dropped_old_index else 'no'}; nodes checked "
            f"{report.nodes_seen}, updated {report.nodes_updated} (vectors converted to "
            f"float16: {report.vectors_converted}, old vectors removed: "
            f"{report.old_vectors_removed}); {report.indexed} indexed"
        )
        if report.old_vectors_kept_for:
            print(
                f"old float32 vectors kept for {', '.join(report.old_vectors_kept_for)}: drop "
                f"it (FT.DROPINDEX without DD) once no service uses it, then run this again"
            )

    asyncio.run(run())
    return 0


def _migrate_graph(settings: Settings) -> int:
    import asyncio

    from gaama.store import connect
    from gaama.store.keys import Keys
    from gaama.store.migrate_graph import migrate_graph

    async def run() -> None:
        redis = connect(settings.redis_url, cluster=settings.redis_cluster, auth=settings.redis)
        try:
            r = await migrate_graph(
                redis,
                Keys(settings.key_prefix),
                progress=lambda line: print(f"# {line}", file=sys.stderr),
            )
        finally:
            await redis.aclose()
        print(
            f"adjacency: {r.adjacency_keys} hashes, {r.values_rewritten} values rewritten; "
            f"NEXT chains: {r.chains}, {r.chains_rewritten} rewritten as listpacks"
        )

    asyncio.run(run())
    return 0


def _mcp(_: argparse.Namespace) -> int:
    """Become the MCP gateway's stdio server (``services.mcp``): the process is replaced, so the
    host's stdin/stdout are the protocol channel and the core imports no service."""
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "services.mcp.main", "--stdio"])
    return 0  # not reached


def _dlq(args: argparse.Namespace) -> int:
    """Become the dead-letter tools (``services.dlq``): they speak Kafka, which the core does
    not, so the process is replaced as for ``gaama mcp``."""
    sys.stdout.flush()
    argv = [sys.executable, "-m", "services.dlq.main", *args.rest]
    os.execv(sys.executable, argv)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    from gaama import cli_memory, cli_token, demo, devstack

    p = argparse.ArgumentParser(prog="gaama", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="the embedded Redis + broker stack for development")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.add_argument("--dir", default=None, help="state directory (default .gaama/dev)")
    dev.add_argument("--redis-port", type=int, default=devstack.DEFAULT_REDIS_PORT)
    dev.add_argument("--kafka-port", type=int, default=devstack.DEFAULT_KAFKA_PORT)
    dev.add_argument("--partitions", type=int, default=4)
    dev.add_argument(
        "--redis-cluster",
        type=int,
        default=1,
        metavar="N",
        help="N > 1: N Redis Cluster primaries on --redis-port and the N-1 ports after it",
    )
    dev.set_defaults(func=_dev)

    migrate = sub.add_parser(
        "migrate", help="upgrade stored data to this version's layout (GAAMA_* settings)"
    )
    migrate.add_argument(
        "what",
        choices=["index", "vectors", "graph"],
        help="index, vectors: both bring node hashes and the index to this version's layout "
        "(exact-match tag digests; float16 vectors instead of float32 + int8) and rebuild the "
        "index if its definition is older; graph: adjacency values and NEXT chains in their "
        "compact forms (memory only: every reader takes the older forms; online). All "
        "idempotent (docs/operations.md, 'Index schema changes')",
    )
    migrate.add_argument(
        "--to",
        default=None,
        metavar="NAME",
        help="build the new index under NAME and leave GAAMA_INDEX_NAME serving (no downtime; "
        "then roll the services to NAME, run again, drop the old index, and run once more to "
        "free the old float32 vectors)",
    )
    migrate.set_defaults(func=_migrate)

    mcp = sub.add_parser(
        "mcp",
        help="an MCP server over stdio for desktop hosts (GAAMA_API_KEY, GAAMA_QUERY_URL, "
        "GAAMA_INGEST_URL; README: 'Use it from an MCP host')",
    )
    mcp.set_defaults(func=_mcp)

    dlq = sub.add_parser(
        "dlq",
        add_help=False,
        help="the dead-letter topics: list, show, replay [--reason R] [--since T] [--dry-run] "
        "(gaama dlq --help; docs/operations.md, 'GaamaDeadLetters')",
    )
    dlq.add_argument("rest", nargs=argparse.REMAINDER)
    dlq.set_defaults(func=_dlq)

    demo.register(sub)
    cli_memory.register(sub)
    cli_token.register(sub)
    return p


def stop_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C: Python's default handler ends the process without running
    ``finally`` blocks, which would leave the services and the embedded stack a command started
    (``timeout``, ``kill``, a CI runner or a container stop all send SIGTERM)."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def run(parser: argparse.ArgumentParser, argv: list[str] | None, prog: str) -> int:
    """Parse ``argv`` and run the chosen sub-command: a ``GaamaError`` is a one-line message and
    exit 2, Ctrl-C or SIGTERM exit 130 after ``finally`` blocks ran."""
    args = parser.parse_args(argv)
    stop_on_sigterm()
    try:
        return int(args.func(args))
    except GaamaError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["dlq"]:  # its options are its own, --help included
        return _dlq(argparse.Namespace(rest=given[1:]))
    return run(build_parser(), argv, "gaama")


if __name__ == "__main__":
    sys.exit(main())
