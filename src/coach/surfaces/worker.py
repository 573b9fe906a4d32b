"""The LiveKit worker: one ``AgentServer`` with the ``coach`` rtc_session entrypoint."""

from __future__ import annotations

import logging

from livekit import rtc
from livekit.agents import AgentServer, JobContext, JobProcess

from ..models import build_llm, build_stt, build_tts, load_vad
from ..runtime import Runtime
from ..settings import load_settings
from .room import FOCUS_METHOD, RoomStateSink, handle_focus

logger = logging.getLogger("coach.worker")

AGENT_NAME = "coach"


def prewarm(proc: JobProcess) -> None:
    """Load the VAD once per worker process, before jobs arrive."""
    proc.userdata["vad"] = load_vad()


server = AgentServer(setup_fnc=prewarm)


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    """Run one conversation in the job's room."""
    settings = load_settings()
    # The engine binds to this job's event loop, so it is created here, not in prewarm.
    runtime = await Runtime.open(settings)

    async def _flush(reason: str) -> None:
        logger.info("job shutting down; flushing recorder", extra={"reason": reason})
        await runtime.aclose()

    ctx.add_shutdown_callback(_flush)
    await ctx.connect()
    participant = await ctx.wait_for_participant()
    # console runs a fake job whose participant is a stand-in shared by everyone: the
    # user is identified by the name they say instead (SPEC §3), and no room session
    # is continued for it.
    identity = None if ctx.is_fake_job() else participant.identity
    sink = RoomStateSink(ctx.room.local_participant, participant.identity)
    ctx.add_shutdown_callback(sink.aclose)
    userdata = runtime.new_userdata(identity=identity, sink=sink)
    if identity is not None and isinstance(participant.name, str) and participant.name:
        userdata.user_name = participant.name
    session = runtime.new_session(
        userdata,
        llm=build_llm(settings),
        stt=build_stt(settings),
        tts=build_tts(settings),
        vad=ctx.proc.userdata["vad"],
    )
    agent = (
        runtime.first_agent(userdata)
        if identity is None
        else await runtime.room_agent(userdata, ctx.room.name)
    )
    await session.start(agent=agent, room=ctx.room)

    async def on_focus(data: rtc.RpcInvocationData) -> str:
        return handle_focus(userdata, data)

    ctx.room.local_participant.register_rpc_method(FOCUS_METHOD, on_focus)
