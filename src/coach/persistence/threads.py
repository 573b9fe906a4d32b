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

Up to ``size`` units run at once (reads beside a writer waiting for SQLite's lock);
more wait in order. Threads start when first needed and end when the pool is shut down
or collected. They are daemons: the interpreter's exit does not wait for a unit stuck on
a lock, and one cut short leaves SQLite's file as a crash does — every committed
transaction kept, the unit's own rolled back.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, TypeVar

__all__ = ["Workers"]

T = TypeVar("T")
_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]
_Inbox = SimpleQueue[_Work | None]


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
                    self.waiting.popleft()[0].cancel()
            idle, self.idle = self.idle, []
        for inbox in idle:
            inbox.put(None)


class Workers(Executor):
    """Up to ``size`` threads named ``name-N``; the last to go idle takes the next unit."""

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one thread")
        self._size, self._name = size, name
        self._shared = _Shared()
        self._threads: list[threading.Thread] = []
        weakref.finalize(self, self._shared.close)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a worker thread; its future."""
        future: Future[T] = Future()
        work: _Work = (future, fn, args, kwargs)
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
        future, fn, args, kwargs = work
        work = None
        run = future.set_running_or_notify_cancel()
        result: Any = None
        error: BaseException | None = None
        if run:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller's to handle, as an executor's
                error = exc
        del fn, args, kwargs
        closed = False
        with shared.lock:  # idle before the caller wakes: its next unit comes here
            if shared.waiting:
                work = shared.waiting.popleft()
            elif shared.closed:
                closed = True
            else:
                shared.idle.append(inbox)
        if run:
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)
        del future, result, error
        if work is None and not closed:
            work = inbox.get()
