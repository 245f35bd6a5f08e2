"""The batch summary says what its figures mean where it prints them (its conventions)."""

from __future__ import annotations

from judge.batch._records import summarize_records


def _record(qid: str, p_yes: list[float]) -> dict[str, object]:
    verdicts = [
        {"index": i, "passage_id": f"{qid}-{i}", "verdict": "yes" if p >= 0.575 else "no", "p_yes": p}
        for i, p in enumerate(p_yes)
    ]
    return {
        "id": qid,
        "mode": "binary",
        "n_passages": len(verdicts),
        "unjudged": 0,
        "score": 0.5,
        "ap": 1.0,
        "ndcg": {"5": 1.0},
        "verdicts": verdicts,
        "expected": {"map": 0.75, "ndcg": {"5": 0.8}},
    }


def test_summary_conventions_explain_the_expected_figures_beside_the_hard_ones() -> None:
    summary = summarize_records([_record("q1", [0.9, 0.2])], (5,))
    assert summary["judge"]["expected"]["map"] == 0.75
    line = summary["conventions"]["judge"]["expected"]
    assert "expectation when every judged passage is relevant with its P(yes)" in line
    assert "threshold" in line and "ground_truth" in line
