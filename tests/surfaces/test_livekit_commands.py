"""The LiveKit commands (`dev`, `start`, `connect`, `console`, `token`) as a user runs them:
a misconfiguration is one line and exit code 2, and `.env` counts for every command."""

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from livekit import api

from coach.persistence import current_revision
from coach.persistence.migrate import head_revision

from .test_chat_cli import coach, coach_env, tmp_cwd

DEV_KEY, DEV_SECRET = "devkey", "secret"  # what livekit-server --dev uses
HANG_GUARD = 300
"""Seconds a worker process may take before a test gives up on it: a hang guard, not a
budget (each wait ends on an event: the worker's knock, its exit)."""

# The dev secret is short; PyJWT says so when the tests verify tokens signed with it.
pytestmark = pytest.mark.filterwarnings("ignore:The HMAC key is")


def lk_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """coach_env with an LLM configured and no LiveKit variables from the outer shell."""
    env = {k: v for k, v in coach_env(tmp_path).items() if not k.startswith("LIVEKIT_")}
    env["COACH_LLM_BASE_URL"] = "http://127.0.0.1:9/v1"
    env.update(extra)
    return env


def write_dotenv(env: dict[str, str], **values: str) -> None:
    lines = [f"{name}={value}" for name, value in values.items()]
    (Path(tmp_cwd(env)) / ".env").write_text("\n".join(lines) + "\n")


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("coach: "), err
    assert "Traceback" not in err
    return err


class FakeLiveKit:
    """Enough of a LiveKit server to see who knocks: it records the worker's
    registration request and refuses it."""

    def __init__(self) -> None:
        self.authorizations: list[str] = []
        self.knocked = asyncio.Event()
        self.url = ""

    async def _agent(self, request: web.Request) -> web.Response:
        self.authorizations.append(request.headers.get("Authorization", ""))
        self.knocked.set()
        return web.Response(status=401, text="no")

    @asynccontextmanager
    async def running(self) -> AsyncIterator["FakeLiveKit"]:
        app = web.Application()
        app.router.add_get("/agent", self._agent)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"ws://{host}:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()


@pytest.mark.parametrize("command", ["dev", "start", "connect"])
async def test_a_worker_command_without_livekit_url_is_one_line(
    tmp_path: Path, command: str
) -> None:
    args = [command, "--room", "design"] if command == "connect" else [command]
    code, out, err = await coach(*args, env=lk_env(tmp_path))
    assert code == 2, err
    assert "LIVEKIT_URL" in one_line(err) and out == ""


async def test_a_worker_command_names_the_missing_api_key_and_secret(tmp_path: Path) -> None:
    code, _, err = await coach("start", env=lk_env(tmp_path, LIVEKIT_URL="ws://127.0.0.1:9"))
    assert code == 2
    assert "LIVEKIT_API_KEY" in one_line(err) and "LIVEKIT_API_SECRET" in err
    assert "LIVEKIT_URL" not in err.split("set")[0]  # the URL is there: not named as missing


async def test_connect_to_an_unreachable_server_says_so_at_once(tmp_path: Path) -> None:
    env = lk_env(
        tmp_path,
        LIVEKIT_URL="ws://127.0.0.1:9",
        LIVEKIT_API_KEY=DEV_KEY,
        LIVEKIT_API_SECRET=DEV_SECRET,
    )
    code, out, err = await coach("connect", "--room", "design", env=env)
    assert code == 2, err
    assert "cannot reach the LiveKit server at ws://127.0.0.1:9" in one_line(err)


async def test_token_reads_the_keys_from_dotenv(tmp_path: Path) -> None:
    env = lk_env(tmp_path)
    write_dotenv(env, LIVEKIT_API_KEY=DEV_KEY, LIVEKIT_API_SECRET=DEV_SECRET)
    code, out, err = await coach("token", "--identity", "alice", "--room", "design", env=env)
    assert (code, err) == (0, "")  # no key-length warning for the dev keys either
    claims = api.TokenVerifier(DEV_KEY, DEV_SECRET).verify(out.strip())
    assert claims.video is not None and claims.room_config is not None
    assert claims.identity == "alice" and claims.video.room == "design"
    assert claims.room_config.agents[0].agent_name == "coach"


async def test_token_for_an_identity_no_user_can_have_is_one_line(tmp_path: Path) -> None:
    env = lk_env(tmp_path)
    write_dotenv(env, LIVEKIT_API_KEY=DEV_KEY, LIVEKIT_API_SECRET=DEV_SECRET)
    code, out, err = await coach("token", "--identity", " alice", env=env)
    assert code == 2 and out == ""
    assert "identity" in one_line(err).lower()


async def test_token_without_keys_is_one_line(tmp_path: Path) -> None:
    code, out, err = await coach("token", "--identity", "alice", env=lk_env(tmp_path))
    assert code == 2 and out == ""
    assert "LIVEKIT_API_KEY" in one_line(err)


@pytest.mark.slow
async def test_start_registers_with_the_server_and_keys_from_dotenv(tmp_path: Path) -> None:
    env = lk_env(tmp_path)
    async with FakeLiveKit().running() as server:
        write_dotenv(
            env, LIVEKIT_URL=server.url, LIVEKIT_API_KEY=DEV_KEY, LIVEKIT_API_SECRET=DEV_SECRET
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "coach",
            "start",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=tmp_cwd(env),
        )
        try:
            # A hang guard only: on a loaded machine the worker's imports and its idle job
            # processes took over 60 s before it knocked (a CI run on 2026-11-30).
            await asyncio.wait_for(server.knocked.wait(), HANG_GUARD)
        finally:
            if proc.returncode is None:  # (a worker that stopped early says why below)
                proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), HANG_GUARD)
    token = server.authorizations[0].removeprefix("Bearer ")
    video = api.TokenVerifier(DEV_KEY, DEV_SECRET).verify(token).video
    assert video is not None and video.agent
    assert proc.returncode == 0, err
    assert b"Warning" not in err and b"Warning" not in out
    # The embedded SQLite file is migrated before any job: otherwise the worker would
    # report itself full (health) and never be given the job that migrates it.
    assert await current_revision(env["COACH_DATABASE_URL"]) == head_revision()
    assert b"cannot be used" not in err


@pytest.mark.slow
async def test_a_worker_that_cannot_register_exits_non_zero_with_one_line(
    tmp_path: Path,
) -> None:
    # `start` as the user runs it, with two knobs turned: no retries, so that the
    # registration failure that would come after minutes comes at once, and the health
    # server on a free port, not 8081, which the other `start` test may hold meanwhile
    # ("address already in use" under pytest-xdist).
    env = lk_env(
        tmp_path, LIVEKIT_URL="ws://127.0.0.1:9", LIVEKIT_API_KEY=DEV_KEY, LIVEKIT_API_SECRET="x"
    )
    program = (
        "import sys; from coach.__main__ import main; "
        "from coach.surfaces.worker import server; "
        "server.update_options(max_retry=0); server._port = 0; sys.exit(main(['start']))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        program,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_cwd(env),
    )
    out, err = await asyncio.wait_for(proc.communicate(), HANG_GUARD)
    text = err.decode()
    assert proc.returncode == 2, text
    assert text.splitlines()[-1].startswith("coach: the worker stopped: failed to connect")
    assert "ws://127.0.0.1:9" in text.splitlines()[-1]
    assert "Traceback" not in text and "worker failed" not in text


async def test_console_without_the_audio_device_is_one_line(tmp_path: Path) -> None:
    try:
        import sounddevice  # noqa: F401

        reason = "no audio input device no-such-mic"
    except OSError:
        reason = "PortAudio"
    code, out, err = await coach("console", "--input-device", "no-such-mic", env=lk_env(tmp_path))
    assert code == 2, err
    assert reason in one_line(err), err
