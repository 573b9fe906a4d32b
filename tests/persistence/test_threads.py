"""The SQLite database's worker threads: the warmest thread takes the next unit, up to
``size`` run at once, the rest wait in order, and a closed pool ends its threads."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import CancelledError

import pytest

from coach.persistence.threads import Workers

HANG_GUARD = 30  # seconds: only so that a broken pool fails instead of hanging


def _thread_name() -> str:
    return threading.current_thread().name


async def test_units_that_follow_each_other_run_on_one_thread() -> None:
    """The loop asks for the next unit as soon as the last one's result reaches it: the
    thread that ran it is already idle, and takes it. (A thread that wakes its caller
    before it goes idle — the standard pool's order — fails this: the loop finds no idle
    thread, starts another, and the units alternate between them.)"""
    loop = asyncio.get_running_loop()
    workers = Workers(5, "w")
    try:
        names = {await loop.run_in_executor(workers, _thread_name) for _ in range(200)}
    finally:
        workers.shutdown()
    assert names == {"w-0"}


def test_up_to_size_units_run_at_once_and_the_rest_wait() -> None:
    workers = Workers(2, "w")
    running = threading.Barrier(3, timeout=HANG_GUARD)  # two units and this test
    release = threading.Event()
    ran: list[int] = []

    def held() -> str:
        running.wait()
        release.wait(HANG_GUARD)
        return _thread_name()

    try:
        first, second = workers.submit(held), workers.submit(held)
        running.wait()  # both run at once: a pool of one would never get here
        later = [workers.submit(ran.append, n) for n in range(5)]
        assert not any(future.done() for future in later)  # both threads are busy
        release.set()
        assert {first.result(HANG_GUARD), second.result(HANG_GUARD)} == {"w-0", "w-1"}
        for future in later:
            future.result(HANG_GUARD)
        assert sorted(ran) == [0, 1, 2, 3, 4]
    finally:
        release.set()
        workers.shutdown()


def test_units_waiting_for_the_one_thread_run_in_order() -> None:
    workers = Workers(1, "w")
    release = threading.Event()
    order: list[int] = []
    try:
        busy = workers.submit(release.wait, HANG_GUARD)
        later = [workers.submit(order.append, n) for n in range(5)]
        release.set()
        assert busy.result(HANG_GUARD) is True
        for future in later:
            future.result(HANG_GUARD)
        assert order == [0, 1, 2, 3, 4]
    finally:
        release.set()
        workers.shutdown()


def test_a_unit_s_exception_reaches_its_caller_and_the_thread_goes_on() -> None:
    workers = Workers(1, "w")

    def fails(error: BaseException) -> None:
        raise error

    try:
        with pytest.raises(KeyError, match="no such row"):
            workers.submit(fails, KeyError("no such row")).result(HANG_GUARD)
        with pytest.raises(SystemExit):  # not only Exception: the caller's to handle
            workers.submit(fails, SystemExit(3)).result(HANG_GUARD)
        assert workers.submit(_thread_name).result(HANG_GUARD) == "w-0"
    finally:
        workers.shutdown()


def test_a_unit_cancelled_before_it_runs_never_runs() -> None:
    workers = Workers(1, "w")
    release = threading.Event()
    ran: list[str] = []
    try:
        busy = workers.submit(release.wait, HANG_GUARD)
        waiting = workers.submit(ran.append, "cancelled")
        assert waiting.cancel()
        release.set()
        assert busy.result(HANG_GUARD) is True
        assert workers.submit(ran.append, "next").result(HANG_GUARD) is None
        assert ran == ["next"]
        with pytest.raises(CancelledError):
            waiting.result(0)
    finally:
        release.set()
        workers.shutdown()


def test_shutdown_ends_every_thread_after_the_units_it_was_given() -> None:
    workers = Workers(3, "w")
    started = threading.Barrier(2, timeout=HANG_GUARD)
    release = threading.Event()

    def held() -> str:
        started.wait()
        release.wait(HANG_GUARD)
        return "finished"

    workers.submit(_thread_name).result(HANG_GUARD)  # an idle thread
    busy = workers.submit(held)  # the idle one takes it: the warmest
    started.wait()
    second = workers.submit(_thread_name).result(HANG_GUARD)  # a second thread, now idle
    assert second == "w-1"
    threads = list(workers._threads)
    assert [thread.name for thread in threads] == ["w-0", "w-1"]
    workers.shutdown(wait=False)
    with pytest.raises(RuntimeError, match="closed"):
        workers.submit(_thread_name)
    assert not busy.done()
    release.set()
    workers.shutdown()  # waits for them
    assert busy.result(0) == "finished"  # the busy thread finished its unit first
    assert not any(thread.is_alive() for thread in threads)


def test_shutdown_can_cancel_the_units_still_waiting() -> None:
    workers = Workers(1, "w")
    release = threading.Event()
    busy = workers.submit(release.wait, HANG_GUARD)
    waiting = workers.submit(_thread_name)
    workers.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    release.set()
    workers.shutdown()
    assert busy.result(0) is True


def test_a_pool_no_one_holds_ends_its_threads() -> None:
    workers = Workers(1, "w")
    assert workers.submit(_thread_name).result(HANG_GUARD) == "w-0"
    (thread,) = workers._threads
    del workers  # never shut down: collected, its idle thread is told to end
    thread.join(HANG_GUARD)
    assert not thread.is_alive()


class _FailingOnce(threading.Thread):
    """A thread whose first start fails, as when the process has no threads left."""

    failed = False

    def start(self) -> None:
        if not _FailingOnce.failed:
            _FailingOnce.failed = True
            raise RuntimeError("can't start new thread")
        super().start()


def test_a_thread_that_fails_to_start_leaves_the_pool_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_FailingOnce, "failed", False)
    monkeypatch.setattr(threading, "Thread", _FailingOnce)  # what the pool starts next
    workers = Workers(1, "w")
    try:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            workers.submit(_thread_name)
        assert workers.submit(_thread_name).result(HANG_GUARD) == "w-0"
    finally:
        workers.shutdown()


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        Workers(0, "w")
