"""Section 5 of ``bench.core``: several OS processes recording into one PostgreSQL.

Each process is what a worker of a fleet is: its own event loop, its own ``Recorder``
and repository (connection pool), recording ``sessions`` conversations. Every message
is submitted together with its memory step (a ``ChatMessage``), so "messages/s" is also
memory steps/s. Every mode's ops (the store's ``AddMessage`` and ``AppendSteps``) are
made before the start, as raw's writers take theirs: making them is the caller's work,
not recording's. The processes start together (a barrier, after their imports and
warm-up) and run:

* **flat out** — each submits its messages as fast as the recorder's back-pressure
  allows; throughput is all messages over the time from the common start until the
  last process has flushed;
* **paced** — together they offer a fixed rate (open loop: message ``k`` of a process
  is due at ``start + k / rate``, whatever happened before), and every op's latency
  from enqueue to the return of the ``write_batch`` that committed it is recorded. The
  latency is taken from when the op was *due*, so a late loop counts against recording
  (and from the actual enqueue, for comparison).

Next to each flat-out run, three more from the same processes on the same rows: **raw**
asyncpg writing them in the recorder's batches (encoded before the start), the
**floor**: coach's ``Recorder`` over raw's writer (:class:`~bench.rawrows.RawStore`:
each batch encoded, signed and sealed as coach does it, then raw's statements), what
coach's recorder would reach with no storage layer of its own, and the **floor through
SQLAlchemy**: the same, with raw's statements run in SQLAlchemy's connection and
transaction (:class:`~bench.rawrows.RawOverSQLAlchemy`), what it would reach with
nothing of coach's storage layer but the stack it is built on.

Beside each flat-out run's throughput, its CPU a message: its processes' (every thread,
from the common start to each one's end) and the PostgreSQL server's (:func:`server_cpu`,
from the first start to the last end). Flat out, the machine's CPUs are the bound, so
raw's CPU a message over a writer's is the throughput ratio those CPUs give, and it
moves less from run to run than the throughputs on a shared machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .measure import coach_keys, percentile, pg_database, pg_url, table, verdict

SECRET = b"x" * 32
RAW_BATCH = 100
"""The recorder's ``max_batch``: raw asyncpg commits as many ops per transaction."""
FLOORS = ("floor", "sqlalchemy")
"""coach's recorder over raw's writer: raw asyncpg's own, or raw's statements run
through SQLAlchemy's asyncpg adapter (:class:`~bench.rawrows.RawOverSQLAlchemy`)."""


class TimedStore:
    """A store that notes when each op's batch committed (wraps the repository, or
    raw's writer)."""

    def __init__(self, repo: Any) -> None:
        self._repo = repo
        self.due: dict[int, tuple[float, float]] = {}
        """``id(op)`` -> (when it was due, when it was submitted), until committed."""
        self.from_due: list[float] = []
        self.from_submit: list[float] = []

    async def write_batch(self, ops: Sequence[Any]) -> None:
        """Write through, then record each op's latency."""
        await self._repo.write_batch(ops)
        now = time.monotonic()
        for op in ops:
            found = self.due.pop(id(op), None)
            if found is not None:
                self.from_due.append(now - found[0])
                self.from_submit.append(now - found[1])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)


@dataclass
class WorkerResult:
    """What one process reports."""

    messages: int
    start: float
    end: float
    batches: int
    errors: int
    from_due: list[float] = field(default_factory=list)
    from_submit: list[float] = field(default_factory=list)
    cpu: float = 0.0
    """This process's CPU (all its threads) from the start to the end, seconds."""
    server: tuple[float, float] = (0.0, 0.0)
    """The PostgreSQL server's CPU (:func:`server_cpu`) at the start and at the end."""


def server_cpu() -> float:
    """CPU seconds of every ``postgres`` process on this machine (and of the ones they
    have reaped), from ``/proc``; 0 where there is none (a remote server)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        close = data.rfind(b")")
        if data[data.find(b"(") + 1 : close] != b"postgres":
            continue
        fields = data[close + 2 :].split()
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


class _Clock:
    """A worker's CPU and the server's, from the common start."""

    def __init__(self) -> None:
        self.cpu = time.process_time()
        self.server = server_cpu()
        self.start = time.monotonic()

    def stop(self) -> tuple[float, float, tuple[float, float]]:
        """The end time, this process's CPU since the start, the server's samples."""
        end = time.monotonic()
        server = server_cpu()
        return end, time.process_time() - self.cpu, (self.server, server)


async def _work(
    index: int, url: str, sessions: int, mode: str, amount: float, rate: float, barrier: Any
) -> WorkerResult:
    from coach.conversation.recorder import Recorder
    from coach.persistence import open_repository
    from coach.store import AddMessage, AppendSteps

    from .backends import chat_items
    from .text import turns

    repo = await open_repository(url, **coach_keys(url), secret=SECRET)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(repo.aclose)
        user = await repo.get_or_create_user(f"bench-{mode}-{index}-{time.time_ns()}")
        ids = [(await repo.create_session(user.id, "challenge")).id for _ in range(sessions)]
        count = int(amount * rate) if mode == "paced" else int(amount)
        texts = turns(100 + index, count // 2 + 26)
        messages = [m for t in texts for m in (t.user, t.assistant)]
        items = [i for t in texts for i in chat_items(t)]
        if mode in FLOORS:
            from coach.persistence.codec import StepCodec

            from .rawrows import RawAsyncpg, RawOverSQLAlchemy, RawStore

            raw = (
                RawAsyncpg(url.replace("postgresql+asyncpg://", "postgresql://", 1))
                if mode == "floor"
                else RawOverSQLAlchemy(url)
            )
            await raw.open()
            stack.push_async_callback(raw.aclose)
            store = TimedStore(RawStore(raw, StepCodec(SECRET)))
        else:
            store = TimedStore(repo)
        recorder = Recorder(store)
        recorder.start()
        next_step = dict.fromkeys(ids, 0)

        def ops(k: int) -> tuple[AddMessage, AppendSteps]:
            sid = ids[(k // 2) % sessions]  # each session gets a user message, then a reply
            role = ("user", "assistant")[k % 2]
            message = AddMessage(sid, role, messages[k])
            steps = AppendSteps(sid, next_step[sid], (items[k],))
            next_step[sid] += 1
            return message, steps

        # Made before the start in every mode (1.2 µs a message): see the module's note.
        made = [ops(k) for k in range(50 + count)]
        if mode in ("raw", "hand"):
            every = [op for pair in made for op in pair]
            return await (_raw if mode == "raw" else _by_hand)(url, every, barrier)

        def submit(k: int, due: float | None) -> None:
            message, steps = made[k]
            if due is not None:
                now = time.monotonic()
                store.due[id(message)] = store.due[id(steps)] = (due, now)
            recorder.submit(message)
            recorder.submit(steps)

        for k in range(50):  # warm-up: connections, statement caches
            submit(k, None)
        await recorder.flush()
        warm = recorder.stats().batches
        barrier.wait()
        clock = _Clock()
        start = clock.start
        if mode in ("flat", *FLOORS):
            for k in range(50, 50 + count):
                submit(k, None)
                if recorder.saturated:
                    await recorder.wait_for_capacity()
                if k % 20 == 0:
                    await asyncio.sleep(0)
        else:
            k = 0
            while k < count:
                due_now = min(count, int((time.monotonic() - start) * rate) + 1)
                while k < due_now:
                    submit(50 + k, start + k / rate)
                    k += 1
                await asyncio.sleep(max(0.0, start + k / rate - time.monotonic()))
        await recorder.flush()
        end, cpu, server = clock.stop()
        stats = recorder.stats()
        await recorder.aclose()
        return WorkerResult(
            count,
            start,
            end,
            stats.batches - warm,
            stats.errors + stats.dropped,
            store.from_due,
            store.from_submit,
            cpu=cpu,
            server=server,
        )


async def _raw(url: str, ops: list[Any], barrier: Any) -> WorkerResult:
    """Raw asyncpg writing the rows of ``ops`` in the recorder's batches (encoded before
    the barrier): the first 100 ops warm up, the rest are timed from the common start."""
    from coach.persistence.codec import StepCodec

    from .rawrows import RawAsyncpg, raw_batches

    batches = raw_batches(ops, StepCodec(SECRET), RAW_BATCH)
    raw = RawAsyncpg(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    await raw.open()
    try:
        await raw.write(batches[0])
        barrier.wait()
        clock = _Clock()
        for rows in batches[1:]:
            await raw.write(rows)
        end, cpu, server = clock.stop()
    finally:
        await raw.aclose()
    count = (len(ops) - RAW_BATCH) // 2
    return WorkerResult(count, clock.start, end, len(batches) - 1, 0, cpu=cpu, server=server)


async def _by_hand(
    url: str,
    ops: list[Any],
    barrier: Any,
    *,
    aead: Any = None,
    secret: bytes = SECRET,
    batch: int = RAW_BATCH,
) -> WorkerResult:
    """The stack with nothing of coach's: the rows of ``ops`` made by hand
    (:func:`~bench.handwritten.hand_batches`) batch by batch in the timed loop, and
    written with raw's statements in SQLAlchemy's connection and transaction — no
    recorder, no storage layer. The first batch warms up. ``aead`` and ``secret``: the
    person's cipher and the memory secret, for rows coach reads back (default: a random
    key, the bench's secret)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from coach.persistence.crypto import new_data_key

    from .handwritten import write_hand_batches
    from .rawrows import RawOverSQLAlchemy

    aead = aead or AESGCM(new_data_key())
    raw = RawOverSQLAlchemy(url)
    await raw.open()
    try:
        await write_hand_batches(raw, ops[:batch], secret, aead, batch)
        barrier.wait()
        clock = _Clock()
        batches = await write_hand_batches(raw, ops[batch:], secret, aead, batch)
        end, cpu, server = clock.stop()
    finally:
        await raw.aclose()
    count = (len(ops) - batch) // 2
    return WorkerResult(count, clock.start, end, batches, 0, cpu=cpu, server=server)


def _worker(
    index: int,
    url: str,
    sessions: int,
    mode: str,
    amount: float,
    rate: float,
    barrier: Any,
    out: Any,
) -> None:
    """Process entry point: run :func:`_work` and send its result back."""
    try:
        out.put(asyncio.run(_work(index, url, sessions, mode, amount, rate, barrier)))
    except BaseException as exc:
        out.put(RuntimeError(f"worker {index}: {type(exc).__name__}: {exc}"))
        barrier.abort()
        raise


def run_processes(
    url: str, processes: int, sessions: int, mode: str, amount: float, rate: float
) -> list[WorkerResult]:
    """Start ``processes`` workers and collect their results.

    ``amount`` is messages per process (flat) or seconds (paced, at ``rate`` messages/s
    per process).
    """
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes, timeout=120)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker, args=(i, url, sessions, mode, amount, rate, barrier, out), daemon=True
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    results: list[Any] = []
    deadline = time.monotonic() + 900
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=1))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                barrier.abort()
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a worker died (exit code {dead[0].exitcode})") from None
    for p in procs:
        p.join(timeout=60)
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise failed[0]
    return results


@dataclass
class LoadResult:
    """Flat-out runs and paced runs of section 5."""

    processes: int
    sessions: int
    flat: list[list[WorkerResult]]
    paced: list[list[WorkerResult]]
    rate: float
    raw: list[list[WorkerResult]] = field(default_factory=list)
    """Raw asyncpg writing the same rows, flat out, each run next to a flat-out run."""
    floor: list[list[WorkerResult]] = field(default_factory=list)
    """coach's recorder over raw's writer, flat out, each run next to a flat-out run."""
    sqlalchemy: list[list[WorkerResult]] = field(default_factory=list)
    """The same, raw's statements run through SQLAlchemy: its share of coach's gap."""
    hand: list[list[WorkerResult]] = field(default_factory=list)
    """The rows made by hand, written through SQLAlchemy, no recorder: the stack's floor."""

    @staticmethod
    def throughput(run: list[WorkerResult]) -> float:
        """All messages over the time from the first start to the last flush."""
        return sum(w.messages for w in run) / (max(w.end for w in run) - min(w.start for w in run))

    @staticmethod
    def cpu(run: list[WorkerResult]) -> tuple[float, float]:
        """The processes' CPU and the server's, µs a message, from the first start to
        the last end."""
        messages = sum(w.messages for w in run)
        server = max(w.server[1] for w in run) - min(w.server[0] for w in run)
        return sum(w.cpu for w in run) / messages * 1e6, server / messages * 1e6


async def section_load(
    processes: int, sessions: int, messages: int, rate: float, seconds: float, reps: int
) -> LoadResult:
    """``reps`` flat-out runs and ``reps`` paced runs, alternating, in one fresh database."""
    from coach.persistence import open_repository

    from .sections import log

    result = LoadResult(processes, sessions, [], [], rate)
    async with pg_database("load") as name:
        url = pg_url(name)
        repo = await open_repository(url, **coach_keys(url), secret=SECRET, create_schema=True)
        await repo.aclose()
        loop = asyncio.get_running_loop()
        for rep in range(reps):
            modes = ("flat", "raw", *FLOORS, "hand", "paced")
            for mode in modes if rep % 2 == 0 else modes[::-1]:
                if mode != "paced":
                    run = await loop.run_in_executor(
                        None, run_processes, url, processes, sessions, mode, messages, 0.0
                    )
                    getattr(result, mode).append(run)
                    rate_now = LoadResult.throughput(run)
                    log(f"  [5] rep {rep + 1} {mode} out: {rate_now:,.0f} msg/s")
                else:
                    run = await loop.run_in_executor(
                        None,
                        run_processes,
                        url,
                        processes,
                        sessions,
                        "paced",
                        seconds,
                        rate / processes,
                    )
                    result.paced.append(run)
                    p99 = percentile([x for w in run for x in w.from_due], 0.99) * 1000
                    log(f"  [5] rep {rep + 1} paced {rate:,.0f}/s: p99 {p99:.1f} ms")
    return result


def load_report(r: LoadResult) -> str:
    """Section 5's tables and verdicts."""
    rates = [LoadResult.throughput(run) for run in r.flat]
    messages = sum(w.messages for w in r.flat[0]) if r.flat else 0
    ops = [sum(2 * w.messages for w in run) / max(1, sum(w.batches for w in run)) for run in r.flat]
    flat = table(
        [
            "processes × sessions",
            "messages (+ as many memory steps) per run",
            "messages/s, median run",
            "runs (messages/s)",
            "ops per commit",
            "target",
        ],
        [
            [
                f"{r.processes} × {r.sessions}",
                f"{messages:,}",
                f"{statistics.median(rates):,.0f}",
                ", ".join(f"{x:,.0f}" for x in rates),
                f"{statistics.median(ops):.0f}",
                f"{verdict(statistics.median(rates) >= 5000)} (≥ 5,000/s)",
            ]
        ],
    )
    due = [x for run in r.paced for w in run for x in w.from_due]
    sent = [x for run in r.paced for w in run for x in w.from_submit]
    achieved = [LoadResult.throughput(run) for run in r.paced]
    p99 = percentile(due, 0.99) * 1000
    per_run = [percentile([x for w in run for x in w.from_due], 0.99) * 1000 for run in r.paced]
    paced = table(
        [
            "offered (messages/s)",
            "achieved, median run",
            "latency from due, all runs: p50 / p99 / max (ms)",
            "from enqueue: p50 / p99 (ms)",
            "p99 from due, each run (ms)",
            "ops measured",
            "target",
        ],
        [
            [
                f"{r.rate:,.0f}",
                f"{statistics.median(achieved):,.0f}" if achieved else "–",
                f"{percentile(due, 0.5) * 1000:.1f} / {p99:.1f} / {max(due, default=0) * 1000:.1f}",
                f"{percentile(sent, 0.5) * 1000:.1f} / {percentile(sent, 0.99) * 1000:.1f}",
                ", ".join(f"{x:.1f}" for x in per_run),
                f"{len(due):,}",
                f"{verdict(p99 <= 150)} (p99 ≤ 150 ms)",
            ]
        ],
    )
    return (
        f"**Flat out** ({len(r.flat)} runs)\n\n{flat}\n\n{raw_report(r)}\n\n"
        f"**Paced** ({len(r.paced)} runs; the recorder's commit window is 50 ms)\n\n{paced}"
    )


def raw_ratios(r: LoadResult, runs: list[list[WorkerResult]] | None = None) -> list[float]:
    """coach's flat-out throughput (or ``runs``') over raw asyncpg's, rep by rep."""
    return [
        LoadResult.throughput(a) / LoadResult.throughput(b)
        for a, b in zip(r.flat if runs is None else runs, r.raw, strict=False)
    ]


def cpu_ratios(
    r: LoadResult, runs: list[list[WorkerResult]] | None = None, extra: float = 0.0
) -> list[float]:
    """Raw asyncpg's CPU a message (its processes' and the server's) over coach's (or
    ``runs``', with ``extra`` µs a message added), rep by rep: the throughput ratio a
    machine flat out on its CPUs gives, with less of a shared machine's noise."""
    return [
        sum(LoadResult.cpu(b)) / (sum(LoadResult.cpu(a)) + extra)
        for a, b in zip(r.flat if runs is None else runs, r.raw, strict=False)
    ]


SQLALCHEMY_FLOOR = (
    "floor through SQLAlchemy: coach's recorder over raw's statements in SQLAlchemy's "
    "connection and transaction"
)
BY_HAND = (
    "by hand through SQLAlchemy: the rows made by hand (`bench.handwritten`) in the timed "
    "loop, raw's statements in SQLAlchemy's connection and transaction; no recorder"
)


def raw_report(r: LoadResult) -> str:
    """coach against raw asyncpg writing the same rows, the same batches, same processes."""
    if not r.raw:
        return ""

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}× ({min(values):.2f}–{max(values):.2f})"

    def row(label: str, runs: list[list[WorkerResult]], ratios: str, by_cpu: str) -> list[str]:
        rates = [LoadResult.throughput(run) for run in runs]
        cpu = [LoadResult.cpu(run) for run in runs]
        return [
            label,
            f"{statistics.median(rates):,.0f}",
            ", ".join(f"{x:,.0f}" for x in rates),
            f"{statistics.median(c for c, _ in cpu):.1f} + "
            f"{statistics.median(s for _, s in cpu):.1f}",
            ratios,
            by_cpu,
        ]

    mid = statistics.median(raw_ratios(r))
    rows = [
        row(
            "coach: its recorder and repository",
            r.flat,
            f"**{spread(raw_ratios(r))}**, {verdict(mid >= 0.6)} (≥ 0.6×)",
            spread(cpu_ratios(r)),
        ),
        row(f"raw asyncpg, {RAW_BATCH} ops per transaction", r.raw, "1", "1"),
    ]
    for label, runs in (
        ("floor: coach's recorder over raw asyncpg's writer", r.floor),
        (SQLALCHEMY_FLOOR, r.sqlalchemy),
        (BY_HAND, r.hand),
    ):
        if runs:
            rows.append(row(label, runs, spread(raw_ratios(r, runs)), spread(cpu_ratios(r, runs))))
    return table(
        [
            "writer (flat out, same processes and rows)",
            "messages/s, median run",
            "runs",
            "CPU a message, median run: its processes + the server (µs)",
            "its throughput / raw's (median of reps, range)",
            "by CPU: raw's CPU a message / its",
        ],
        rows,
    )
