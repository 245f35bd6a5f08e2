"""NIST's official TREC DL 2019 passage scores of three ICT runs, reproduced digit for digit.

``summary (trec_eval)`` is relevance level 1, ``summary (passages-eval)`` level 2
(``ndcg`` uses graded gains at both levels).
"""

from __future__ import annotations

import re

import pytest
from _helpers import SHARED_DATA

from judge.cli import main
from judge.metrics import parse_measure

DATA = SHARED_DATA / "trec_dl19"
SUMMARIES = DATA / "official_nist_summaries_ICT_runs.md"

pytestmark = pytest.mark.skipif(not SUMMARIES.exists(), reason="shared TREC DL 2019 data not present")


def _summaries() -> list[tuple[str, int, dict[str, str]]]:
    """(run name, relevance level, {measure: printed value}) for every summary block."""
    out: list[tuple[str, int, dict[str, str]]] = []
    run = ""
    level = 0
    values: dict[str, str] = {}
    for line in SUMMARIES.read_text().splitlines():
        if line.startswith("#### "):
            run = line[5:].strip()
        elif "summary (passages-eval)" in line:
            level, values = 2, {}
        elif "summary (trec_eval)" in line:
            level, values = 1, {}
        elif level and re.match(r"^\s+\w+\s+all\s+[0-9.]+$", line):
            measure, _, value = line.split()
            values[measure] = value
        elif level and line.strip() == "```" and values:
            out.append((run, level, values))
            level, values = 0, {}
    return out


SUMMARY_BLOCKS = _summaries() if SUMMARIES.exists() else []


def test_all_six_summaries_found() -> None:
    assert sorted((run, level) for run, level, _ in SUMMARY_BLOCKS) == [
        ("ICT-BERT2", 1), ("ICT-BERT2", 2), ("ICT-CKNRM_B", 1), ("ICT-CKNRM_B", 2),
        ("ICT-CKNRM_B50", 1), ("ICT-CKNRM_B50", 2),
    ]  # fmt: skip
    for _, _, values in SUMMARY_BLOCKS:
        assert {"map", "recip_rank", "P_10", "ndcg_cut_10", "recall_1000", "ndcg", "bpref"} <= set(values)


@pytest.mark.parametrize(
    ("run", "level", "expected"),
    SUMMARY_BLOCKS,
    ids=[f"{run}-l{level}" for run, level, _ in SUMMARY_BLOCKS],
)
def test_reproduces_nist_summary(
    run: str, level: int, expected: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    implemented = [m for m in expected if parse_measure(m).is_trec]
    assert implemented == list(expected)  # every measure in the summaries is implemented
    args = ["trec", "-l", str(level)]
    for measure in implemented:
        args += ["-m", measure]
    assert main([*args, str(DATA / "2019qrels-pass.txt"), str(DATA / f"{run}.run")]) == 0
    produced = {}
    for line in capsys.readouterr().out.splitlines():
        name, qid, value = line.split("\t")
        assert qid == "all"
        produced[name.strip()] = value
    assert produced == {m: expected[m] for m in implemented}
