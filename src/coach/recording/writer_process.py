"""The recorder's database work in a process of its own, off the voice turn's CPU.

The :class:`~coach.recording.writer.Recorder` decides what to write and when (queue,
group commit, retries, fencing); :class:`WriterProcess` is the store it writes through.
Each call — ``write_batch``, and the two reads the recorder makes after a lost
acknowledgement — is pickled, sent over a socket pair to a child process
(``python -m coach.recording.writer_process``, with its own event loop, engine and
pool), run there, and answered. The agent's event loop pays one hand-off per batch
(pickling a 28-op batch takes ~0.1 ms); SQLAlchemy, the driver's round trips and the
signed pickling of memory steps for storage run in the child, on another core. (A
sender thread would keep even the hand-off off the loop, but measured slower: its GIL
hand-offs cost the loop more than the pickling they moved.)
``COACH_RECORDER_PROCESS=false`` writes in-process instead.

* **Shutdown.** The child ignores SIGINT and SIGTERM, so a Ctrl-C or a supervisor's
  signal to the process group cannot cut a write short: the parent drains the
  recorder, then closes the pipe (:meth:`WriterProcess.aclose`).
* **Parent killed.** The child reads end-of-file, finishes the batch in hand and exits:
  a SIGKILL of the agent still loses at most the commit window not yet handed over.
* **Child killed.** The call in flight fails with a transient
  :class:`~coach.errors.StorageError`; the recorder retries (checking whether the batch
  landed) and the next call starts a new child.
* **Errors** come back as the same :mod:`coach.errors` types, with ``transient`` set
  by the child, which still sees the driver's error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Final

from ..errors import CoachError, InvalidWrite, StorageError
from ..persistence import Repository, create_engine
from ..persistence.engine import SQLITE_BUSY_TIMEOUT_MS
from .ops import WriteOp
from .writer import is_transient

if TYPE_CHECKING:
    from ..persistence.records import StateRecord

__all__ = ["WriterConfig", "WriterProcess", "main"]

logger = logging.getLogger("coach.recorder")

CALLS: Final = frozenset({"write_batch", "agent_step_count", "get_state"})
"""The repository methods the child runs; anything else is refused."""
_PROTOCOL: Final = pickle.HIGHEST_PROTOCOL


@dataclass(frozen=True)
class WriterConfig:
    """What the child needs to open its own repository (sent over the pipe, not argv)."""

    database_url: str = field(repr=False)  # may carry a password
    secret: bytes = field(repr=False)
    phase_ids: tuple[str, ...]
    pool_size: int = 2
    max_overflow: int = 0
    busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS
    """How long a SQLite write waits for the lock before it counts as an outage."""


class WriterProcess:
    """The parent's end: a :class:`~coach.recording.writer.BatchStore` run by a child.

    Calls are answered one at a time, in order (the recorder has one writer task). The
    child starts on :meth:`start` or on the first call, and again after it dies. Use it
    from one event loop.

    Args:
        config: How the child opens its repository.
        start_timeout: Seconds a child may take to import and open its repository.
        close_timeout: Seconds :meth:`aclose` waits for the child to exit before
            killing it.
    """

    def __init__(
        self, config: WriterConfig, *, start_timeout: float = 60.0, close_timeout: float = 10.0
    ) -> None:
        if not sys.executable:
            raise StorageError("cannot start the writer process: no Python executable known")
        self._config = config
        self._start_timeout = start_timeout
        self._close_timeout = close_timeout
        self._lock = asyncio.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._starting: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running child's process id (None before it starts or after it died)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        """Start the child now, in the background, so the first write need not wait."""
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._boot())

    async def _boot(self) -> None:
        try:
            async with self._lock:
                if not self._closed:  # closed before the boot ran: start nothing
                    await self._ensure_child()
        except CoachError as exc:  # the first call will try again, and raise
            logger.warning("writer process did not start", extra={"error": str(exc)})

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        """``Repository.write_batch`` in the child."""
        await self._call("write_batch", list(ops))

    async def agent_step_count(self, session_id: str) -> int:
        """``Repository.agent_step_count`` in the child."""
        count: int = await self._call("agent_step_count", session_id)
        return count

    async def get_state(self, session_id: str) -> StateRecord:
        """``Repository.get_state`` in the child."""
        state: StateRecord = await self._call("get_state", session_id)
        return state

    async def _call(self, method: str, *args: Any) -> Any:
        if self._closed:
            raise StorageError("the writer process is closed")
        try:
            request = pickle.dumps((method, args), protocol=_PROTOCOL)
        except Exception as exc:
            # Something in the batch cannot be pickled: the recorder then writes the ops
            # one by one, and only the bad one is refused.
            raise InvalidWrite(
                f"a write could not be sent to the writer process ({type(exc).__name__})"
            ) from None
        async with self._lock:
            reader, writer = await self._ensure_child()
            try:
                await _send(writer, request)
                reply = await _receive(reader)
            except (OSError, EOFError):
                code = await self._stop_child(graceful=False)
                raise _transient(
                    f"the writer process exited during a write (exit code {code})"
                ) from None
            except BaseException:  # cancelled mid-call: the pipe is out of step
                self._abandon_child()
                raise
        return _unpack(reply)

    async def aclose(self) -> None:
        """Let the child finish the call in hand and exit (killed after ``close_timeout``)."""
        if self._closed:
            return
        self._closed = True
        try:
            async with asyncio.timeout(self._close_timeout):
                await self._lock.acquire()
        except TimeoutError:  # a call is stuck: stop the child under it
            logger.error("writer process did not finish in time; killed")
            self._abandon_child()
            await self._lock.acquire()
        try:
            await self._stop_child(graceful=True)
        finally:
            self._lock.release()
        if self._starting is not None:
            await self._starting

    # --- the child's lifecycle (called holding the lock) -------------------------------

    async def _ensure_child(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        proc, reader, writer = self._proc, self._reader, self._writer
        if proc is not None and reader is not None and writer is not None:
            if proc.poll() is None and not writer.is_closing():
                return reader, writer
        await self._stop_child(graceful=False)
        parent_end, child_end = socket.socketpair()
        try:
            self._proc = await asyncio.to_thread(
                subprocess.Popen,
                [sys.executable, "-m", __name__, str(child_end.fileno())],
                pass_fds=[child_end.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            parent_end.close()
            raise _transient(f"cannot start the writer process ({type(exc).__name__})") from None
        finally:
            child_end.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent_end)
        self._reader, self._writer = reader, writer
        try:
            async with asyncio.timeout(self._start_timeout):
                await _send(writer, pickle.dumps(self._config, protocol=_PROTOCOL))
                _unpack(await _receive(reader))
        except (OSError, EOFError, TimeoutError) as exc:
            code = await self._stop_child(graceful=False)
            raise _transient(
                f"the writer process did not start ({type(exc).__name__}, exit code {code})"
            ) from None
        except CoachError:
            await self._stop_child(graceful=False)
            raise
        logger.debug("writer process started", extra={"pid": self._proc.pid})
        return reader, writer

    async def _stop_child(self, *, graceful: bool) -> int | None:
        """Close the pipe (the child reads end-of-file and exits) and reap it."""
        proc, writer = self._proc, self._writer
        self._proc = self._reader = self._writer = None
        if writer is not None:
            writer.close()
        if proc is None:
            return None
        try:
            return await asyncio.to_thread(proc.wait, self._close_timeout if graceful else 1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            return await asyncio.to_thread(proc.wait)

    def _abandon_child(self) -> None:
        """Kill the child without waiting; the next call (or close) reaps it."""
        if self._proc is not None:
            self._proc.kill()
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    # The framing of multiprocessing.connection.Connection, which the child reads.
    if len(data) > 0x7FFFFFFF:
        writer.write(struct.pack("!iQ", -1, len(data)))
    else:
        writer.write(struct.pack("!i", len(data)))
    writer.write(data)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack("!i", await reader.readexactly(4))
    if size == -1:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
    return await reader.readexactly(size)


def _transient(message: str) -> StorageError:
    error = StorageError(message)
    error.transient = True
    return error


def _unpack(reply: bytes) -> Any:
    kind, value, transient = pickle.loads(reply)  # our own child's reply
    if kind == "ok":
        return value
    error = pickle.loads(value)
    if isinstance(error, StorageError):
        error.transient = transient
    raise error


def _error_reply(exc: CoachError) -> bytes:
    try:
        packed = pickle.dumps(exc, protocol=_PROTOCOL)
    except Exception:  # an error type that cannot travel: keep its type name and message
        packed = pickle.dumps(StorageError(f"{type(exc).__name__}: {exc}"), protocol=_PROTOCOL)
    return pickle.dumps(("error", packed, is_transient(exc)), protocol=_PROTOCOL)


# --- the child ---------------------------------------------------------------------------


async def _answer(store: Repository, request: bytes) -> bytes:
    try:
        method, args = pickle.loads(request)  # from our own parent
    except Exception as exc:  # e.g. a class this process cannot import: refuse, go on
        name = type(exc).__name__
        return _error_reply(InvalidWrite(f"the writer process cannot read a write ({name})"))
    if method not in CALLS:
        return _error_reply(InvalidWrite(f"the writer process does not run {method!r}"))
    try:
        result = await getattr(store, method)(*args)
    except CoachError as exc:
        return _error_reply(exc)
    except Exception as exc:  # a bug: report it by type, keep serving
        logger.exception("writer process: unexpected error")
        return _error_reply(StorageError(f"unexpected {type(exc).__name__} in the writer process"))
    return pickle.dumps(("ok", result, False), protocol=_PROTOCOL)


async def _serve_child(conn: Connection) -> None:
    config: WriterConfig = pickle.loads(await asyncio.to_thread(conn.recv_bytes))
    try:
        engine = create_engine(
            config.database_url,
            pool_size=config.pool_size,
            max_overflow=config.max_overflow,
            busy_timeout_ms=config.busy_timeout_ms,
        )
    except Exception as exc:  # an unusable URL: the parent's own engine would not open either
        conn.send_bytes(_error_reply(StorageError(f"writer process: {type(exc).__name__}")))
        return
    store = Repository(engine, secret=config.secret, phase_ids=config.phase_ids)
    try:
        conn.send_bytes(pickle.dumps(("ok", os.getpid(), False), protocol=_PROTOCOL))
        while True:
            try:
                request = await asyncio.to_thread(conn.recv_bytes)
            except (EOFError, OSError):
                return  # the parent closed the pipe, or died: the batch in hand is done
            reply = await _answer(store, request)
            try:
                conn.send_bytes(reply)
            except OSError:
                return
    finally:
        await store.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """The child: ``python -m coach.recording.writer_process FD`` (FD: its socket end)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m coach.recording.writer_process FD", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s coach.writer[%(process)d] %(name)s: %(message)s",
    )
    with Connection(int(args[0])) as conn:
        try:
            asyncio.run(_serve_child(conn))
        except (EOFError, OSError):
            return 1  # the parent went away before sending the configuration
    return 0


if __name__ == "__main__":
    sys.exit(main())
