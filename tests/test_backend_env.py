"""$JUDGE_BACKEND names the default judge: after an explicit spec or --base-url, before the keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from judge.backends import (
    ConfigurationError,
    QrelsBackend,
    ScriptedBackend,
    describe_backend,
    resolve_backend,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_QRELS = ROOT / "datasets" / "sample.qrels"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DASHSCOPE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "JUDGE_BACKEND"):
        monkeypatch.delenv(name, raising=False)


def test_env_spec_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_BACKEND", f"qrels:{SAMPLE_QRELS}")
    backend = resolve_backend()
    assert isinstance(backend, QrelsBackend)
    assert backend.path == SAMPLE_QRELS and backend.level == 1
    assert describe_backend(backend).endswith("(JUDGE_BACKEND set)")


def test_env_spec_wins_over_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_BACKEND", f"qrels:{SAMPLE_QRELS}:2")
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    backend = resolve_backend()
    assert isinstance(backend, QrelsBackend) and backend.level == 2


def test_explicit_spec_object_and_base_url_win_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_BACKEND", "qrels:/no/such/file.qrels")
    scripted = ScriptedBackend(["{}"])
    assert resolve_backend(scripted) is scripted
    assert isinstance(resolve_backend(f"qrels:{SAMPLE_QRELS}"), QrelsBackend)
    assert resolve_backend(base_url="http://127.0.0.1:9/v1").name.startswith("openai:")


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_env_is_unset(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("JUDGE_BACKEND", value)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert describe_backend(resolve_backend()).endswith("(OPENAI_BASE_URL set)")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("nope:x", "'nope:x' is unknown"),
        ("qrels:/no/such/file.qrels", "does not exist"),
        ("qrels:", "needs a file"),
    ],
)
def test_bad_env_spec_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str, says: str) -> None:
    monkeypatch.setenv("JUDGE_BACKEND", value)
    with pytest.raises(ConfigurationError) as err:
        resolve_backend()
    assert str(err.value).startswith("$JUDGE_BACKEND: ") and says in str(err.value)
    assert err.value.field is None  # the CLI must not blame --backend, which was not given


def test_cli_scores_with_the_env_judge(tmp_path: Path) -> None:
    """`judge score` with no --backend judges the sample from its labels: every passage of
    grade >= 1 is "yes", so the judge's verdicts equal the sample's ground truth."""
    env = {k: v for k, v in os.environ.items() if k not in {"DASHSCOPE_API_KEY", "OPENAI_BASE_URL"}}
    env.update(
        JUDGE_BACKEND=f"qrels:{SAMPLE_QRELS}",
        JUDGE_HOME=str(tmp_path / "home"),
        PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}",
    )
    out = tmp_path / "sample.judged.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "judge", "score", str(ROOT / "datasets" / "sample.jsonl"), "-o", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(JUDGE_BACKEND set)" in proc.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 14
    grades = {
        (qid, doc): int(grade)
        for qid, _, doc, grade in (
            line.split() for line in SAMPLE_QRELS.read_text(encoding="utf-8").splitlines()
        )
    }
    for record in records:
        for verdict in record["verdicts"]:
            expected = "yes" if grades[(record["id"], verdict["passage_id"])] >= 1 else "no"
            assert verdict["verdict"] == expected
