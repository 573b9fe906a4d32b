"""The recorder's queue against a fake store: order, coalescing, retry, back-pressure."""

import asyncio
from collections.abc import Sequence

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import exc as sa_exc

from coach.conversation.losses import is_transient
from coach.conversation.recorder import Recorder
from coach.errors import StaleWrite, StorageError
from coach.persistence.engine import is_transient as engine_is_transient
from coach.state.zones import DeltaSpec
from coach.store import AddMessage, StateRecord, UpdateSession, WriteOp, WriteZone


def storage_error(cause: Exception) -> StorageError:
    """What the repository raises for ``cause``: judged transient as the engine judges it."""
    try:
        raise StorageError("db failed") from cause
    except StorageError as err:
        err.transient = engine_is_transient(cause)
        return err


class FakeStore:
    """Records committed batches; can be told to fail (the database being down)."""

    def __init__(self) -> None:
        self.batches: list[list[WriteOp]] = []
        self.down = False
        self.failures = 0
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.reject: set[str] = set()  # contents rejected permanently

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            self.failures += 1
            raise storage_error(ConnectionRefusedError("connection refused"))
        for op in ops:
            if isinstance(op, AddMessage) and op.content in self.reject:
                raise storage_error(sa_exc.IntegrityError("insert", {}, Exception("check failed")))
        self.batches.append(list(ops))

    async def get_state(self, session_id: str) -> StateRecord:
        return StateRecord(session_id, 0)

    async def agent_step_count(self, session_id: str) -> int:
        return 0

    @property
    def ops(self) -> list[WriteOp]:
        return [op for batch in self.batches for op in batch]


def msg(i: int, session: str = "s1") -> AddMessage:
    return AddMessage(session, "user", f"m{i}")


async def test_everything_is_written_in_submission_order() -> None:
    store = FakeStore()
    rec = Recorder(store, commit_interval=0)
    rec.start()
    for i in range(50):
        rec.submit(msg(i, session=f"s{i % 3}"))
    await asyncio.wait_for(rec.flush(), 5)
    assert [op.content for op in store.ops] == [f"m{i}" for i in range(50)]  # type: ignore[union-attr]
    assert rec.stats().written == 50 and rec.stats().queue_depth == 0
    await rec.aclose()


async def test_ops_queued_during_a_commit_go_together_in_the_next_one() -> None:
    store = FakeStore()
    store.gate = asyncio.Event()
    rec = Recorder(store, commit_interval=0)
    rec.start()
    rec.submit(msg(0))
    await store.entered.wait()  # the writer took the first op and is blocked in the store
    for i in range(1, 11):
        rec.submit(msg(i))
    store.gate.set()
    await asyncio.wait_for(rec.flush(), 5)
    assert [len(b) for b in store.batches] == [1, 10]
    assert rec.stats().batches == 2
    await rec.aclose()


async def test_writes_within_the_commit_window_share_one_transaction() -> None:
    store = FakeStore()
    rec = Recorder(store, commit_interval=60)
    rec.start()
    for i in range(20):
        rec.submit(msg(i))
    assert store.batches == []  # still inside the window: nothing written yet
    await asyncio.wait_for(rec.flush(), 5)  # a flush does not wait for the window
    assert [len(b) for b in store.batches] == [20]
    await rec.aclose()


async def test_a_full_batch_is_written_without_waiting_for_the_window() -> None:
    store = FakeStore()
    rec = Recorder(store, commit_interval=60, max_batch=5)
    rec.start()
    for i in range(5):
        rec.submit(msg(i))
    await asyncio.wait_for(store.entered.wait(), 5)
    assert [len(b) for b in store.batches] == [5]
    await rec.aclose()


async def test_database_down_then_back_loses_nothing() -> None:
    store = FakeStore()
    store.down = True
    rec = Recorder(store, retry_initial=0.001, retry_max=0.005)
    rec.start()
    for i in range(5):
        rec.submit(msg(i))
    with pytest.raises(TimeoutError):  # nothing can be written while the database is down
        await asyncio.wait_for(rec.flush(), 0.05)
    assert store.failures >= 2 and rec.stats().errors == store.failures
    assert rec.stats().queue_depth == 5 and rec.stats().write_lag > 0
    rec.submit(msg(5))
    store.down = False
    await asyncio.wait_for(rec.flush(), 5)
    assert [op.content for op in store.ops] == [f"m{i}" for i in range(6)]  # type: ignore[union-attr]
    await rec.aclose()


async def test_permanent_error_drops_only_the_offending_write() -> None:
    store = FakeStore()
    store.gate = asyncio.Event()
    store.reject = {"m2"}
    rec = Recorder(store, commit_interval=0)
    rec.start()
    for i in range(5):
        rec.submit(msg(i))
    store.gate.set()
    await asyncio.wait_for(rec.flush(), 5)
    assert [op.content for op in store.ops] == ["m0", "m1", "m3", "m4"]  # type: ignore[union-attr]
    assert rec.stats().dropped == 1
    losses = await rec.aclose()
    assert (losses.count, losses.dropped, losses.unwritten) == (1, 1, 0)
    assert losses.reasons == ("StorageError (IntegrityError)",)


async def test_full_queue_slows_the_agent_instead_of_dropping() -> None:
    store = FakeStore()
    store.gate = asyncio.Event()
    rec = Recorder(store, max_pending=3, commit_interval=0)
    rec.start()
    for i in range(3):
        rec.submit(msg(i))
    assert rec.saturated  # wait_for_capacity blocks the agent from here on
    waiter = asyncio.create_task(rec.wait_for_capacity())
    store.gate.set()
    await asyncio.wait_for(waiter, 5)
    assert not rec.saturated
    await asyncio.wait_for(rec.flush(), 5)
    assert len(store.ops) == 3
    await rec.aclose()


async def test_close_reports_unwritten_data(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    store.down = True
    rec = Recorder(store, retry_initial=0.001, retry_max=0.002, shutdown_timeout=0.05)
    rec.start()
    rec.submit(UpdateSession("s1", {"status": "completed"}))
    losses = await rec.aclose()
    assert (losses.count, losses.unwritten, losses.dropped) == (1, 1, 0)
    assert losses.reasons == ("StorageError (ConnectionRefusedError)",)
    assert (
        "1 write(s) were not saved (1 still queued when the database stayed unavailable; "
        "cause: StorageError (ConnectionRefusedError))" in caplog.text
    )


def test_transient_classification() -> None:
    assert is_transient(storage_error(ConnectionResetError("gone")))
    assert is_transient(
        storage_error(sa_exc.OperationalError("x", {}, Exception("database is locked")))
    )
    assert not is_transient(storage_error(sa_exc.IntegrityError("x", {}, Exception("dup"))))
    assert not is_transient(storage_error(sa_exc.DBAPIError("x", {}, Exception("invalid input"))))
    assert not is_transient(StaleWrite("someone else wrote first"))
    assert not is_transient(ValueError("not storage"))


def test_the_recorder_trusts_the_stores_verdict_but_never_retries_a_conflict() -> None:
    refused = storage_error(ConnectionRefusedError("refused"))
    refused.transient = False
    assert not is_transient(refused)
    stale = StaleWrite("moved on")
    stale.transient = True  # a conflict is never retried as such
    assert not is_transient(stale)


class FlakyCommitStore(FakeStore):
    """The first commit lands but its acknowledgement is lost; retries see StaleWrite."""

    def __init__(self) -> None:
        super().__init__()
        self.state_step = 0
        self.attempts = 0

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        self.attempts += 1
        zone_ops = [op for op in ops if isinstance(op, WriteZone)]
        if zone_ops and zone_ops[0].expected_step != self.state_step:
            raise StaleWrite("state moved on")
        self.batches.append(list(ops))
        self.state_step += len(zone_ops)
        if self.attempts == 1:
            raise storage_error(
                sa_exc.OperationalError(
                    "commit", {}, Exception("connection lost"), connection_invalidated=True
                )
            )

    async def get_state(self, session_id: str) -> StateRecord:
        return StateRecord(session_id, self.state_step)


async def test_a_landed_zone_batch_whose_ack_was_lost_is_not_written_twice() -> None:
    store = FlakyCommitStore()
    rec = Recorder(store, retry_initial=0.001, retry_max=0.002)
    rec.start()
    spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="data.ideas")
    rec.submit(WriteZone("s1", "data", {"ideas": [1]}, spec, expected_step=0))
    rec.submit(msg(1))
    await asyncio.wait_for(rec.flush(), 5)
    assert len(store.batches) == 1  # written once; the retry recognised it had landed
    assert rec.stats().dropped == 0 and store.state_step == 1
    await rec.aclose()


class ConflictStore(FakeStore):
    """Another writer owns session s1's numbering: its zone writes are refused as stale."""

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        if any(isinstance(op, WriteZone) and op.session_id == "s1" for op in ops):
            raise StaleWrite("Session s1 state is at step 9, not 1")
        if any(isinstance(op, AddMessage) and "\ud800" in op.content for op in ops):
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        await super().write_batch(ops)


async def test_a_session_whose_numbering_was_lost_is_fenced_and_others_go_on() -> None:
    store = ConflictStore()
    rec = Recorder(store, commit_interval=0)
    rec.start()
    spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="data.ideas")
    rec.submit(WriteZone("s1", "data", {"n": 1}, spec, expected_step=0))
    await asyncio.wait_for(rec.flush(), 5)
    assert rec.is_fenced("s1") and not rec.is_fenced("s2")
    batches_before = len(store.batches)
    rec.submit(WriteZone("s1", "data", {"n": 2}, spec, expected_step=9))  # would line up
    rec.submit(WriteZone("s2", "data", {"n": 1}, spec, expected_step=0))
    rec.submit(msg(1, "s1"))  # plain messages of a fenced session are still kept
    await asyncio.wait_for(rec.flush(), 5)
    written = [op for batch in store.batches[batches_before:] for op in batch]
    assert [type(op).__name__ for op in written] == ["WriteZone", "AddMessage"]
    assert written[0].session_id == "s2"
    assert rec.stats().dropped == 2
    await rec.aclose()


async def test_an_unexpected_error_drops_only_its_write_and_the_writer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = ConflictStore()
    rec = Recorder(store, commit_interval=0)
    rec.start()
    rec.submit(AddMessage("s2", "user", "bad \ud800 text"))
    rec.submit(msg(2, "s2"))
    await asyncio.wait_for(rec.flush(), 5)
    rec.submit(msg(3, "s2"))
    await asyncio.wait_for(rec.flush(), 5)
    assert [op.content for op in store.ops] == ["m2", "m3"]  # type: ignore[union-attr]
    assert rec.stats().dropped == 1
    assert "bad" not in caplog.text  # what the user said never reaches the log
    await rec.aclose()


class SlowBigBatchStore(FakeStore):
    """A database that cannot commit more than ``fits`` writes within its deadline."""

    def __init__(self, fits: int) -> None:
        super().__init__()
        self.fits = fits
        self.timeouts = 0

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        if len(ops) > self.fits:
            self.timeouts += 1
            try:
                raise StorageError("write_batch failed: no answer within 5 s") from TimeoutError()
            except StorageError as err:
                err.transient = True
                raise
        await super().write_batch(ops)


async def test_a_batch_that_cannot_commit_in_time_is_split_not_retried_whole() -> None:
    store = SlowBigBatchStore(fits=3)
    store.gate = asyncio.Event()  # hold the first commit so that a big batch queues up
    rec = Recorder(store, max_batch=16, retry_initial=0.001)
    rec.start()
    rec.submit(msg(0))
    await asyncio.wait_for(store.entered.wait(), 10)
    for i in range(1, 17):
        rec.submit(msg(i))
    store.gate.set()
    await asyncio.wait_for(rec.flush(), 10)
    assert [op.content for op in store.ops] == [f"m{i}" for i in range(17)]  # type: ignore[union-attr]
    assert all(len(batch) <= 3 for batch in store.batches)
    assert rec.stats().dropped == 0 and store.timeouts >= 1
    # It commits again: later batches grow back towards max_batch.
    assert rec.stats().max_batch > 2
    await rec.aclose()


async def test_each_committed_writes_lag_is_in_the_stats_and_the_histogram() -> None:
    observed = "coach_recorder_commit_lag_seconds_count"
    before = REGISTRY.get_sample_value(observed) or 0.0
    store = FakeStore()
    rec = Recorder(store, commit_interval=0)
    rec.start()
    for i in range(20):
        rec.submit(msg(i))
    await asyncio.wait_for(rec.flush(), 10)
    stats = rec.stats()
    assert 0 < stats.commit_lag_p50 <= stats.commit_lag_p95 <= stats.commit_lag_max
    assert REGISTRY.get_sample_value(observed) == before + 20  # one observation a write
    await rec.aclose()


class RetriedStore(FakeStore):
    """Down until told otherwise; says when it has failed ``until`` times."""

    def __init__(self, until: int) -> None:
        super().__init__()
        self.until = until
        self.retried = asyncio.Event()

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        try:
            await super().write_batch(ops)
        finally:
            if self.failures >= self.until:
                self.retried.set()


async def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="coach.recorder")
    store = RetriedStore(until=10)  # many retries while the database is away
    store.down = True
    rec = Recorder(store, retry_initial=0.001, retry_max=0.002)
    rec.start()
    rec.submit(msg(0))
    await asyncio.wait_for(store.retried.wait(), 30)
    store.down = False
    await asyncio.wait_for(rec.flush(), 10)
    lines = [r for r in caplog.records if r.name == "coach.recorder" and r.levelno >= 20]
    warned = [r for r in lines if r.levelname == "WARNING"]
    assert len(warned) == 1 and "database unavailable" in warned[0].getMessage()
    assert [r.getMessage() for r in lines if r.levelname == "INFO"][:1] == [
        "database reachable again; queued writes are being stored"
    ]
    await rec.aclose()
