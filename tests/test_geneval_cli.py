"""`judge gen-eval` from the command line: JSON and text output, --map, --normalization, and
broken lines (file:line and field on stderr, exit 2, nothing printed on stdout)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from judge.cli import main

LINES = [
    {"id": "en", "prediction": "I think it is Paris, France", "golden_answers": ["Paris"]},
    {"prediction": "答案是北京。", "golden_answers": ["上海", "北京"]},
]


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "a.jsonl", LINES)
    assert main(["gen-eval", str(src), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"all", "per_item"}
    first, second = out["per_item"]
    assert (first["id"], first["line"]) == ("en", 1)
    assert (second["id"], second["line"]) == ("#2", 2)
    assert first["f1"] == pytest.approx(2 / 7)
    assert second["f1"] == pytest.approx(2 * 0.4 / 1.4)
    assert out["all"]["acc"] == 1.0
    assert out["all"]["em"] == 0.0
    assert out["all"]["f1"] == pytest.approx((2 / 7 + 2 * 0.4 / 1.4) / 2)
    assert list(out["all"]) == ["em", "acc", "coverem", "f1", "rouge-1", "rouge-2", "rouge-l"]


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "a.jsonl", LINES)
    assert main(["gen-eval", str(src)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"# {src}: 2 items; normalization squad")
    assert lines[1:3] == ["em       0.0000", "acc      1.0000"]
    assert len(lines) == 8


def test_map_and_ultrarag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "m.jsonl", [{"qid": 7, "output": "e-mail", "answers": ["email"]}])
    args = ["gen-eval", str(src), "--json", "--map", "prediction=output", "--map", "golden_answers=answers"]
    assert main([*args, "--map", "id=qid"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["per_item"][0]["id"] == "7"
    assert out["per_item"][0]["em"] == 1.0
    assert main([*args, "--normalization", "ultrarag"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["normalization"] == "ultrarag"
    assert out["per_item"][0]["em"] == 0.0


def test_gzip_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(LINES[0]) + "\n")
    assert main(["gen-eval", str(src), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["all"]["acc"] == 1.0


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ({"golden_answers": ["x"]}, "prediction", "missing"),
        ({"prediction": 3, "golden_answers": ["x"]}, "prediction", "must be a string"),
        ({"prediction": "x"}, "golden_answers", "missing"),
        ({"prediction": "x", "golden_answers": "x"}, "golden_answers", "must be a list"),
        ({"prediction": "x", "golden_answers": []}, "golden_answers", "empty list"),
        ({"prediction": "x", "golden_answers": ["a", 2]}, "golden_answers[1]", "must be a string"),
        ({"id": [1], "prediction": "x", "golden_answers": ["a"]}, "id", "string or an integer"),
    ],
)
def test_broken_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: dict[str, object], field: str, message: str
) -> None:
    src = _write(tmp_path / "b.jsonl", [LINES[0], row])
    assert main(["gen-eval", str(src)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{src}:2: field '{field}': " in captured.err
    assert message in captured.err


def test_every_broken_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "c.jsonl"
    src.write_text('{"prediction": "a", "golden_answers": ["a"]}\nnot json\n\n[1]\n', encoding="utf-8")
    assert main(["gen-eval", str(src), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{src}:2: not valid JSON" in captured.err
    assert f"{src}:4: expected a JSON object" in captured.err
    assert "2 broken line(s)" in captured.err


def test_bad_map_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "a.jsonl", LINES)
    assert main(["gen-eval", str(src), "--map", "query=q"]) == 2
    assert "unknown field 'query'" in capsys.readouterr().err
    assert main(["gen-eval", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    assert main(["gen-eval", str(empty)]) == 2
    assert "empty file" in capsys.readouterr().err
