"""The SQLite database's worker threads: the warmest thread takes the next unit, up to
``size`` run at once, the rest wait in order, a unit's result reaches the loop that asked
for it, and a closed pool ends its threads."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable

import pytest

from coach.persistence.threads import Workers

HANG_GUARD = 30  # seconds: only so that a broken pool fails instead of hanging


def _thread_name() -> str:
    return threading.current_thread().name


async def _result(future: asyncio.Future[str]) -> str:
    return await asyncio.wait_for(future, HANG_GUARD)


async def test_units_that_follow_each_other_run_on_one_thread() -> None:
    """The loop asks for the next unit as soon as the last one's result reaches it: the
    thread that ran it is already idle, and takes it. (A thread that wakes its caller
    before it goes idle — the standard pool's order — fails this: the loop finds no idle
    thread, starts another, and the units alternate between them.)"""
    workers = Workers(5, "w")
    try:
        names = {await workers.run(_thread_name) for _ in range(200)}
    finally:
        workers.shutdown()
    assert names == {"w-0"}


async def test_up_to_size_units_run_at_once_and_the_rest_wait() -> None:
    workers = Workers(2, "w")
    running = threading.Barrier(3, timeout=HANG_GUARD)  # two units and this test
    release = threading.Event()
    ran: list[int] = []

    def held() -> str:
        running.wait()
        release.wait(HANG_GUARD)
        return _thread_name()

    try:
        first, second = workers.run(held), workers.run(held)
        # both run at once: a pool of one would never get here
        await asyncio.to_thread(running.wait)
        later = [workers.run(functools.partial(ran.append, n)) for n in range(5)]
        assert ran == []  # both threads are busy
        release.set()
        assert {await _result(first), await _result(second)} == {"w-0", "w-1"}
        for future in later:
            await asyncio.wait_for(future, HANG_GUARD)
        assert sorted(ran) == [0, 1, 2, 3, 4]
    finally:
        release.set()
        workers.shutdown()


async def test_units_waiting_for_the_one_thread_run_in_order() -> None:
    workers = Workers(1, "w")
    release = threading.Event()
    order: list[int] = []
    try:
        busy = workers.run(functools.partial(release.wait, HANG_GUARD))
        later = [workers.run(functools.partial(order.append, n)) for n in range(5)]
        release.set()
        assert await asyncio.wait_for(busy, HANG_GUARD) is True
        for future in later:
            await asyncio.wait_for(future, HANG_GUARD)
        assert order == [0, 1, 2, 3, 4]
    finally:
        release.set()
        workers.shutdown()


async def test_a_unit_s_exception_reaches_its_caller_and_the_thread_goes_on() -> None:
    workers = Workers(1, "w")

    def fails(error: BaseException) -> Callable[[], None]:
        def unit() -> None:
            raise error

        return unit

    try:
        with pytest.raises(KeyError, match="no such row"):
            await workers.run(fails(KeyError("no such row")))
        with pytest.raises(SystemExit):  # not only Exception: the caller's to handle
            await workers.run(fails(SystemExit(3)))
        assert await workers.run(_thread_name) == "w-0"
    finally:
        workers.shutdown()


async def test_a_unit_cancelled_before_it_runs_never_runs() -> None:
    workers = Workers(1, "w")
    release = threading.Event()
    ran: list[str] = []
    try:
        busy = workers.run(functools.partial(release.wait, HANG_GUARD))
        waiting = workers.run(functools.partial(ran.append, "cancelled"))
        assert waiting.cancel()
        release.set()
        assert await asyncio.wait_for(busy, HANG_GUARD) is True
        await workers.run(functools.partial(ran.append, "next"))
        assert ran == ["next"]
    finally:
        release.set()
        workers.shutdown()


class _Held:
    """A unit that says it started, then holds its thread until released."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self) -> str:
        self.started.set()
        self.release.wait(HANG_GUARD)
        return "finished"


async def test_a_unit_whose_caller_left_while_it_ran_ends_quietly() -> None:
    """The caller is cancelled while its unit runs (a shutdown's deadline): the unit
    runs to its end, its result goes nowhere — no error in the loop — and the thread
    takes the next unit."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    workers = Workers(1, "w")
    held = _Held()

    try:
        caller = asyncio.ensure_future(workers.run(held))
        await asyncio.to_thread(held.started.wait, HANG_GUARD)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        held.release.set()
        assert await workers.run(_thread_name) == "w-0"  # after the held unit
    finally:
        held.release.set()
        workers.shutdown()
        loop.set_exception_handler(None)
    assert errors == []


def test_a_unit_that_ends_after_its_loop_closed_leaves_the_thread_working() -> None:
    """A loop closed while its unit still runs (an interpreter shutting down): the
    result has nowhere to go, and the thread goes on with the next loop's units."""
    workers = Workers(1, "w")
    held = _Held()

    async def leave_it_running() -> None:
        workers.run(held)
        await asyncio.to_thread(held.started.wait, HANG_GUARD)

    try:
        asyncio.run(leave_it_running())  # closes its loop with the unit still held
        held.release.set()

        async def next_unit() -> str:
            return await asyncio.wait_for(workers.run(_thread_name), HANG_GUARD)

        assert asyncio.run(next_unit()) == "w-0"
    finally:
        held.release.set()
        workers.shutdown()


async def test_shutdown_ends_every_thread_after_the_units_it_was_given() -> None:
    workers = Workers(3, "w")
    started = threading.Barrier(2, timeout=HANG_GUARD)
    release = threading.Event()

    def held() -> str:
        started.wait()
        release.wait(HANG_GUARD)
        return "finished"

    await workers.run(_thread_name)  # an idle thread
    busy = workers.run(held)  # the idle one takes it: the warmest
    await asyncio.to_thread(started.wait)
    second = await workers.run(_thread_name)  # a second thread, now idle
    assert second == "w-1"
    threads = list(workers._threads)
    assert [thread.name for thread in threads] == ["w-0", "w-1"]
    workers.shutdown(wait=False)
    with pytest.raises(RuntimeError, match="closed"):
        workers.run(_thread_name)
    assert not busy.done()
    release.set()
    await asyncio.to_thread(workers.shutdown)  # waits for them
    assert await asyncio.wait_for(busy, HANG_GUARD) == "finished"  # its unit first
    assert not any(thread.is_alive() for thread in threads)


async def test_shutdown_can_cancel_the_units_still_waiting() -> None:
    workers = Workers(1, "w")
    release = threading.Event()
    busy = workers.run(functools.partial(release.wait, HANG_GUARD))
    waiting = workers.run(_thread_name)
    workers.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, HANG_GUARD)
    release.set()
    await asyncio.to_thread(workers.shutdown)
    assert await asyncio.wait_for(busy, HANG_GUARD) is True


async def test_a_pool_no_one_holds_ends_its_threads() -> None:
    workers = Workers(1, "w")
    assert await workers.run(_thread_name) == "w-0"
    (thread,) = workers._threads
    del workers  # never shut down: collected, its idle thread is told to end
    await asyncio.to_thread(thread.join, HANG_GUARD)
    assert not thread.is_alive()


class _FailingOnce(threading.Thread):
    """A thread whose first start fails, as when the process has no threads left."""

    failed = False

    def start(self) -> None:
        if not _FailingOnce.failed:
            _FailingOnce.failed = True
            raise RuntimeError("can't start new thread")
        super().start()


async def test_a_thread_that_fails_to_start_leaves_the_pool_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_FailingOnce, "failed", False)
    monkeypatch.setattr(threading, "Thread", _FailingOnce)  # what the pool starts next
    workers = Workers(1, "w")
    try:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            workers.run(_thread_name)
        assert await workers.run(_thread_name) == "w-0"
    finally:
        workers.shutdown()


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        Workers(0, "w")
