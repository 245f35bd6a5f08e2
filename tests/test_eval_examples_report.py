"""scripts/eval_examples.py's report: kappa at a threshold tuned on the other queries."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _helpers import load_script

ee = load_script("eval_examples")


def _rows(spec: dict[str, list[tuple[int, float | None]]]) -> list[dict[str, Any]]:
    return [
        {"query_id": q, "relevant": rel, "p_yes": p, "verdict": "yes" if (p or 0) >= 0.5 else "no"}
        for q, pairs in spec.items()
        for rel, p in pairs
    ]


ROWS = _rows(
    {
        "q1": [(1, 0.9), (0, 0.3)],
        "q2": [(1, 0.8), (0, 0.4)],
        "q3": [(1, 0.35), (0, 0.2)],
    }
)


def test_each_query_is_decided_at_the_threshold_tuned_on_the_others() -> None:
    # eval_judge.tune_threshold: midpoints between the scores, ties to the one nearest 0.5.
    # Without q1 (q2, q3): 0.275 and 0.6 both give kappa 0.5 (3 of 4 agree, chance 0.5): 0.6.
    # Without q2: only 0.325 is perfect. Without q3: 0.6 is perfect.
    tune = ee.EJ.tune_threshold
    for left_out, t in (("q1", 0.6), ("q2", 0.325), ("q3", 0.6)):
        rest = [r for r in ROWS if r["query_id"] != left_out]
        rel = np.array([r["relevant"] for r in rest]) == 1
        assert tune(rel, np.array([r["p_yes"] for r in rest])) == pytest.approx(t)


def test_leave_one_query_out_kappa_by_hand() -> None:
    # q1 at 0.6: yes, no (right); q2 at 0.325: yes, yes (one wrong); q3 at 0.6: no, no (one
    # wrong): 4 of 6 agree, both say yes to half, chance 0.5 -> kappa (2/3 - 1/2) / (1/2)
    kappa, mean_t = ee.loqo_kappa(ROWS)
    assert kappa == pytest.approx(1 / 3)
    assert mean_t == pytest.approx((0.6 + 0.325 + 0.6) / 3)


def test_one_query_or_no_probabilities_is_undefined() -> None:
    one = [r for r in ROWS if r["query_id"] == "q1"]
    assert all(math.isnan(x) for x in ee.loqo_kappa(one))
    assert all(math.isnan(x) for x in ee.loqo_kappa(_rows({"a": [(1, None)], "b": [(0, None)]})))
    assert all(math.isnan(x) for x in ee.loqo_kappa([]))
