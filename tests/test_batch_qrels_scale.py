"""judge score: a graded ground truth meets the yes/no verdicts on a stated scale
(``--qrels-level``, default 1), stated in every record and the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.backends import RuleBackend
from judge.batch import BatchOptions, score_dataset
from judge.judging import JudgeConfig
from judge.store import recover_output

ROW = {
    "id": "q1",
    "query": "小狗贫血的表现",
    "retrieval_context": [
        {"id": "a", "text": "牙龈颜色变淡 RELEVANT"},
        {"id": "b", "text": "精神萎靡 RELEVANT"},
        {"id": "c", "text": "猫粮的价格"},
    ],
    "qrels": {"a": 3, "b": 1, "c": 0},
}


@pytest.mark.parametrize(
    ("level", "counts", "rule"),
    [
        (1, {"tp": 2, "fp": 0, "fn": 0, "tn": 1}, "graded labels made binary: grade >= 1 is relevant"),
        (2, {"tp": 1, "fp": 1, "fn": 0, "tn": 1}, "graded labels made binary: grade >= 2 is relevant"),
    ],
)
async def test_agreement_at_the_stated_level(
    tmp_path: Path, level: int, counts: dict[str, int], rule: str
) -> None:
    inp = tmp_path / "d.jsonl"
    inp.write_text(json.dumps(ROW, ensure_ascii=False) + "\n", encoding="utf-8")
    opts = BatchOptions(progress="quiet", fsync=False, qrels_level=level)
    outcome = await score_dataset(
        inp, tmp_path / "o.jsonl", RuleBackend.keyword("RELEVANT"), JudgeConfig(), options=opts
    )
    (record,) = recover_output(tmp_path / "o.jsonl")
    agreement = record["ground_truth"]["agreement"]
    assert agreement == counts and record["ground_truth"]["agreement_rule"] == rule
    assert rule in outcome.summary["conventions"]["ground_truth"]["judge_agreement"]
    # the ground truth's own metrics stay on its own scale (trec_eval conventions, level 1)
    assert record["ground_truth"]["ap"] == 1.0
