"""The recorder: one background writer per process that persists what sessions queue.

Callers (event handlers, tools) only enqueue — :meth:`Recorder.submit` is synchronous
and never touches the database, so recording adds nothing to a voice turn. One task
drains the queue in order: what is queued within one commit window (``commit_interval``,
50 ms by default; at once when flushing or when a batch is full) is written together
in one transaction (group commit), which the repository applies as a few statements,
not a few per write. On a database error the writer keeps the batch and retries
with backoff while the conversation goes on; nothing is dropped or reordered. When the
queue reaches its bound, :meth:`Recorder.wait_for_capacity` slows the agent down
(back-pressure) instead of losing writes.

Durability contract: a write is durable once its batch commits. A SIGKILL loses at most
what was queued but not yet committed — the current commit window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Sequence

from .. import metrics
from ..errors import CoachError, StaleWrite, StorageError
from ..store import (
    AppendSteps,
    BatchWriter,
    WriteOp,
    WriteZone,
)
from .losses import (
    LAG_WINDOW,
    Losses,
    RecorderStats,
    describe,
    is_transient,
    reason,
    timed_out,
)

logger = logging.getLogger("coach.recorder")


class Recorder:
    """Queues writes from every session of this process and commits them in the background.

    What a crash can lose is what is queued and not yet committed: the writes of the
    current group-commit window (``commit_interval``) plus those of the transaction in
    flight — counted by ``coach_recorder_queue_depth`` and timed by
    ``coach_recorder_commit_lag_seconds`` (:meth:`stats` has its percentiles). A batch that
    does not commit within the database's deadline is split in halves, and ``max_batch``
    shrinks until batches commit again, so one that can never fit is not retried whole.
    """

    def __init__(
        self,
        store: BatchWriter,
        *,
        max_pending: int = 10_000,
        max_batch: int = 100,
        commit_interval: float = 0.05,
        retry_initial: float = 0.05,
        retry_max: float = 2.0,
        stats_interval: float = 30.0,
        shutdown_timeout: float = 10.0,
    ) -> None:
        self._store = store
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._batch_limit = max_batch
        """The configured ``max_batch``; ``_max_batch`` shrinks below it after timeouts."""
        self._lags: deque[float] = deque(maxlen=LAG_WINDOW)
        self._commit_interval = commit_interval
        self._urgent = False
        self._fenced: set[str] = set()
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._stats_interval = stats_interval
        self._shutdown_timeout = shutdown_timeout
        self._queue: deque[tuple[int, float, WriteOp]] = deque()
        self._submitted = 0
        self._committed = 0
        self._errors = 0
        self._dropped = 0
        self._batches = 0
        self._inflight_since: float | None = None
        self._inflight = 0
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Condition()
        self._capacity = asyncio.Event()
        self._capacity.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._last_stats_log = time.monotonic()
        self._reasons: Counter[str] = Counter()
        """Why writes were dropped, by error type (for :meth:`losses`)."""
        self._last_outage: str | None = None
        """The last transient failure: why queued writes are still waiting."""

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """Start the writer task (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="coach.recorder")

    async def aclose(self) -> Losses:
        """Flush (waiting at most ``shutdown_timeout``), then stop.

        Returns what was lost over the recorder's life (nothing, normally); when anything
        was, one error line says how many writes and why.
        """
        try:
            async with asyncio.timeout(self._shutdown_timeout):
                await self.flush()
            flushed = True
        except TimeoutError:
            flushed = False
            if self._last_outage is None:  # still waiting on its first try (a lock, a stall)
                self._last_outage = f"no answer within {self._shutdown_timeout:g} s"
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        stats = self.stats()
        losses = self.losses(unwritten=0 if flushed else stats.queue_depth)
        if losses.count:
            logger.error("recorder closed: %s", losses)
        else:
            logger.info("recorder closed", extra={"written": stats.written, "errors": stats.errors})
        return losses

    def losses(self, *, unwritten: int = 0) -> Losses:
        """Writes dropped so far (plus ``unwritten`` still queued), with their causes."""
        reasons = [reason for reason, _ in self._reasons.most_common()]
        if unwritten and self._last_outage and self._last_outage not in reasons:
            reasons.insert(0, self._last_outage)
        return Losses(dropped=self._dropped, unwritten=unwritten, reasons=tuple(reasons))

    # --- queueing (synchronous, never blocks) -----------------------------------------

    def submit(self, op: WriteOp) -> None:
        """Queue one write. Never blocks and never drops; see :meth:`wait_for_capacity`."""
        self._submitted += 1
        self._queue.append((self._submitted, time.monotonic(), op))
        if self.pending >= self._max_pending:
            self._capacity.clear()
        if len(self._queue) == 1 or len(self._queue) >= self._max_batch:
            self._wakeup.set()

    # --- waiting -------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Writes submitted and not yet committed (or dropped)."""
        return self._submitted - self._committed

    @property
    def saturated(self) -> bool:
        """True while the queue is at its bound (:meth:`wait_for_capacity` blocks)."""
        return not self._capacity.is_set()

    async def wait_for_capacity(self) -> None:
        """Wait while the queue is at its bound (back-pressure on the agent)."""
        await self._capacity.wait()

    async def flush(self) -> None:
        """Wait until everything submitted so far is committed (bound it with a timeout).

        Flushing does not wait for the commit window: what is queued is written at once.
        """
        target = self._submitted
        self._urgent = True
        self._wakeup.set()
        async with self._progress:
            await self._progress.wait_for(lambda: self._committed >= target)

    def stats(self) -> RecorderStats:
        """Queue depth, write lag, error and throughput counters."""
        oldest = self._queue[0][1] if self._queue else self._inflight_since
        lags = sorted(self._lags)
        return RecorderStats(
            queue_depth=self.pending,
            write_lag=time.monotonic() - oldest if oldest is not None and self.pending else 0.0,
            errors=self._errors,
            dropped=self._dropped,
            written=self._committed - self._dropped,
            batches=self._batches,
            commit_lag_p50=lags[len(lags) // 2] if lags else 0.0,
            commit_lag_p95=lags[min(len(lags) - 1, len(lags) * 95 // 100)] if lags else 0.0,
            commit_lag_max=lags[-1] if lags else 0.0,
            max_batch=self._max_batch,
        )

    # --- the writer ------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closing:
            if not self._queue:
                self._urgent = False
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            window = self._commit_interval - (time.monotonic() - self._queue[0][1])
            if window > 0 and not self._urgent and len(self._queue) < self._max_batch:
                # Group commit: let the rest of this turn's writes join the batch.
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), window)
                continue
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))]
            self._inflight_since = batch[0][1]
            metrics.RECORDER_QUEUE.set(self.pending)
            try:
                await self._write([op for _, _, op in batch])
            except Exception as exc:  # never let the writer die: every session depends on it
                self._errors += 1
                self._dropped += len(batch)
                self._reasons[reason(exc)] += len(batch)
                logger.exception("recorder batch failed; %d write(s) dropped", len(batch))
            self._inflight_since = None
            done = time.monotonic()
            metrics.BATCH_SIZE.observe(len(batch))
            lags = [done - queued for _, queued, _ in batch]
            metrics.observe_all(metrics.COMMIT_LAG, lags)
            self._lags.extend(lags)
            async with self._progress:
                self._committed += len(batch)
                self._progress.notify_all()
            metrics.RECORDER_QUEUE.set(self.pending)
            if self.pending < self._max_pending:
                self._capacity.set()
            self._maybe_log_stats()

    async def _write(self, ops: list[WriteOp], *, failed: bool = False) -> None:
        """Commit ``ops`` as one transaction, retrying while the database is away;
        ``failed`` says an earlier attempt at these writes may have landed."""
        ops = self._without_fenced(ops)
        delay = self._retry_initial
        while ops:
            try:
                await self._store.write_batch(ops)
                self._batches += 1
                if self._max_batch < self._batch_limit:  # it commits again: grow back
                    self._max_batch = min(self._max_batch * 2, self._batch_limit)
                if self._last_outage is not None:
                    logger.info("database reachable again; queued writes are being stored")
                    self._last_outage = None
                return
            except CoachError as exc:
                if failed and isinstance(exc, StaleWrite):
                    # A failed attempt may have committed (connection lost during COMMIT):
                    # writing the batch again would store its messages twice.
                    landed = await self._landed(ops)
                    if landed:
                        self._batches += 1
                        return
                    if landed is None:  # cannot tell yet: the database is still flapping
                        exc = StorageError("cannot check whether a batch was written")
                        exc.transient = True
                self._errors += 1
                failed = True
                passing = is_transient(exc)
                metrics.RECORDER_ERRORS.labels("transient" if passing else "refused").inc()
                if not passing:
                    break
                metrics.RECORDER_QUEUE.set(self.pending)  # it grows while the database is away
                if self._last_outage is None:  # one line when an outage starts, not per retry
                    logger.warning(
                        "database unavailable (%s); queued writes wait and are retried",
                        reason(exc),
                        extra={**describe(exc), "retry_in": delay},
                    )
                else:
                    logger.debug("database still unavailable; retry in %.2f s", delay)
                self._last_outage = reason(exc)
                if timed_out(exc) and len(ops) > 1:
                    # Too big to commit within the deadline: halve it (and later batches)
                    # instead of retrying it whole while back-pressure holds the agents.
                    self._max_batch = max(1, min(self._max_batch, len(ops) // 2))
                    half = len(ops) // 2
                    await self._write(ops[:half], failed=True)
                    await self._write(ops[half:], failed=True)
                    return
            except Exception as exc:  # a bug must not stop recording for every session
                self._errors += 1
                metrics.RECORDER_ERRORS.labels("unexpected").inc()
                logger.error("unexpected error writing a batch: %s", reason(exc))
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._retry_max)
        # A permanent error poisons only the op that caused it: write the rest one by one.
        for op in ops:
            if op.session_id in self._fenced and isinstance(op, AppendSteps | WriteZone):
                self._drop(op, "session fenced")
                continue
            try:
                await self._store.write_batch([op])
                self._batches += 1
            except CoachError as exc:
                if is_transient(exc):
                    await self._write([op])
                    continue
                self._drop(op, reason(exc))
                if isinstance(op, AppendSteps | WriteZone):
                    self._fence(op.session_id, exc)
            except Exception as exc:
                self._drop(op, reason(exc))

    def _drop(self, op: WriteOp, reason: str) -> None:
        self._dropped += 1
        self._reasons[reason] += 1
        metrics.DROPPED.labels(reason.split()[0]).inc()
        logger.error(
            "write rejected; dropped %s of session %s: %s",
            type(op).__name__,
            op.session_id,
            reason,
            extra={"op": type(op).__name__, "session_id": op.session_id, "reason": reason},
        )

    def _fence(self, session_id: str, cause: CoachError) -> None:
        """Stop writing numbered state for a session whose numbering we lost.

        After a refused memory step or zone write, this process's step counters for the
        session are wrong (another writer moved on, or a write is missing): writing on
        would either fail forever or — worse — slip in once the numbers line up again.
        """
        if session_id not in self._fenced:
            self._fenced.add(session_id)
            message = (
                "session fenced: its state is written elsewhere"
                if isinstance(cause, StaleWrite)
                else "session fenced: one of its numbered writes was refused"
            )
            logger.error(message, extra={"session_id": session_id, "error": type(cause).__name__})

    def is_fenced(self, session_id: str) -> bool:
        """Whether this process stopped writing a session's state (see ``_fence``)."""
        return session_id in self._fenced

    def _without_fenced(self, ops: list[WriteOp]) -> list[WriteOp]:
        kept: list[WriteOp] = []
        for op in ops:
            if op.session_id in self._fenced and isinstance(op, AppendSteps | WriteZone):
                self._drop(op, "session fenced")
            else:
                kept.append(op)
        return kept

    async def _landed(self, ops: Sequence[WriteOp]) -> bool | None:
        """Whether ``ops`` are already stored (None: the database cannot be asked now).

        A batch is one transaction, so its numbered writes tell for all of it: it landed
        if every session's stored memory-step count and state step are where the batch's
        appends and zone writes end. A batch with neither cannot be checked and counts as
        not stored.
        """
        step_ends = {
            op.session_id: op.start + len(op.steps) for op in ops if isinstance(op, AppendSteps)
        }
        state_ends = {
            op.session_id: op.expected_step + 1
            for op in ops
            if isinstance(op, WriteZone) and op.expected_step is not None
        }
        if not step_ends and not state_ends:
            return False
        try:
            for session_id, end in step_ends.items():
                if await self._store.agent_step_count(session_id) != end:
                    return False
            for session_id, end in state_ends.items():
                if (await self._store.get_state(session_id)).step != end:
                    return False
        except CoachError:
            return None
        logger.warning("a batch whose commit was not acknowledged had landed; not rewritten")
        return True

    def _maybe_log_stats(self) -> None:
        now = time.monotonic()
        if now - self._last_stats_log >= self._stats_interval and logger.isEnabledFor(
            logging.DEBUG
        ):
            self._last_stats_log = now
            stats = self.stats()
            logger.debug("recorder stats", extra=stats.__dict__)
