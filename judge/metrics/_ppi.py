"""Prediction-powered figures: a judge's mean measure corrected by a random sample of human
labels, with an interval (pure: arrays in, numbers out).

The population is the run's judged pairs (``N``); the judge's verdict ``f_i`` is known for
every one of them, a person's label ``Y_j`` for a sample ``S`` of them. The target is the
judge's own figure (same measure, same conventions) computed with every verdict replaced by
the person's label.

**The rectifier.** For a measure averaged over queries, the *effect* of a label is how much
it moves the mean when it replaces its verdict, the query's other verdicts kept::

    e_j = (m_q(f with f_j := Y_j) - m_q(f)) / Q

(``Q``: the queries where the measure is defined). The estimate is the judge's figure plus
the sample's effects scaled up to the population:

* uniform sample of ``n`` pairs (without replacement, :func:`rectified_mean` without
  ``inclusion``): ``theta = m(f) + N * mean(e)``, standard error
  ``N * sqrt((1 - n/N) * var(e) / n)`` (the finite-population correction: the target is
  this run's figure, not a super-population's), and Student's t quantile with ``n - 1``
  degrees of freedom (the variance is estimated from the sample; with 64 labels the
  normal quantile's intervals covered 92.7% instead of 95% in simulation, Student's 93.3%);
* pairs drawn one by one with known inclusion probabilities ``pi_j`` (Poisson sampling,
  active inference: :func:`rectified_mean` with ``inclusion``): the Horvitz-Thompson form
  ``theta = m(f) + sum(e / pi)``, standard error ``sqrt(sum((1 - pi) e^2 / pi^2))``.

The interval is ``theta +- z * se`` (Angelopoulos et al., *Prediction-powered
inference*, Science 2023, with the judge's predictions known on the whole finite
population, so only the rectifier's variance is left; Zrnic and Candès, *Active
statistical inference*, 2024, for the weighted form).

**Linear measures** (P@k, DCG@k, the share judged relevant ``set_P``): a label's effect does
not depend on the other labels, the effects sum to the exact difference, and the estimate is
the standard prediction-powered rectifier, unbiased. **AP and nDCG** are not linear (AP's
denominator and nDCG's ideal ranking depend on the labels). Measured against the judge's own
verdicts, a label's effect leaves out the interaction of two wrong verdicts of one query
(intervals covered 75-92% in simulation). So binary AP and nDCG@k expand around a
*calibrated* point instead (:func:`calibrated_effects`): each verdict becomes the
probability that a person calls such a verdict relevant (``q1`` for yes, ``q0`` for no,
estimated from the sample), the figure there is the exact expected AP / nDCG under
independent labels, and each label's effect is measured against that point (a
model-assisted difference estimator: the model's errors average out to first order, and the
rectifier keeps the estimate honest where the model is wrong). Graded nDCG uses the plain
linearisation. The coverage of both is measured (``scripts/eval_ppi.py``) and written in
:data:`MEASURED_COVERAGE`; a measure whose measured coverage falls short of
:data:`COVERAGE_GOAL`, and every measure with fewer than :data:`MIN_LABELS` labels, gets the
estimate but no interval (``coverage_ok`` false).

**Drawn pairs left unlabelled** (``missing`` in :func:`ppi_figure`) are missing labels, not
labels: the label count and the :data:`MIN_LABELS` minimum are the labelled pairs'. For a
linear measure each missing pair's effect lies between the least and the largest effect any
label could have on it, so the interval is a conservative bound: the estimate ranges over
every labelling of the missing pairs, and the standard error is the largest any labelling
could give (for a uniform sample, the sum of squared effects at its largest less the smallest
squared mean). A labelled pair that goes missing can only widen each of the three, so more
missing labels never make an interval narrower; with none missing it is the ordinary one.
The point estimate fills each missing pair with the labels of the labelled pairs the judge
gave the same verdict (missing at random within the verdict, weighted as the sample is;
agreeing with the judge where no labelled pair shares its verdict), which lies inside the
bound. A nonlinear measure uses the labelled pairs alone, with no interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import norm, t

from judge.metrics._expected_ranking import expected_average_precision, expected_ndcg
from judge.metrics._judged import JudgedList
from judge.metrics._measure import Measure

__all__ = [
    "COVERAGE_GOAL",
    "LINEAR_MEASURES",
    "MEASURED_COVERAGE",
    "MIN_LABELS",
    "PpiFigure",
    "PpiInterval",
    "calibrated_effects",
    "inclusion_probabilities",
    "is_linear",
    "label_effects",
    "poisson_draw",
    "ppi_figure",
    "rectified_mean",
]

#: Measure families (trec_eval root names) linear in the labels of a judged list.
LINEAR_MEASURES = frozenset({"P", "set_P", "dcg", "dcg_cut"})

#: Measure families whose values lie in [0, 1]: their estimate and interval are clipped to it
#: (the truth lies in it, so clipping never loses coverage).
UNIT_RANGE = frozenset({"P", "set_P", "map", "ndcg", "ndcg_cut"})

#: Coverage an interval must reach in simulation to be shown as valid.
COVERAGE_GOAL = 0.93

#: Fewer labels than this: no interval for any measure. In simulation (DL 2019, 430 pairs) the
#: nominal 95% intervals covered 89-90% with 22 labels (5%) and 93-95% from 43 labels (10%) up.
MIN_LABELS = 40

#: The lowest coverage of the nominal 95% interval of AP's and nDCG@10's calibrated rectifier
#: measured by ``scripts/eval_ppi.py`` with at least 40 labels (TREC DL 2019, ICT-BERT2's top
#: 10: a simulated lenient judge, 300 draws at 10/15/30% labelled, nDCG@10 90.7-92.3%, AP
#: 93.0-94.0%; the embedded judge's real verdicts on a 15-query slice, 200 draws with 45 and 75
#: labels, nDCG@10 86.5-90.0%, AP 88.5-90.5%); docs/agreement.md has the tables. Linear
#: measures need no entry (the rectifier is exact).
MEASURED_COVERAGE: Mapping[str, float] = {"ndcg_cut": 0.865, "map": 0.885}


def is_linear(measure: Measure) -> bool:
    """Whether ``measure``'s per-query value is linear in the labels of a judged list."""
    return measure.name in LINEAR_MEASURES


def interval_valid(measure: Measure, labels: int | None = None) -> bool:
    """At least :data:`MIN_LABELS` labels (when given), and linear or its measured coverage
    reaches :data:`COVERAGE_GOAL`."""
    if labels is not None and labels < MIN_LABELS:
        return False
    return is_linear(measure) or MEASURED_COVERAGE.get(measure.name, 0.0) >= COVERAGE_GOAL


@dataclass(frozen=True)
class PpiInterval:
    """A rectified estimate, its interval (None when fewer than two labels) and its
    standard error."""

    estimate: float
    low: float | None
    high: float | None
    se: float | None


def _z(confidence: float, df: int | None = None) -> float:
    """The two-sided quantile: normal, or Student's t with ``df`` degrees of freedom."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    q = 0.5 + confidence / 2.0
    return float(norm.ppf(q) if df is None else t.ppf(q, df))


def rectified_mean(
    judge_value: float,
    effects: npt.ArrayLike,
    *,
    population: int | None = None,
    inclusion: npt.ArrayLike | None = None,
    confidence: float = 0.95,
) -> PpiInterval:
    """The judge's figure corrected by the labels' ``effects`` (see the module docstring).

    Give ``population`` (``N``) for a uniform sample without replacement, or ``inclusion``
    (each label's probability of having been drawn, in (0, 1]) for a Poisson sample.
    """
    e = np.asarray(effects, dtype=np.float64).reshape(-1)
    z = _z(confidence)  # checks the level; a uniform sample's variance is estimated: t below
    if not np.all(np.isfinite(e)):
        raise ValueError("effects must be finite")
    if inclusion is not None:
        pi = np.asarray(inclusion, dtype=np.float64).reshape(-1)
        if pi.shape != e.shape:
            raise ValueError(f"inclusion has {pi.shape[0]} values for {e.shape[0]} effects")
        with np.errstate(divide="ignore", over="ignore"):
            weights = 1.0 / pi
        if not np.all((pi > 0.0) & (pi <= 1.0) & np.isfinite(weights)):
            raise ValueError("inclusion probabilities must be in (0, 1] with a finite 1 / p")
        estimate = judge_value + math.fsum(e / pi)
        se: float | None = math.sqrt(math.fsum((1.0 - pi) * e**2 / pi**2)) if e.size else None
    else:
        if population is None:
            raise ValueError("give population (a uniform sample) or inclusion probabilities")
        n = e.size
        if n > population:
            raise ValueError(f"{n} labels for a population of {population} pairs")
        estimate = judge_value + (population * float(np.mean(e)) if n else 0.0)
        se = (
            population * math.sqrt(max(0.0, 1.0 - n / population) * float(np.var(e, ddof=1)) / n)
            if n >= 2
            else None
        )
        if n >= 2:
            z = _z(confidence, n - 1)
    if se is None:
        return PpiInterval(estimate, None, None, None)
    return PpiInterval(estimate, estimate - z * se, estimate + z * se, se)


def label_effects(
    lists: Sequence[JudgedList],
    measure: Measure,
    pairs: Sequence[tuple[int, int]],
    relevant: Sequence[int],
    gains: Sequence[int],
) -> tuple[float | None, npt.NDArray[np.float64]]:
    """The judge's mean of ``measure`` over ``lists`` (the queries where it is defined) and
    each label's effect on it: ``pairs[j]`` = (list index, position), whose verdict becomes
    ``relevant[j]`` / ``gains[j]``. A pair whose verdict is unjudged is a ValueError."""
    values = [jl.value(measure) for jl in lists]
    defined = [v for v in values if v is not None]
    effects = np.zeros(len(pairs), dtype=np.float64)
    if not defined:
        return None, effects
    q = len(defined)
    flipped: dict[tuple[int, int, int, int], float] = {}
    for j, ((qi, pos), rel, gain) in enumerate(zip(pairs, relevant, gains, strict=True)):
        base = lists[qi]
        if base.relevant[pos] < 0:
            raise ValueError(f"pair {j} (list {qi}, position {pos}) is unjudged")
        if int(base.relevant[pos]) == rel and int(base.gains[pos]) == gain:
            continue  # the label agrees with the verdict: no effect
        key = (qi, pos, int(rel), int(gain))
        if key not in flipped:
            r = base.relevant.copy()
            g = base.gains.copy()
            r[pos], g[pos] = rel, gain
            value = JudgedList(r, g, base.pool_relevant, base.pool_gains).value(measure)
            before = values[qi]
            assert value is not None and before is not None  # the list has a judged passage
            flipped[key] = (value - before) / q
        effects[j] = flipped[key]
    return math.fsum(defined) / q, effects


def _expected(measure: Measure, p: npt.NDArray[np.float64]) -> float:
    if measure.name == "map":
        return expected_average_precision(p) if p.size else 0.0
    return expected_ndcg(p, k=measure.cutoff).value


CALIBRATED_MEASURES = frozenset({"map", "ndcg_cut"})


def calibrated_effects(
    lists: Sequence[JudgedList],
    measure: Measure,
    pairs: Sequence[tuple[int, int]],
    relevant: Sequence[int],
    *,
    inclusion: Sequence[float] | None = None,
) -> tuple[float | None, npt.NDArray[np.float64]]:
    """The calibrated expansion point of a nonlinear binary measure (AP, nDCG@k) and each
    label's effect around it.

    The sample gives ``q1`` = P(label relevant | verdict yes) and ``q0`` = P(label relevant |
    verdict no) (weighted by ``1 / inclusion`` when given); every judged passage gets the
    probability of its verdict's stratum, and the figure at that point is the exact expected
    measure under independent labels (:func:`expected_average_precision`,
    :func:`expected_ndcg`). A label's effect is how much its query's expected value moves
    when its probability becomes the label. Pairs' positions are in the lists' own indexing
    (unjudged passages included)."""
    if measure.name not in CALIBRATED_MEASURES:
        raise ValueError(f"{measure.name} has no calibrated expansion (AP and nDCG@k only)")
    weights = np.ones(len(pairs)) if inclusion is None else 1.0 / np.asarray(inclusion, dtype=np.float64)
    verdicts = np.array([int(lists[qi].relevant[pos]) for qi, pos in pairs], dtype=np.int64)
    labels = np.asarray(relevant, dtype=np.float64).reshape(-1)
    if np.any(verdicts < 0):
        raise ValueError("a labelled pair is unjudged")
    q = {}
    for f in (0, 1):
        mask = verdicts == f
        q[f] = float(np.sum(weights[mask] * labels[mask]) / np.sum(weights[mask])) if mask.any() else float(f)
    points: list[npt.NDArray[np.float64] | None] = []
    values: list[float | None] = []
    for jl in lists:
        judged = jl.relevant[jl.relevant >= 0]
        if judged.size == 0:
            points.append(None)
            values.append(None)
            continue
        p = np.where(judged == 1, q[1], q[0]).astype(np.float64)
        points.append(p)
        values.append(_expected(measure, p))
    defined = [v for v in values if v is not None]
    effects = np.zeros(len(pairs), dtype=np.float64)
    if not defined:
        return None, effects
    n_q = len(defined)
    for j, (qi, pos) in enumerate(pairs):
        point, before = points[qi], values[qi]
        assert point is not None and before is not None
        index = int(np.count_nonzero(lists[qi].relevant[:pos] >= 0))  # position among the judged
        moved = point.copy()
        moved[index] = labels[j]
        effects[j] = (_expected(measure, moved) - before) / n_q
    return math.fsum(defined) / n_q, effects


def estimate_dict(
    estimate: float | None,
    low: float | None,
    high: float | None,
    judge: float | None,
    digits: int,
) -> dict[str, object]:
    """An estimate, its interval and the judge's own figure as a JSON mapping, each rounded
    to ``digits`` (None stays None): the shared head of every corrected figure's dict."""

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, digits)

    return {"estimate": r(estimate), "low": r(low), "high": r(high), "judge": r(judge)}


@dataclass(frozen=True)
class PpiFigure:
    """One measure's prediction-powered figure: ``estimate`` and its interval (None when
    the method's coverage falls short, or fewer than :data:`MIN_LABELS` labels), the judge's own figure, the
    labels used, and whether the interval's coverage is established."""

    estimate: float | None
    low: float | None
    high: float | None
    judge: float | None
    labels: int
    linear: bool
    coverage_ok: bool

    def as_dict(self, digits: int = 6) -> dict[str, object]:
        return {
            **estimate_dict(self.estimate, self.low, self.high, self.judge, digits),
            "labels": self.labels,
            "coverage_ok": self.coverage_ok,
        }


def ppi_figure(
    lists: Sequence[JudgedList],
    measure: Measure,
    pairs: Sequence[tuple[int, int]],
    relevant: Sequence[int],
    gains: Sequence[int],
    *,
    population: int | None = None,
    inclusion: Sequence[float] | None = None,
    confidence: float = 0.95,
    missing: Sequence[tuple[int, int]] = (),
    missing_inclusion: Sequence[float] | None = None,
    candidates: Sequence[tuple[int, int]] = ((0, 0), (1, 1)),
) -> PpiFigure:
    """``measure``'s prediction-powered figure over ``lists`` from the labels of ``pairs``
    (see :func:`label_effects` and :func:`rectified_mean`; binary AP and nDCG expand around
    the calibrated point of :func:`calibrated_effects`). The interval is given only for a
    measure whose coverage is established with this many labels (:func:`interval_valid`); a
    measure within [0, 1] has its estimate and interval clipped to it.

    ``missing``: drawn pairs left unlabelled (``missing_inclusion`` their probabilities of a
    Poisson sample), each of which could take any label of ``candidates`` ((relevant, gain)
    pairs): a linear measure's interval is then the conservative bound of the module doc,
    a nonlinear one's the labelled pairs' estimate without an interval. ``labels`` counts
    the labelled pairs only."""
    judge_value, effects = label_effects(lists, measure, pairs, relevant, gains)
    linear = is_linear(measure)
    ok = interval_valid(measure, len(pairs))
    if judge_value is None:
        return PpiFigure(None, None, None, None, len(pairs), linear, ok)
    if missing and population is None and missing_inclusion is None:
        raise ValueError("give the missing pairs' inclusion probabilities (a Poisson sample)")
    point = judge_value
    binary = all(np.array_equal(jl.relevant, jl.gains) for jl in lists)
    if not linear and binary and measure.name in CALIBRATED_MEASURES:
        calibrated, effects = calibrated_effects(lists, measure, pairs, relevant, inclusion=inclusion)
        assert calibrated is not None  # defined wherever the judge's figure is
        point = calibrated
    elif not linear:
        ok = False  # graded nonlinear: the plain linearisation, coverage not measured
    if missing and linear:
        result = _bounded(
            lists,
            measure,
            point,
            effects,
            (pairs, relevant, gains, inclusion),
            (missing, missing_inclusion, candidates),
            population=population,
            confidence=confidence,
        )
    else:
        if missing:  # nonlinear: the labelled pairs alone, their probabilities scaled by the response rate
            ok = False
            rate = len(pairs) / (len(pairs) + len(missing))
            inclusion = None if inclusion is None else [p * rate for p in inclusion]
        result = rectified_mean(
            point, effects, population=population, inclusion=inclusion, confidence=confidence
        )
    estimate, low, high = result.estimate, result.low, result.high
    if measure.name in UNIT_RANGE:
        estimate = min(1.0, max(0.0, estimate))
        low = None if low is None else max(0.0, low)
        high = None if high is None else min(1.0, high)
    if not ok:
        low = high = None
    return PpiFigure(estimate, low, high, judge_value, len(pairs), linear, ok)


def _bounded(
    lists: Sequence[JudgedList],
    measure: Measure,
    judge_value: float,
    effects: npt.NDArray[np.float64],
    labelled: tuple[Sequence[tuple[int, int]], Sequence[int], Sequence[int], Sequence[float] | None],
    missing: tuple[Sequence[tuple[int, int]], Sequence[float] | None, Sequence[tuple[int, int]]],
    *,
    population: int | None,
    confidence: float,
) -> PpiInterval:
    """A linear measure's estimate and conservative interval with drawn pairs missing their
    labels (the module doc): the interval's ends are the least and largest estimate over every
    labelling of the missing pairs, widened by the largest standard error any could give."""
    pairs, relevant, gains, inclusion = labelled
    gone, gone_inclusion, candidates = missing
    weighted = population is None
    w = np.ones(len(pairs)) if inclusion is None else 1.0 / np.asarray(inclusion, dtype=np.float64)
    verdict_of = [int(lists[qi].relevant[pos]) for qi, pos in pairs]
    lo = np.zeros(len(gone))
    hi = np.zeros(len(gone))
    fill = np.zeros(len(gone))
    for j, (qi, pos) in enumerate(gone):
        if lists[qi].relevant[pos] < 0:
            raise ValueError(f"missing pair {j} (list {qi}, position {pos}) is unjudged")
        verdict = int(lists[qi].relevant[pos])
        donors = [k for k, v in enumerate(verdict_of) if v == verdict]
        options = list(dict.fromkeys([*candidates, *((relevant[k], gains[k]) for k in donors)]))
        _, moved = label_effects(
            lists, measure, [(qi, pos)] * len(options), [r for r, _ in options], [g for _, g in options]
        )
        effect = dict(zip(options, moved.tolist(), strict=True))
        lo[j], hi[j] = min(0.0, *effect.values()), max(0.0, *effect.values())
        if donors:  # missing at random within the verdict: the same verdict's labels, as weighted
            fill[j] = math.fsum(w[k] * effect[(relevant[k], gains[k])] for k in donors) / math.fsum(
                w[k] for k in donors
            )
    widest = np.maximum(lo**2, hi**2)
    if weighted:
        pi = np.asarray(gone_inclusion, dtype=np.float64)
        if pi.shape != lo.shape or not np.all((pi > 0.0) & (pi <= 1.0)):
            raise ValueError("every missing pair needs an inclusion probability in (0, 1]")
        base = rectified_mean(judge_value, effects, inclusion=inclusion or [], confidence=confidence)
        shift = base.estimate - judge_value
        estimate = judge_value + shift + math.fsum(fill / pi)
        least = judge_value + shift + math.fsum(lo / pi)
        most = judge_value + shift + math.fsum(hi / pi)
        labelled_var = 0.0 if base.se is None else base.se**2
        se = math.sqrt(labelled_var + math.fsum((1.0 - pi) * widest / pi**2))
        z = _z(confidence)
    else:
        assert population is not None
        n = len(pairs) + len(gone)
        if n > population:
            raise ValueError(f"{n} drawn pairs for a population of {population} pairs")
        total = math.fsum(effects)
        estimate = judge_value + population * (total + math.fsum(fill)) / n
        mean_lo, mean_hi = (total + math.fsum(lo)) / n, (total + math.fsum(hi)) / n
        least, most = judge_value + population * mean_lo, judge_value + population * mean_hi
        if n < 2:
            return PpiInterval(estimate, None, None, None)
        smallest_mean_sq = 0.0 if mean_lo <= 0.0 <= mean_hi else min(mean_lo**2, mean_hi**2)
        squares = math.fsum(effects**2) + math.fsum(widest)
        var = max(0.0, (squares - n * smallest_mean_sq) / (n - 1))
        se = population * math.sqrt(max(0.0, 1.0 - n / population) * var / n)
        z = _z(confidence, n - 1)
    return PpiInterval(estimate, least - z * se, most + z * se, se)


def inclusion_probabilities(weights: npt.ArrayLike, expected: float) -> npt.NDArray[np.float64]:
    """Inclusion probabilities proportional to ``weights`` (each > 0) that sum to
    ``expected`` labels, capped at 1 (the weight of the capped ones handed to the others).
    ``expected`` >= the number of pairs: every probability is 1."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.size == 0:
        return w
    if not np.all(np.isfinite(w) & (w > 0)):
        raise ValueError("weights must be finite and > 0")
    if not (math.isfinite(expected) and expected > 0):
        raise ValueError(f"the expected number of labels must be > 0, got {expected}")
    if expected >= w.size:
        return np.ones_like(w)
    pi = np.zeros_like(w)
    capped = np.zeros(w.size, dtype=bool)
    for _ in range(w.size):  # each pass caps at least one more, or ends
        free = ~capped
        scale = (expected - np.count_nonzero(capped)) / float(np.sum(w[free]))
        pi[free] = w[free] * scale
        over = free & (pi >= 1.0)
        if not over.any():
            break
        capped |= over
        pi[capped] = 1.0
    return pi


def poisson_draw(inclusion: npt.ArrayLike, seed: int | Sequence[int]) -> npt.NDArray[np.bool_]:
    """Which pairs are drawn: each independently with its inclusion probability (seeded; a
    sequence of integers seeds one stream of them, as :class:`numpy.random.SeedSequence`)."""
    pi = np.asarray(inclusion, dtype=np.float64).reshape(-1)
    return np.asarray(
        np.random.default_rng(list(seed) if isinstance(seed, Sequence) else seed).random(pi.size) < pi
    )
