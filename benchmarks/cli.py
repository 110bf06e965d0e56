"""The ``python -m benchmarks`` command: ``locomo``, ``query``, ``ingest``, ``embed``, ``forget``,
``fairness``."""

from __future__ import annotations

import argparse
import sys

from benchmarks import embed, fairness, forget, ingest, locomo, query
from gaama.cli import stop_on_sigterm
from gaama.errors import GaamaError

PROG = "python -m benchmarks"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    sub = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for module in (locomo, query, ingest, embed, forget, fairness):
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stop_on_sigterm()
    try:
        return int(args.func(args))
    except GaamaError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
