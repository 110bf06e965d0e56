"""Benchmarks of GAAMA, run from a checkout: ``python -m benchmarks locomo|query|ingest``.

They are not part of the ``gaama`` package (nor its wheel or image); they use it like any client
and need the ``bench`` extra. Each benchmark module exposes ``register(subparsers)``, adding its
own sub-command to the parser of :mod:`benchmarks.cli`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # not subscriptable at run time on Python 3.11
    SubParsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
