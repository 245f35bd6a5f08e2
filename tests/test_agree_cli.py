"""``judge agree``: published LLMJudge numbers and hand-derived small cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers import SHARED_DATA

from judge.cli import main

DATA = SHARED_DATA / "llmjudge_dl23"


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(argv) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize(
    ("submission", "kappa", "alpha"),
    [
        # arXiv 2502.13908, Table 3 (Cohen's kappa and ordinal Krippendorff's alpha on 0-3).
        ("willia-umbrela1", 0.2863, 0.4918),
        ("NISTRetrieval-instruct0", 0.1877, 0.3819),
    ],
)
def test_reproduces_llmjudge_table3(
    capsys: pytest.CaptureFixture[str], submission: str, kappa: float, alpha: float
) -> None:
    human = DATA / "llmjudge_test_qrel_idx.txt"
    judged = DATA / "submissions" / f"{submission}.txt"
    if not human.is_file() or not judged.is_file():
        pytest.skip("LLMJudge data not available beside the repository")
    out = _json(capsys, ["agree", str(human), str(judged), "--json"])
    measures = out["measures"]
    assert isinstance(measures, dict)
    assert round(measures["kappa"], 4) == kappa
    assert round(measures["alpha_ordinal"], 4) == alpha
    assert out["pairs"] == {"both": 4423, "only_human": 0, "only_judge": 0, "queries_both": 25}


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    # Pairs both label: q1/d1 (0, 0), q1/d2 (1, 2), q1/d3 (2, 2). q2/d4 only human, q3/d9 only judge.
    human = _write(tmp_path / "human.qrels", ["q1 0 d1 0", "q1 0 d2 1", "q1 0 d3 2", "q2 0 d4 3"])
    judged = _write(tmp_path / "judge.qrels", ["q1 0 d3 2", "q1 0 d1 0", "q1 0 d2 2", "q3 0 d9 1"])
    return human, judged


def test_partial_overlap_by_hand(capsys: pytest.CaptureFixture[str], small: tuple[Path, Path]) -> None:
    human, judged = small
    out = _json(capsys, ["agree", str(human), str(judged), "-l", "2", "--json"])
    assert out["pairs"] == {"both": 3, "only_human": 1, "only_judge": 1, "queries_both": 1}
    m = out["measures"]
    assert isinstance(m, dict)
    # Same as tests/test_agree_metrics.py: A = [0, 1, 2], B = [0, 2, 2].
    assert m["kappa"] == pytest.approx(0.5)
    assert m["kappa_quadratic"] == pytest.approx(0.8)
    assert m["alpha_ordinal"] == pytest.approx(7 / 9)
    assert m["exact_agreement"] == pytest.approx(2 / 3)
    # Level 2: A -> [0, 0, 1], B -> [0, 1, 1]; po = 2/3, pe = 4/9, kappa = (2/9)/(5/9) = 0.4.
    assert m["binary_kappa"] == pytest.approx(0.4)
    assert out["confusion"] == {
        "rows": "human",
        "columns": "judge",
        "labels": [0, 1, 2],
        "matrix": [[1, 0, 0], [0, 0, 1], [0, 0, 1]],
    }
    assert out["undefined"] == {}
    conventions = out["conventions"]
    assert isinstance(conventions, dict)
    assert conventions["binary_relevant"] == "grade >= 2"


def test_text_report(capsys: pytest.CaptureFixture[str], small: tuple[Path, Path]) -> None:
    human, judged = small
    assert main(["agree", str(human), str(judged)]) == 0
    text = capsys.readouterr().out
    assert "pairs labelled by both: 3 (1 queries); only human: 1; only judge: 1" in text
    assert "Cohen's kappa (unweighted)" in text and "0.5000" in text
    assert "Krippendorff's alpha (ordinal)" in text and "0.7778" in text
    # -l defaults to 1: A -> [0, 1, 1], B -> [0, 1, 1]: perfect agreement.
    assert "binary kappa (relevant = grade >= 1)  1.0000" in text


def test_all_same_label_is_reported_undefined_not_nan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    human = _write(tmp_path / "h", ["q1 0 d1 1", "q1 0 d2 1"])
    judged = _write(tmp_path / "j", ["q1 0 d1 1", "q1 0 d2 1"])
    out = _json(capsys, ["agree", str(human), str(judged), "--json"])
    m = out["measures"]
    assert isinstance(m, dict)
    assert m["kappa"] is None and m["alpha_ordinal"] is None and m["binary_kappa"] is None
    assert m["exact_agreement"] == 1.0
    undefined = out["undefined"]
    assert isinstance(undefined, dict)
    assert "expected disagreement is zero" in undefined["kappa"]
    assert main(["agree", str(human), str(judged)]) == 0
    text = capsys.readouterr().out
    assert "undefined (kappa is undefined" in text
    assert "nan" not in text.lower()


def test_no_common_pair_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    human = _write(tmp_path / "h", ["q1 0 d1 1"])
    judged = _write(tmp_path / "j", ["q1 0 d2 1"])
    assert main(["agree", str(human), str(judged)]) == 2
    assert "no query-document pair is labelled in both" in capsys.readouterr().err


def test_malformed_qrels_names_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    human = _write(tmp_path / "h", ["q1 0 d1 1", "q1 0 d2 x"])
    judged = _write(tmp_path / "j", ["q1 0 d1 1"])
    assert main(["agree", str(human), str(judged)]) == 2
    err = capsys.readouterr().err
    assert str(human) in err and ":2" in err


def test_runs_kendall_and_spearman_by_hand(
    capsys: pytest.CaptureFixture[str], small: tuple[Path, Path], tmp_path: Path
) -> None:
    human, judged = small
    runs = []
    for name, first in (("r1", "d1"), ("r2", "d2"), ("r3", "d3")):
        others = [d for d in ("d1", "d2", "d3") if d != first]
        lines = [f"q1 Q0 {d} {i} {3 - i}.0 {name}" for i, d in enumerate([first, *others], start=1)]
        runs.append(str(_write(tmp_path / f"{name}.run", lines)))
    out = _json(capsys, ["agree", str(human), str(judged), "-l", "2", "--runs", *runs, "-m", "P_1", "--json"])
    ranking = out["ranking"]
    assert isinstance(ranking, dict)
    # Level 2: human relevant {d3}, judge relevant {d2, d3}. P_1 human (0, 0, 1), judge (0, 1, 1).
    assert [(r["human"], r["judge"]) for r in ranking["runs"]] == [(0.0, 0.0), (0.0, 1.0), (1.0, 1.0)]
    # tau-b: nc = 1, nd = 0, one tie in each list: 1 / sqrt(2 * 2) = 0.5.
    # rho: ranks (1.5, 1.5, 3) and (1, 2.5, 2.5): Pearson = 0.75 / 1.5 = 0.5.
    assert ranking["correlations"] == {
        "kendall_tau_b": pytest.approx(0.5),
        "spearman_rho": pytest.approx(0.5),
    }
    assert ranking["measure"] == "P_1"
    assert ranking["qrels_scope"] == "each qrels file as is"


def test_runs_need_two(capsys: pytest.CaptureFixture[str], small: tuple[Path, Path], tmp_path: Path) -> None:
    human, judged = small
    run = _write(tmp_path / "r.run", ["q1 Q0 d1 1 1.0 r"])
    assert main(["agree", str(human), str(judged), "--runs", str(run)]) == 2
    assert "at least two runs" in capsys.readouterr().err


def test_constant_system_scores_give_undefined_correlation(
    capsys: pytest.CaptureFixture[str], small: tuple[Path, Path], tmp_path: Path
) -> None:
    human, judged = small
    a = _write(tmp_path / "a.run", ["q1 Q0 d3 1 2.0 a", "q1 Q0 d1 2 1.0 a"])
    b = _write(tmp_path / "b.run", ["q1 Q0 d3 1 2.0 b", "q1 Q0 d2 2 1.0 b"])
    out = _json(capsys, ["agree", str(human), str(judged), "--runs", str(a), str(b), "-m", "P_1", "--json"])
    ranking = out["ranking"]
    assert isinstance(ranking, dict)
    assert ranking["correlations"] == {"kendall_tau_b": None, "spearman_rho": None}
    assert "constant" in ranking["undefined"]["kendall_tau_b"]


def test_overlap_only_scores_runs_on_common_pairs(
    capsys: pytest.CaptureFixture[str], small: tuple[Path, Path], tmp_path: Path
) -> None:
    human, judged = small
    a = _write(tmp_path / "a.run", ["q1 Q0 d3 1 2.0 a", "q2 Q0 d4 1 1.0 a"])
    b = _write(tmp_path / "b.run", ["q1 Q0 d1 1 2.0 b", "q2 Q0 d4 1 1.0 b"])
    argv = ["agree", str(human), str(judged), "-l", "2", "--runs", str(a), str(b), "-m", "P_1", "--json"]
    # As is: q2 is judged by the human file only. P_1 human: a (1 + 1)/2, b (0 + 1)/2; judge: q1 only.
    ranking = _json(capsys, argv)["ranking"]
    assert isinstance(ranking, dict)
    assert [(r["human"], r["judge"]) for r in ranking["runs"]] == [(1.0, 1.0), (0.5, 0.0)]
    # Overlap only: both sides score q1 alone.
    ranking = _json(capsys, [*argv, "--overlap-only"])["ranking"]
    assert isinstance(ranking, dict)
    assert [(r["human"], r["judge"]) for r in ranking["runs"]] == [(1.0, 1.0), (0.0, 0.0)]
    assert ranking["qrels_scope"] == "pairs both files label"
