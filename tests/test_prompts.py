import shutil
from pathlib import Path

import pytest

from coach._resources import resource_path
from coach.errors import PromptError
from coach.prompts import load_prompts, render


@pytest.fixture
def prompt_dir(tmp_path: Path) -> Path:
    target = tmp_path / "prompts"
    shutil.copytree(resource_path("prompts"), target)
    return target


def test_shipped_prompts_load_in_manifest_order() -> None:
    book = load_prompts()
    assert book.manifest.ids == (
        "challenge",
        "empathize",
        "define",
        "ideate",
        "strategy",
        "evaluation",
    )
    assert [p.id for p in book.manifest.owned_by("strategist")] == [
        "empathize",
        "define",
        "ideate",
        "strategy",
    ]
    assert book.manifest.next_after("strategy").id == "evaluation"  # type: ignore[union-attr]
    assert book.manifest.next_after("evaluation") is None


def test_render_fills_variables_and_keeps_literal_braces() -> None:
    assert (
        render("Hi {name}, {{not a var}}", {"name": "Ada"}, file="f", key="k")
        == "Hi Ada, {not a var}"
    )


def test_render_refuses_missing_variable() -> None:
    with pytest.raises(PromptError) as err:
        render("Hi {name} from {city}", {"name": "Ada"}, file="f.yaml", key="greeting")
    assert str(err.value) == "f.yaml: greeting: missing variable(s): city"


def test_book_render_is_strict() -> None:
    book = load_prompts()
    with pytest.raises(PromptError, match="missing variable"):
        book.render("strategist", "instructions", user_name="Ada")


@pytest.mark.parametrize(
    ("file", "text", "key", "reason"),
    [
        ("design_coach.yaml", "instructions: [unclosed\n", "line 2", "invalid YAML"),
        ("design_coach.yaml", "- a list\n", "-", "expected a mapping"),
        ("design_coach.yaml", "greeting: hi\n", "instructions", "Field required"),
        (
            "design_coach.yaml",
            "instructions: x\ngreeting: y\ncolour: red\n",
            "colour",
            "Extra inputs",
        ),
        (
            "design_coach.yaml",
            "instructions: Hi {usr_name}\ngreeting: y\n",
            "instructions",
            "unknown variable(s) usr_name",
        ),
        (
            "design_strategist.yaml",
            "instructions: x {session_brief}\ngreeting: '{0}'\n",
            "greeting",
            "not a plain variable name",
        ),
        (
            "design_evaluator.yaml",
            "instructions: Review {design_challenge}\ngreeting: y\n",
            "instructions",
            "must use {session_brief}",
        ),
        ("phases.yaml", "version: 1\nphases: []\n", "phases", "at least 1 item"),
        (
            "phases.yaml",
            "version: 1\nphases:\n  - {id: a, name: A, owner: coach, instructions: x}\n",
            "phases",
            "no phase is owned by the strategist",
        ),
        (
            "phases.yaml",
            "version: 1\nphases:\n  - {id: Bad Id, name: A, owner: coach, instructions: x}\n",
            "phases.0.id",
            "String should match",
        ),
    ],
)
def test_broken_prompt_file_names_file_key_and_reason(
    prompt_dir: Path, file: str, text: str, key: str, reason: str
) -> None:
    (prompt_dir / file).write_text(text)
    with pytest.raises(PromptError) as err:
        load_prompts(prompt_dir)
    assert err.value.file.endswith(file)
    assert err.value.key == key
    assert reason in err.value.reason


def test_missing_prompt_file(prompt_dir: Path) -> None:
    (prompt_dir / "design_evaluator.yaml").unlink()
    with pytest.raises(PromptError, match="design_evaluator.yaml: -: cannot read file"):
        load_prompts(prompt_dir)
