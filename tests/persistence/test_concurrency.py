"""Concurrent writers (SPEC §7): unique, gap-free, ordered steps; stale writers are told."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import llm
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from coach.errors import StaleWrite
from coach.persistence import Repository
from coach.persistence.driver import lock_sessions
from coach.state import DeltaSpec
from coach.store import AddMessage, AppendSteps, UpdateSession
from tests.support import NOT_IN_MEMORY, append_steps, key_env, raw_sql

WRITER = Path(__file__).with_name("_writer.py")


def _spec(actor: str) -> DeltaSpec:
    return DeltaSpec(
        trigger="system", source="system", actor_id=actor, delta_type="update", path="data"
    )


async def _session(repo: Repository) -> str:
    user = await repo.get_or_create_user("busy")
    return (await repo.create_session(user.id)).id


async def test_many_tasks_get_unique_gap_free_steps(repo: Repository) -> None:
    sid = await _session(repo)

    async def writer(task: int) -> list[int]:
        steps = []
        for i in range(10):
            state, delta = await repo.update_data(sid, {"task": task, "i": i}, _spec(f"t{task}"))
            assert state.step == delta.step
            steps.append(delta.step)
        return steps

    results = await asyncio.gather(*(writer(task) for task in range(20)))

    every = sorted(step for steps in results for step in steps)
    assert every == list(range(1, 201))
    for steps in results:  # each writer saw its own steps strictly increase
        assert steps == sorted(steps)
    deltas = await repo.get_deltas(sid)
    assert [d.step for d in deltas] == list(range(1, 201))
    assert Counter(d.actor_id for d in deltas) == {f"t{task}": 10 for task in range(20)}
    assert (await repo.get_state(sid)).step == 200


async def test_racing_writers_with_expected_step_one_wins(repo: Repository) -> None:
    sid = await _session(repo)
    state = await repo.get_state(sid)
    outcomes = await asyncio.gather(
        *(
            repo.update_data(sid, {"w": n}, _spec(f"w{n}"), expected_step=state.step)
            for n in range(8)
        ),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(winners) == 1
    assert len(losers) == 7 and all(isinstance(e, StaleWrite) for e in losers)
    assert (await repo.get_state(sid)).step == 1


async def test_concurrent_memory_appends_never_interleave(repo: Repository) -> None:
    sid = await _session(repo)
    items = [llm.ChatMessage(role="user", content=[f"m{i}"]) for i in range(12)]

    async def recorder(part: int) -> int | BaseException:
        try:
            return await append_steps(repo, sid, items[part * 4 : part * 4 + 4], start=0)
        except StaleWrite as exc:
            return exc

    outcomes = await asyncio.gather(*(recorder(part) for part in range(3)))
    assert sum(1 for o in outcomes if o == 4) == 1
    assert sum(1 for o in outcomes if isinstance(o, StaleWrite)) == 2
    assert await repo.agent_step_count(sid) == 4

    saved = await asyncio.gather(*(repo.save_agent_state(sid, items) for _ in range(4)))
    assert saved == [12, 12, 12, 12]
    loaded = await repo.load_agent_state(sid)
    assert len(loaded) == 12 and loaded[4:] == items[4:]


@pytest.mark.slow
@NOT_IN_MEMORY  # another process cannot reach this one's memory
async def test_two_processes_write_one_session(database_url: str, repo: Repository) -> None:
    sid = await _session(repo)
    count = 40
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WRITER),
            database_url,
            sid,
            actor,
            str(count),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **key_env(database_url)},
        )
        for actor in ("proc-a", "proc-b")
    ]
    try:
        for proc in procs:  # both connected: start them together
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line != b"ready\n":
                _, err = await proc.communicate()
                pytest.fail(f"writer did not start: {line!r} {err.decode()[-2000:]}")
        outputs = await asyncio.wait_for(
            asyncio.gather(*(proc.communicate(b"go\n") for proc in procs)), 120
        )
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()[-2000:]
        assert out == b"done\n"

    deltas = await repo.get_deltas(sid)
    assert [d.step for d in deltas] == list(range(1, 2 * count + 1))
    assert Counter(d.actor_id for d in deltas) == {"proc-a": count, "proc-b": count}
    state = await repo.get_state(sid)
    assert state.step == 2 * count
    messages = await repo.get_session_conversation(sid)
    assert len(messages) == 2 * count
    for actor in ("proc-a", "proc-b"):  # each process's own writes stay in its order
        mine = [m.content for m in messages if m.content.startswith(actor)]
        assert mine == [f"{actor} {i}" for i in range(count)]


@pytest.mark.postgres
async def test_a_batch_over_several_sessions_locks_them_as_an_update_would(
    postgres_url: str, open_repo: Callable[..., Awaitable[Repository]]
) -> None:
    # A batch's claims are one UPDATE, whose row locks the database takes in its own
    # order; so the rows are locked first, in id order, as strongly as an UPDATE locks
    # them and no more: another writer of those sessions waits, and a message of one of
    # them (whose foreign key takes a key-share lock of the session) does not.
    repo = await open_repo(postgres_url)
    a, b = sorted([await _session(repo), await _session(repo)])
    async with raw_sql(repo, begin=True) as holder, raw_sql(repo) as prober:
        await holder.run_sync(lambda conn: lock_sessions(conn, [a, b]))
        await asyncio.wait_for(repo.write_batch([AddMessage(a, "user", "heard")]), 60)
        for sid in (a, b):
            with pytest.raises(DBAPIError, match="could not obtain lock"):
                await prober.execute(
                    text("SELECT 1 FROM sessions WHERE id = :id FOR NO KEY UPDATE NOWAIT"),
                    {"id": uuid.UUID(sid)},
                )
            await prober.rollback()
    assert [m.content for m in await repo.get_session_conversation(a)] == ["heard"]


@pytest.mark.postgres
async def test_a_batch_locks_its_sessions_in_id_order_before_it_claims(
    postgres_url: str, open_repo: Callable[..., Awaitable[Repository]]
) -> None:
    # The claims' UPDATE takes its row locks in the order its plan reads the rows — here
    # the table's, where the higher id is stored first. A batch must lock its sessions in
    # id order before that, or two writers of the same sessions can deadlock: with the
    # lower id held elsewhere, a batch of both waits for it with the higher one free.
    repo = await open_repo(postgres_url)
    b = await _session(repo)
    a = await _session(repo)
    while a > b:
        a = await _session(repo)
    lock = text("SELECT 1 FROM sessions WHERE id = :id FOR NO KEY UPDATE NOWAIT")
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with raw_sql(repo) as holder, raw_sql(repo) as prober:
        await holder.execute(lock, {"id": uuid.UUID(a)})
        batch = asyncio.ensure_future(
            repo.write_batch([AppendSteps(b, 0, ("b",)), AppendSteps(a, 0, ("a",))])
        )

        async def blocked() -> None:
            while not (await prober.execute(waiting)).scalar():
                await prober.rollback()
                await asyncio.sleep(0.01)  # a poll of the database's state, not a wait

        await asyncio.wait_for(blocked(), 60)
        await prober.rollback()
        await prober.execute(lock, {"id": uuid.UUID(b)})  # free: the batch waits before it
        await prober.rollback()
        assert not batch.done()
        await holder.rollback()
        await asyncio.wait_for(batch, 60)
    assert [await repo.agent_step_count(sid) for sid in (a, b)] == [1, 1]


@pytest.mark.postgres
async def test_writers_of_the_same_sessions_in_opposite_orders_never_deadlock(
    postgres_url: str, open_repo: Callable[..., Awaitable[Repository]]
) -> None:
    # A batch's claims are one UPDATE, whose row locks PostgreSQL takes in an order of its
    # own. Without the batch's sessions locked first, in id order, these two writers
    # deadlocked in 13 of the 40 rounds: PostgreSQL breaks each after a second and the
    # retry hides it from the caller, but the database counts it.
    first, second = await open_repo(postgres_url), await open_repo(postgres_url)
    rounds, sessions = 40, [await _session(first) for _ in range(12)]
    for n in range(rounds):
        order = random.Random(n).sample(sessions, len(sessions))

        async def write(repo: Repository, order: list[str], n: int = n) -> bool:
            ops: list[Any] = [AppendSteps(sid, n, (f"{n} {sid}",)) for sid in order]
            ops += [UpdateSession(sid, {"current_agent": "strategist"}) for sid in order[::4]]
            try:
                await repo.write_batch(ops)
            except StaleWrite:
                return False
            return True

        won = await asyncio.wait_for(
            asyncio.gather(write(first, order), write(second, order[::-1])), 60
        )
        assert sorted(won) == [False, True], n  # one claims the round, the other is told
    assert {await first.agent_step_count(sid) for sid in sessions} == {rounds}
    await first.aclose()
    await second.aclose()  # a backend's counters reach the database when it exits
    async with raw_sql(first) as conn:
        counted = text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        assert (await conn.execute(counted)).scalar() == 0
