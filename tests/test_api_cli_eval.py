"""``judge eval``: a one-off check from the shell, with a fake backend resolved by spec."""

from __future__ import annotations

import json
from typing import Any

import pytest

import judge.backends._resolve
from judge.backends import PermanentError, RuleBackend, ScriptedBackend
from judge.cli import main


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Make every backend spec resolve to the fake in ``holder["backend"]``."""
    holder: dict[str, Any] = {
        "backend": RuleBackend.keyword("RELEVANT", reason_yes="提到了[bold]症状[/bold]"),
        "specs": [],
    }

    def resolve(spec: Any = None, **kwargs: Any) -> Any:
        holder["specs"].append((spec, kwargs))
        return holder["backend"]

    monkeypatch.setattr(judge.backends._resolve, "resolve_backend", resolve)  # what make_backend calls
    return holder


ARGS = [
    "eval",
    "--query",
    "小狗贫血的表现",
    "-c",
    "牙龈苍白 RELEVANT",
    "-c",
    "狗粮保质期",
    "-c",
    "精神差 RELEVANT",
]


def test_table_output(fake: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--backend", "qwen:qwen-plus", "--no-summary"]) == 0
    out, err = capsys.readouterr()
    assert "judge: using judge fake:keyword" in err
    assert fake["specs"][0][0] == "qwen:qwen-plus"
    assert "小狗贫血的表现" in out
    assert "提到了[bold]症状[/bold]" in out  # reasons are printed literally, not as markup
    assert "score 0.6667" in out and "AP 0.8333" in out and "unjudged 0" in out
    assert "calls 3" in out


def test_json_output(fake: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--json", "-k", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [v["verdict"] for v in data["verdicts"]] == ["yes", "no", "yes"]
    assert data["score"] == pytest.approx(2 / 3)
    assert data["ap"] == pytest.approx((1 + 2 / 3) / 2)
    assert set(data["ndcg"]) == {"3"}
    assert data["usage"]["calls"] == 4  # three verdicts + the summary
    assert fake["backend"].closed is True  # the CLI closes the backend it resolved


def test_graded_probability_table(fake: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--mode", "graded", "--probability", "--no-summary"]) == 0
    out = capsys.readouterr().out
    assert "P(yes)" in out and "E(grade)" in out
    # RuleBackend puts 0.9 on the chosen grade (3 or 0) and 0.1/3 on each other grade:
    # P(grade >= 2) = 0.9 + 0.0333 = 0.9333; E(grade) = 3 * 0.9 + (0 + 1 + 2) * 0.0333 = 2.8.
    assert "0.9333" in out and "2.80" in out


def test_bad_input_and_permanent_backend_error(
    fake: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "--query", "  ", "-c", "x"]) == 2
    assert "field '--query'" in capsys.readouterr().err
    assert main(["eval", "--query", "q", "-c", "x", "-k", "0"]) == 2
    fake["backend"] = ScriptedBackend([PermanentError("401 invalid api key")])
    assert main(["eval", "--query", "q", "-c", "x", "--no-summary"]) == 3
    assert "401 invalid api key" in capsys.readouterr().err
