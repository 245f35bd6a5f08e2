"""The README's Python examples run as written, and print what the README says they print."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def run_block(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
    return out.getvalue()


def test_the_readme_has_the_three_python_examples() -> None:
    blocks = python_blocks()
    assert len(blocks) == 3
    assert "ScriptedBackend" in blocks[1]
    assert "RelevancyJudge" in blocks[2]


def test_scripted_example_prints_the_readme_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = python_blocks()[1]
    expected = re.search(r"^# (score=.*)$", code, flags=re.M)
    if expected is None:
        raise AssertionError("the scripted example lost its expected-output comment")
    printed = run_block(code, tmp_path, monkeypatch)
    assert expected.group(1) in printed.splitlines()


def test_deepeval_example_runs_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_block(python_blocks()[2], tmp_path, monkeypatch)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.local_model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the [local] extra")
def test_default_backend_example_runs_with_the_embedded_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("DASHSCOPE_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    printed = run_block(python_blocks()[0], tmp_path, monkeypatch).splitlines()
    # Two verdict lines: "1 yes 3 <reason>"; the relevant passage first, the irrelevant second.
    first, second = printed[0].split(maxsplit=3), printed[1].split(maxsplit=3)
    assert first[:2] == ["1", "yes"]
    assert second[:2] == ["2", "no"]
