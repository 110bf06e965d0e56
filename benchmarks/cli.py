"""The ``python -m benchmarks`` command: ``locomo``, ``query``, ``ingest``, ``embed``, ``forget``,
``fairness``, ``pipeline``, ``chaos``, ``shutdown``, ``updates``, and ``paired`` (two runs of a
LoCoMo ranks file compared question by question)."""

from __future__ import annotations

import argparse

from benchmarks import (
    chaos,
    embed,
    fairness,
    forget,
    ingest,
    locomo,
    paired,
    pipeline,
    query,
    shutdown,
    updates,
)
from gaama.cli import run

PROG = "python -m benchmarks"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    sub = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for module in (
        locomo,
        query,
        ingest,
        embed,
        forget,
        fairness,
        pipeline,
        chaos,
        shutdown,
        updates,
        paired,
    ):
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), argv, PROG)
