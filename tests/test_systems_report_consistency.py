"""compare-systems reports: the interval beside a p-value comes from the same test, the
bootstrap CI is named as such, every P(yes) is shown beside its threshold, and measure
columns follow the order asked for."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import judge
from judge.backends import RuleBackend
from judge.metrics import compare_scores, permutation_interval, permutation_test
from judge.systems import SystemComparison
from judge.systems._render import _verdict_sentence, p_yes_text

# Per-query differences of 8 queries where the percentile bootstrap CI excludes 0 but the
# randomization test does not reject (p about 0.07): the CKNRM_B50 vs BERT2 situation.
DIFFS = [0.21, -0.48, -0.04, -0.19, -0.17, -0.13, -0.4, -0.13]


def _comparison(seed: int = 0, resamples: int = 2000) -> SystemComparison:
    a = np.full(len(DIFFS), 0.5)
    b = a + np.array(DIFFS)
    c = compare_scores(
        a, b, measure="map", baseline_name="BERT2", system_name="B50", resamples=resamples, seed=seed
    )
    low, high = permutation_interval(a, b, resamples=resamples, seed=seed)
    return SystemComparison(
        baseline="BERT2", system="B50", measure="map", n=c.n, baseline_mean=c.mean_baseline,
        system_mean=c.mean_system, diff=c.difference, p_value=c.p_permutation, p_holm=c.p_permutation,
        t_test_p=c.p_t_test, t_test_p_holm=None, ci_low=c.ci_low, ci_high=c.ci_high,
        randomization_ci_low=low, randomization_ci_high=high, wins=1, ties=0, losses=7, order_stability=None,
    )  # fmt: skip


def test_bootstrap_excludes_zero_but_the_test_does_not_reject_is_said_in_words() -> None:
    c = _comparison()
    assert c.ci_high < 0 and 0.05 < c.p_value < 0.1  # the contradiction the report used to print
    assert c.randomization_ci_low is not None and c.randomization_ci_high is not None
    assert c.randomization_ci_low < 0 < c.randomization_ci_high  # the test's own interval agrees with p
    text = _verdict_sentence(c)
    assert text.startswith("B50 is not significantly different from BERT2 on map")
    assert "randomization test p=" in text and "its 95% interval" in text and "bootstrap 95% CI" in text
    assert "the bootstrap CI excludes 0 but the randomization test does not reject" in text


def test_the_test_interval_excludes_zero_exactly_when_p_is_below_alpha() -> None:
    rng = np.random.default_rng(2)
    for seed in range(120):
        n = int(rng.integers(4, 30))
        a = rng.uniform(size=n)
        b = a + rng.normal(rng.normal(0, 0.1), 0.2, size=n)
        p = permutation_test(a, b, resamples=500, seed=seed).p_value
        for confidence in (0.9, 0.95):
            low, high = permutation_interval(a, b, confidence=confidence, resamples=500, seed=seed)
            assert (low <= 0 <= high) == (p >= 1 - confidence), (seed, p, low, high)
            assert low <= float(np.mean(b - a)) <= high
    # two pairs: no shift can be rejected at 0.05 (smallest p is 0.5): unbounded
    assert permutation_interval([0.1, 0.2], [0.5, 0.9], resamples=200) == (-np.inf, np.inf)


def test_p_yes_is_shown_beside_its_threshold() -> None:
    assert p_yes_text(0.80, 0.834, "binary") == "p=0.80 < 0.834"
    assert p_yes_text(0.91, 0.834, "binary") == "p=0.91 ≥ 0.834"
    # rounding never prints a p equal to the threshold on the wrong side
    assert p_yes_text(0.8338, 0.834, "binary") == "p=0.8338 < 0.834"
    assert p_yes_text(0.67, None, "binary") == "p=0.67"
    assert p_yes_text(0.8, None, "graded") == "P(yes)=0.80, grade by argmax"


def _systems(tmp_path: Path) -> dict[str, Path]:
    # B ranks the same passages in another order: relevant first in A, last in B
    passages = [{"id": f"p{j}", "text": f"段落 {j}" + (" [相关]" if j < 2 else "")} for j in range(4)]
    paths = {}
    for name, order in (("A", [0, 1, 2, 3]), ("B", [2, 0, 3, 1])):
        rows = [
            {"id": f"q{i}", "query": f"问题 {i}", "retrieval_context": [passages[j] for j in order]}
            for i in range(4)
        ]
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    return paths


@pytest.mark.parametrize("asked", [["P_5", "recip_rank", "map"], ["recip_rank", "ndcg_cut_3", "P_5"]])
def test_measure_columns_follow_the_order_asked_for(tmp_path: Path, asked: list[str]) -> None:
    report = judge.compare_systems(
        _systems(tmp_path),
        tmp_path / "r",
        backend=RuleBackend.keyword("[相关]"),
        measures=asked,
        cache=False,
        resamples=200,
    )
    assert report.conventions["measures"] == asked
    assert [c.measure for c in report.comparisons] == asked
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "| system | queries | " + " | ".join(asked) + " | map_isolated |" in md
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "".join(f"<th>{m}</th>" for m in asked) in html


def test_html_badges_show_p_yes_with_the_threshold(tmp_path: Path) -> None:
    backend = RuleBackend.keyword("[相关]", p_match=0.8)
    judge.compare_systems(
        _systems(tmp_path), tmp_path / "r", backend=backend, config=judge.JudgeConfig(probability=True),
        cache=False, resamples=200,
    )  # fmt: skip
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    report = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
    thresholds = report["conventions"]["p_yes_thresholds"]
    assert thresholds == {"binary.zh.v2": 0.575, "binary.en.v4": 0.725}
    assert "p=0.80 ≥ 0.575" in html and "p=0.20 &lt; 0.575" in html
