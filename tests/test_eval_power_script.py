"""scripts/eval_power.py (discriminative power of the judge's comparisons): the exact paired
test, the power counts, the labels' tie group, the pooled and expected nDCG, trec_eval's run
order; and scripts/experiment_data.py's held-out query window. Values worked by hand."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from _helpers import load_script


def _power() -> ModuleType:
    return load_script("eval_power")


@pytest.mark.parametrize(
    ("a", "b", "p"),
    [
        ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 2 / 8),  # only all + and all - reach |sum| 3
        ([0.0, 0.0], [1.0, 2.0], 2 / 4),  # sums 3, 1, -1, -3
        ([0.0] * 5, [1.0] * 5, 2 / 32),
        ([0.0] * 6, [1.0] * 6, 2 / 64),  # the smallest all-one-way set below 0.05
        ([0.5, 0.5], [0.5, 0.5], 1.0),  # no difference at all
        ([0.0, 1.0], [1.0, 0.0], 1.0),  # mean difference 0: every sign vector is as extreme
        ([0.0, 0.0, 0.0], [3.0, -1.0, 1.0], 6 / 8),  # sums 3, 1, 5, 3 and mirrors: all but +-1 reach 3
    ],
)
def test_exact_sign_flip_p_by_hand(a: list[float], b: list[float], p: float) -> None:
    assert _power().exact_sign_flip_p(a, b) == pytest.approx(p, abs=1e-15)


def test_exact_sign_flip_p_matches_enumeration_with_ties() -> None:
    """Meet in the middle against all 2^n sign vectors, with repeated differences (ties in
    the null distribution, counted as extreme) and odd n."""
    power = _power()
    rng = np.random.default_rng(3)
    for n in (1, 4, 7, 9):
        a = np.round(rng.random(n), 1)
        b = np.round(a + rng.normal(0.1, 0.2, n), 1)
        d = b - a
        extreme = sum(
            abs(float(np.dot(s, d))) >= abs(float(d.sum())) - 1e-9 * float(np.abs(d).sum())
            for s in itertools.product((-1.0, 1.0), repeat=n)
        )
        expected = 1.0 if not np.any(d) or abs(d.sum()) < 1e-12 else extreme / 2**n
        assert power.exact_sign_flip_p(a, b) == pytest.approx(expected, abs=1e-15)


def test_power_counts_by_hand() -> None:
    """Pairs 0, 1, 3 are separated by the reference (pair 3 with a difference of exactly 0:
    no direction); the variant separates 0 (same way), 1 (opposite) and 2 (opposite to the
    reference's unseparated difference)."""
    counts = _power().power_counts(
        ref_diff=[0.1, -0.2, 0.3, 0.0],
        ref_p=[0.01, 0.02, 0.5, 0.01],
        diff=[0.05, 0.1, -0.2, 0.1],
        p=[0.03, 0.01, 0.04, 0.5],
    )
    assert counts == {"reference": 3, "separated": 3, "agree": 1, "separated_agree": 1, "wrong": 2}


def test_power_counts_nothing_separated() -> None:
    counts = _power().power_counts([0.1, 0.2], [0.5, 0.05], [0.1, 0.2], [0.06, 0.05])
    assert counts == {"reference": 0, "separated": 0, "agree": 0, "separated_agree": 0, "wrong": 0}


def test_pair_tests_order_and_direction() -> None:
    scores = np.array([[0.0] * 6, [1.0] * 6, [0.5] * 6])
    pairs, diff, p = _power().pair_tests(scores)
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    assert diff.tolist() == [1.0, 0.5, -0.5]
    assert p.tolist() == pytest.approx([2 / 64] * 3)


def test_holm_tie_group() -> None:
    """Row 0 is the best; row 1 differs from it on every one of 6 queries (p 2/64, Holm x2
    = 0.0625 >= 0.05: kept); with 7 queries p 2/128 x 2 = 0.03125: separated. Row 2 equals
    row 0 (p 1): kept either way."""
    power = _power()
    six = np.array([[1.0] * 6, [0.0] * 6, [1.0] * 6])
    assert power.holm_tie_group(six, 0) == [0, 1, 2]
    seven = np.array([[1.0] * 7, [0.0] * 7, [1.0] * 7])
    assert power.holm_tie_group(seven, 0) == [0, 2]


def test_ndcg_fractional_gains_and_empty_ideal() -> None:
    power = _power()
    # DCG 0.5 + 1/log2(3); ideal 1 + 0.5/log2(3) over the three gains, cut at 2
    want = (0.5 + 1 / math.log2(3)) / (1 + 0.5 / math.log2(3))
    assert power.ndcg([0.5, 1.0], [0.5, 1.0, 0.2], k=2) == pytest.approx(want)
    assert power.ndcg([0.0, 0.0], [0.0, 0.0], k=2) == 0.0
    assert power.dcg([1.0, 1.0, 1.0], k=2) == pytest.approx(1 + 1 / math.log2(3))


def test_expected_pooled_ndcg_by_hand() -> None:
    """Two pooled passages, each relevant with 1/2, both ranked (k = 2): the four labelings
    give nDCG 1 (both), 1 (first only), 1/log2(3) (second only: DCG 1/log2(3), ideal 1) and
    0: the mean 1/4 (2 + 1/log2(3)). With one of them ranked at k = 1: 1/2."""
    power = _power()
    assert power.expected_pooled_ndcg([0.5, 0.5], [0.5, 0.5], [0, 1], k=2) == pytest.approx(
        0.25 * (2 + 1 / math.log2(3))
    )
    assert power.expected_pooled_ndcg([0.5], [0.5, 0.5], [0], k=1) == pytest.approx(0.5)
    # certain verdicts: the thresholded figure
    assert power.expected_pooled_ndcg([0.0, 1.0], [0.0, 1.0, 1.0], [0, 1], k=2) == pytest.approx(
        power.ndcg([0.0, 1.0], [0.0, 1.0, 1.0], k=2)
    )


def test_trec_run_order_breaks_score_ties_by_docno_descending(tmp_path: Path) -> None:
    run = tmp_path / "r.trec"
    run.write_text("q 0 a 1 2.0 x\nq 0 c 2 1.0 x\nq 0 b 3 2.0 x\n", encoding="utf-8")
    assert _power().read_trec_run(run) == {"q": ["b", "a", "c"]}


def test_prepare_dl19_offset_is_the_held_out_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_script("experiment_data")
    src = tmp_path / "data" / "trec_dl19"
    src.mkdir(parents=True)
    (src / "dl2019_document.jsonl").write_text(json.dumps({"docid": 1, "doc": "x"}) + "\n", encoding="utf-8")
    (src / "2019qrels-pass.txt").write_text("q3 0 1 1\nq1 0 1 0\nq2 0 1 2\n", encoding="utf-8")
    (src / "msmarco-test2019-queries.tsv").write_text("q1\tone\nq2\ttwo\nq3\tthree\n", encoding="utf-8")
    monkeypatch.setattr(data, "DATA", tmp_path / "data")
    first = data.prepare_dl19(tmp_path / "w", limit=2)
    rest = data.prepare_dl19(tmp_path / "w", limit=2, offset=2)
    read = lambda p: [json.loads(x)["id"] for x in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    assert read(first["queries"]) == ["q3", "q1"]  # the qrels' order
    assert read(rest["queries"]) == ["q2"]  # what is left after the first two
    assert first["queries"] != rest["queries"]
