"""scripts/eval_examples.py's report: kappa at a threshold tuned on the other queries."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "eval_examples.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("eval_examples", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["eval_examples"] = module
    spec.loader.exec_module(module)
    return module


ee = _load()


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


def test_the_best_threshold_is_the_smallest_of_the_tied_best() -> None:
    # q2 and q3: thresholds 0.35 and 0.8 both give kappa 0.5 (3 of 4 agree, chance 0.5)
    assert ee._best_threshold([r for r in ROWS if r["query_id"] != "q1"]) == pytest.approx(0.35)
    assert ee._best_threshold([r for r in ROWS if r["query_id"] != "q2"]) == pytest.approx(0.35)
    assert ee._best_threshold([r for r in ROWS if r["query_id"] != "q3"]) == pytest.approx(0.8)


def test_leave_one_query_out_kappa_by_hand() -> None:
    # q1 at 0.35: yes, no (right); q2 at 0.35: yes, yes (one wrong); q3 at 0.8: no, no (one
    # wrong): 4 of 6 agree, both say yes to half, chance 0.5 -> kappa (2/3 - 1/2) / (1/2)
    kappa, mean_t = ee.loqo_kappa(ROWS)
    assert kappa == pytest.approx(1 / 3)
    assert mean_t == pytest.approx((0.35 + 0.35 + 0.8) / 3)


def test_one_query_or_no_probabilities_is_undefined() -> None:
    one = [r for r in ROWS if r["query_id"] == "q1"]
    assert all(math.isnan(x) for x in ee.loqo_kappa(one))
    assert all(math.isnan(x) for x in ee.loqo_kappa(_rows({"a": [(1, None)], "b": [(0, None)]})))
    assert all(math.isnan(x) for x in ee.loqo_kappa([]))
