"""`judge trec` reproduces trec_eval's own test outputs to every printed digit.

The command lines come from trec_eval's ``quicktest_commands.txt``; every line of every
expected output must be printed identically, in the same order, and nothing else: the set
of measure names printed equals the expected file's.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import pytest
from _helpers import SHARED_DATA

from judge.cli import main
from judge.metrics import parse_measure

DATA = SHARED_DATA / "trec_eval"

# The measures every trec_eval-compatible evaluation here must implement.
CORE = {
    "map", "Rprec", "recip_rank", "P", "recall", "ndcg", "ndcg_cut", "success",
    "num_q", "num_ret", "num_rel", "num_rel_ret",
}  # fmt: skip
# Expected files the brief requires us to reproduce.
REQUIRED_FILES = {
    "out.test", "out.test.a", "out.test.aq", "out.test.aqc", "out.test.aqcM", "out.test.aql",
    "out.test.meas_params",
}  # fmt: skip
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="shared trec_eval data not present")


def _commands() -> list[tuple[list[str], str]]:
    """(arguments for `judge trec`, expected-output file name) of each usable quicktest line."""
    out: list[tuple[list[str], str]] = []
    if not DATA.is_dir():
        return out
    for line in (DATA / "quicktest_commands.txt").read_text().splitlines():
        if "./trec_eval" not in line or "| diff - " not in line:
            continue
        command, expected = line.split("| diff - ")
        words = shlex.split(command)[1:]
        if any(w.startswith(("-R", "-Z")) for w in words):
            continue  # preference / z-score formats: not trec_results + qrels
        args = [str(DATA / w[len("test/") :]) if w.startswith("test/") else w for w in words]
        expected_name = expected.strip()[len("test/") :]
        files = [a for a in args if a.startswith(str(DATA))]
        if not (DATA / expected_name).exists() or not all(Path(f).exists() for f in files):
            continue
        out.append((args, expected_name))
    return out


COMMANDS = _commands()


def _measure_name(key: str) -> str:
    """Family of a printed trec_eval key, e.g. 'P_5' -> 'P', 'utility_2,-1,0,0' -> 'utility'."""
    for family in ("relstring", "utility", "11pt_avg"):  # printed with their parameter text
        if key == family or key.startswith(family + "_"):
            return family
    if key.startswith("ndcg_") and "=" in key:
        return "ndcg"
    return parse_measure(key).name


def _keys(lines: list[str]) -> list[str]:
    """The measure key of each output line (``P_5``, ``ndcg_cut_10`` ...)."""
    return [line.split("\t")[0].strip() for line in lines if line.strip()]


def test_quicktest_covers_the_required_outputs() -> None:
    assert {name for _, name in COMMANDS} == REQUIRED_FILES


# A ranked list (grades in rank order, -1 = not in the qrels) and every qrels grade of its
# query, with each core measure's value derived by hand (relevant = grade >= 1; R = 3).
_GRADES = [1, 0, 2, -1]
_QRELS = [1, 0, 2, 1]
_BY_HAND = {
    "map": (1 / 1 + 2 / 3) / 3,
    "Rprec": 2 / 3,
    "recip_rank": 1.0,
    "P_10": 2 / 10,
    "recall_10": 2 / 3,
    "success_10": 1.0,
    # DCG = 1/log2(2) + 2/log2(4) = 2; IDCG of [2, 1, 1] = 2 + 1/log2(3) + 1/log2(4)
    "ndcg": 2 / (2 + 1 / math.log2(3) + 0.5),
    "ndcg_cut_10": 2 / (2 + 1 / math.log2(3) + 0.5),
    "num_ret": 4,
    "num_rel": 3,
    "num_rel_ret": 2,
}


def test_core_measures_are_implemented() -> None:
    """Every core family is exercised by the reference outputs and computes the value
    derived by hand on a small query."""
    expected: set[str] = set()
    for _, name in COMMANDS:
        expected |= {_measure_name(k) for k in _keys((DATA / name).read_text().splitlines())}
    assert expected >= CORE, f"the reference outputs do not exercise {sorted(CORE - expected)}"
    assert {parse_measure(k).name for k in _BY_HAND} | {"num_q"} == CORE
    for key, value in _BY_HAND.items():
        assert parse_measure(key).compute(_GRADES, qrels=_QRELS) == pytest.approx(value, abs=1e-12), key


def test_core_measures_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["trec", "-m", "all_trec", str(DATA / "qrels.test"), str(DATA / "results.test")]
    assert main(args) == 0
    printed = {_measure_name(k) for k in _keys(capsys.readouterr().out.splitlines())}
    assert printed >= CORE, f"not printed: {sorted(CORE - printed)}"


@pytest.mark.parametrize(("args", "expected_name"), COMMANDS, ids=[name for _, name in COMMANDS])
def test_reproduces_trec_eval_output(
    args: list[str], expected_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trec", *args]) == 0
    produced = capsys.readouterr().out.splitlines()
    expected = (DATA / expected_name).read_text().splitlines()
    # the same measures, no more and no fewer ...
    assert set(_keys(produced)) == set(_keys(expected))
    # ... and every line to the printed digit, in trec_eval's order
    missing = [line for line in expected if line not in produced]
    assert not missing, f"{len(missing)} expected lines not produced, e.g. {missing[:3]}"
    assert produced == expected


def test_default_measures_are_trec_eval_official(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trec", str(DATA / "qrels.test"), str(DATA / "results.test")]) == 0
    assert capsys.readouterr().out == (DATA / "out.test").read_text()
