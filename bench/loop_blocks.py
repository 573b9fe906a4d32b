"""What blocks a job's event loop in its first turns: coach's prewarm alone, or after the
framework's own warm-up as a LiveKit job process gets it.

Each trial is a fresh Python process. Like ``prewarm``, it builds the model clients before
the job; then, under LiveKit's own loop monitor (warn threshold 50 ms), it opens the
runtime (a SQLite file), starts an ``AgentSession`` with the coach, gets the greeting and
speaks two turns (a challenge captured and handed to the strategist, an insight added)
against the local fake OpenAI server. Before that:

* ``bare``: nothing — a plain process, as a script or test runs the agents;
* ``livekit``: what a LiveKit job process starts from on Linux: the forkserver imports
  the plugins, runs the framework's warm-up (``livekit.agents.ipc._preload``: the local
  inference models, the OpenAI SDK's resources, an HTTP client) and freezes the heap
  (``_preload_freeze``) before it forks the job process.

Trials alternate in pairs; the report gives, per mode, the median time of the three
turns, the median time the loop was reported blocked, the reports' locations and whether
their stacks pass through coach's code, and the median of the paired differences. Run::

    python -m bench.loop_blocks --pairs 10
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .measure import key_settings
from .paired import main as paired_main
from .paired import paired_trials

MODES = ("bare", "livekit")
FRAMEWORK_PRELOAD = (
    "livekit.plugins.openai",
    "livekit.plugins.silero",
    "livekit.agents.ipc._preload",
    "livekit.agents.ipc._preload_freeze",
)
WARN_SECONDS = 0.05


class _Blocks(logging.Handler):
    """The loop monitor's warnings: how long, and where."""

    def __init__(self, package: str) -> None:
        super().__init__()
        self.package = package
        self.reports: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "event loop blocked" in record.getMessage():
            stack = str(getattr(record, "stack", ""))
            frames = [line.strip() for line in stack.splitlines() if line.strip()]
            self.reports.append(
                {
                    "ms": float(getattr(record, "duration", 0.0)) * 1000,
                    "gc_ms": float(getattr(record, "gc_time", 0.0)) * 1000,
                    "at": frames[-1] if frames else "?",
                    "coach_code": any(self.package in line for line in frames),
                }
            )


async def _job(mode: str, url: str, database: str) -> dict[str, Any]:
    if mode == "livekit":
        for module in FRAMEWORK_PRELOAD:  # in this order: the last one freezes the heap
            importlib.import_module(module)

    from livekit.agents.telemetry import loop_monitor

    import coach
    from coach.conversation.runtime import Runtime
    from coach.models import VoiceModels
    from coach.settings import Settings

    settings = Settings(
        database_url=database,
        **key_settings(database),
        secret_key="bench-loop-blocks-secret-0123456789",
        llm_base_url=url,
        llm_model="fake",
    )
    models = VoiceModels.build(settings)  # prewarm
    blocks = _Blocks(str(Path(coach.__file__).parent))
    logging.getLogger().addHandler(blocks)
    thresholds = loop_monitor.LoopMonitorThresholds(warn=WARN_SECONDS, error=10.0)
    loop_monitor.start_monitoring(
        asyncio.get_running_loop(), thresholds=thresholds, emit_spans=False
    )
    started = time.perf_counter()
    runtime = await Runtime.open(settings)
    userdata = runtime.new_userdata(identity="bench")
    session = runtime.new_session(userdata, llm=models.llm)
    await (await session.start(runtime.first_agent(userdata), capture_run=True))
    await session.run(user_input="I want to redesign onboarding for a budgeting app")
    await session.run(user_input="People drop off at bank linking")
    turns = time.perf_counter() - started
    await session.aclose()
    await runtime.aclose()
    loop_monitor.stop_monitoring(asyncio.get_running_loop())
    return {"turns_ms": turns * 1000, "reports": blocks.reports}


def _child(mode: str, url: str, database: str) -> None:
    print(json.dumps(asyncio.run(_job(mode, url, database))), flush=True)


async def _serve(pairs: int) -> None:
    from coach.testing import FakeOpenAIServer, call, say

    visit = [
        say("Hi! I'm your design coach. What's your name?"),
        call("capture_design_challenge", challenge="Redesign onboarding for a budgeting app"),
        call("transfer_to_strategist"),
        say("Strategist here: where do people drop off?"),
        call("add_insight", text="People drop off at bank linking"),
        say("Noted."),
    ]
    async with FakeOpenAIServer(visit * (2 * pairs + 1)) as server:
        results = await paired_trials("loop_blocks", MODES, pairs, server.base_url)
    _report(results, pairs)


def _report(results: dict[str, list[dict[str, Any]]], pairs: int) -> None:
    def blocked(trial: dict[str, Any]) -> float:
        return float(sum(r["ms"] for r in trial["reports"]))

    print(f"a job's greeting and first two turns, {pairs} pairs (median ms)")
    print("| before prewarm | three turns | loop blocked ≥ 50 ms | reports | from coach's code |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        trials = results[mode]
        reports = [r for t in trials for r in t["reports"]]
        print(
            f"| {mode} | {statistics.median(t['turns_ms'] for t in trials):.1f} "
            f"| {statistics.median(blocked(t) for t in trials):.1f} "
            f"| {len(reports)} | {sum(r['coach_code'] for r in reports)} |"
        )
    diffs = [
        a["turns_ms"] - b["turns_ms"]
        for a, b in zip(results["bare"], results["livekit"], strict=True)
    ]
    print(f"| bare − livekit, paired | {statistics.median(diffs):.1f} | | | |")
    for mode in MODES:
        places = Counter(r["at"][:150] for t in results[mode] for r in t["reports"])
        for place, count in places.most_common(5):
            print(f"{mode}: {count}× {place}")
    print(f"command: python -m bench.loop_blocks --pairs {pairs}")


def main() -> None:
    paired_main("loop_blocks", _child, _serve)


if __name__ == "__main__":
    main()
