"""The adapted decision rule (judge.metrics fit_adaptation): features, the ridge logistic fit,
leave-one-query-out figures and the guards, on values worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judge.metrics import adaptation_features, fit_adaptation, fit_logistic, relevance_feedback


def test_features_by_hand() -> None:
    # logits of 0.5, 0.8, 0.2, 0.5: 0, ln 4, -ln 4, 0; threshold 0.8 shifts the raw column by ln 4
    x = adaptation_features([0.5, 0.8, 0.2, 0.5, 0.8, 0.2], ["a", "a", "a", "a", "b", "b"], 0.8)
    ln4 = math.log(4)
    assert x[:, 0] == pytest.approx([-ln4, 0.0, -2 * ln4, -ln4, 0.0, -2 * ln4])
    # query a: mean logit 0, centred = logit; query b has 2 passages (< 4): no centring (0)
    assert x[:, 1] == pytest.approx([0.0, ln4, -ln4, 0.0, 0.0, 0.0])


def test_features_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="finite"):
        adaptation_features([0.5, math.nan], ["a", "a"], 0.5)
    with pytest.raises(ValueError, match="threshold"):
        adaptation_features([0.5], ["a"], 1.0)
    with pytest.raises(ValueError, match="query ids"):
        adaptation_features([0.5, 0.2], ["a"], 0.5)


def test_logistic_intercept_only_is_the_log_odds_of_the_labels() -> None:
    # a zero column: the ridge keeps its weight at 0, the unpenalised intercept is logit(3/4) = ln 3
    w, b = fit_logistic(np.zeros((4, 1)), [1, 1, 1, 0])
    assert w[0] == pytest.approx(0.0, abs=1e-9)
    assert b == pytest.approx(math.log(3), abs=1e-6)


def test_logistic_two_points_by_hand() -> None:
    # x = -1 (no), +1 (yes), ridge 1: by symmetry b = 0 and the gradient -2 sigma(-w) + w = 0
    w, b = fit_logistic(np.array([[-1.0], [1.0]]), [0, 1], ridge=1.0)
    assert b == pytest.approx(0.0, abs=1e-9)
    assert w[0] == pytest.approx(2.0 / (1.0 + math.exp(w[0])), abs=1e-9)
    assert w[0] == pytest.approx(0.6750, abs=1e-3)  # 2 / (1 + e^0.675) = 0.6748
    # separable labels stay finite through the ridge; a weaker ridge lets the weight grow
    w_small, _ = fit_logistic(np.array([[-1.0], [1.0]]), [0, 1], ridge=0.1)
    assert math.isfinite(w_small[0]) and w_small[0] > w[0]


def test_relevance_feedback_never_counts_the_pair_itself() -> None:
    sim = np.array(
        [
            [1.0, 0.2, 0.9, 0.0],
            [0.2, 1.0, 0.3, 0.0],
            [0.9, 0.3, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )
    # pairs 0 (yes), 1 (no), 2 unlabelled in query a; pair 3 alone in query b
    rf = relevance_feedback(sim, ["a", "a", "a", "b"], [1, 0, -1, 1])
    # pair 2: 0.9 (to the yes) - 0.3 (to the no); pairs 0 and 1 lack the other kind once
    # themselves are left out; pair 3's query has no other label
    assert rf == pytest.approx([0.0, 0.0, 0.6, 0.0])


# Three queries of four labelled pairs (two relevant, two not): the judge ranks each query
# right but leans on its query: yes to all of a, no to all of b, right on c.
P = [0.95, 0.9, 0.8, 0.85, 0.2, 0.25, 0.05, 0.1, 0.6, 0.7, 0.3, 0.4]
Y = [1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0]
Q = ["a"] * 4 + ["b"] * 4 + ["c"] * 4


def test_loqo_alone_by_hand_and_centring_repairs_the_lean() -> None:
    fit = fit_adaptation(P, Q, Y, 0.5, min_labels=4, resamples=200)
    # alone at 0.5: yes to a (4) and c's relevant (2); people 6 yes. Agreement 8/12, chance
    # 1/2 (both say yes to half): kappa (2/3 - 1/2) / (1/2) = 1/3
    assert fit.loqo["alone"]["kappa"] == pytest.approx(1 / 3, abs=1e-4)
    # the centred log-odds separate every query (relevant above its mean, the rest below)
    assert fit.loqo["adapted"]["kappa"] == pytest.approx(1.0)
    assert fit.loqo["adapted"]["auc"] == pytest.approx(1.0)
    assert fit.applied and fit.reason.startswith("applied")
    assert fit.weights["centred"] > abs(fit.weights["logit"])
    assert fit.labels == 12 and fit.positives == 6 and fit.queries == 3
    block = fit.block()
    assert block["features"] == ["logit", "centred"]
    assert block["leave_one_query_out"]["gain"]["kappa"] == pytest.approx(2 / 3, abs=1e-4)
    lo, hi = block["leave_one_query_out"]["alone"]["kappa_ci"]
    assert lo <= 1 / 3 <= hi


def test_a_labelled_pair_never_judges_itself() -> None:
    # a labelled pair's p_adapted comes from the rule fitted on the other queries only:
    # changing its own label (and its query's other labels) leaves it where it was
    base = fit_adaptation(P, Q, Y, 0.5, min_labels=4, resamples=0)
    flipped = list(Y)
    flipped[0] = 0
    flipped[2] = 1
    again = fit_adaptation(P, Q, flipped, 0.5, min_labels=4, resamples=0)
    assert again.p_adapted[:4] == pytest.approx(base.p_adapted[:4])
    assert again.p_adapted[4:] != pytest.approx(base.p_adapted[4:])


def test_unlabelled_pairs_take_the_rule_fitted_on_every_label() -> None:
    p = [*P, 0.88, 0.82, 0.9, 0.8]  # a fourth query: the judge says yes to all, unlabelled
    fit = fit_adaptation(p, [*Q, "d", "d", "d", "d"], [*Y, None, None, None, None], 0.5, min_labels=4)
    x = adaptation_features(p, [*Q, "d", "d", "d", "d"], 0.5)
    x = x / x.std(axis=0)
    z = x[12:] @ np.array([fit.weights["logit"], fit.weights["centred"]]) + fit.intercept
    assert fit.p_adapted[12:] == pytest.approx(list(1 / (1 + np.exp(-z))))
    # its two higher passages yes, the two lower no: the lean of query d is taken out
    assert fit.decisions[12:] == [1, 0, 1, 0]


def test_not_applied_when_it_does_not_beat_the_judge() -> None:
    # the judge alone is already right on every labelled pair: kappa 1 cannot be beaten
    p = [0.9, 0.8, 0.2, 0.1] * 3
    fit = fit_adaptation(p, Q, Y, 0.5, min_labels=4, resamples=0)
    assert fit.loqo["alone"]["kappa"] == pytest.approx(1.0)
    assert not fit.applied
    assert "not above the judge alone's" in fit.reason


@pytest.mark.parametrize(
    ("labels", "groups", "reason"),
    [
        ([None] * 12, Q, "0 labelled pairs"),
        ([1] * 12, Q, "all 12 labels are 1"),
        (Y[:8] + [None] * 4, ["a"] * 4 + ["b"] * 8, "labels on 2 queries"),
    ],
)
def test_guards_keep_the_judge(labels: list[int | None], groups: list[str], reason: str) -> None:
    fit = fit_adaptation(P, groups, labels, 0.5, min_labels=4, resamples=0)
    assert not fit.applied and reason in fit.reason
    assert fit.p_adapted == [None] * 12 and fit.decisions == [None] * 12


def test_unjudged_pairs_are_left_out_and_ties_are_kept_apart() -> None:
    p: list[float | None] = list(P)
    p[1] = None  # unjudged: no P(yes), no adapted value, not a label
    fit = fit_adaptation(p, Q, Y, 0.5, min_labels=4, resamples=0)
    assert fit.p_adapted[1] is None and fit.decisions[1] is None
    assert fit.labels == 11
    # tied P(yes) within a query get one adapted value (the rule reads only P(yes) and the query)
    tied = [0.6, 0.6, 0.4, 0.4] * 3
    fit = fit_adaptation(tied, Q, Y, 0.5, min_labels=4, resamples=0)
    assert fit.p_adapted[0] == pytest.approx(fit.p_adapted[1])


def test_extra_feature_columns_are_standardised_and_named() -> None:
    rf = [0.02, 0.01, -0.01, -0.02] * 3  # tiny raw scale: standardised before the ridge
    fit = fit_adaptation(P, Q, Y, 0.5, extra={"feedback": rf}, min_labels=4, resamples=0)
    assert fit.features == ("logit", "centred", "feedback")
    assert fit.scales["feedback"] == pytest.approx(float(np.std(rf)), rel=1e-4)
    with pytest.raises(ValueError, match="not finite"):
        fit_adaptation(P, Q, Y, 0.5, extra={"feedback": [math.inf] * 12}, min_labels=4)
    with pytest.raises(ValueError, match="11 values"):
        fit_adaptation(P, Q, Y, 0.5, extra={"feedback": [0.0] * 11}, min_labels=4)


def test_centre_by_query_by_hand() -> None:
    from judge.metrics import centre_by_query

    # query a (4 values, mean 2.5): each less 2.5; query b has 2 values (< 4): 0; the order kept
    got = centre_by_query([1.0, 2.0, 3.0, 4.0, 9.0, 7.0], ["a", "a", "a", "a", "b", "b"])
    assert got == pytest.approx([-1.5, -0.5, 0.5, 1.5, 0.0, 0.0])
    # a lower minimum centres b too: 9 and 7 about their mean 8
    got = centre_by_query([9.0, 7.0], ["b", "b"], min_passages=2)
    assert got == pytest.approx([1.0, -1.0])
    assert centre_by_query([], []).size == 0
    with pytest.raises(ValueError, match="query ids"):
        centre_by_query([1.0, 2.0], ["a"])


def _kappa(a: list[int], b: list[int]) -> float:
    x, y = np.array(a, dtype=float), np.array(b, dtype=float)
    po = float(np.mean(x == y))
    pe = float(x.mean() * y.mean() + (1 - x.mean()) * (1 - y.mean()))
    return (po - pe) / (1 - pe)


def _feedback_run() -> tuple[list[float], list[str], list[int | None], list[int], list[float]]:
    """Ten queries of six passages (even positions relevant). The judge is right at 0.5 except
    where (query + position) % 7 == 0 (8 of 60). Queries 0-5 are labelled on d0-d3 and their
    relevance feedback reads it perfectly, uncentred as Rocchio gives it (1 for a relevant
    passage, 0 for the others); queries 6-9 nobody labelled: feedback 0."""
    p: list[float] = []
    groups: list[str] = []
    labels: list[int | None] = []
    truth: list[int] = []
    feedback: list[float] = []
    for k in range(10):
        for i in range(6):
            rel = int(i % 2 == 0)
            value = 0.65 + 0.02 * ((k + i) % 5) if rel else 0.25 + 0.02 * ((k * i) % 5)
            p.append(round(1 - value if (k + i) % 7 == 0 else value, 3))
            groups.append(f"q{k}")
            truth.append(rel)
            labels.append(rel if k < 6 and i < 4 else None)
            feedback.append(float(rel) if k < 6 else 0.0)
    return p, groups, labels, truth, feedback


def test_the_check_scores_a_held_out_query_as_a_query_nobody_labelled() -> None:
    """The rule decides queries nobody labelled with no feedback; its leave-one-query-out check
    must score the held-out query so too. Scored with its own labels' feedback, the check
    shows kappa 1 and applies a rule that says no to every passage of the unlabelled queries
    (0 read as the level of a non-relevant passage), where the judge alone has kappa 0.75."""
    p, groups, labels, truth, feedback = _feedback_run()
    fit = fit_adaptation(p, groups, labels, 0.5, extra={"feedback": feedback}, resamples=0)
    unlabelled = [j for j, g in enumerate(groups) if int(g[1:]) >= 6]
    judge = [int(p[j] >= 0.5) for j in unlabelled]
    decided = [int(fit.decisions[j] or 0) if fit.applied else judge[n] for n, j in enumerate(unlabelled)]
    want = [truth[j] for j in unlabelled]
    assert _kappa(want, judge) == pytest.approx(0.75)
    # without its feedback the held-out query is decided by the log-odds: no better than the judge
    assert fit.loqo["adapted"]["kappa"] == pytest.approx(fit.loqo["alone"]["kappa"]) and not fit.applied
    assert _kappa(want, decided) >= _kappa(want, judge)


def test_a_held_out_querys_own_feedback_never_enters_its_check() -> None:
    p, groups, labels, _, feedback = _feedback_run()
    base = fit_adaptation(p, groups, labels, 0.5, extra={"feedback": feedback}, resamples=0)
    other = list(feedback)
    other[:6] = [5.0, -3.0, 0.5, 2.0, 0.0, 1.0]  # query 0's feedback, whatever it is
    again = fit_adaptation(p, groups, labels, 0.5, extra={"feedback": other}, resamples=0)
    # query 0's labelled pairs are scored as if it had no label: the same held-out values
    assert again.p_adapted[:4] == pytest.approx(base.p_adapted[:4], abs=1e-12)


def test_feedback_is_neutral_where_a_query_has_no_label() -> None:
    # the level of the labelled queries' feedback is no signal (centred on its query): shifting it
    # leaves every decision, the unlabelled queries' among them, where it was
    p, groups, labels, _, feedback = _feedback_run()
    base = fit_adaptation(p, groups, labels, 0.5, extra={"feedback": feedback}, resamples=0)
    shifted = [f + 3.0 if int(g[1:]) < 6 else f for f, g in zip(feedback, groups, strict=True)]
    again = fit_adaptation(p, groups, labels, 0.5, extra={"feedback": shifted}, resamples=0)
    assert again.p_adapted == pytest.approx(base.p_adapted, abs=1e-9)
    assert again.weights == pytest.approx(base.weights) and again.applied == base.applied
