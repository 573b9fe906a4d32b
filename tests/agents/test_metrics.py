"""The operator's metrics, scraped from LiveKit's own ``/metrics`` endpoint after a
recorded conversation and a resume."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
from livekit.agents.telemetry.http_server import HttpServer

from coach.conversation.runtime import Runtime
from coach.surfaces.worker import server

from .helpers import new_session_with_phases
from .test_rpc import live

NAMES = (
    "coach_recorder_queue_depth",
    "coach_recorder_commit_lag_seconds_count",
    "coach_recorder_batch_writes_count",
    "coach_resume_seconds_count",
    "coach_active_sessions",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sample(text: str, name: str) -> float:
    """The value of an unlabelled sample in Prometheus' text format."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def scrape(port: int) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200
            return await response.text()


async def test_a_recorded_conversation_and_a_resume_show_in_the_metrics(runtime: Runtime) -> None:
    port = free_port()
    endpoint = HttpServer("127.0.0.1", port)
    await endpoint.start()
    try:
        before = await scrape(port)
        session_id = await new_session_with_phases(runtime, "ada", 1)  # a recorded visit
        session = await live(runtime)
        active = await scrape(port)
        await session.userdata.load_state(session_id)  # a resume
        await session.aclose()
        await asyncio.wait_for(runtime.recorder.flush(), 10)
        after = await scrape(port)
    finally:
        await endpoint.aclose()

    for name in NAMES:
        sample(after, name)
    assert sample(after, "coach_recorder_commit_lag_seconds_count") > sample(
        before, "coach_recorder_commit_lag_seconds_count"
    )
    assert sample(after, "coach_recorder_batch_writes_count") > sample(
        before, "coach_recorder_batch_writes_count"
    )
    assert (
        sample(after, "coach_resume_seconds_count")
        == sample(before, "coach_resume_seconds_count") + 1
    )
    assert sample(active, "coach_active_sessions") == sample(after, "coach_active_sessions") + 1
    assert sample(after, "coach_recorder_queue_depth") == 0.0
    for counter in ("recorder_errors", "recorder_dropped_writes", "model_errors"):
        assert f"# TYPE coach_{counter}_total counter" in after


def test_the_worker_serves_them_on_the_configured_port(tmp_path: object) -> None:
    server.serve_metrics(9464, str(tmp_path))
    try:
        assert (server._prometheus_port, server._prometheus_multiproc_dir) == (9464, str(tmp_path))
    finally:
        server.serve_metrics(None, None)  # type: ignore[arg-type]
