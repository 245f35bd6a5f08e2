"""`judge trec` from the command line: JSON output and bad input (exit 2, file:line, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.cli import main

QRELS = "q1 0 a 2\nq1 0 b 0\nq1 0 c 1\nq2 0 x 1\n"
RUN = "q1 Q0 a 1 3.0 sys\nq1 Q0 b 2 2.0 sys\nq1 Q0 c 3 1.0 sys\nq2 Q0 y 1 1.0 sys\n"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    qrels = tmp_path / "qrels.txt"
    run = tmp_path / "run.txt"
    qrels.write_text(QRELS)
    run.write_text(RUN)
    return qrels, run


def test_text_output_layout(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    qrels, run = files
    assert main(["trec", "-q", "-m", "map", "-m", "num_rel", str(qrels), str(run)]) == 0
    assert capsys.readouterr().out == (
        "num_rel               \tq1\t2\n"
        "map                   \tq1\t0.8333\n"
        "num_rel               \tq2\t1\n"
        "map                   \tq2\t0.0000\n"
        "num_rel               \tall\t3\n"
        "map                   \tall\t0.4167\n"
    )


def test_json_output(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    qrels, run = files
    assert main(["trec", "--json", "-m", "map", "-m", "nDCG@10", "-m", "runid", str(qrels), str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"all", "conventions", "measures"}
    assert out["all"]["runid"] == "sys"
    assert out["all"]["map"] == pytest.approx((1 + 2 / 3) / 2 / 2)
    assert set(out["all"]) == {"runid", "map", "ndcg_cut_10"}
    assert out["conventions"]["relevance_level"] == 1
    assert out["conventions"]["ties"].startswith("score descending")
    assert out["measures"]["ndcg_cut_10"]["gain"] == "linear"
    assert main(["trec", "--json", "-q", "-l", "2", "-m", "P@1", str(qrels), str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["per_query"] == {"q1": {"P_1": 1.0}, "q2": {"P_1": 0.0}}
    assert out["conventions"]["relevance_level"] == 2


def test_complete_and_max_docs(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    qrels, run = files
    qrels.write_text(QRELS + "q3 0 z 1\n")
    assert (
        main(["trec", "-c", "-M", "1", "-m", "num_q", "-m", "num_ret", "-m", "P@2", str(qrels), str(run)])
        == 0
    )
    assert capsys.readouterr().out == (
        "num_q                 \tall\t3\n"
        "num_ret               \tall\t2\n"
        "P_2                   \tall\t0.1667\n"
    )


def _bad(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    qrels: str = QRELS,
    run: str = RUN,
    extra: tuple[str, ...] = (),
) -> str:
    (tmp_path / "qrels.txt").write_text(qrels)
    (tmp_path / "run.txt").write_text(run)
    code = main(["trec", *extra, str(tmp_path / "qrels.txt"), str(tmp_path / "run.txt")])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("which", "content", "where", "field"),
    [
        ("run", RUN + "q2 Q0 z 2 0.5\n", ":5:", "tag"),
        ("run", "q1 Q0 a\n", ":1:", "rank"),
        ("qrels", QRELS + "q9 0 k\n", ":5:", "grade"),
        ("qrels", "q1 0 a 1 extra\n", ":1:", None),
        ("run", RUN.replace("2.0", "two"), ":2:", "score"),
        ("run", RUN.replace("2.0", "nan"), ":2:", "score"),
        ("run", RUN.replace("2.0", "2_0"), ":2:", "score"),
        ("qrels", QRELS.replace("q1 0 b 0", "q1 0 b rel"), ":2:", "grade"),
        ("qrels", QRELS.replace("q1 0 b 0", "q1 0 b 1.0"), ":2:", "grade"),
        ("run", "", ":1:", None),
        ("qrels", "# only a comment\n\n", ":1:", None),
        ("run", RUN + "q1 Q0 a 9 0.1 sys\n", ":5:", "docno"),
        ("qrels", QRELS + "q1 0 a 0\n", ":5:", "docno"),
    ],
)
def test_bad_input_exits_2_naming_file_and_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    which: str,
    content: str,
    where: str,
    field: str | None,
) -> None:
    err = _bad(tmp_path, capsys, **{which: content})
    assert f"{tmp_path / (which + '.txt')}{where}" in err
    if field is not None:
        assert f"field '{field}'" in err


def test_duplicate_docno_names_both_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, capsys, run=RUN + "q1 Q0 b 9 0.1 sys\n")
    assert "run.txt:5:" in err and "duplicate docno 'b'" in err and "first at line 2" in err


def test_empty_file_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, capsys, run="\n\n")
    assert "run.txt:1:" in err and "empty file" in err


def test_no_common_query(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, capsys, run="other Q0 a 1 1.0 sys\n")
    assert "run.txt" in err and "no query has both" in err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("-m", "nonsense"), "nonsense"),
        (("-m", "P@0"), "P@0"),
        (("-M", "0"), "-M"),
        (("-l", "-1"), "relevance level"),
    ],
)
def test_bad_options_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], message: str
) -> None:
    assert message in _bad(tmp_path, capsys, extra=options)


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.txt").write_text(RUN)
    assert main(["trec", str(tmp_path / "nope.txt"), str(tmp_path / "run.txt")]) == 2
    err = capsys.readouterr().err
    assert "nope.txt" in err and "Traceback" not in err
