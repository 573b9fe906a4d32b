"""`python -m coach web`: the browser client's files and the join tokens it asks for."""

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from livekit import api
from pydantic import SecretStr
from yarl import URL

from coach.errors import ConfigError
from coach.settings import Settings
from coach.surfaces.web import CLIENT_DIR, TOKEN_TTL, web_app

from .test_chat_cli import coach, coach_env, tmp_cwd

DEV_URL, DEV_KEY, DEV_SECRET = "ws://localhost:7880", "devkey", "secret"

pytestmark = pytest.mark.filterwarnings("ignore:The HMAC key is")


def dev_settings(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "livekit_url": DEV_URL,
        "livekit_api_key": SecretStr(DEV_KEY),
        "livekit_api_secret": SecretStr(DEV_SECRET),
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def client_dir(tmp_path: Path) -> Path:
    """A built client in miniature: an index page and one hashed asset."""
    built = tmp_path / "client"
    (built / "assets").mkdir(parents=True)
    (built / "index.html").write_text('<div id="root"></div><script src="assets/app-1a2b.js">')
    (built / "assets" / "app-1a2b.js").write_text("console.log('coach')")
    return built


@pytest.fixture
async def client(
    client_dir: Path,
) -> AsyncIterator[TestClient[aiohttp.web.Request, aiohttp.web.Application]]:
    async with TestClient(TestServer(web_app(dev_settings(), client_dir))) as test_client:
        yield test_client


async def test_a_token_joins_a_new_room_with_coach_dispatched(client: TestClient) -> None:  # type: ignore[type-arg]
    before = time.time()
    answer = await client.post("/api/token", json={"identity": "ada"})
    assert answer.status == 200
    body = await answer.json()
    assert body["server_url"] == DEV_URL and body["identity"] == "ada"
    assert re.fullmatch(r"coach-[0-9a-f]{12}", body["room_name"])

    claims = api.TokenVerifier(DEV_KEY, DEV_SECRET).verify(body["participant_token"])
    assert claims.identity == "ada"
    assert claims.video is not None and claims.room_config is not None
    assert claims.video.room_join is True and claims.video.room == body["room_name"]
    assert [a.agent_name for a in claims.room_config.agents] == ["coach"]
    token = json.loads(_payload(body["participant_token"]))
    assert before + TOKEN_TTL.total_seconds() - 5 <= token["exp"] <= time.time() + 900 + 5

    again = await (await client.post("/api/token", json={"identity": "ada"})).json()
    assert again["room_name"] != body["room_name"]  # each connection gets its own room


async def test_browsers_are_sent_to_the_public_livekit_url(client_dir: Path) -> None:
    settings = dev_settings(public_livekit_url="wss://lk.example.com")
    async with TestClient(TestServer(web_app(settings, client_dir))) as http:
        body = await (await http.post("/api/token", json={"identity": "ada"})).json()
    assert body["server_url"] == "wss://lk.example.com"


async def test_a_page_opened_under_another_host_name_gets_no_token(client_dir: Path) -> None:
    # DNS rebinding: a page at evil.example, its name pointed at 127.0.0.1, asks the
    # developer's server for a token from the developer's browser.
    async with TestClient(TestServer(web_app(dev_settings(), client_dir))) as http:
        refused = await http.post(
            "/api/token", json={"identity": "ada"}, headers={"Host": "evil.example:8000"}
        )
        assert refused.status == 403
        assert "evil.example" in (await refused.json())["error"]
        assert (await http.get("/", headers={"Host": "evil.example"})).status == 403
        for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
            answer = await http.post("/api/token", json={"identity": "ada"}, headers={"Host": host})
            assert answer.status == 200, host
    allowed = web_app(dev_settings(), client_dir, allowed_hosts=["coach.lan"])
    async with TestClient(TestServer(allowed)) as http:
        answer = await http.post(
            "/api/token", json={"identity": "ada"}, headers={"Host": "Coach.LAN:8000"}
        )
        assert answer.status == 200


def _payload(jwt: str) -> bytes:
    import base64

    part = jwt.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ('{"identity": " ada"}', 400, "identity"),
        ('{"identity": ""}', 400, "identity"),
        ('{"identity": "a\\u0000b"}', 400, "identity"),
        ('{"identity": "a\\u200bda"}', 400, "invisible"),
        ('{"identity": "\\u202eada"}', 400, "invisible"),
        (json.dumps({"identity": "x" * 256}), 400, "identity"),
        ('{"identity": 5}', 400, '{"identity": "your name"}'),
        ('["ada"]', 400, '{"identity": "your name"}'),
        ("identity=ada", 400, "not JSON"),
        ("[" * 100_000, 413, "4096 bytes"),
    ],
)
async def test_a_bad_token_request_is_refused_in_one_line(
    client: TestClient,  # type: ignore[type-arg]
    body: str,
    status: int,
    says: str,
) -> None:
    answer = await client.post(
        "/api/token", data=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status == status
    refusal = await answer.json()
    assert set(refusal) == {"error"} and says in refusal["error"]
    assert "\n" not in refusal["error"] and "Traceback" not in refusal["error"]


async def test_the_client_files_are_served(
    client: TestClient,  # type: ignore[type-arg]
    client_dir: Path,
) -> None:
    index = await client.get("/")
    assert index.status == 200 and index.content_type == "text/html"
    assert index.headers["Cache-Control"] == "no-cache"
    assert '<div id="root">' in await index.text()
    asset = await client.get("/assets/app-1a2b.js")
    assert asset.status == 200 and "javascript" in asset.content_type
    assert asset.headers["X-Content-Type-Options"] == "nosniff"
    assert (await client.get("/assets/missing.js")).status == 404
    # A file beside the client's folder, asked for as ../ (encoded, so the client does
    # not tidy it away): never served.
    (client_dir.parent / "secret.txt").write_text("not for the web")
    for path in ("/%2e%2e/secret.txt", "/..%2fsecret.txt", "/assets/%2e%2e/%2e%2e/secret.txt"):
        answer = await client.get(URL(path, encoded=True))
        assert answer.status in (403, 404), path
        assert "not for the web" not in await answer.text()


def test_the_package_ships_a_built_client() -> None:
    index = (CLIENT_DIR / "index.html").read_text()
    referenced = re.findall(r'(?:src|href)="\.?/?(assets/[^"]+)"', index)
    assert referenced, index
    for path in referenced:
        assert (CLIENT_DIR / path).is_file(), path


@pytest.mark.parametrize("missing", ["livekit_url", "livekit_api_key", "livekit_api_secret"])
def test_web_without_livekit_settings_is_a_config_error(missing: str, client_dir: Path) -> None:
    with pytest.raises(ConfigError, match="LIVEKIT_"):
        web_app(dev_settings(**{missing: None}), client_dir)


def test_web_without_a_built_client_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="make web"):
        web_app(dev_settings(), tmp_path)


# --- the command, as a user runs it -----------------------------------------------------


def web_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in coach_env(tmp_path).items() if not k.startswith("LIVEKIT_")}
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_web_without_keys_is_one_line(tmp_path: Path) -> None:
    code, out, err = await coach("web", env=web_env(tmp_path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("coach: ") and "LIVEKIT_API_KEY" in err


async def test_web_on_a_port_that_is_taken_is_one_line(tmp_path: Path) -> None:
    env = web_env(tmp_path, LIVEKIT_URL=DEV_URL, LIVEKIT_API_KEY=DEV_KEY)
    env["LIVEKIT_API_SECRET"] = DEV_SECRET
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await coach("web", "--port", str(port), env=env)
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err.splitlines()[-1]
    code, _, err = await coach("web", "--port", "70000", env=env)
    assert code == 2 and "1 to 65535" in err


@pytest.mark.slow
async def test_web_serves_the_client_and_tokens_until_terminated(tmp_path: Path) -> None:
    env = web_env(tmp_path)
    (Path(tmp_cwd(env)) / ".env").write_text(
        f"LIVEKIT_URL={DEV_URL}\nLIVEKIT_API_KEY={DEV_KEY}\nLIVEKIT_API_SECRET={DEV_SECRET}\n"
    )
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coach",
        "web",
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_cwd(env),
    )
    try:
        assert proc.stdout is not None
        banner = await asyncio.wait_for(proc.stdout.readline(), 60)  # printed once listening
        assert f"http://127.0.0.1:{port}/" in banner.decode()
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            async with http.get("/") as index:
                assert '<div id="root">' in await index.text()
            answer = await http.post("/api/token", json={"identity": "ada"})
            body = await answer.json()
        claims = api.TokenVerifier(DEV_KEY, DEV_SECRET).verify(body["participant_token"])
        assert claims.identity == "ada"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()


@pytest.mark.slow
def test_the_wheel_carries_the_built_client(tmp_path: Path) -> None:
    # What `pip install` users get: the client's files inside the package, no Node.js.
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), "."],
        cwd=root,
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("coach-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        f"coach/surfaces/web_client/{p.relative_to(CLIENT_DIR).as_posix()}"
        for p in CLIENT_DIR.rglob("*")
        if p.is_file()
    }
    assert "coach/surfaces/web_client/index.html" in shipped
    assert shipped <= names


@pytest.mark.slow
def test_the_committed_client_is_what_web_src_builds(tmp_path: Path) -> None:
    # The package ships the committed build: a change to web/src must be rebuilt
    # (`make web`) and committed with it. (make test runs `npm ci` in web/ first.)
    root = Path(__file__).resolve().parents[2]
    built = tmp_path / "client"
    subprocess.run(
        ["npm", "run", "--prefix", "web", "--silent", "build", "--", "--outDir", str(built)],
        cwd=root,
        check=True,
        capture_output=True,
        timeout=300,
    )

    def tree(top: Path) -> dict[str, bytes]:
        return {
            p.relative_to(top).as_posix(): p.read_bytes() for p in top.rglob("*") if p.is_file()
        }

    fresh, committed = tree(built), tree(CLIENT_DIR)
    assert sorted(fresh) == sorted(committed), "rebuild the client: make web"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"rebuild the client (make web): {stale} differ"


@pytest.mark.parametrize(
    "host",
    ["evil.com@localhost", "localhost:evil.com", "127.0.0.1#evil.com", "localhost/x", "[::1"],
)
async def test_a_host_header_that_is_not_exactly_a_host_is_refused(
    client: TestClient,  # type: ignore[type-arg]
    host: str,
) -> None:
    answer = await client.post("/api/token", json={"identity": "ada"}, headers={"Host": host})
    assert answer.status in (400, 403)
    assert "participant_token" not in await answer.json()


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://evil.example", 403),
        ("null", 403),
        ("http://localhost.evil.example:8000", 403),
        ("http://localhost:8000", 200),
        ("http://127.0.0.1:5173", 200),
    ],
)
async def test_a_cross_origin_page_cannot_mint_a_token_even_blind(
    client: TestClient,  # type: ignore[type-arg]
    origin: str,
    status: int,
) -> None:
    # A form or fetch with text/plain needs no preflight: the server must refuse it.
    answer = await client.post(
        "/api/token",
        data='{"identity": "ada"}',
        headers={"Content-Type": "text/plain", "Origin": origin, "Host": "localhost:8000"},
    )
    assert answer.status == status
    assert ("participant_token" in await answer.json()) is (status == 200)


async def raw_request(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection and read the whole answer: up to the end of
    its body when it says how long that is (the server may keep reading what is left of
    a request for a while before it closes), else up to the close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(60):  # hang guard only
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)\r$", head)
            if length is None:
                return head + await reader.read()
            return head + await reader.readexactly(int(length.group(1)))
    finally:
        writer.close()


@pytest.fixture
async def raw_port(client_dir: Path) -> AsyncIterator[int]:
    app = web_app(dev_settings(), client_dir, body_timeout=0.5)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_a_target_naming_another_host_and_a_missing_host_are_refused(
    raw_port: int,
) -> None:
    absolute = await raw_request(
        raw_port, b"GET http://evil.com/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    assert absolute.startswith(b"HTTP/1.1 400")
    no_host = await raw_request(raw_port, b"GET / HTTP/1.0\r\n\r\n")
    assert no_host.startswith(b"HTTP/1.0 400") and b"Host header" in no_host


async def test_a_body_shorter_than_its_length_is_not_waited_on_forever(raw_port: int) -> None:
    head = (
        b"POST /api/token HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    answer = await raw_request(raw_port, head + b'{"identity":')
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive in time" in answer
    assert b"\r\nConnection: close\r\n" in answer  # the rest of the body may still come


async def test_a_malformed_request_is_logged_in_one_line(
    raw_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    await raw_request(raw_port, b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n")
    await raw_request(raw_port, b"GARBAGE\r\n\r\n")
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert records and all(r.exc_info is None and r.levelname == "WARNING" for r in records)
    assert all("\n" not in r.getMessage() for r in records)
    assert any("malformed request (HTTP 400" in r.getMessage() for r in records)
