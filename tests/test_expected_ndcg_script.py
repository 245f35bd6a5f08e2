"""scripts/expected_ndcg_vs_truth.py: correlations of hard / expected / expected-gain NDCG
with the ground truth, on a judged output written here with a stand-in judge."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_script

from judge.backends import RuleBackend
from judge.batch import BatchOptions, score_dataset
from judge.judging import JudgeConfig

ROOT = Path(__file__).resolve().parent.parent


def _script() -> Any:
    return load_script("expected_ndcg_vs_truth")


def test_script_reports_the_three_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    judged = tmp_path / "sample.judged.jsonl"
    backend = RuleBackend.keyword(["布洛芬", "贫血", "高铁"], p_match=0.7)
    options = BatchOptions(progress="quiet", fsync=False)
    asyncio.run(
        score_dataset(
            ROOT / "datasets" / "sample.jsonl",
            judged,
            backend,
            JudgeConfig(probability=True),
            options=options,
        )
    )
    script = _script()
    result = script.report(judged, [5, 10])
    five = result["cutoffs"]["5"]
    assert five["queries"] == 14
    assert set(five) >= {"hard", "expected", "expected_gain", "truth_mean"}
    assert -1.0 <= five["expected"]["pearson"] <= 1.0 and five["expected"]["mae"] >= 0
    assert five["expected_gain"]["pearson"] is None  # constant: no correlation
    # every P(yes) alike (0.7 or 0.3 from this judge): the expected-gain NDCG calls every
    # list near perfect, the expectation does not
    assert five["expected_gain"]["mean"] > five["expected"]["mean"]
    assert script.main([str(judged), "-k", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cutoffs"]["5"] == five
