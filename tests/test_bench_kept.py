"""``bench.kept`` counts each kept behaviour as often as the write path runs it.

The ledger's per-message figures multiply a behaviour's cost by its calls: messages,
step rows and sessions from the ops, statements and transactions from a model of what
``write_batch`` runs for them. This holds the model to the repository: the statements
a listener sees while the recorder's batches are written, on SQLite and on PostgreSQL —
one claim per session on SQLite, one for all and a lock first on PostgreSQL — are the
ones the ledger counts. No timing is asserted.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench.kept import Kept, Ledger, shape
from bench.recorder_cpu import BATCH, workload
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
