"""The worker threads of a SQLite database: each unit runs on the thread that went idle
last.

SQLite's driver blocks, so :class:`~.engine.Database` runs each unit of work whole on a
worker thread. The standard :class:`~concurrent.futures.ThreadPoolExecutor` hands work
to the thread that has waited longest, and starts a second thread as soon as the loop
asks for the next unit before the last one's thread has marked itself idle (it marks
itself after the caller is woken) — so units that follow each other, a conversation's
writes or a resume after a write, alternate between two threads. Waking the colder
thread cost 25–30 µs of CPU per unit here, a tenth of a turn's whole write; this pool
marks a thread idle before its caller is woken, and wakes the warmest one.

A unit's result goes straight to the loop's future that awaits it (one
``call_soon_threadsafe``), not through a :class:`concurrent.futures.Future` chained to
an asyncio one as ``run_in_executor`` does: that chain — the executor's future and its
condition, the callbacks both ways, the state copied over — was a third of a turn's
whole hand-off (139 against 217 thousand instructions for an empty unit).

Up to ``size`` units run at once (reads beside a writer waiting for SQLite's lock);
more wait in order. Threads start when first needed and end when the pool is shut down
or collected. They are daemons: the interpreter's exit does not wait for a unit stuck on
a lock, and one cut short leaves SQLite's file as a crash does — every committed
transaction kept, the unit's own rolled back.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

__all__ = ["Workers"]

T = TypeVar("T")
_Inbox = SimpleQueue["_Work | None"]


class _Work:
    """A unit, and the loop's future that waits for it."""

    __slots__ = ("fn", "future", "loop")

    def __init__(
        self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]
    ) -> None:
        self.fn, self.loop, self.future = fn, loop, future

    def wanted(self) -> bool:
        """Whether the caller still waits (read on a worker thread: a cancel that lands
        just after is the caller's to handle, as with any unit already running)."""
        return not self.future.cancelled()

    def settle(self, result: Any, error: BaseException | None) -> None:
        """Hand the unit's result or error to its future, on the loop."""
        self._on_loop(_settle, self.future, result, error)

    def cancel(self) -> None:
        """Cancel the unit's future, on the loop (a unit that never ran)."""
        self._on_loop(self.future.cancel)

    def _on_loop(self, callback: Callable[..., object], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: no one waits any more
            pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _Shared:
    """What the pool and its threads share; the threads hold this, not the pool, so an
    unreferenced pool is collected and its threads told to end."""

    __slots__ = ("closed", "idle", "lock", "waiting")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Inbox] = []
        """The idle threads' inboxes; the last one went idle last."""
        self.waiting: deque[_Work] = deque()
        self.closed = False

    def close(self, *, cancel: bool = False) -> None:
        """Take no more units; end the idle threads now, the busy ones once the units
        waiting are run (``cancel``: cancelled instead)."""
        with self.lock:
            self.closed = True
            if cancel:
                while self.waiting:
                    self.waiting.popleft().cancel()
            idle, self.idle = self.idle, []
        for inbox in idle:
            inbox.put(None)


class Workers:
    """Up to ``size`` threads named ``name-N``; the last to go idle takes the next unit."""

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one thread")
        self._size, self._name = size, name
        self._shared = _Shared()
        self._threads: list[threading.Thread] = []
        weakref.finalize(self, self._shared.close)

    def run(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``fn()`` on a worker thread; the future of its result, on the running loop
        (the unit is queued before this returns). Cancelling the future before the unit
        starts keeps it from running; once it runs, it runs to its end.

        Raises:
            RuntimeError: The pool is shut down, or no thread could be started.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        work = _Work(fn, loop, future)
        shared = self._shared
        with shared.lock:
            if shared.closed:
                raise RuntimeError("cannot run a unit on a closed pool")
            if shared.idle:
                shared.idle.pop().put(work)
            elif len(self._threads) < self._size:
                inbox: _Inbox = SimpleQueue()
                inbox.put(work)
                thread = threading.Thread(
                    target=_work,
                    args=(shared, inbox),
                    name=f"{self._name}-{len(self._threads)}",
                    daemon=True,
                )
                thread.start()  # counted once it runs: a failed start leaves no gap
                self._threads.append(thread)
            else:
                shared.waiting.append(work)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking units; each thread ends once the units given to it have run
        (``cancel_futures``: the waiting ones are cancelled instead)."""
        self._shared.close(cancel=cancel_futures)
        if wait:
            for thread in list(self._threads):
                if thread is not threading.current_thread():
                    thread.join()


def _work(shared: _Shared, inbox: _Inbox) -> None:
    """A worker thread: run what its inbox gets, then the units waiting, until closed."""
    work = inbox.get()
    while work is not None:
        run = work.wanted()
        result: Any = None
        error: BaseException | None = None
        if run:
            try:
                result = work.fn()
            except BaseException as exc:  # the caller's to handle, as an executor's
                error = exc
        done, work = work, None
        closed = False
        with shared.lock:  # idle before the caller wakes: its next unit comes here
            if shared.waiting:
                work = shared.waiting.popleft()
            elif shared.closed:
                closed = True
            else:
                shared.idle.append(inbox)
        if run:
            done.settle(result, error)
        del done, result, error
        if work is None and not closed:
            work = inbox.get()
