"""A job starts its conversation with the model clients its process built in prewarm."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from coach.models import VoiceModels
from coach.settings import Settings
from coach.surfaces.worker import prewarm, voice_models


@dataclass
class FakeProc:
    """The part of ``JobProcess`` prewarm uses."""

    userdata: dict[str, Any] = field(default_factory=dict)


def test_prewarm_builds_the_clients_once_and_the_job_uses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no developer .env
    monkeypatch.setenv("COACH_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    proc = FakeProc()
    prewarm(proc)  # type: ignore[arg-type]
    built = proc.userdata["models"]
    assert isinstance(built, VoiceModels) and proc.userdata["vad"] is not None
    settings = Settings(llm_base_url="http://127.0.0.1:9/v1")
    assert voice_models(proc, settings) is built  # type: ignore[arg-type]
    assert str(built.llm._client.base_url).startswith("http://127.0.0.1:9/v1")


def test_a_job_without_prewarm_still_gets_its_clients() -> None:
    settings = Settings(llm_base_url="http://127.0.0.1:9/v1")
    models = voice_models(FakeProc(), settings)  # type: ignore[arg-type]
    assert isinstance(models, VoiceModels)


def test_prewarm_pays_the_process_one_time_costs(tmp_path: Path) -> None:
    # In a process of its own, as a job process: prewarm freezes the heap it leaves.
    program = (
        "import gc, sys\n"
        "from coach.models import _FIRST_USE_MODULES\n"
        "from coach.surfaces.worker import prewarm\n"
        "class Proc:\n"
        "    userdata = {}\n"
        "before = [m for m in _FIRST_USE_MODULES if m in sys.modules]\n"
        "prewarm(Proc())\n"
        "after = [m for m in _FIRST_USE_MODULES if m in sys.modules]\n"
        "print(len(before), len(after), len(_FIRST_USE_MODULES), gc.get_freeze_count() > 0)\n"
    )
    env = {**os.environ, "COACH_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    before, after, total, frozen = out.stdout.split()
    assert int(before) < int(after) == int(total) and frozen == "True"
