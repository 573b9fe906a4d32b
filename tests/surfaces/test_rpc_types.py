"""The TypeScript types frontends use are what the RPC models say: regenerating
``web/src/rpc.schema.json`` and ``web/src/rpc.ts`` from ``coach.surfaces.rpc`` (as
``make rpc-types`` does, with the pinned json-schema-to-typescript) changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coach.surfaces.rpc import ERRORS, METHODS

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
JSON2TS = WEB / "node_modules" / ".bin" / "json2ts"


def test_the_committed_schema_is_the_models_schema() -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "coach.surfaces.rpc"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert generated == (WEB / "src" / "rpc.schema.json").read_text(), (
        "the RPC models changed: run `make rpc-types` and commit web/src"
    )
    schema = json.loads(generated)
    assert sorted(schema["properties"]) == sorted(METHODS)
    assert schema["$defs"]["RpcErrorCode"]["enum"] == sorted(ERRORS)


def test_the_committed_typescript_is_what_the_schema_generates(tmp_path: Path) -> None:
    if not JSON2TS.exists():
        pytest.fail("web/'s npm packages are missing: `make test` installs them (npm ci)")
    script = json.loads((WEB / "package.json").read_text())["scripts"]["rpc-types"]
    out = tmp_path / "rpc.ts"
    command = script.replace("--output src/rpc.ts", f"--output {out}")
    subprocess.run(command, shell=True, cwd=WEB, check=True, timeout=120, env=_node_env())
    assert out.read_text() == (WEB / "src" / "rpc.ts").read_text(), (
        "web/src/rpc.ts is stale: run `make rpc-types` and commit it"
    )
    for name in ("CoachRpc", "ListSessionsResponse", "ConversationEntry", "RpcErrorCode"):
        assert (
            f"export {'type' if name == 'RpcErrorCode' else 'interface'} {name} " in out.read_text()
        )


def _node_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{WEB / 'node_modules' / '.bin'}:{os.environ['PATH']}"}
