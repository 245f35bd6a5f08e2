"""Human labels override verdicts in records and the summary (judge.batch.apply_labels),
and the job-level queue and agreement helpers; figures derived by hand."""

from __future__ import annotations

from typing import Any

import pytest

from judge.batch import apply_labels, build_record, job_agreement, job_review_queue, summarize_records
from judge.io import DatasetRecord
from judge.io._jsonl import DatasetPassage
from judge.judging import JudgeConfig, PassageVerdict, summarize
from judge.metrics import ScaleError
from judge.store import Label, LabelSet


def _v(i: int, verdict: str, p: float | None = None, grade: int | None = None) -> PassageVerdict:
    return PassageVerdict(
        index=i,
        passage_id=f"d{i + 1}",
        verdict=verdict,  # type: ignore[arg-type]
        grade=grade,
        p_yes=p,
        reason=f"judge reason {i}",
        template_id="binary.zh.v2",
        template_hash="h",
        backend="fake",
    )


def _record(
    qid: str, verdicts: list[PassageVerdict], *, mode: str = "binary", qrels: dict[str, int] | None = None
) -> dict[str, Any]:
    passages = tuple(DatasetPassage(text=f"{qid} text {v.index}", id=f"d{v.index + 1}") for v in verdicts)
    rec = DatasetRecord(id=qid, query=f"query {qid}", passages=passages, line=1, qrels=qrels)
    config = JudgeConfig(mode=mode, probability=False)  # type: ignore[arg-type]
    result = summarize(rec.query, verdicts, config, "fake", k=(5, 10))
    return build_record(rec, result, (5, 10))


def _q1() -> dict[str, Any]:
    # judge: yes(.9) no(.45) yes(.55) no(.1) -> relevant [1, 0, 1, 0]
    return _record(
        "q1",
        [_v(0, "yes", 0.9), _v(1, "no", 0.45), _v(2, "yes", 0.55), _v(3, "no", 0.1)],
        qrels={"d1": 1, "d2": 1, "d3": 0, "d4": 0},
    )


def _q2() -> dict[str, Any]:
    return _record("q2", [_v(0, "no", 0.2), _v(1, "yes", 0.7)])


def test_labels_override_records_and_summary_as_computed_by_hand() -> None:
    records = [_q1(), _q2()]
    before = summarize_records(records, (5, 10))
    # by hand: q1 AP = (1/1 + 2/3) / 2 = 0.833333; q2 AP = 1/2 = 0.5; mAP 0.666667
    assert records[0]["ap"] == pytest.approx(0.833333) and before["judge"]["map"] == pytest.approx(0.666667)
    assert "human_labels" not in before
    labels = LabelSet(
        [
            Label("q1", "d2", 1, "ann", comment="clearly answers it"),
            Label("q1", "d3", 0, "bob"),
            Label("q9", "d1", 1, "ann"),  # no such query here
        ]
    )
    outcome = apply_labels(records, labels, k=(5, 10))
    q1 = outcome.records[0]
    # q1 relevant becomes [1, 1, 0, 0]: AP = (1 + 1) / 2 = 1.0; P@5 = 2/4 (4 judged)
    assert q1["ap"] == 1.0 and q1["score"] == 0.5 and q1["ndcg"]["5"] == 1.0
    v2, v3 = q1["verdicts"][1], q1["verdicts"][2]
    assert (v2["verdict"], v2["p_yes"], v2["source"], v2["reviewer"]) == ("yes", 1.0, "human", "ann")
    assert v2["replaced"]["verdict"] == "no" and v2["replaced"]["p_yes"] == 0.45
    assert v2["reason"] == "clearly answers it" and v2["replaced"]["reason"] == "judge reason 1"
    assert (v3["verdict"], v3["p_yes"], v3["reviewer"]) == ("no", 0.0, "bob")
    # expected AP with p = [0.9, 1, 0, 0.1], enumerating d1 and d4:
    # .81 * 1 + .09 * (1 + 1 + 3/4) / 3 + .09 * 1/2 + .01 * (1/2 + 2/4) / 2 = 0.9425
    assert q1["expected"]["map"] == pytest.approx(0.9425, abs=1e-6)
    # ground-truth agreement now counts the human verdicts: tp d1 d2, tn d3 d4
    assert q1["ground_truth"]["agreement"] == {"tp": 2, "fp": 0, "fn": 0, "tn": 2}
    assert outcome.records[1] == records[1]  # untouched query is unchanged
    assert (outcome.applied, outcome.changed, outcome.queries, outcome.unmatched) == (2, 2, 1, 1)
    summary = summarize_records(outcome.records, (5, 10))
    assert summary["judge"]["map"] == pytest.approx((1.0 + 0.5) / 2)
    assert summary["human_labels"]["passages"] == 2 and summary["human_labels"]["changed"] == 2
    assert summary["human_labels"]["queries"] == 1 and summary["human_labels"]["reviewers"] == ["ann", "bob"]


def test_reapplying_undoes_earlier_overrides() -> None:
    records = [_q1()]
    once = apply_labels(records, LabelSet([Label("q1", "d2", 1, "ann")])).records
    assert once[0]["ap"] == 1.0  # relevant [1, 1, 1, 0]: (1 + 1 + 1) / 3
    again = apply_labels(once, LabelSet([Label("q1", "d4", 1, "ann")])).records
    # only d4 is human now: relevant [1, 0, 1, 1] -> AP = (1 + 2/3 + 3/4) / 3
    assert again[0]["ap"] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3, abs=1e-6)
    assert [v["source"] for v in again[0]["verdicts"]] == ["judge", "judge", "judge", "human"]
    assert again[0]["verdicts"][1]["p_yes"] == 0.45
    cleared = apply_labels(again, LabelSet([])).records
    assert cleared[0]["ap"] == records[0]["ap"] and cleared[0]["verdicts"] == records[0]["verdicts"]


def test_a_label_decides_an_unjudged_passage() -> None:
    unjudged = PassageVerdict(
        index=1, passage_id="d2", verdict="unjudged", template_id="t", template_hash="h", backend="fake"
    )
    records = [_record("q3", [_v(0, "no", 0.3), unjudged])]
    assert records[0]["unjudged"] == 1 and len(records[0]["unjudged_passages"]) == 1
    out = apply_labels(records, LabelSet([Label("q3", "d2", 1, "ann")])).records[0]
    # relevant [0, 1]: AP = 1/2; nothing left unjudged
    assert out["unjudged"] == 0 and out["unjudged_passages"] == [] and out["ap"] == 0.5


def test_graded_labels_on_a_binary_job_need_a_level() -> None:
    records = [_q1()]
    labels = LabelSet([Label("q1", "d2", 2, "ann", scale="graded")])
    with pytest.raises(ScaleError) as err:
        apply_labels(records, labels)
    assert "graded" in str(err.value) and "binary" in str(err.value) and err.value.field == "labels_level"
    low = apply_labels(records, labels, level=3).records[0]  # grade 2 < 3: not relevant
    high = apply_labels(records, labels, level=2).records[0]
    assert low["verdicts"][1]["verdict"] == "no" and high["verdicts"][1]["verdict"] == "yes"


def test_binary_labels_on_a_graded_job_need_a_yes_grade() -> None:
    records = [
        _record("g1", [_v(0, "yes", grade=2), _v(1, "no", grade=1)], mode="graded"),
    ]
    labels = LabelSet([Label("g1", "d2", 1, "ann")])
    with pytest.raises(ScaleError, match="yes_grade"):
        apply_labels(records, labels)
    out = apply_labels(records, labels, yes_grade=3).records[0]
    v = out["verdicts"][1]
    assert (v["grade"], v["verdict"], v["expected_grade"]) == (3, "yes", 3.0)
    # gains [2, 3]: DCG = 2 + 3/log2(3); IDCG = 3 + 2/log2(3)
    import math

    assert out["ndcg"]["5"] == pytest.approx((2 + 3 / math.log2(3)) / (3 + 2 / math.log2(3)), abs=1e-6)


def test_job_queue_leaves_out_reviewed_items_and_agreement_counts_them() -> None:
    records = [_q1(), _q2()]
    labels = [
        Label("q1", "d2", 1, "ann", created=1.0),
        Label("q1", "d2", 1, "bob", created=2.0),
        Label("q1", "d3", 1, "ann", created=1.0),
        Label("q1", "d3", 0, "bob", created=2.0),
        Label("q2", "d2", 1, "ann", created=1.0, audit=True),
    ]
    queue = job_review_queue(records, LabelSet(labels), audit_every=0, threshold=0.5)
    # flip probability x |change of mAP| (2 queries) if the verdict flips:
    # q2 d1 no .2 -> [1, 1]: AP .5 -> 1, .2 x .25 = .05; q1 d1 yes .9 -> [0, 0, 1, 0]: AP .8333 -> .3333,
    # .1 x .25 = .025; q1 d4 no .1 -> [1, 0, 1, 1]: AP .8333 -> .8056, .1 x .01389 = .001389
    assert [(i.qid, i.docno) for i in queue] == [("q2", "d1"), ("q1", "d1"), ("q1", "d4")]
    assert [round(i.priority, 6) for i in queue] == [0.05, 0.025, 0.001389]
    report = job_agreement(records, labels, resamples=50)
    # items: d2 judge 0 / human 1, d3 judge 1 / human 0 (bob, most recent), q2 d2 judge 1 / human 1
    assert report.overall.n == 3 and report.overall.accuracy == pytest.approx(1 / 3)
    assert report.overall.confusion == [[0, 1], [1, 1]]
    assert report.audit.n == 1
    assert [(p.a, p.b, p.n, p.agreement) for p in report.reviewers] == [("ann", "bob", 2, 0.5)]


def test_label_for_passage_keys_and_keeps_the_judge_verdict() -> None:
    from judge.batch import label_for_passage

    record = _q1()
    lab = label_for_passage(record, 1, 1, "ann", comment="yes", audit=True)
    assert (lab.qid, lab.docno, lab.query, lab.scale) == ("q1", "d2", "query q1", "binary")
    assert (lab.judge_verdict, lab.judge_p_yes, lab.template_id, lab.audit) == (
        "no",
        0.45,
        "binary.zh.v2",
        True,
    )
    overridden = apply_labels([record], LabelSet([lab])).records[0]
    again = label_for_passage(overridden, 1, 0, "bob")
    assert again.judge_verdict == "no" and again.judge_p_yes == 0.45  # the judge's, not ann's
    with pytest.raises(IndexError):
        label_for_passage(record, 4, 1, "ann")
