"""The voice latency budget: end of the caller's speech -> the first frame of the answer.

A caller (``coach.testing.caller``: a real-time microphone and loudspeaker) talks to an
``AgentSession`` with the real silero VAD and the real OpenAI STT/TTS/LLM plugins, against
the local speech server (espeak-ng; transcripts registered by fingerprint, so recognition
costs the same in every mode) and the fake OpenAI LLM server. Three modes, same models:

* ``bare``: a plain LiveKit ``Agent`` (the coach's greeting instructions), no persistence;
* ``coach``: coach's ``DesignCoach`` through ``Runtime.new_session`` (recording on, SQLite);
* ``coach-norec``: the same agent and store, the session recorder not attached.

Every round runs one call per mode, in rotating order, each with the same turns; turn
``i`` of a round is paired across modes. Reported: p50/p95 per mode, the ratios to
``bare``, the median of paired differences, and the framework's own breakdown from its
metrics events (end-of-utterance delay after the VAD's end of speech, STT, LLM time to
first token, TTS time to first byte).

Every mode runs with the same turn handling, pinned (:data:`TURN_HANDLING`: VAD turn
detection, fixed endpointing 0.5 s), so no mode's answer waits on what the framework learned from
another's pauses. The event loop is watched during every call: a 2 ms heartbeat gives each
mode's longest stall and the stalls over 20 ms, and LiveKit's own loop monitor (warn at
20 ms) says where the loop was when it reported one — in coach's code or not. Run::

    python -m bench.voice --rounds 5 --turns 4
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .measure import key_settings

if TYPE_CHECKING:
    from livekit.agents import TurnHandlingOptions

MODES = ("bare", "coach", "coach-norec")
TURNS = [
    ("i like the colour blue", "I like the colour blue."),
    ("people forget to log in", "People forget to log in."),
    ("the budget is small", "The budget is small."),
    ("we ship in spring", "We ship in spring."),
    ("users want it simple", "Users want it simple."),
    ("that sounds right", "That sounds right."),
]
REPLY = "I see. Tell me more."
TURN_HANDLING: TurnHandlingOptions = {
    "turn_detection": "vad",
    "endpointing": {"mode": "fixed", "min_delay": 0.5, "max_delay": 3.0},
}
"""The same turn handling for every mode, stated rather than left to defaults: the end of
a turn is the VAD's end of speech plus 0.5 s. (Left to itself the session picks a turn
detector that, without LiveKit's inference service, finds every end unlikely and waits
the full 3 s — a constant that would hide any difference between the modes.)"""
STALL_MS = 20.0
"""A stall a caller could hear: the issue's budget for one attributable to coach."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


async def _call(
    mode: str, turns: int, runtime: Any, speech: Any, llm_server: Any, vad: Any
) -> dict[str, Any]:
    from livekit.agents import Agent, AgentSession, metrics
    from livekit.plugins import openai

    from coach.testing import say
    from coach.testing.voice import VoiceCall, speech_models

    stt, tts = speech_models(speech)
    model = openai.LLM(model="fake", base_url=llm_server.base_url, api_key="x")
    userdata = runtime.new_userdata(identity=f"bench-{mode}")
    agent: Agent
    if mode == "bare":
        session: AgentSession[Any] = AgentSession(
            llm=model, stt=stt, tts=tts, vad=vad, turn_handling=TURN_HANDLING
        )
        agent = Agent(instructions=runtime.first_agent(userdata).instructions)
    elif mode == "coach":
        session = runtime.new_session(
            userdata, llm=model, stt=stt, tts=tts, vad=vad, turn_handling=TURN_HANDLING
        )
        agent = runtime.first_agent(userdata)
    else:
        session = AgentSession(
            userdata=userdata, llm=model, stt=stt, tts=tts, vad=vad, turn_handling=TURN_HANDLING
        )
        agent = runtime.first_agent(userdata)
    # Every mode greets first, as coach does: the framework's dynamic endpointing learns
    # from the pauses around agent speech, so a call without a greeting would not compare.
    call = VoiceCall(session, speech, llm_server, collect_metrics=True)
    llm_server.extend([say("Hello!")])
    await session.start(agent)
    if mode == "bare":
        session.generate_reply(instructions="Greet the user.")
    await call.until_listening(0)
    latencies: list[float] = []
    for text, transcript in TURNS[:turns]:
        turn = await call.say(text, [say(REPLY)], transcript=transcript)
        if turn.latency is None:
            raise RuntimeError(f"{mode}: no answer was heard to {text!r}")
        latencies.append(turn.latency)
    breakdown: dict[str, list[float]] = defaultdict(list)
    for m in call.metrics:
        if isinstance(m, metrics.EOUMetrics):
            breakdown["end_of_utterance_delay"].append(m.end_of_utterance_delay)
            breakdown["transcription_delay"].append(m.transcription_delay)
        elif isinstance(m, metrics.STTMetrics) and m.duration > 0:
            breakdown["stt_duration"].append(m.duration)
        elif isinstance(m, metrics.LLMMetrics) and m.ttft > 0:
            breakdown["llm_ttft"].append(m.ttft)
        elif isinstance(m, metrics.TTSMetrics) and m.ttfb > 0:
            breakdown["tts_ttfb"].append(m.ttfb)
    await call.aclose()
    await runtime.recorder.flush()
    return {"latency": latencies, "breakdown": breakdown}


async def run(rounds: int, turns: int) -> dict[str, Any]:
    from livekit.agents.telemetry import loop_monitor

    import coach
    from coach.conversation.runtime import Runtime
    from coach.models import load_vad
    from coach.settings import Settings
    from coach.testing import FakeOpenAIServer
    from coach.testing.speech_server import SpeechServer

    from .loop_blocks import _Blocks
    from .measure import LoopMeter

    logging.getLogger("livekit").setLevel(logging.ERROR)
    results: dict[str, dict[str, Any]] = {
        m: {"latency": [], "breakdown": defaultdict(list), "reports": [], "lags": []} for m in MODES
    }
    blocks = _Blocks(str(Path(coach.__file__).parent))
    monitor_log = logging.getLogger("livekit.agents")
    monitor_log.addHandler(blocks)
    monitor_log.setLevel(logging.WARNING)
    monitor_log.propagate = False  # its reports are counted, not printed
    with tempfile.TemporaryDirectory(prefix="coach-bench-voice-") as tmp:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{Path(tmp) / 'coach.db'}",
            **key_settings(f"sqlite+aiosqlite:///{Path(tmp) / 'coach.db'}"),
            secret_key="bench-voice-secret-0123456789abcdef",
            llm_base_url="http://127.0.0.1:9/v1",
        )
        runtime = await Runtime.open(settings)
        vad = load_vad()
        loop = asyncio.get_running_loop()
        thresholds = loop_monitor.LoopMonitorThresholds(warn=STALL_MS / 1000, error=10.0)
        loop_monitor.start_monitoring(loop, thresholds=thresholds, emit_spans=False)
        try:
            async with SpeechServer() as speech, FakeOpenAIServer() as llm_server:
                for r in range(rounds):
                    order = MODES[r % 3 :] + MODES[: r % 3]
                    for mode in order:
                        seen = len(blocks.reports)
                        async with LoopMeter(period=0.002) as meter:
                            got = await _call(mode, turns, runtime, speech, llm_server, vad)
                        results[mode]["lags"].extend(meter.lateness_ms)
                        results[mode]["reports"].extend(blocks.reports[seen:])
                        results[mode]["latency"].append(got["latency"])
                        for key, values in got["breakdown"].items():
                            results[mode]["breakdown"][key].extend(values)
                    print(f"round {r + 1}/{rounds} done", flush=True)
        finally:
            loop_monitor.stop_monitoring(loop)
            await runtime.aclose()
    return results


def report(results: dict[str, Any], rounds: int, turns: int) -> None:
    def flat(mode: str) -> list[float]:
        return [x * 1000 for call in results[mode]["latency"] for x in call]

    bare = flat("bare")
    print(f"\nend of caller speech -> first agent audio frame, {rounds} rounds x {turns} turns")
    print("| mode | p50 ms | p95 ms | p50 / bare | p95 / bare | paired diff vs bare, median ms |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        values = flat(mode)
        diffs = [a - b for a, b in zip(values, bare, strict=True)]
        p50, p95 = _percentile(values, 0.5), _percentile(values, 0.95)
        print(
            f"| {mode} | {p50:.0f} | {p95:.0f} | {p50 / _percentile(bare, 0.5):.3f} "
            f"| {p95 / _percentile(bare, 0.95):.3f} | {statistics.median(diffs):+.0f} |"
        )
    print("\nbreakdown from the framework's metrics events (median ms)")
    keys = ["end_of_utterance_delay", "transcription_delay", "stt_duration", "llm_ttft", "tts_ttfb"]
    print("| mode | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for mode in MODES:
        b = results[mode]["breakdown"]
        cells = [f"{statistics.median(b[k]) * 1000:.0f}" if b.get(k) else "-" for k in keys]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print(
        "\nthe event loop during the calls "
        f"(a 2 ms heartbeat; LiveKit's monitor at {STALL_MS:.0f} ms)"
    )
    print(
        f"| mode | longest stall ms | stalls > {STALL_MS:.0f} ms | p99 lateness ms "
        "| monitor reports | in coach's code |"
    )
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        lags = results[mode]["lags"]
        reports = results[mode]["reports"]
        print(
            f"| {mode} | {max(lags):.1f} | {sum(1 for x in lags if x > STALL_MS)} "
            f"| {_percentile(lags, 0.99):.1f} | {len(reports)} "
            f"| {sum(1 for r in reports if r['coach_code'])} |"
        )
    print(f"\ncommand: python -m bench.voice --rounds {rounds} --turns {turns}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.voice", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="calls per mode")
    parser.add_argument("--turns", type=int, default=4, choices=range(1, len(TURNS) + 1))
    args = parser.parse_args()
    started = time.perf_counter()
    results = asyncio.run(run(args.rounds, args.turns))
    report(results, args.rounds, args.turns)
    print(f"wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
