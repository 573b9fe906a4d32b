"""The worker threads of a SQLite database: each unit runs on the thread that went idle
last.

SQLite's driver blocks, so :class:`~.engine.Database` runs each unit of work whole on a
worker thread. The standard :class:`~concurrent.futures.ThreadPoolExecutor` hands work
to the thread that has waited longest, and starts a second thread as soon as the loop
asks for the next unit before the last one's thread has marked itself idle (it marks
itself after the caller is woken) — so units that follow each other, a conversation's
writes or a resume after a write, alternate between two threads. Waking the colder
thread costs some 20 µs of CPU per unit here, a tenth of a turn's whole write; this
pool marks a thread idle before its caller is woken, and wakes the warmest one.

Up to ``size`` units run at once (reads beside a writer waiting for SQLite's lock);
more wait in order. Threads start when first needed and are daemons: a unit cut short
by the interpreter's exit leaves SQLite's file as a crash does — every committed
transaction kept, the unit's own rolled back (its caller, gone, reported it unsaved).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, TypeVar

__all__ = ["Workers"]

T = TypeVar("T")
_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class Workers(Executor):
    """Up to ``size`` threads named ``name-N``; the last to go idle takes the next unit."""

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one thread")
        self._size, self._name = size, name
        self._lock = threading.Lock()
        self._idle: list[SimpleQueue[_Work | None]] = []
        """The idle threads' inboxes; the last one went idle last."""
        self._waiting: deque[_Work] = deque()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a worker thread; its future."""
        future: Future[T] = Future()
        work: _Work = (future, fn, args, kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run a unit on a closed pool")
            if self._idle:
                self._idle.pop().put(work)
            elif len(self._threads) < self._size:
                inbox: SimpleQueue[_Work | None] = SimpleQueue()
                inbox.put(work)
                thread = threading.Thread(
                    target=self._work,
                    args=(inbox,),
                    name=f"{self._name}-{len(self._threads)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._waiting.append(work)
        return future

    def _work(self, inbox: SimpleQueue[_Work | None]) -> None:
        work = inbox.get()
        while work is not None:
            future, fn, args, kwargs = work
            work = None
            if not future.set_running_or_notify_cancel():
                outcome: tuple[bool, Any] | None = None
            else:
                try:
                    outcome = (True, fn(*args, **kwargs))
                except BaseException as exc:  # the caller's to handle, as an executor's
                    outcome = (False, exc)
            del fn, args, kwargs
            closed = False
            with self._lock:  # idle before the caller wakes: its next unit comes here
                if self._waiting:
                    work = self._waiting.popleft()
                elif self._closed:
                    closed = True
                else:
                    self._idle.append(inbox)
            if outcome is not None:
                ok, value = outcome
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
            del future, outcome
            if work is None and not closed:
                work = inbox.get()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking units; each thread ends once the units given to it have run
        (``cancel_futures``: the waiting ones are cancelled instead)."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while self._waiting:
                    self._waiting.popleft()[0].cancel()
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for inbox in idle:
            inbox.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()
