"""Whole conversations by voice: a caller's microphone and loudspeaker at real-time pace,
the real silero VAD, the real OpenAI plugins (local speech server, fake LLM server) and
coach's runtime with its real recorder.

Every wait is on an event (the VAD's end of speech, a final transcript, playback started
or finished, the agent listening again); the timeouts are hang guards only.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from livekit.agents import APIConnectOptions, llm
from livekit.agents.vad import VAD
from livekit.agents.voice.agent_session import SessionConnectOptions
from livekit.plugins import openai

from coach.agents import DesignStrategist
from coach.agents.restore import restored_chat_ctx
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.surfaces.worker import OUTAGE_SENTENCES, end_job_on_outage
from coach.testing import FakeOpenAIServer, Reply, ToolCall, call, say
from coach.testing.speech_server import SpeechServer
from coach.testing.voice import HANG, VoiceCall, speech_models
from tests.agents.helpers import CHALLENGE, new_session_with_phases

pytestmark = pytest.mark.voice

# Long enough that the caller can cut in well before its end (espeak-ng: ~8 s).
LONG_REPLY = (
    "I'm the strategist. Before we start, let me explain how this works. We will go through "
    "five phases together, from understanding your users to a strategy you can test, "
    "and I will keep notes of every decision we make along the way."
)


async def open_call(
    runtime: Runtime,
    speech: SpeechServer,
    llm_server: FakeOpenAIServer,
    vad: VAD,
    *,
    identity: str | None = None,
    greeting: str = "Hello! What's your name?",
    **session_kwargs: Any,
) -> VoiceCall:
    userdata = runtime.new_userdata(identity=identity)
    stt, tts = speech_models(speech)
    model = openai.LLM(model="fake", base_url=llm_server.base_url, api_key="x")
    session = runtime.new_session(userdata, llm=model, stt=stt, tts=tts, vad=vad, **session_kwargs)
    return await VoiceCall.open(
        session, speech, llm_server, runtime.first_agent(userdata), greeting=[say(greeting)]
    )


async def close(call: VoiceCall, runtime: Runtime) -> None:
    await call.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), HANG)


def userdata(call: VoiceCall) -> UserData:
    data: UserData = call.session.userdata
    return data


async def test_a_first_visit_by_voice(
    runtime: Runtime, speech: SpeechServer, llm_server: FakeOpenAIServer, vad: VAD
) -> None:
    call_ = await open_call(runtime, speech, llm_server, vad)
    name = await call_.say(
        "my name is ada",
        [call("identify_user", name="Ada"), say("Welcome Ada. What shall we design?")],
        transcript="My name is Ada.",
    )
    assert name.transcript == "My name is Ada."
    challenge = await call_.say(
        "i want to redesign onboarding for a budgeting app",
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("I'm the strategist. Who struggles today?"),
        ],
        transcript=CHALLENGE,
    )
    assert isinstance(call_.session.current_agent, DesignStrategist)
    phase = await call_.say(
        "new users give up at the bank step",
        [
            call("complete_phase", summary="New users fear linking a bank."),
            say("Good. On to define."),
        ],
    )
    data = userdata(call_)
    session_id = data.session_id
    assert session_id is not None and data.completed_phases == ["challenge", "empathize"]
    # Every reply was heard in full, each after the caller stopped talking.
    for turn in (name, challenge, phase):
        assert turn.heard and not any(h.interrupted for h in turn.heard)
        assert turn.latency is not None and turn.latency > 0
    # The VAD ended each of the caller's turns: speaking, then listening again.
    states = [e.new_state for e in call_.items("user_state_changed")]
    assert states.count("speaking") >= 3 and states[-1] == "listening"
    await close(call_, runtime)

    stored = await runtime.store.get_session_conversation(session_id)
    said = [(m.role, m.content) for m in stored]
    assert ("user", "My name is Ada.") in said
    assert ("user", CHALLENGE) in said
    assert ("user", "new users give up at the bank step") in said
    assert ("assistant", "I'm the strategist. Who struggles today?") in said
    assert not any(m.interrupted for m in stored)
    outputs = await runtime.store.get_phase_outputs(session_id)
    assert [o.phase_id for o in outputs][:2] == ["challenge", "empathize"]
    assert outputs[1].output == "New users fear linking a bank."


async def test_barge_in_stops_the_reply_and_stores_only_what_was_heard(
    runtime: Runtime, speech: SpeechServer, llm_server: FakeOpenAIServer, vad: VAD
) -> None:
    call_ = await open_call(runtime, speech, llm_server, vad, identity="ada")
    interruption = await call_.utterance("wait stop", "Wait, stop.")
    llm_server.extend(
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say(LONG_REPLY),
        ]
    )
    segments = len(call_.speaker.segments)
    await call_.mic.say(await call_.utterance("i want to redesign onboarding", CHALLENGE))
    # The long reply starts playing; once the caller has heard a few words of it, they
    # talk over it.
    started = await call_.speaker.events.wait_for(
        lambda e: e[0] == "started", start=len(call_.speaker.events.items), guard=HANG
    )
    reply = started[1]
    await call_.speaker.played(reply, 2.0, guard=HANG)
    llm_server.extend([say("Sorry, go ahead.")])
    mark = len(call_.log.items)
    await call_.mic.say(interruption)
    finished = await call_.speaker.events.wait_for(
        lambda e: e[0] == "finished" and e[1] is reply, guard=HANG
    )
    assert finished[1].interrupted
    assert 2.0 <= reply.played < reply.captured - 1.0
    await call_.until_listening(mark)
    assert len(call_.speaker.segments) > segments + 1  # the answer to "wait, stop" played

    data = userdata(call_)
    session_id, user_id = data.session_id, data.user_id
    assert session_id is not None
    await close(call_, runtime)
    stored = await runtime.store.get_session_conversation(session_id)
    cut = [m for m in stored if m.interrupted]
    assert len(cut) == 1 and cut[0].role == "assistant"
    # Only the part the caller heard: a beginning of the reply, not all of it.
    assert cut[0].content and LONG_REPLY.startswith(cut[0].content.strip())
    assert len(cut[0].content) < len(LONG_REPLY) / 2
    after = [(m.role, m.content) for m in stored[stored.index(cut[0]) + 1 :]]
    assert after == [("user", "Wait, stop."), ("assistant", "Sorry, go ahead.")]

    # A resumed session shows the reply as interrupted, as far as it was heard.
    assert user_id is not None
    result = await runtime.store.resume_session(session_id, user_id=user_id)
    assert [m.content for m in result.context.history if m.interrupted] == [cut[0].content]
    restored = restored_chat_ctx(result, current=llm.ChatContext.empty())
    marked = [i for i in restored.items if isinstance(i, llm.ChatMessage) and i.interrupted]
    assert [i.text_content for i in marked] == [cut[0].content]


async def test_a_spoken_resume_is_recognised_and_loads_the_session(
    sqlite_runtime: Runtime, speech: SpeechServer, llm_server: FakeOpenAIServer, vad: VAD
) -> None:
    runtime = sqlite_runtime
    session_id = await new_session_with_phases(runtime, "ada", 2, challenge="sign up redesign")
    call_ = await open_call(
        runtime, speech, llm_server, vad, identity="ada", greeting="Welcome back, Ada."
    )
    # Recognised for real (pocketsphinx, the phrase grammar): nothing registered.
    asked = await call_.say(
        "let's continue my sign up redesign",
        [
            Reply(
                tool_calls=(ToolCall("select_session_to_load", {"session_id": session_id}),),
                from_request=(("heard", r"(continue my sign up redesign)"),),
            ),
            say("Say continue when ready."),
        ],
    )
    assert asked.transcript == "let's continue my sign up redesign"
    assert speech.recognised[0].source == "pocketsphinx"
    loaded = await call_.say(
        "continue", [call("load_selected_session"), say("Back in define. Where were we?")]
    )
    assert loaded.heard and loaded.heard[-1].played > 0
    data = userdata(call_)
    assert data.session_id == session_id
    assert data.current_phase_id == "ideate"  # two strategist phases were done
    await close(call_, runtime)


class _Job:
    """The job controls the worker ends a job with (JobContext's delete_room/shutdown),
    and the room's transcript the user is told in, recorded in order."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.done = asyncio.Event()

    async def tell(self, text: str) -> None:
        self.ended.append(f"told: {text}")

    def delete_room(self, room_name: str | None = None) -> Any:
        self.ended.append("room deleted")

    def shutdown(self, reason: str = "") -> None:
        self.ended.append(f"shutdown: {reason}")
        self.done.set()


@pytest.mark.parametrize("down", ["transcriptions", "speech"])
async def test_a_speech_outage_mid_call_ends_it_cleanly_and_keeps_what_was_said(
    down: str,
    sqlite_runtime: Runtime,
    speech: SpeechServer,
    llm_server: FakeOpenAIServer,
    vad: VAD,
) -> None:
    runtime = sqlite_runtime
    once = APIConnectOptions(max_retry=0, timeout=10)
    call_ = await open_call(
        runtime,
        speech,
        llm_server,
        vad,
        identity="ada",
        conn_options=SessionConnectOptions(
            stt_conn_options=once, tts_conn_options=once, max_unrecoverable_errors=sys.maxsize
        ),
    )
    job = _Job()
    end_job_on_outage(call_.session, job, tell=job.tell, limit=0)  # as the worker does
    await call_.say(
        "i want to redesign onboarding",
        [call("capture_design_challenge", challenge=CHALLENGE), say("Got it. Who is it for?")],
        transcript=CHALLENGE,
    )
    session_id = userdata(call_).session_id
    assert session_id is not None
    spoken_before = len(speech.spoken)
    speech.outage.add(down)  # type: ignore[arg-type]
    llm_server.extend([say("A budgeting app, lovely.")])
    await call_.mic.say(await call_.utterance("a budgeting app"))
    await asyncio.wait_for(job.done.wait(), HANG)
    kind = "stt_error" if down == "transcriptions" else "tts_error"
    sentence = OUTAGE_SENTENCES[kind]
    # Told in the transcript, then the room closed and the job ended.
    assert job.ended[0] == f"told: {sentence}"
    assert job.ended[1] == "room deleted" and job.ended[2].startswith("shutdown: speech failure")
    if down == "transcriptions":
        # The voice still works: the caller heard the sentence to its end before the room
        # closed (it was synthesised, and its segment played whole).
        assert " ".join(speech.spoken[spoken_before:]) == sentence  # synthesised by sentence
        last = call_.speaker.segments[-1]
        assert last.ended_at is not None and not last.interrupted and last.played > 1.0
    else:
        assert sentence not in speech.spoken  # the voice is what failed: text only
    await close(call_, runtime)

    stored = [(m.role, m.content) for m in await runtime.store.get_session_conversation(session_id)]
    assert ("user", CHALLENGE) in stored
    assert ("assistant", "Got it. Who is it for?") in stored
    if down == "speech":
        # recognised before the synthesiser failed: the caller's words are kept too
        assert ("user", "a budgeting app") in stored
    session = await runtime.store.get_session(session_id)
    assert session is not None and session.status == "in_progress"
