"""What an operator can watch, as Prometheus metrics.

They are served by LiveKit's own endpoint (``AgentServer(prometheus_port=...)``,
``COACH_METRICS_PORT``), which aggregates the job processes' values in multiprocess
mode: gauges add up across live processes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

RECORDER_QUEUE: Final = Gauge(
    "coach_recorder_queue_depth",
    "Writes queued and not yet committed (set by the writer task, off the voice turn)",
    multiprocess_mode="livesum",
)
COMMIT_LAG: Final = Histogram(
    "coach_recorder_commit_lag_seconds",
    "Time from a write being queued to its commit",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
BATCH_SIZE: Final = Histogram(
    "coach_recorder_batch_writes",
    "Writes per committed transaction (group commit)",
    buckets=(1, 2, 5, 10, 20, 50, 100),
)
RECORDER_ERRORS: Final = Counter(
    "coach_recorder_errors",
    "Database errors the recorder met, by kind (transient: retried; refused: dropped)",
    ["kind"],
)
DROPPED: Final = Counter(
    "coach_recorder_dropped_writes",
    "Writes given up on, by cause (a stale write is StaleWrite)",
    ["cause"],
)
RESUME_LATENCY: Final = Histogram(
    "coach_resume_seconds",
    "Time to load a session for resuming (flush, read, restore)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
ACTIVE_SESSIONS: Final = Gauge(
    "coach_active_sessions",
    "Conversations running in this worker",
    multiprocess_mode="livesum",
)
MODEL_ERRORS: Final = Counter(
    "coach_model_errors",
    "Errors from the models (llm_error, stt_error, tts_error), by type and recoverability",
    ["type", "recoverable"],
)
RENDERS: Final = Counter(
    "coach_renders",
    "Briefs rendered after a data-changing turn, by outcome (model, fallback, stale)",
    ["outcome"],
)


def observe_all(histogram: Histogram, amounts: Sequence[float]) -> None:
    """``histogram.observe`` of each of ``amounts``, each bucket they fall in and the sum
    updated once.

    ``prometheus_client`` has no observation of many values: each ``observe`` takes its
    value's lock twice, about 4 µs a call, which the recorder paid for every write it
    committed. This reads the histogram's own bucket bounds and updates the same value
    objects ``observe`` updates (not the library's public API: ``tests/test_metrics.py``
    holds it to ``observe``), so it serves the library's multiprocess mode as ``observe``
    does.
    """
    bounds = histogram._upper_bounds  # ends with +Inf: every amount has a bucket
    counts = [0] * len(bounds)
    for amount in amounts:
        counts[bisect_left(bounds, amount)] += 1  # the first bound >= amount, as observe
    histogram._sum.inc(sum(amounts))
    for bucket, count in zip(histogram._buckets, counts, strict=True):
        if count:
            bucket.inc(count)
