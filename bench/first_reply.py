"""A job's first reply: model clients built on the job's event loop, or in ``prewarm``.

Each trial is a fresh Python process, as a LiveKit job process is. It opens the runtime
(a SQLite file), gets the model clients, starts an ``AgentSession`` with the coach and
waits for the greeting from the local fake OpenAI server. The timer starts when the job
starts, so a ``prewarm`` build (done before a job arrives) is outside it:

* ``inline``: the clients are built in the job, on its event loop (the old entrypoint);
* ``prewarmed``: they were built before the job started (``prewarm``, as now).

Trials alternate in pairs; the report is the median of each and of the paired
differences, and how long the build held the job's event loop. Run::

    python -m bench.first_reply --pairs 10
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

from .measure import key_settings
from .paired import main as paired_main
from .paired import paired_trials

MODES = ("inline", "prewarmed")


async def _job(mode: str, url: str, database: str) -> dict[str, float]:
    from coach.conversation.runtime import Runtime
    from coach.models import VoiceModels
    from coach.settings import Settings

    settings = Settings(
        database_url=database,
        **key_settings(database),
        secret_key="bench-first-reply-secret-0123456789",
        llm_base_url=url,
        llm_model="fake",
    )
    prewarmed = VoiceModels.build(settings) if mode == "prewarmed" else None
    started = time.perf_counter()
    runtime = await Runtime.open(settings)
    build_started = time.perf_counter()
    models = prewarmed or VoiceModels.build(settings)
    build = time.perf_counter() - build_started
    userdata = runtime.new_userdata(identity="bench")
    session = runtime.new_session(userdata, llm=models.llm)
    await (await session.start(runtime.first_agent(userdata), capture_run=True))
    first_reply = time.perf_counter() - started
    await session.aclose()
    await runtime.aclose()
    return {"first_reply_ms": first_reply * 1000, "build_on_loop_ms": build * 1000}


def _child(mode: str, url: str, database: str) -> None:
    print(json.dumps(asyncio.run(_job(mode, url, database))), flush=True)


async def _serve(pairs: int) -> None:
    from coach.testing import FakeOpenAIServer, say

    replies = [say("Hi! I'm your design coach. What's your name?")] * (2 * pairs + 2)
    async with FakeOpenAIServer(replies) as server:
        results = await paired_trials("first_reply", MODES, pairs, server.base_url)
    _report(results, pairs)


def _report(results: dict[str, list[dict[str, float]]], pairs: int) -> None:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[mode])

    diffs = [
        a["first_reply_ms"] - b["first_reply_ms"]
        for a, b in zip(results["inline"], results["prewarmed"], strict=True)
    ]
    print(f"first reply of a job, {pairs} pairs (median ms)")
    print("| clients built | first reply | built on the job's loop |")
    print("|---|---|---|")
    for mode in MODES:
        print(
            f"| {mode} | {med(mode, 'first_reply_ms'):.1f} | {med(mode, 'build_on_loop_ms'):.1f} |"
        )
    print(f"| inline − prewarmed, paired | {statistics.median(diffs):.1f} | |")
    print(f"command: python -m bench.first_reply --pairs {pairs}")


def main() -> None:
    paired_main("first_reply", _child, _serve)


if __name__ == "__main__":
    main()
