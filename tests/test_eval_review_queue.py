"""scripts/eval_review_queue.py on the simulated judge (no LLM): the README's figures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "eval_review_queue", ROOT / "scripts" / "eval_review_queue.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["eval_review_queue"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_queue_labels_beat_random_labels_on_the_simulated_judge(tmp_path: Path) -> None:
    from judge.store import recover_output

    mod = _script()
    out = tmp_path / "sim.judged.jsonl"
    mod.simulate_judged(ROOT / "datasets" / "sample.jsonl", out, seed=0)
    records = recover_output(out)
    assert len(records) == 14 and sum(len(r["verdicts"]) for r in records) == 84
    report = mod.evaluate(records, n=10, draws=20, seed=0)
    # the README's simulated-judge table, row "seed 0"
    assert report["ground_truth_map"] == pytest.approx(0.6367, abs=1e-4)
    assert report["none"]["abs_error"] == pytest.approx(0.0194, abs=1e-4)
    assert report["queue"]["abs_error"] == pytest.approx(0.0103, abs=1e-4)
    assert report["random"]["abs_error"] == pytest.approx(0.0178, abs=1e-4)
    assert report["queue"]["abs_error"] < report["random"]["abs_error"] < report["none"]["abs_error"]
    assert [i["audit"] for i in report["queue_items"]] == [False] * 4 + [True] + [False] * 4 + [True]
