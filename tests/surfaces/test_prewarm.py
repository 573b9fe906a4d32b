"""A job starts its conversation with the model clients its process built in prewarm."""

from __future__ import annotations

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
