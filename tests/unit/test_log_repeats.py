"""Rate-limited logs (services.runtime.logs): a chatty library's repeated warnings pass once per
window with the count held back, and every consumer stage's worker installs the filter once
faust has configured logging."""

from __future__ import annotations

import logging

from gaama.config import load_settings
from services.runtime.bootstrap import GracefulWorker
from services.runtime.logs import OutageLog, RepeatFilter
from services.runtime.worker import make_app


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str, *args: object, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_an_outage_is_logged_at_once_then_once_per_window_and_when_it_ends(caplog):
    clock = Clock()
    outage = OutageLog(logging.getLogger("gaama.test.outage"), "Redis", every_s=30, clock=clock)
    caplog.set_level(logging.INFO, "gaama.test.outage")
    outage.failed("refused")
    clock.now = 10
    outage.failed("refused")  # within the window: held back
    outage.failed("refused")
    clock.now = 45
    outage.failed("timeout")
    outage.ok()
    outage.failed("refused")  # a new outage: at once, nothing held back
    assert [r.getMessage() for r in caplog.records] == [
        "Redis unavailable: refused",
        "Redis unavailable (2 more not logged): timeout",
        "Redis available again after 4 failures",
        "Redis unavailable: refused",
    ]


def test_repeats_of_a_chatty_warning_pass_once_per_window_with_the_count():
    clock = Clock()
    f = RepeatFilter(every_s=30, clock=clock)
    template = "Timer %s is overlapping (interval=%r runtime=%r)"
    assert f.filter(record("mode.timers", template, "close_idle", 0.5, 0.6))
    passed = [f.filter(record("mode.timers", template, "close_idle", 0.5, x)) for x in range(5)]
    assert passed == [False] * 5
    other = record("faust.transport.consumer", "wait_empty: Waiting for tasks %r", [])
    assert f.filter(other)  # another template is its own key
    clock.now += 31
    late = record("mode.timers", template, "close_idle", 0.5, 0.7)
    assert f.filter(late)
    assert late.getMessage().endswith("(5 similar messages not logged)")


def test_our_own_logs_and_info_lines_are_never_held_back():
    f = RepeatFilter(every_s=30, clock=Clock())
    for _ in range(3):
        assert f.filter(record("gaama.extract", "chunk %s closed", "c1"))
        assert f.filter(record("aiokafka.conn", "connected", level=logging.INFO))


async def test_every_stage_worker_installs_the_filter_after_faust_configures_logging():
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        app = make_app("extract", load_settings(), 8082)  # nothing is bound
        worker = GracefulWorker(app, loglevel="INFO")
        worker._setup_logging()  # what faust's first start does
        assert root.handlers
        await worker.on_execute()
        for handler in root.handlers:
            assert any(isinstance(f, RepeatFilter) for f in handler.filters), handler
    finally:
        for handler in list(root.handlers):
            if handler not in saved_handlers:
                root.removeHandler(handler)
        for handler in saved_handlers:
            for f in [f for f in handler.filters if isinstance(f, RepeatFilter)]:
                handler.removeFilter(f)
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(saved_level)
