"""SIGTERM unwinds a gaama command like Ctrl-C, so its clean-up (``finally``) runs."""

from __future__ import annotations

import os
import signal

import pytest

from gaama.cli import stop_on_sigterm


def test_sigterm_runs_finally_blocks() -> None:
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    try:
        stop_on_sigterm()
        with pytest.raises(KeyboardInterrupt, match="signal 15"):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs between bytecodes
                    pass
            finally:
                cleaned.append(True)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert cleaned == [True]
