"""``bench.kept`` counts each kept behaviour as often as the write path runs it.

The ledger's per-message figures multiply a behaviour's cost by its calls: messages,
step rows and sessions from the ops, statements and transactions from a model of what
``write_batch`` runs for them. This holds the model to the repository: the statements
a listener sees while the recorder's batches are written, on SQLite and on PostgreSQL —
one claim per session on SQLite, one for all on PostgreSQL (locking them first) — are the
ones the ledger counts. And the verdicts' "least" rows add the ledger to the reference
round by round. No timing is asserted.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from bench import profiles, storage_speed
from bench.kept import Kept, Ledger, shape
from bench.pgload import WorkerResult
from bench.recorder_cpu import BATCH, RecorderCpu, workload
from bench.results import least
from bench.storage_speed import Batch
from sqlalchemy import event

from coach.persistence import Repository


@pytest.mark.parametrize(("sessions", "turns"), [(1, 1), (1, 70), (9, 5)])
async def test_the_ledger_counts_the_statements_write_batch_runs(
    repo: Repository, sessions: int, turns: int
) -> None:
    user = await repo.get_or_create_user("kept")
    ids = [(await repo.create_session(user.id, "challenge")).id for _ in range(sessions)]
    ops = workload(ids, turns, seed=3)
    engine, seen = repo.database.sync_engine, []

    def statement(_conn: Any, _cursor: Any, sql: str, *_rest: Any) -> None:
        seen.append(sql)

    event.listen(engine, "before_cursor_execute", statement)
    try:
        for first in range(0, len(ops), BATCH):
            await repo.write_batch(ops[first : first + BATCH])
    finally:
        event.remove(engine, "before_cursor_execute", statement)

    counted = shape(ops, BATCH, postgres=repo.database.dialect == "postgresql", per="all")
    run = [sql for sql in seen if not sql.startswith("BEGIN")]  # SQLite's, as the reference's
    assert counted.statements == len(run)
    assert counted.locks == sum("FOR NO KEY UPDATE" in sql for sql in run)
    assert counted.transactions == len(range(0, len(ops), BATCH))
    assert counted.messages == 2 * sessions * turns
    assert counted.steps == 2 * sessions * turns
    assert (counted.locks > 0) == (repo.database.dialect == "postgresql" and sessions > 1)


def test_a_ledger_is_the_sum_of_its_behaviours_each_as_often_as_called() -> None:
    ledger = Ledger("turn", "t", "turn", (Kept("a", 0.5, 4), Kept("b", 2.0, 0.25)))
    assert [row.cost for row in ledger.rows] == [2.0, 0.5]
    assert ledger.total == 2.5


def test_the_least_adds_the_ledger_to_the_reference_round_by_round() -> None:
    """``bench.results.least``: each target's reference in SQLAlchemy plus what coach keeps
    on that path, over the target's anchor in the same round (the seed API's reference
    alone); for the 4 processes, raw's CPU a message (its processes' and the server's)
    over the reference's with the kept CPU added."""
    ledgers = [
        Ledger("turn", "t", "turn", (Kept("a", 10.0, 2),)),  # 20 µs a turn
        Ledger("resume", "r", "resume", (Kept("b", 50.0, 1),)),  # 50 µs a resume
        Ledger("postgres 50 × 20", "m", "message", (Kept("c", 4.0, 1),)),  # 4 µs a message
    ]
    parts = {
        profiles.T_STACK: [130.0, 280.0, 180.0],
        profiles.T_SEED: [260.0, 500.0, 240.0],
        profiles.T_PEER: [100.0, 200.0, 100.0],
    }
    resume = {
        storage_speed.HAND_STACK: [Batch(0.25, 0.25, 100), Batch(0.30, 0.30, 100)],
        storage_speed.PEER: [Batch(0.10, 0.10, 100), Batch(0.10, 0.10, 100)],
    }
    recorder = RecorderCpu("postgres", 50, 20, stack_cpu=[30e-6, 36e-6], raw_cpu=[20e-6, 20e-6])
    # Per message: by hand 30 µs of its processes and 35 of the server, raw 15 and 30.
    hand = [[WorkerResult(20_000, 0.0, 1.0, 0, 0, cpu=0.6, server=(5.0, 5.7))]]
    raw = [[WorkerResult(40_000, 0.0, 1.0, 0, 0, cpu=0.6, server=(5.0, 6.2))]]
    load = SimpleNamespace(hand=hand, raw=raw)
    found = {
        b.label.split(":")[0]: b
        for b in least(
            SimpleNamespace(  # type: ignore[arg-type]
                ledgers=ledgers,
                parts=SimpleNamespace(parts=parts),
                resume=resume,
                recorder=[recorder],
                load=load,
            )
        )
    }

    turn = found["write_batch / SQLiteSession"]
    assert (turn.median, turn.low, turn.high) == pytest.approx((1.5, 1.5, 2.0))
    assert turn.met  # at the line: the median on its side meets it
    seed = found["seed API / SQLiteSession"]  # its reference alone: the ledger only adds
    assert (seed.median, seed.low, seed.high) == pytest.approx((2.5, 2.4, 2.6))
    assert seed.met and seed.target == 2.5 and "alone" in seed.label
    # (2.5 ms + 50 µs) / 1 ms and (3 ms + 50 µs) / 1 ms
    assert found["live resume / SQLiteSession last 50"].median == pytest.approx(2.8)
    message = found["recorder / raw, postgres 50 × 20"]
    assert (message.low, message.high) == pytest.approx((1.7, 2.0))
    fleet = found["4 processes PG / raw asyncpg, by CPU a message"]
    assert fleet.median == pytest.approx((15 + 30) / (30 + 35 + 4))
    assert fleet.at_least and fleet.target == 0.6
