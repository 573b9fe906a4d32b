"""Section 5 of ``bench.core`` gives coach's recorder the work raw's writers get, no more.

Raw asyncpg and the writer by hand take their ops made before the common start; the
recorder's workers must too, or the recorder's throughput would carry the making of
two ops a message (about 1.2 µs) that the ratio then charges to recording.
"""

from __future__ import annotations

import gc

import pytest
from bench.measure import _drop_key_file
from bench.pgload import LoadResult, WorkerResult, _work
from sqlalchemy.engine import make_url

from coach.store import AddMessage


class _Start:
    """The common start of one worker: counts the messages made when it is reached."""

    def __init__(self) -> None:
        self.made: list[int] = []

    def wait(self) -> None:
        self.made.append(sum(1 for o in gc.get_objects() if type(o) is AddMessage))


@pytest.mark.postgres
async def test_the_recorder_s_workers_make_every_op_before_the_start(postgres_url: str) -> None:
    start = _Start()
    try:
        result = await _work(0, postgres_url, 2, "flat", 30, 0.0, start)
    finally:
        _drop_key_file(str(make_url(postgres_url).database))
    assert result.messages == 30
    # Its CPU and the server's are taken from the start: the server is on this machine.
    assert result.cpu > 0
    assert result.server[1] >= result.server[0] > 0
    # The 50 warm-up messages and the 30 timed ones, made before the start.
    assert start.made and start.made[0] >= 80


def test_a_runs_cpu_a_message_is_its_processes_and_the_servers_over_the_run() -> None:
    run = [
        WorkerResult(1_000, 0.0, 1.0, 0, 0, cpu=0.010, server=(7.000, 7.020)),
        WorkerResult(1_000, 0.1, 1.2, 0, 0, cpu=0.030, server=(7.005, 7.060)),
    ]
    processes, server = LoadResult.cpu(run)
    assert processes == pytest.approx(20.0)  # 40 ms over 2,000 messages, in µs
    assert server == pytest.approx(30.0)  # 7.060 - 7.000 s over 2,000 messages
