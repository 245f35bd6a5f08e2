"""scripts/eval_recall.py: the reference text, ROC AUC and the report, by hand (no model)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from _helpers import load_script


def _script() -> ModuleType:
    return load_script("eval_recall")


def test_reference_of_rgb_answers() -> None:
    er = _script()
    assert er.reference_of(["12人"]) == "12人"
    assert er.reference_of([["1313851", "131万"], "东盟"]) == "1313851或131万、东盟"


def test_roc_auc_by_hand() -> None:
    er = _script()
    assert er.roc_auc([1.0, 0.5], [0.0, 0.5]) == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    assert er.roc_auc([], [0.1]) is None


def test_report_table(tmp_path: Path) -> None:
    er = _script()

    def side(recall: float | None, p: list[float | None], calls: int) -> dict[str, object]:
        return {
            "recall": recall,
            "claims": ["c"] * len(p),
            "max_p_yes": p,
            "error": None,
            "usage": {"calls": calls},
        }

    rows = [
        {"id": 0, "positive": side(1.0, [0.9], 2), "negative": side(0.0, [0.3], 3), "seconds": 10},
        {"id": 1, "positive": side(0.5, [0.8, 0.2], 3), "negative": side(0.5, [0.6, 0.1], 5), "seconds": 20},
    ]
    out = tmp_path / "r.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    table = er.report(out, 3).splitlines()
    # claims 1 and 2 -> 1.5 per query;
    # recall: positives 1.0, 0.5 vs negatives 0.0, 0.5 -> AUC (1 + 1 + 1 + 0.5) / 4 = 0.875;
    # soft: positives 0.9, 0.5 vs negatives 0.3, 0.35 -> AUC 1.0.
    assert table[2] == "| 2 | 1.500 | 0.750 | 0.250 | 1 / 1 / 0 | 0.875 | 1.000 | 0 | 13 | 30 |"
