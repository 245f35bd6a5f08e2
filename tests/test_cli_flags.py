"""Every command reports a bad flag value by its flag name, exit 2, before any judging.

Config objects (CallPolicy, JudgeConfig, backend resolution) raise ConfigError with a
``field``; the CLI maps the field to the flag with one table (FLAG_FOR_FIELD), never from
the message text. Here the message texts are checked not to be needed: each error names
the flag and carries the config's own explanation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.backends import ConfigError
from judge.cli import main
from judge.cli._flags import FLAG_FOR_FIELD, config_error

BAD_CALL_FLAGS = [
    (["--concurrency", "0"], "--concurrency", "must be an integer >= 1"),
    (["--timeout", "-1"], "--timeout", "must be a number > 0"),
    (["--max-retries", "-1"], "--max-retries", "must be an integer >= 0"),
    (["--rpm", "0"], "--rpm", "must be a number > 0"),
    (["--tpm", "-2"], "--tpm", "must be a number > 0"),
]
BAD_JUDGE_FLAGS = [
    (["--p-yes-threshold", "1.5"], "--p-yes-threshold", "must be in [0, 1]"),
    (["--backend", "nonsense:model"], "--backend", "is unknown: expected one of"),
]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps(
            {"id": "q1", "query": "小狗贫血", "retrieval_context": ["牙龈苍白", "狗粮"]}, ensure_ascii=False
        )
        + "\n",
        encoding="utf-8",
    )
    return path


def _check(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, says: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"field '{flag}'" in err, err
    assert says in err, err


@pytest.mark.parametrize(("extra", "flag", "says"), BAD_CALL_FLAGS + BAD_JUDGE_FLAGS)
def test_score_names_the_flag(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], flag: str, says: str
) -> None:
    out = tmp_path / "out.jsonl"
    _check(capsys, ["score", str(dataset), "-o", str(out), "--quiet", *extra], flag, says)
    assert not out.exists()  # nothing judged


@pytest.mark.parametrize(("extra", "flag", "says"), BAD_CALL_FLAGS + BAD_JUDGE_FLAGS)
def test_eval_names_the_flag(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str, says: str
) -> None:
    _check(capsys, ["eval", "--query", "q", "-c", "x", *extra], flag, says)


@pytest.mark.parametrize(
    ("extra", "flag", "says"),
    [
        *BAD_CALL_FLAGS,
        *BAD_JUDGE_FLAGS,
        (["--samples", "0"], "--samples", "must be >= 1"),
        (["--temperature", "-0.5"], "--temperature", "must be >= 0"),
        (["--samples", "3", "--probability"], "--samples", "cannot be combined with probability mode"),
    ],
)
def test_stability_names_the_flag(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], flag: str, says: str
) -> None:
    _check(capsys, ["stability", str(dataset), "-o", str(tmp_path / "r"), "--quiet", *extra], flag, says)


def test_the_flag_comes_from_the_field_not_the_message() -> None:
    err = config_error(ConfigError("anything at all", field="timeout_s"))
    assert (err.field, err.message) == ("--timeout", "anything at all")
    assert config_error(ConfigError("x", field="timeout_s"), {"timeout_s": "timeout_s"}).field == "timeout_s"
    assert config_error(ConfigError("x", field="unmapped")).field == "unmapped"
    assert config_error(ConfigError("x")).field is None
    # every CallPolicy and JudgeConfig field a flag sets is in the table
    for field in ("concurrency", "timeout_s", "max_retries", "rpm", "tpm", "p_yes_threshold", "samples"):
        assert FLAG_FOR_FIELD[field].startswith("--")
