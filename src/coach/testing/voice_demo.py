"""``make voice-demo``: two spoken visits through the local voice stack.

A caller talks to coach at real-time pace through the real silero VAD and the real OpenAI
STT/TTS/LLM plugins, against the local speech server (espeak-ng, pocketsphinx) and the
scripted fake OpenAI server. Visit 1: the caller gives their name and challenge, cuts
the strategist off mid-sentence (barge-in), and finishes a phase. Visit 2: they give
their name again and resume by voice ("let's continue my sign up redesign", recognised
by pocketsphinx). It prints what the caller said and heard, with each turn's latency
(end of their speech -> first audio of the answer), and leaves ``DIR/coach.db``, whose
``sessions show`` marks the interrupted reply. Run::

    python -m coach.testing.voice_demo --dir .voice-demo
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from livekit.plugins import openai

from coach.conversation.runtime import Runtime
from coach.errors import CoachError
from coach.models import load_vad
from coach.settings import Settings
from coach.surfaces.sessions import show_session

from . import FakeOpenAIServer, Reply, ToolCall, call, say
from .demo import DEMO_SECRET, DemoError, reset_database, this_python
from .speech_server import SpeechServer
from .voice import HANG, Turn, VoiceCall, speech_models

CHALLENGE = "Redesign the sign up of a budgeting app so new users finish setup."
LONG_REPLY = (
    "I'm the strategist. Before we start, let me explain how this works. We will go "
    "through five phases together, from understanding your users to a strategy you can "
    "test, and I will keep notes of every decision we make along the way."
)


def _print_turn(turn: Turn, call_: VoiceCall, start: int) -> None:
    latency = f"{turn.latency * 1000:.0f} ms" if turn.latency is not None else "-"
    print(f"  caller said : {turn.said.utterance.text!r}  (heard as {turn.transcript!r})")
    _print_heard(call_, start, latency)


def _print_heard(call_: VoiceCall, start: int, latency: str) -> None:
    for event in call_.log.items[start:]:
        if event[0] != "conversation_item_added":
            continue
        item = event[1].item
        if getattr(item, "role", None) == "assistant":
            mark = "  [interrupted: only this much was heard]" if item.interrupted else ""
            print(f"  caller heard: {item.text_content!r}{mark}")
    print(f"  latency     : {latency} (end of speech -> first audio)")


async def _visit(
    runtime: Runtime, speech: SpeechServer, llm: FakeOpenAIServer, vad: Any
) -> VoiceCall:
    userdata = runtime.new_userdata()
    stt, tts = speech_models(speech)
    model = openai.LLM(model="fake", base_url=llm.base_url, api_key="x")
    session = runtime.new_session(userdata, llm=model, stt=stt, tts=tts, vad=vad)
    call_ = VoiceCall(session, speech, llm)
    llm.extend([say("Hello! I'm your design coach. What's your name?")])
    await session.start(runtime.first_agent(userdata))
    await call_.until_listening(0)
    print("  coach greets: 'Hello! I'm your design coach. What's your name?'")
    return call_


async def _turn(call_: VoiceCall, text: str, replies: list[Reply], transcript: str | None) -> None:
    start = len(call_.log.items)
    turn = await call_.say(text, replies, transcript=transcript)
    _print_turn(turn, call_, start)


async def _first_visit(
    runtime: Runtime, speech: SpeechServer, llm: FakeOpenAIServer, vad: Any
) -> str:
    print("\n=== Visit 1: a first visit by voice, with one barge-in")
    call_ = await _visit(runtime, speech, llm, vad)
    await _turn(
        call_,
        "my name is ada",
        [call("identify_user", name="Ada"), say("Welcome Ada. What shall we design?")],
        "My name is Ada.",
    )
    # Barge-in: the caller talks over the strategist's long first reply.
    ask = await call_.utterance("i want to redesign the sign up", CHALLENGE)
    stop = await call_.utterance("wait stop", "Wait, stop.")
    llm.extend(
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say(LONG_REPLY),
        ]
    )
    start = len(call_.log.items)
    said = await call_.mic.say(ask)
    started = await call_.speaker.events.wait_for(
        lambda e: e[0] == "started", start=len(call_.speaker.events.items), guard=HANG
    )
    reply = started[1]
    latency = f"{(reply.first_frame_at - said.ended_at) * 1000:.0f} ms"
    print(f"  caller said : {ask.text!r}  (heard as {CHALLENGE!r})")
    await call_.speaker.played(reply, 2.5, guard=HANG)
    llm.extend([say("Sorry, go ahead.")])
    mark = len(call_.log.items)
    await call_.mic.say(stop)
    await call_.speaker.events.wait_for(lambda e: e[0] == "finished" and e[1] is reply, guard=HANG)
    await call_.until_listening(mark)
    _print_heard(call_, start, latency)
    print(f"  ...the caller cut in after {reply.played:.1f} s of {reply.captured:.1f} s")
    await _turn(
        call_,
        "new users give up at the bank step",
        [
            call("complete_phase", summary="New users fear linking a bank."),
            say("Good. On to define."),
        ],
        None,
    )
    session_id: str | None = call_.session.userdata.session_id
    await call_.aclose()
    await runtime.recorder.flush()
    if session_id is None:
        raise DemoError("visit 1 ended without a session: the challenge was not captured")
    return session_id


async def _second_visit(
    runtime: Runtime, speech: SpeechServer, llm: FakeOpenAIServer, vad: Any, session_id: str
) -> None:
    print("\n=== Visit 2: a spoken resume (recognised by pocketsphinx, nothing registered)")
    call_ = await _visit(runtime, speech, llm, vad)
    await _turn(
        call_,
        "my name is ada",
        [call("identify_user", name="Ada"), say("Welcome back, Ada. Shall we continue?")],
        "My name is Ada.",
    )
    await _turn(
        call_,
        "let's continue my sign up redesign",
        [
            Reply(
                tool_calls=(ToolCall("select_session_to_load", {"session_id": session_id}),),
                from_request=(("heard", r"(continue my sign up redesign)"),),
            ),
            say("Found it. Say continue when ready."),
        ],
        None,
    )
    await _turn(
        call_,
        "continue",
        [call("load_selected_session"), say("Back in define. Where were we?")],
        None,
    )
    resumed = call_.session.userdata.session_id
    await call_.aclose()
    if resumed != session_id:
        raise DemoError(f"visit 2 did not resume session {session_id} (it has {resumed})")
    await runtime.recorder.flush()


async def run(directory: Path) -> str:
    path = reset_database(directory).resolve()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{path}",
        secret_key=DEMO_SECRET,
        llm_base_url="http://127.0.0.1:9/v1",
    )
    runtime = await Runtime.open(settings)
    vad = load_vad()
    try:
        async with (
            SpeechServer(
                phrases=["let's continue my sign up redesign", "continue", "my name is ada"]
            ) as speech,
            FakeOpenAIServer() as llm,
        ):
            session_id = await _first_visit(runtime, speech, llm, vad)
            await _second_visit(runtime, speech, llm, vad, session_id)
            if llm.errors:
                raise DemoError(f"the fake model could not answer: {llm.errors[0]}")
        print(f"\n=== What is stored: $ python -m coach sessions show {session_id}")
        await show_session(runtime.store, session_id, sys.stdout)
    finally:
        await runtime.aclose()
    print(
        "\nTo read it again:\n  "
        f"COACH_DATABASE_URL={shlex.quote('sqlite:///' + str(path))} "
        f"COACH_SECRET_KEY={DEMO_SECRET} {this_python()} -m coach sessions show {session_id}"
    )
    return session_id


def main(argv: list[str] | None = None) -> int:
    """Play the two visits; exit 1 with one line when something a user can fix fails."""
    parser = argparse.ArgumentParser(prog="python -m coach.testing.voice_demo")
    parser.add_argument("--dir", type=Path, default=Path(".voice-demo"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    try:
        asyncio.run(run(args.dir))
    except (DemoError, CoachError, RuntimeError) as exc:
        print(f"voice demo: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
