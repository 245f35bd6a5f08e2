"""`judge compare`: paired tests of later runs against the first, seeded and Holm-corrected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers import SHARED_DATA

from judge.cli import main
from judge.metrics import holm

DL19 = SHARED_DATA / "trec_dl19"

QRELS = "".join(f"q{q} 0 d{d} {1 if d == q % 3 else 0}\n" for q in range(6) for d in range(3))


def _run(path: Path, first: dict[int, int]) -> Path:
    """Each query ranks document first[q] on top, then the others."""
    lines = []
    for q in range(6):
        order = [first[q]] + [d for d in range(3) if d != first[q]]
        lines += [f"q{q} Q0 d{d} {r + 1} {3 - r} tag\n" for r, d in enumerate(order)]
    path.write_text("".join(lines))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    qrels = tmp_path / "qrels"
    qrels.write_text(QRELS)
    worst = _run(tmp_path / "a.run", {q: (q % 3 + 1) % 3 for q in range(6)})  # relevant never first
    best = _run(tmp_path / "b.run", {q: q % 3 for q in range(6)})  # relevant always first
    mixed = _run(tmp_path / "c.run", {q: q % 3 if q < 3 else (q % 3 + 1) % 3 for q in range(6)})
    return qrels, worst, best, mixed


def _compare(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["compare", "--json", *args]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def test_compare_values_and_holm(files: tuple[Path, ...], capsys: pytest.CaptureFixture[str]) -> None:
    qrels, worst, best, mixed = (str(p) for p in files)
    out = _compare(
        ["-m", "P@1", "-m", "MRR", "--seed", "3", "--resamples", "2000", qrels, worst, best, mixed], capsys
    )
    rows = out["comparisons"]
    assert isinstance(rows, list) and len(rows) == 4  # 2 runs x 2 measures
    by_key = {(r["system"], r["measure"]): r for r in rows}
    p1 = by_key[("b.run", "P_1")]
    assert (p1["mean_baseline"], p1["mean_system"], p1["difference"], p1["n"]) == (0.0, 1.0, 1.0, 6)
    # all six differences are +1: only the all-plus / all-minus flips are as extreme (2/64)
    assert p1["p_permutation"] == pytest.approx(2 / 64, abs=0.012)
    assert p1["ci_low"] == p1["ci_high"] == 1.0
    half = by_key[("c.run", "P_1")]
    assert half["difference"] == pytest.approx(0.5)
    expected_holm = holm([r["p_permutation"] for r in rows])
    assert [r["p_permutation_holm"] for r in rows] == pytest.approx(list(expected_holm))
    assert out["conventions"]["baseline"] == "a.run"
    assert "Holm over 4 comparisons" in out["conventions"]["multiple_comparisons"]


def test_same_seed_same_p_values(files: tuple[Path, ...], capsys: pytest.CaptureFixture[str]) -> None:
    qrels, worst, _, mixed = (str(p) for p in files)
    args = ["--seed", "11", "--resamples", "500", qrels, worst, mixed]
    assert _compare(args, capsys) == _compare(args, capsys)


@pytest.mark.skipif(not DL19.is_dir(), reason="shared TREC DL 2019 data not present")
def test_dl19_runs_means_match_trec(capsys: pytest.CaptureFixture[str]) -> None:
    qrels = str(DL19 / "2019qrels-pass.txt")
    runs = [str(DL19 / f"{name}.run") for name in ("ICT-BERT2", "ICT-CKNRM_B", "ICT-CKNRM_B50")]
    out = _compare(["-m", "map", "-m", "ndcg_cut_10", "--resamples", "1000", qrels, *runs], capsys)
    rows = {(r["system"], r["measure"]): r for r in out["comparisons"]}
    assert f"{rows[('ICT-CKNRM_B.run', 'map')]['mean_baseline']:.4f}" == "0.1941"
    assert f"{rows[('ICT-CKNRM_B.run', 'map')]['mean_system']:.4f}" == "0.1897"
    assert f"{rows[('ICT-CKNRM_B50.run', 'ndcg_cut_10')]['mean_system']:.4f}" == "0.6014"
    assert all(r["n"] == 43 for r in rows.values())
    assert all(r["p_permutation"] <= r["p_permutation_holm"] <= 1 for r in rows.values())


def test_text_output(files: tuple[Path, ...], capsys: pytest.CaptureFixture[str]) -> None:
    qrels, worst, best, _ = (str(p) for p in files)
    assert main(["compare", "-m", "P@1", "--resamples", "200", qrels, worst, best]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# baseline a.run; seed 0; 200 resamples")
    assert lines[1].split()[:3] == ["system", "measure", "n"]
    assert lines[2].split()[:6] == ["b.run", "P_1", "6", "0.0000", "1.0000", "1.0000"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["-m", "num_q"], "num_q"), (["-m", "relstring"], "relstring"), (["--resamples", "0"], "--resamples")],
)
def test_bad_compare_input(
    files: tuple[Path, ...], capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    qrels, worst, best, _ = (str(p) for p in files)
    assert main(["compare", *extra, qrels, worst, best]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_compare_needs_two_runs(files: tuple[Path, ...], capsys: pytest.CaptureFixture[str]) -> None:
    qrels, worst, _, _ = (str(p) for p in files)
    assert main(["compare", qrels, worst]) == 2
    assert "at least two runs" in capsys.readouterr().err
