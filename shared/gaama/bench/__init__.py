"""Benchmarks: ``gaama bench locomo|query|ingest``.

Each benchmark module exposes ``register(subparsers)``; they share one ``bench`` parser, which
:func:`bench_subparsers` creates on first use, so the modules can register in any order.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # not subscriptable at run time on Python 3.11
    SubParsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def bench_subparsers(sub: SubParsers) -> SubParsers:
    """The sub-parsers of the ``bench`` command under ``sub``, created once.

    Args:
        sub: The top-level sub-parsers of the ``gaama`` command.

    Returns:
        Where a benchmark adds its own sub-command (``bench_subparsers(sub).add_parser(...)``).
    """
    bench: argparse.ArgumentParser | None = sub.choices.get("bench")
    if bench is None:
        bench = sub.add_parser("bench", help="benchmarks (LoCoMo recall, query and ingest load)")
        bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for action in bench._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: SubParsers = action
            return found
    # Someone created "bench" without sub-commands: give it some rather than fail.
    return bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
