"""Prediction-powered figures: the rectifier by hand, its coverage on DL 2019-like simulated
data, and ``judge score --sample-labels`` (summary block, refusals)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from judge.cli import main
from judge.io import InputError, read_sample_labels
from judge.metrics import JudgedList, PpiInterval, judge_measure, label_effects, ppi_figure, rectified_mean

Z95 = 1.959963984540054
T1 = 12.706204736174707  # Student's t, 1 degree of freedom (Cauchy): tan(0.475 pi)


def _lists() -> list[JudgedList]:
    # two queries; the judge says q0: yes yes, q1: yes no -> P@2 = (1 + 0.5) / 2 = 0.75
    return [JudgedList.of([1, 1], [1, 1]), JudgedList.of([1, 0], [1, 0])]


def test_label_effects_by_hand() -> None:
    # q0's second passage labelled no: q0's P@2 1 -> 0.5, the mean moves by -0.5 / 2 queries;
    # q1's first labelled yes: agrees with the verdict, no effect
    value, effects = label_effects(_lists(), judge_measure("P_2"), [(0, 1), (1, 0)], [0, 1], [0, 1])
    assert value == pytest.approx(0.75)
    assert effects.tolist() == pytest.approx([-0.25, 0.0])


def test_rectifier_uniform_by_hand() -> None:
    # N = 4 pairs, n = 2 labels: 0.75 + 4 * mean(-0.25, 0) = 0.25;
    # se = 4 * sqrt((1 - 2/4) * var([-0.25, 0], ddof=1) / 2) = 4 * sqrt(0.5 * 0.03125 / 2)
    r = rectified_mean(0.75, [-0.25, 0.0], population=4)
    se = 4 * (0.5 * 0.03125 / 2) ** 0.5
    assert r.estimate == pytest.approx(0.25)
    assert r.se == pytest.approx(se)
    # the variance is estimated from 2 labels: Student's t with 1 degree of freedom
    assert (r.low, r.high) == pytest.approx((0.25 - T1 * se, 0.25 + T1 * se))


def test_rectifier_weighted_by_hand() -> None:
    # Horvitz-Thompson: 0.75 + (-0.25 / 0.5 + 0 / 0.25) = 0.25; se = sqrt((1 - 0.5) 0.0625 / 0.25)
    r = rectified_mean(0.75, [-0.25, 0.0], inclusion=[0.5, 0.25])
    assert r.estimate == pytest.approx(0.25)
    assert r.se == pytest.approx(0.125**0.5)
    assert r.high == pytest.approx(0.25 + Z95 * 0.125**0.5)  # known probabilities: normal


def test_rectifier_edges() -> None:
    # no label: the judge's figure as it is, and no interval (nothing to estimate a variance from)
    assert rectified_mean(0.4, [], population=10) == PpiInterval(0.4, None, None, None)
    assert rectified_mean(0.4, [], inclusion=[]) == PpiInterval(0.4, None, None, None)
    one = rectified_mean(0.4, [0.1], population=10)
    assert one.estimate == pytest.approx(1.4) and one.low is None and one.se is None
    full = rectified_mean(0.5, [0.1, 0.1], population=2)  # every pair labelled: no sampling error
    assert full.estimate == pytest.approx(0.7) and full.se == 0.0
    with pytest.raises(ValueError):
        rectified_mean(0.5, [0.1] * 3, population=2)
    with pytest.raises(ValueError):
        rectified_mean(0.5, [0.1], inclusion=[0.0])
    with pytest.raises(ValueError):  # 1 / 1e-320 overflows: no estimate from it
        rectified_mean(0.5, [0.1], inclusion=[1e-320])
    with pytest.raises(ValueError):
        rectified_mean(0.5, [0.1], population=3, confidence=1.0)


def test_figure_withholds_intervals_below_min_labels_and_for_short_coverage() -> None:
    lists = _lists()
    p2 = ppi_figure(lists, judge_measure("P_2"), [(0, 1), (1, 0)], [0, 1], [0, 1], population=4)
    assert p2.estimate == pytest.approx(0.25) and p2.linear
    assert p2.low is None and p2.high is None and not p2.coverage_ok  # 2 labels < MIN_LABELS
    ap = ppi_figure(lists, judge_measure("map"), [(0, 1), (1, 0)], [0, 1], [0, 1], population=4)
    assert ap.estimate is not None and ap.low is None and ap.high is None and not ap.coverage_ok


def test_figure_clips_to_the_measures_range() -> None:
    from scipy.stats import t as student

    # 25 queries of 2 passages (N = 50); the judge says yes to all but q0's second passage.
    # 40 labels: q0's second passage is relevant (effect on P@2: +0.5 / 25 = +0.02), 39 agree.
    lists = [JudgedList.of([1, 0], [1, 0])] + [JudgedList.of([1, 1], [1, 1]) for _ in range(24)]
    pairs = [(0, 1), *[(q, i) for q in range(1, 25) for i in range(2)][:39]]
    labels = [1] * 40
    fig = ppi_figure(lists, judge_measure("P_2"), pairs, labels, labels, population=50)
    assert fig.judge == pytest.approx(0.98)
    # 0.98 + 50 * 0.02 / 40 = 1.005, clipped; se = 50 sqrt((1 - 40/50) var / 40)
    var = ((0.02 - 0.0005) ** 2 + 39 * 0.0005**2) / 39
    se = 50 * (0.2 * var / 40) ** 0.5
    assert fig.estimate == 1.0 and fig.high == 1.0 and fig.coverage_ok
    assert fig.low == pytest.approx(1.005 - float(student.ppf(0.975, 39)) * se)


def test_calibrated_effects_by_hand() -> None:
    """One query, the judge says yes yes no; labels 1, 0, 0. The yes stratum's labels give q1 =
    1/2, the no stratum's q0 = 0: the point is p = (1/2, 1/2, 0). Under independent labels:
    AP is 1 for (1, 1) and (1, 0), 1/2 for (0, 1) and 0 for (0, 0): E[AP] = 2.5 / 4 = 0.625.
    Labelling the first 1 gives p = (1, 1/2, 0), E[AP] = 1 (+0.375); the second 0 gives
    (1/2, 0, 0), E[AP] = 1/2 (-0.125); the third agrees with its point (0)."""
    from judge.metrics import calibrated_effects

    lists = [JudgedList.of([1, 1, 0], [1, 1, 0])]
    pairs = [(0, 0), (0, 1), (0, 2)]
    point, effects = calibrated_effects(lists, judge_measure("map"), pairs, [1, 0, 0])
    assert point == pytest.approx(0.625) and effects.tolist() == pytest.approx([0.375, -0.125, 0.0])
    # weighted by 1 / inclusion (0.25, 0.5, 1): q1 = (4 * 1 + 2 * 0) / 6 = 2/3, p = (2/3, 2/3, 0):
    # E[AP] = 4/9 + 2/9 + (2/9) (1/2) = 7/9; the first labelled: p = (1, 2/3) -> 1 (+2/9); the
    # second: (2/3, 0) -> 2/3 (-1/9)
    point, effects = calibrated_effects(
        lists, judge_measure("map"), pairs, [1, 0, 0], inclusion=[0.25, 0.5, 1.0]
    )
    assert point == pytest.approx(7 / 9) and effects.tolist() == pytest.approx([2 / 9, -1 / 9, 0.0])
    # nDCG@2 at p = (1/2, 1/2, 0), the ideal from the labels: 1 for (1, 1) and (1, 0), g = 1/log2(3)
    # for (0, 1), 0 for (0, 0): (2 + g) / 4; the first labelled: 1; the second: (1/2, 0) -> 1/2
    g = 1 / np.log2(3)
    point, effects = calibrated_effects(lists, judge_measure("ndcg_cut_2"), pairs, [1, 0, 0])
    assert point == pytest.approx((2 + g) / 4)
    assert effects.tolist() == pytest.approx([1 - (2 + g) / 4, 0.5 - (2 + g) / 4, 0.0])
    # the figure: a uniform sample of all 3 pairs, 0.625 + 3 * mean(0.375, -0.125, 0) = 0.875
    # (the truth, AP of labels 1 0 0, is 1: the expansion is first order); the judge's own is 1
    fig = ppi_figure(lists, judge_measure("map"), pairs, [1, 0, 0], [1, 0, 0], population=3)
    assert fig.estimate == pytest.approx(0.875) and fig.judge == pytest.approx(1.0) and fig.low is None
    with pytest.raises(ValueError):
        calibrated_effects(lists, judge_measure("P_2"), pairs, [1, 0, 0])


def _records_50() -> list[dict[str, object]]:
    """25 queries of 2 passages; the judge says yes to all but q0's second (P@2 0.98)."""
    return [
        {
            "id": f"q{i}",
            "docnos": ["a", "b"],
            "verdicts": [{"verdict": "yes"}, {"verdict": "no" if i == 0 else "yes"}],
        }
        for i in range(25)
    ]


def test_unlabelled_drawn_pairs_withhold_the_interval_unless_allowed() -> None:
    from judge.batch import SampleLabelOptions, ppi_block
    from judge.io import SampleLabel, SampleLabels

    # 40 labels, all agreeing with the judge, and 2 drawn pairs nobody labelled (grade -1)
    labelled = [SampleLabel(f"q{i}", d, 1, 2 * i + j + 1) for i in range(1, 21) for j, d in enumerate("ab")]
    missing = (SampleLabel("q21", "a", -1, 50), SampleLabel("q21", "b", -1, 51))
    sample = SampleLabels("s.qrels", tuple(labelled), missing)
    strict = ppi_block(_records_50(), SampleLabelOptions(sample), [2])
    allowed = ppi_block(_records_50(), SampleLabelOptions(sample, allow_unlabelled=True), [2])
    for block in (strict, allowed):
        assert block["labels"] == 40 and block["unlabelled"] == 2
        assert block["precision"]["2"]["labels"] == block["mean_score"]["labels"] == 40
        assert block["unlabelled_pairs"] == [["q21", "a"], ["q21", "b"]]
        # every label agrees with the judge, so the unlabelled pairs are filled in agreeing too:
        # the judge's 0.98, exactly
        assert block["precision"]["2"]["estimate"] == pytest.approx(0.98)
    assert strict["precision"]["2"]["low"] is None and strict["mean_score"]["high"] is None
    assert "no interval" in strict["interval_note"]
    # allowed: the bound over whatever labels q21's a and b have. Each could be a no (P@2 of
    # q21 1 -> 0.5, effect -0.5 / 25 = -0.02) or agree (0); n = 42 drawn of N = 50: the estimate
    # ranges over 0.98 + 50 * [-0.04, 0] / 42; the standard error is the largest: squares 2 *
    # 0.02^2, the smallest squared mean 0, var 0.0008 / 41, se = 50 sqrt(0.16 var / 42), t(41)
    from scipy.stats import t as student

    se = 50 * (0.16 * 0.0008 / 41 / 42) ** 0.5
    z = float(student.ppf(0.975, 41))
    for fig in (allowed["precision"]["2"], allowed["mean_score"]):
        assert fig["low"] == pytest.approx(0.98 - 50 * 0.04 / 42 - z * se, abs=2e-6)
        assert fig["high"] == pytest.approx(min(1.0, 0.98 + z * se), abs=2e-6)
    assert "conservative bound" in allowed["interval_note"]
    assert "missing" in allowed["method"]["unlabelled"]
    clean = ppi_block(_records_50(), SampleLabelOptions(SampleLabels("s.qrels", tuple(labelled))), [2])
    assert (
        clean["unlabelled"] == 0 and clean["interval_note"] is None and clean["method"]["unlabelled"] is None
    )
    assert clean["precision"]["2"]["low"] == pytest.approx(0.98)
    assert clean["ndcg"]["2"]["estimate"] is None and clean["withheld"]["measures"] == ["ndcg", "map"]
    # a measurement (scripts/agreement_on_choice.py) computes them: every label agrees, so the
    # calibrated point is the judge's verdicts themselves (q1 = 1, q0 = 0) and nDCG@2 = 1 / 1
    measured = ppi_block(
        _records_50(), SampleLabelOptions(SampleLabels("s.qrels", tuple(labelled))), [2], withhold=False
    )
    assert measured["withheld"] is None and measured["ndcg"]["2"]["estimate"] == pytest.approx(1.0)


def _dl19_like(seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """43 queries x 10 passages; labels at a per-query rate (DL 2019's top 10 is about half
    relevant); a lenient judge: 25% of the not-relevant say yes, 5% of the relevant no."""
    rng = np.random.default_rng(seed)
    truth, judge = [], []
    for _ in range(43):
        rate = rng.uniform(0.1, 0.95)
        y = (rng.random(10) < rate).astype(int)
        u = rng.random(10)
        f = np.where(y == 1, (u >= 0.05).astype(int), (u < 0.25).astype(int))
        truth.append(y.tolist())
        judge.append(f.tolist())
    return truth, judge


def test_p10_interval_holds_on_dl19_like_data() -> None:
    """20 seeded draws, 15% of the 430 pairs labelled at random: the P@10 interval holds the
    truth in >= 17 draws and the mean error is under half the judge's."""
    p10 = judge_measure("P_10")
    covered, err_ppi, err_judge = 0, [], []
    for seed in range(20):
        truth, judge = _dl19_like(seed)
        lists = [JudgedList.of(f, f) for f in judge]
        pairs = [(q, i) for q in range(43) for i in range(10)]
        rng = np.random.default_rng(1000 + seed)
        sample = sorted(rng.choice(len(pairs), size=65, replace=False).tolist())
        chosen = [pairs[j] for j in sample]
        labels = [truth[q][i] for q, i in chosen]
        fig = ppi_figure(lists, p10, chosen, labels, labels, population=430)
        target = float(np.mean([np.mean(t) for t in truth]))
        assert fig.estimate is not None and fig.low is not None and fig.high is not None
        assert fig.judge is not None
        covered += fig.low <= target <= fig.high
        err_ppi.append(abs(fig.estimate - target))
        err_judge.append(abs(fig.judge - target))
    assert covered >= 17
    assert np.mean(err_ppi) < 0.5 * np.mean(err_judge)


# ---------------------------------------------------------------------------- the command
def _write(tmp_path: Path, sample: str) -> tuple[Path, Path, Path]:
    data = tmp_path / "d.jsonl"
    data.write_text(
        "\n".join(
            json.dumps(
                {
                    "id": q,
                    "query": f"query {q}",
                    "retrieval_context": [{"id": d, "text": f"text {d}"} for d in ds],
                }
            )
            for q, ds in (("q0", ("a", "b")), ("q1", ("c", "d")))
        )
        + "\n",
        encoding="utf-8",
    )
    qrels = tmp_path / "judge.qrels"  # the judge: yes yes / yes no (as _lists)
    qrels.write_text("q0 0 a 1\nq0 0 b 1\nq1 0 c 1\nq1 0 d 0\n", encoding="utf-8")
    labels = tmp_path / "sample.qrels"
    labels.write_text(sample, encoding="utf-8")
    return data, qrels, labels


def _score(tmp_path: Path, data: Path, qrels: Path, labels: Path) -> int:
    return main(
        [
            "score", str(data), "-o", str(tmp_path / "out.jsonl"), "--backend", f"qrels:{qrels}",
            "--no-cache", "--quiet", "-k", "2", "--sample-labels", str(labels),
        ]
    )  # fmt: skip


def test_score_summary_has_ppi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, qrels, labels = _write(tmp_path, "q0 0 b 0\nq1 0 c 3\n")
    assert _score(tmp_path, data, qrels, labels) == 0
    summary = json.loads((tmp_path / "out.summary.json").read_text(encoding="utf-8"))
    ppi = summary["ppi"]
    assert ppi["labels"] == 2 and ppi["population"] == 4
    assert ppi["mapping"].startswith("a person's grade >= 1 is relevant")
    p2 = ppi["precision"]["2"]
    assert p2["estimate"] == pytest.approx(0.25) and p2["judge"] == pytest.approx(0.75)
    assert p2["low"] is None and p2["coverage_ok"] is False  # 2 labels: no interval
    # corrected AP and nDCG are withheld; the judge's own figures stay: q0 yes yes (AP 1, nDCG@2 1),
    # q1 yes no (AP 1: its one relevant at rank 1; nDCG@2 1: the ideal is the judged list's)
    for fig in (ppi["map"], ppi["ndcg"]["2"]):
        assert fig["estimate"] is None and fig["low"] is None and fig["coverage_ok"] is False
        assert fig["judge"] == pytest.approx(1.0) and "worse than the judge's" in fig["withheld"]
    assert ppi["withheld"]["measures"] == ["ndcg", "map"]
    assert set(ppi) >= {"precision", "ndcg", "map", "mean_score", "labels", "method"}


def test_score_refuses_a_pair_not_in_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, qrels, labels = _write(tmp_path, "q0 0 a 1\n# a comment\nq1 0 zzz 1\n")
    assert _score(tmp_path, data, qrels, labels) == 2
    err = capsys.readouterr().err
    assert f"{labels}:3" in err and "zzz" in err
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out.summary.json").exists()


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("q0 0 a x\n", 1, "grade"),
        ("q0 0 a 1\nq0 0 b -2\n", 2, "grade"),  # -1: drawn, left unlabelled; below it: refused
        ("q0 0 a 1 1e-320\n", 1, "inclusion"),  # below MIN_INCLUSION: 1 / p is not meaningful
        ("q0 0 a 1 0.5\nq0 0 b 1 9.9e-7\n", 2, "inclusion"),
        ("q0 0 a 1 0.5\nq0 0 b 1\n", 2, "inclusion"),
        ("q0 0 a 1 1.5\n", 1, "inclusion"),
        ("q0 0 a 1 nan\n", 1, "inclusion"),
        ("q0 0 a 1\nq0 0 a 0\n", 2, None),
        ("q0 a 1\n", 1, "grade"),  # the first missing column, as read_qrels names it
    ],
)
def test_bad_sample_files_name_their_line(tmp_path: Path, text: str, line: int, field: str | None) -> None:
    path = tmp_path / "s.qrels"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_sample_labels(path)
    assert info.value.line == line and info.value.field == field


def test_weighted_sample_file(tmp_path: Path) -> None:
    path = tmp_path / "s.qrels"
    path.write_text("q0 0 a 1 0.5\nq0 0 b 0 1\n", encoding="utf-8")
    sample = read_sample_labels(path)
    assert sample.weighted and [x.inclusion for x in sample.labels] == [0.5, 1.0]


def test_compare_systems_reports_each_systems_ppi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, qrels, labels = _write(tmp_path, "q0 0 b 0\nq1 0 c 3\n")
    other = tmp_path / "b.jsonl"
    other.write_text(  # B ranks only q0's a and q1's d: no sample label falls on q0's b or q1's c
        "\n".join(
            json.dumps(
                {"id": q, "query": f"query {q}", "retrieval_context": [{"id": d, "text": f"text {d}"}]}
            )
            for q, d in (("q0", "a"), ("q1", "d"))
        )
        + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "cmp"
    args = ["compare-systems", f"A={data}", f"B={other}", "-o", str(out), "--backend", f"qrels:{qrels}",
            "--no-cache", "--quiet", "--stability-resamples", "0", "--resamples", "50",
            "-m", "P_2"]  # fmt: skip
    assert main([*args, "--sample-labels", str(labels)]) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    a, b = report["systems"]["A"]["ppi"], report["systems"]["B"]["ppi"]
    assert a["labels"] == 2 and a["precision"]["2"]["estimate"] == pytest.approx(0.25)
    assert b["labels"] == 0 and b["precision"]["2"]["estimate"] == pytest.approx(b["precision"]["2"]["judge"])
    assert "judge's paired comparison" in report["conventions"]["sample_labels"]["choice"]
    md = (out / "report.md").read_text(encoding="utf-8")
    section = md.split("## Prediction-powered figures")[1].split("\n## ")[0]
    # the section shows P@k and the share judged relevant, and says why corrected AP and nDCG are not there
    assert "| P@2 judge / ppi |" in section and "nDCG@2 judge / ppi" not in section
    assert "AP judge / ppi" not in section and "Corrected nDCG and AP are not shown" in section
    assert "worse than the judge's own figures" in section
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Prediction-powered figures" in html and "Corrected nDCG and AP are not shown" in html
    bad = tmp_path / "bad.qrels"
    bad.write_text("q0 0 a 1\nq9 0 a 1\n", encoding="utf-8")
    capsys.readouterr()
    assert main([*args, "-o", str(tmp_path / "cmp2"), "--sample-labels", str(bad)]) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    assert not (tmp_path / "cmp2" / "report.json").exists()


# ---------------------------------------------------------------------------- sample mode
def test_inclusion_probabilities_by_hand() -> None:
    from judge.metrics import inclusion_probabilities, poisson_draw

    # proportional: 2 expected over weights 1, 1, 2 -> 0.5, 0.5, 1.0
    assert inclusion_probabilities([1, 1, 2], 2).tolist() == pytest.approx([0.5, 0.5, 1.0])
    # 8 / 10 * 2 > 1: capped at 1, the other expected label split over 1 + 1
    assert inclusion_probabilities([1, 1, 8], 2).tolist() == pytest.approx([0.5, 0.5, 1.0])
    assert inclusion_probabilities([3, 1], 5).tolist() == [1.0, 1.0]
    assert inclusion_probabilities([], 2).size == 0
    with pytest.raises(ValueError):
        inclusion_probabilities([1, 0], 1)
    assert poisson_draw([1.0, 0.0, 1.0], seed=3).tolist() == [True, False, True]


def test_sample_mode_records_probabilities_and_feeds_the_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judge.store import Label, LabelStore

    data, qrels, labels = _write(tmp_path, "q0 0 a 1\n")
    assert _score(tmp_path, data, qrels, labels) == 0
    store = tmp_path / "labels.sqlite"
    with LabelStore(store) as s:
        s.put(Label("q0", "a", 1, "ann"))  # labelled before the draw: once drawn, it is a labelled pair
    capsys.readouterr()
    args = ["labels", "sample", str(tmp_path / "out.jsonl"), "--store", str(store), "--n", "4"]
    assert main(args) == 0  # 4 expected of 4 judged pairs: every pair drawn with probability 1
    drawn = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(d["qid"], d["docno"]) for d in drawn} == {("q0", "a"), ("q0", "b"), ("q1", "c"), ("q1", "d")}
    assert {d["inclusion"] for d in drawn} == {1.0}
    with LabelStore(store) as s:
        s.put(Label("q0", "b", 0, "ann"))
        s.put(Label("q1", "c", 1, "ann"))
        s.put(Label("q9", "x", 1, "ann"))  # not drawn: never in an estimate
    sample = tmp_path / "sample.qrels"
    assert main(["labels", "export", "--sample", "--store", str(store), "-o", str(sample)]) == 0
    err = capsys.readouterr().err
    assert "1 drawn pair(s) left unlabelled" in err and "unlabelled: q1\td" in err
    lines = sample.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# judge sample of ") and "1 left unlabelled" in lines[0]
    # every drawn pair, q0's a with the label given before the draw, q1's d named as unlabelled (-1)
    assert lines[1:] == ["q0 0 a 1 1.0", "q0 0 b 0 1.0", "q1 0 c 1 1.0", "q1 0 d -1 1.0"]
    (tmp_path / "out.jsonl").unlink()
    assert _score(tmp_path, data, qrels, sample) == 0
    ppi = json.loads((tmp_path / "out.summary.json").read_text(encoding="utf-8"))["ppi"]
    assert "Horvitz-Thompson" in ppi["method"]["sampling"]
    assert ppi["labels"] == 3 and ppi["unlabelled"] == 1 and ppi["unlabelled_pairs"] == [["q1", "d"]]
    assert "no interval" in ppi["interval_note"] and "--allow-unlabelled" in ppi["interval_note"]
    # Horvitz-Thompson with probability 1: each label's effect counted once; the unlabelled pair
    # (a no) is filled in agreeing, as no labelled pair shares its verdict (effect 0):
    # 0.75 + 0 (a) - 0.25 (b) + 0 (c) + 0 (d) = 0.5
    p2 = ppi["precision"]["2"]
    assert p2["estimate"] == pytest.approx(0.5) and p2["low"] is None


def test_sample_mode_uncertainty_design_and_refusals(tmp_path: Path) -> None:
    from judge.batch import sample_queue

    verdicts = [{"verdict": "yes", "p_yes": 0.5}, {"verdict": "no", "p_yes": 0.99}, {"verdict": "unjudged"}]
    records = [{"id": "q", "query": "x", "docnos": ["a", "b", "c"], "verdicts": verdicts}]
    items = sample_queue(records, expected=1.0, design="uncertainty", seed=0)
    # weights sqrt(.25) = 0.5 and max(sqrt(.0099), 0.1) = 0.1: probabilities 5/6 and 1/6
    probs = {i.docno: i.inclusion for i in sample_queue(records, expected=1.0, design="uncertainty", seed=1)}
    probs |= {i.docno: i.inclusion for i in items}
    for seed in range(2, 40):  # seeded: b (1 in 6) is drawn at some point
        probs |= {
            i.docno: i.inclusion for i in sample_queue(records, expected=1.0, design="uncertainty", seed=seed)
        }
    assert probs == pytest.approx({"a": 5 / 6, "b": 1 / 6})
    with pytest.raises(InputError):
        sample_queue(records, expected=1.0, design="nope")
    with pytest.raises(InputError):
        sample_queue(records, expected=0.0)


def test_score_refuses_a_bad_confidence_and_retry_checks_the_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels, labels = _write(tmp_path, "q0 0 a 1\n")
    out = str(tmp_path / "out.jsonl")
    base = ["score", str(data), "-o", out, "--backend", f"qrels:{qrels}", "--no-cache", "--quiet"]
    assert main([*base, "--sample-labels", str(labels), "--confidence", "1.5"]) == 2
    assert "--confidence" in capsys.readouterr().err and not Path(out).exists()
    assert main(base) == 0
    bad = tmp_path / "bad.qrels"
    bad.write_text("q7 0 a 1\n", encoding="utf-8")
    before = Path(out).read_text(encoding="utf-8")
    retry = ["score", "--retry-unjudged", out, "--backend", f"qrels:{qrels}", "--no-cache", "--quiet"]
    assert main([*retry, "--sample-labels", str(bad)]) == 2
    assert f"{bad}:1" in capsys.readouterr().err
    assert Path(out).read_text(encoding="utf-8") == before  # nothing rewritten
    assert main([*retry, "--sample-labels", str(labels)]) == 0
    summary = json.loads((tmp_path / "out.summary.json").read_text(encoding="utf-8"))
    assert summary["ppi"]["labels"] == 1


def test_python_api_takes_sample_labels(tmp_path: Path) -> None:
    import judge

    data, qrels, labels = _write(tmp_path, "q0 0 b 0\nq1 0 c 3\n")
    report = judge.compare_systems(
        {"A": data, "B": data},
        tmp_path / "api",
        backend=f"qrels:{qrels}",
        cache=False,
        stability_resamples=0,
        resamples=50,
        sample_labels=labels,
    )
    ppi = report.systems["A"].ppi
    assert ppi is not None and ppi["labels"] == 2
    assert ppi["precision"]["5"]["judge"] == pytest.approx(0.3)  # (2/5 + 1/5) / 2 queries
