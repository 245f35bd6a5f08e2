"""matplotlib is the optional extra ``plot``: imported only to draw, and a stability run
without it stops before any judging with an error naming the extra."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import judge.cli._stability as stability_cli
from judge.cli import main
from judge.io import InputError
from judge.stability import require_plots
from judge.stability._report import new_figure


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes ``import matplotlib...`` raise ModuleNotFoundError, as when not installed.
    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []

    def fake_open(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise AssertionError("no backend may be opened")

    monkeypatch.setattr(stability_cli, "open_backend", fake_open)
    return calls


def _dataset(path: Path) -> Path:
    line = {"id": "q1", "query": "查询", "retrieval_context": ["段落一", "段落二"]}
    path.write_text(json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def test_importing_the_stability_package_does_not_import_matplotlib() -> None:
    code = "import sys, judge.stability, judge.cli._stability; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_figure_without_matplotlib_is_an_error_naming_the_extra(no_matplotlib: None) -> None:
    with pytest.raises(InputError, match=r"judge\[plot\]"):
        new_figure((4.0, 3.0))
    with pytest.raises(InputError, match=r"judge\[plot\]"):
        require_plots()


def test_with_matplotlib_a_figure_is_drawn() -> None:
    pytest.importorskip("matplotlib")
    fig = new_figure((4.0, 3.0))
    assert list(fig.get_size_inches()) == [4.0, 3.0]
    require_plots()


def test_stability_without_matplotlib_exits_2_before_any_judging(
    tmp_path: Path, no_matplotlib: None, opened: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert main(["stability", str(_dataset(tmp_path / "d.jsonl")), "--runs", "2", "-o", str(out)]) == 2
    assert "pip install 'judge[plot]'" in capsys.readouterr().err
    assert opened == []
    assert not out.exists()


def test_nightly_without_matplotlib_exits_2_before_any_judging(
    tmp_path: Path, no_matplotlib: None, opened: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _dataset(tmp_path / "d.jsonl")
    config = tmp_path / "nightly.json"
    config.write_text(json.dumps({"dataset": "d.jsonl", "runs": 2}), encoding="utf-8")
    assert main(["nightly", str(config), "--quiet"]) == 2
    assert "pip install 'judge[plot]'" in capsys.readouterr().err
    assert opened == []
