"""A decision rule learned from a run's labels (``--adapt``): pure functions over arrays.

The judge gives every pair its P(yes); a team's labels say, for some pairs, what people
decided. :func:`fit_adaptation` learns from them how far to trust each of a few features of
a pair and decides every pair of the run with them:

* ``logit``: the judge's log-odds at its own threshold, ``logit(p_yes) - logit(t)`` (the
  judge alone says yes iff it is >= 0);
* ``centred``: the same log-odds less the mean over the judged pairs of its query (the
  judge's leaning on that query taken out; no label enters it). A query with fewer than
  ``min_passages`` judged pairs has no reliable mean: 0 there (the collection's rule);
* optional extra columns the caller computes (``extra``), such as the encoder's query-passage
  similarity centred on its query (:func:`centre_by_query`) and its relevance feedback
  (:func:`relevance_feedback`): each column is standardised over the run's judged pairs
  before the fit, so one ridge weighs them alike. A column that reads its query's labels
  (``label_features``, by default :data:`RELEVANCE_FEEDBACK`) must be 0 on a query without
  labels; it is centred on its query before the fit, so that 0, what an unlabelled query
  has, is neutral by construction (every labelled query's values average 0 too, and the
  intercept learns nothing from their level).

The rule is an L2-regularised logistic regression (``ridge``, the intercept unpenalised)
fitted by Newton's method on the labelled pairs; ``p_adapted`` is its probability and the
adapted verdict is yes iff ``p_adapted >= 0.5``.

Honest by construction:

* **Leave one query out (LOQO)**: each labelled query's pairs are predicted by the rule
  fitted on the *other* queries' labels, from features built exactly as where the rule is
  applied to a query nobody labelled: its label-reading columns are 0 (no label of the
  held-out query enters its own feedback) and standardised with that; the pooled
  predictions give κ (the judge alone at its threshold, adapted at 0.5) and ROC AUC
  (P(yes) against ``p_adapted``), each with a percentile bootstrap interval over the
  labelled queries (seeded), and the paired gain.
* A **labelled pair never judges itself**: its ``p_adapted`` is its LOQO prediction (its
  own label, and its query's, never in the weights; an ``extra`` column that reads labels,
  such as relevance feedback, is the caller's to compute without the pair's own label).
* The rule is **applied** only when the LOQO κ adapted is above the judge alone's; otherwise
  (or with too few labels) ``applied`` is False, ``reason`` says why, and the caller keeps
  the judge's verdicts.
* A rule that **weighs the judge's log-odds negatively** (``logit`` or ``centred``) is never
  applied, whatever its κ: it would turn the judge's verdicts around. Labels that contradict
  the judge everywhere (a scale read upside down: 0 for the most relevant) teach such a rule
  and pass the LOQO check, since it agrees with them; ``warning`` names that likely cause.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from judge.metrics._agreement import AgreementUndefinedError, cohen_kappa, roc_auc

# Its public names are listed once, by the package (``_ADAPT_NAMES`` in judge/metrics/__init__.py,
# which loads this module on first use).

ADAPT_METHOD = "logistic.v2"
"""The method's id, recorded on every adapted verdict and in the summary (v2: one rule over
every feature the run has; v1 fitted with and without the extra columns and let the labels
choose, which the held-out measurement found noisier, docs/agreement.md)."""
MIN_ADAPT_LABELS = 8
"""Fewer labelled pairs than this: not adapted (the judge's verdicts kept)."""
MIN_ADAPT_QUERIES = 3
"""Fewer labelled queries than this: not adapted (LOQO needs held-out queries)."""
MIN_QUERY_PASSAGES = 4
"""A query with fewer judged pairs has no ``centred`` feature (0: the collection's rule)."""
DEFAULT_RIDGE = 1.0
RELEVANCE_FEEDBACK = "feedback"
"""The relevance feedback's name in the rule (:func:`relevance_feedback`): a column that reads
its query's labels (see ``label_features`` of :func:`fit_adaptation`)."""
JUDGE_COLUMNS = ("logit", "centred")
"""The columns that are the judge's own log-odds: a negative weight on either inverts it."""
P_CLIP = 1e-15  # P(yes) of a confident model comes within 1e-9 of 1: keep those apart

FloatArray = npt.NDArray[np.float64]


def _logit(p: FloatArray) -> FloatArray:
    q = np.clip(p, P_CLIP, 1.0 - P_CLIP)
    out: FloatArray = np.log(q) - np.log1p(-q)
    return out


def _sigmoid(z: FloatArray) -> FloatArray:
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * z))  # stable for any z
    return out


def _thresholds(threshold: float | Sequence[float] | FloatArray, n: int) -> FloatArray:
    t = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (n,)).copy()
    if not np.all(np.isfinite(t)) or np.any((t <= 0.0) | (t >= 1.0)):
        raise ValueError(f"the threshold must be in (0, 1), got {threshold}")
    return t


def centre_by_query(
    values: Sequence[float] | FloatArray, groups: Sequence[str], *, min_passages: int = MIN_QUERY_PASSAGES
) -> FloatArray:
    """Each value less the mean of its query's values (``groups``: each value's query): what
    the query leans to taken out, its order kept. A query with fewer than ``min_passages``
    values has no reliable mean: 0 there (the collection's rule). No label enters it."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or len(groups) != v.size:
        raise ValueError(f"{v.size} values but {len(groups)} query ids")
    out = np.zeros_like(v)
    keys = np.asarray(list(groups), dtype=object)
    for key in dict.fromkeys(groups):
        mask = keys == key
        if int(mask.sum()) >= min_passages:
            out[mask] = v[mask] - v[mask].mean()
    return out


def adaptation_features(
    p_yes: Sequence[float] | FloatArray,
    groups: Sequence[str],
    threshold: float | Sequence[float] | FloatArray,
    *,
    min_passages: int = MIN_QUERY_PASSAGES,
) -> FloatArray:
    """The ``logit`` and ``centred`` columns (``n x 2``) of ``p_yes`` (finite, in [0, 1]),
    each pair's query in ``groups``, the judge's ``threshold`` (one, or one per pair; see
    the module doc)."""
    p = np.asarray(p_yes, dtype=np.float64)
    if p.ndim != 1 or len(groups) != p.size:
        raise ValueError(f"{p.size} P(yes) values but {len(groups)} query ids")
    if not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("P(yes) values must be finite numbers in [0, 1]")
    t = _thresholds(threshold, p.size)
    z = _logit(p)
    raw = z - np.log(t / (1.0 - t))
    return np.column_stack([raw, centre_by_query(z, groups, min_passages=min_passages)])


def relevance_feedback(similarity: FloatArray, groups: Sequence[str], labels: Sequence[int]) -> FloatArray:
    """Rocchio's relevance feedback of every pair: the mean similarity (``similarity[i, j]``,
    e.g. cosine of two passages' vectors) to its query's labelled relevant pairs minus the
    mean to its labelled non-relevant ones, never counting the pair itself (a labelled
    pair's own label does not enter its value). 0 where the query has no labelled pair of
    either kind besides the pair itself. ``labels``: 1, 0 or -1 (unlabelled)."""
    sim = np.asarray(similarity, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    n = y.size
    if sim.shape != (n, n) or len(groups) != n:
        raise ValueError(f"need an {n} x {n} similarity matrix and {n} query ids, got {sim.shape}")
    keys = np.asarray(list(groups), dtype=object)
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        same = keys == keys[i]
        same[i] = False
        rel = same & (y == 1)
        non = same & (y == 0)
        if rel.any() and non.any():
            out[i] = float(sim[i, rel].mean() - sim[i, non].mean())
    return out


def fit_logistic(
    x: FloatArray, y: Sequence[int] | npt.NDArray[np.int64], *, ridge: float = DEFAULT_RIDGE, iters: int = 100
) -> tuple[FloatArray, float]:
    """``(weights, intercept)`` minimising ``sum log-loss + ridge / 2 * |weights|^2`` (the
    intercept unpenalised) by Newton's method; ``y`` 0/1. Separable labels stay finite
    through the ridge (``ridge`` > 0)."""
    xs = np.asarray(x, dtype=np.float64)
    t = np.asarray(y, dtype=np.float64)
    if xs.ndim != 2 or xs.shape[0] != t.size:
        raise ValueError(f"need an n x k matrix for {t.size} labels, got {xs.shape}")
    if ridge <= 0:
        raise ValueError("ridge must be > 0")
    n, k = xs.shape
    a = np.column_stack([xs, np.ones(n)])
    penalty = np.diag([ridge] * k + [1e-9])
    theta = np.zeros(k + 1)
    for _ in range(iters):
        p = _sigmoid(a @ theta)
        grad = a.T @ (p - t) + penalty @ theta
        hess = a.T @ (a * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hess, grad)
        theta = theta - step
        if float(np.max(np.abs(step))) < 1e-10:
            break
    return theta[:k].copy(), float(theta[k])


@dataclass(frozen=True)
class Adaptation:
    """What :func:`fit_adaptation` learned and decided (see the module doc).

    ``p_adapted``: one value per pair (None where the pair had no P(yes)); ``decisions``
    the adapted yes (1) / no (0) at 0.5; ``weights`` by feature name on the standardised
    columns (fitted on every label) and ``intercept``; ``loqo`` the held-out figures:
    ``{"alone": {...}, "adapted": {...}, "gain": {...}}`` each with ``kappa``, ``auc`` and
    their ``*_ci`` intervals; ``applied`` and ``reason``; ``warning`` (None unless the rule
    was refused for inverting the judge: what to check)."""

    method: str
    features: tuple[str, ...]
    p_adapted: list[float | None]
    decisions: list[int | None]
    weights: dict[str, float]
    intercept: float | None
    labels: int
    positives: int
    queries: int
    loqo: dict[str, Any]
    applied: bool
    reason: str
    scales: dict[str, float] = field(default_factory=dict)
    warning: str | None = None

    def block(self) -> dict[str, Any]:
        """The summary's ``adaptation`` block (no per-pair values)."""
        return {
            "method": self.method,
            "features": list(self.features),
            "labels": self.labels,
            "positives": self.positives,
            "queries": self.queries,
            "weights": {k: round(v, 6) for k, v in self.weights.items()},
            "intercept": None if self.intercept is None else round(self.intercept, 6),
            "leave_one_query_out": self.loqo,
            "applied": self.applied,
            "reason": self.reason,
            "warning": self.warning,
        }


def _kappa(y: npt.NDArray[np.int64], d: npt.NDArray[np.int64]) -> float | None:
    try:
        return float(cohen_kappa(y, d, labels=[0, 1]))
    except AgreementUndefinedError:
        return None


def _auc(y: npt.NDArray[np.int64], s: FloatArray) -> float | None:
    try:
        return float(roc_auc(y, s))
    except AgreementUndefinedError:
        return None


def _fast_kappa(y: FloatArray, d: FloatArray) -> float:
    n = y.size
    po = float(np.mean(y == d))
    py, pd = float(y.mean()), float(d.mean())
    pe = py * pd + (1 - py) * (1 - pd)
    return math.nan if pe >= 1.0 or n == 0 else (po - pe) / (1.0 - pe)


def _fast_auc(y: FloatArray, s: FloatArray) -> float:
    pos = s[y == 1]
    neg = s[y == 0]
    if pos.size == 0 or neg.size == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater) / float(pos.size * neg.size)


def _interval(draws: list[float]) -> list[float] | None:
    good = [d for d in draws if not math.isnan(d)]
    if len(good) < max(10, len(draws) // 2):
        return None
    return [round(float(np.percentile(good, 2.5)), 4), round(float(np.percentile(good, 97.5)), 4)]


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _loqo_figures(
    y: npt.NDArray[np.int64],
    alone_d: npt.NDArray[np.int64],
    alone_s: FloatArray,
    adapted_p: FloatArray,
    qidx: npt.NDArray[np.int64],
    *,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    adapted_d = (adapted_p >= 0.5).astype(np.int64)
    k_alone, k_adapted = _kappa(y, alone_d), _kappa(y, adapted_d)
    a_alone, a_adapted = _auc(y, alone_s), _auc(y, adapted_p)
    rng = np.random.default_rng(seed)
    queries = np.unique(qidx)
    members = [np.flatnonzero(qidx == q) for q in queries]
    yf, ad, dd = y.astype(np.float64), alone_d.astype(np.float64), adapted_d.astype(np.float64)
    draws: dict[str, list[float]] = {k: [] for k in ("ka", "kd", "kg", "aa", "ad", "ag")}
    for _ in range(resamples if queries.size >= 2 else 0):
        rows = np.concatenate([members[i] for i in rng.integers(queries.size, size=queries.size)])
        ka, kd = _fast_kappa(yf[rows], ad[rows]), _fast_kappa(yf[rows], dd[rows])
        aa, adp = _fast_auc(yf[rows], alone_s[rows]), _fast_auc(yf[rows], adapted_p[rows])
        draws["ka"].append(ka)
        draws["kd"].append(kd)
        draws["kg"].append(kd - ka)
        draws["aa"].append(aa)
        draws["ad"].append(adp)
        draws["ag"].append(adp - aa)

    def gain(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else b - a

    return {
        "alone": {
            "kappa": _r(k_alone),
            "kappa_ci": _interval(draws["ka"]),
            "auc": _r(a_alone),
            "auc_ci": _interval(draws["aa"]),
        },
        "adapted": {
            "kappa": _r(k_adapted),
            "kappa_ci": _interval(draws["kd"]),
            "auc": _r(a_adapted),
            "auc_ci": _interval(draws["ad"]),
        },
        "gain": {
            "kappa": _r(gain(k_alone, k_adapted)),
            "kappa_ci": _interval(draws["kg"]),
            "auc": _r(gain(a_alone, a_adapted)),
            "auc_ci": _interval(draws["ag"]),
        },
        "interval": f"95% percentile bootstrap over the {queries.size} labelled queries, "
        f"{resamples} resamples, seed {seed}",
    }


def _standardise(cols: FloatArray, judged: npt.NDArray[np.bool_]) -> tuple[FloatArray, FloatArray]:
    """Columns divided by their standard deviation over the judged pairs (1 where it is 0)."""
    scale = cols[judged].std(axis=0) if judged.any() else np.ones(cols.shape[1])
    scale = np.where(scale > 1e-12, scale, 1.0)
    return cols / scale, scale


def _loqo_predictions(
    raw: FloatArray,
    lab: npt.NDArray[np.int64],
    kidx: npt.NDArray[np.int64],
    q_of: npt.NDArray[np.int64],
    rows_of: list[npt.NDArray[np.int64]],
    label_cols: list[int],
    ridge: float,
) -> FloatArray:
    """Each labelled pair's probability from the rule fitted on the other queries' labels
    (one kind of label only there: that kind, with certainty). The features are built as if
    the held-out query had no label: its label-reading columns (``label_cols`` of the raw
    columns ``raw``) are 0 on every one of its pairs (``rows_of[q]``) and every column is
    standardised with that, as where the rule decides a query nobody labelled."""
    out = np.zeros(kidx.size)
    x = _standardise(raw, np.ones(raw.shape[0], dtype=bool))[0]
    for qi in np.unique(q_of):
        test = q_of == qi
        train = kidx[~test]
        if label_cols:
            held = raw.copy()
            held[np.ix_(rows_of[int(qi)], np.asarray(label_cols, dtype=np.int64))] = 0.0
            x = _standardise(held, np.ones(raw.shape[0], dtype=bool))[0]
        if np.unique(lab[train]).size < 2:
            w0, b0 = np.zeros(x.shape[1]), 30.0 if lab[train][0] == 1 else -30.0
        else:
            w0, b0 = fit_logistic(x[train], lab[train], ridge=ridge)
        out[test] = _sigmoid(x[kidx[test]] @ w0 + b0)
    return out


def _decide(weights: Mapping[str, float], loqo: Mapping[str, Any]) -> tuple[bool, str, str | None]:
    """``(applied, reason, warning)`` of a fitted rule: never one that weighs the judge's
    log-odds negatively (it inverts the judge: ``warning`` names the likely cause), else
    applied iff its leave-one-query-out κ is above the judge alone's."""
    k_alone, k_adapted = loqo["alone"]["kappa"], loqo["adapted"]["kappa"]
    inverted = {nm: weights[nm] for nm in JUDGE_COLUMNS if weights.get(nm, 0.0) < 0.0}
    if inverted:
        said = ", ".join(f"{nm} {v:.3g}" for nm, v in inverted.items())
        return (
            False,
            f"not applied: the rule weighs the judge's log-odds negatively ({said}), so it would "
            "turn the judge's verdicts around; the judge's verdicts are kept",
            "the labels contradict the judge: the more the judge leans to yes, the more they say no. "
            "The likely cause is labels on an inverted scale (0 for the most relevant, or a grade read "
            "upside down); check the labels and their mapping (--labels-level, --labels-yes-grade)",
        )
    if k_adapted is None or (k_alone is not None and k_adapted <= k_alone):
        return (
            False,
            f"not applied: leave-one-query-out kappa adapted {k_adapted} is not above the judge "
            f"alone's {k_alone}; the judge's verdicts are kept",
            None,
        )
    return (
        True,
        f"applied: leave-one-query-out kappa adapted {k_adapted} above the judge alone's {k_alone}",
        None,
    )


def fit_adaptation(
    p_yes: Sequence[float | None],
    groups: Sequence[str],
    labels: Sequence[int | None],
    threshold: float | Sequence[float],
    *,
    extra: Mapping[str, Sequence[float]] | None = None,
    label_features: Collection[str] = (RELEVANCE_FEEDBACK,),
    ridge: float = DEFAULT_RIDGE,
    min_passages: int = MIN_QUERY_PASSAGES,
    min_labels: int = MIN_ADAPT_LABELS,
    min_queries: int = MIN_ADAPT_QUERIES,
    use_centred: bool = True,
    resamples: int = 1000,
    seed: int = 0,
) -> Adaptation:
    """Learn the rule from ``labels`` (1, 0, or None: unlabelled) and decide every pair
    (see the module doc). ``p_yes``: the judge's P(yes) (None: unjudged, left out and left
    None); ``groups``: each pair's query; ``threshold``: the judge's P(yes) threshold (one,
    or one per pair);
    ``extra``: further feature columns by name (one value per pair); those named in
    ``label_features`` read their query's labels (0 on a query without any): centred on
    their query, and 0 on a held-out query in the leave-one-query-out check."""
    n = len(p_yes)
    if len(groups) != n or len(labels) != n:
        raise ValueError(f"{n} P(yes) values, {len(groups)} query ids and {len(labels)} labels")
    judged = np.array([p is not None for p in p_yes], dtype=bool)
    idx = [int(i) for i in np.flatnonzero(judged)]
    names: list[str] = ["logit", "centred"] if use_centred else ["logit"]
    p = np.array([p_yes[i] for i in idx], dtype=np.float64)
    g = [str(groups[i]) for i in idx]
    t = _thresholds(threshold, n)[idx]
    base = adaptation_features(p, g, t, min_passages=min_passages)
    cols = [base if use_centred else base[:, :1]]
    for name, values in (extra or {}).items():
        if len(values) != n:
            raise ValueError(f"feature {name!r} has {len(values)} values for {n} pairs")
        col = np.array([values[i] for i in idx], dtype=np.float64)
        if not np.all(np.isfinite(col)):
            raise ValueError(f"feature {name!r} has a value that is not finite")
        if name in label_features:  # neutral by construction: 0 is its query's mean, as unlabelled
            col = centre_by_query(col, g, min_passages=1)
        cols.append(col[:, None])
        names.append(name)
    raw = np.column_stack(cols)
    x, scale = _standardise(raw, np.ones(len(idx), dtype=bool))
    given = [labels[i] for i in idx]
    lab = np.array([-1 if v is None else int(v) for v in given], dtype=np.int64)
    if np.any((lab != -1) & (lab != 0) & (lab != 1)):
        raise ValueError("labels must be 0, 1 or None")
    known = lab >= 0
    yk = lab[known]
    qkeys = np.array(g, dtype=object)
    labelled_queries = sorted({str(q) for q in qkeys[known]})
    positives = int(yk.sum())
    empty: list[float | None] = [None] * n

    def result(applied: bool, reason: str, **kw: Any) -> Adaptation:
        return Adaptation(
            method=ADAPT_METHOD,
            features=tuple(names),
            p_adapted=kw.get("p_adapted", empty),
            decisions=kw.get("decisions", [None] * n),
            weights=kw.get("weights", {}),
            intercept=kw.get("intercept"),
            labels=int(yk.size),
            positives=positives,
            queries=len(labelled_queries),
            loqo=kw.get("loqo", {}),
            applied=applied,
            reason=reason,
            scales={nm: round(float(s), 6) for nm, s in zip(names, scale, strict=True)},
            warning=kw.get("warning"),
        )

    if yk.size < min_labels:
        return result(False, f"{yk.size} labelled pairs with a P(yes); adapting needs at least {min_labels}")
    if positives == 0 or positives == yk.size:
        return result(False, f"all {yk.size} labels are {int(yk[0])}; adapting needs both kinds")
    if len(labelled_queries) < min_queries:
        return result(
            False,
            f"labels on {len(labelled_queries)} queries; leave-one-query-out needs at least {min_queries}",
        )
    # every label's LOQO prediction: the rule fitted on the other queries' labels
    kidx = np.flatnonzero(known)
    q_of = np.array([labelled_queries.index(str(q)) for q in qkeys[kidx]], dtype=np.int64)
    rows_of = [np.flatnonzero(qkeys == q) for q in labelled_queries]
    label_cols = [c for c, nm in enumerate(names) if nm in label_features]
    loqo_p = _loqo_predictions(raw, lab, kidx, q_of, rows_of, label_cols, ridge)
    alone_s = p[kidx]
    alone_d = (alone_s >= t[kidx]).astype(np.int64)
    loqo = _loqo_figures(yk, alone_d, alone_s, loqo_p, q_of, resamples=resamples, seed=seed)
    w, b = fit_logistic(x[kidx], yk, ridge=ridge)
    p_all = _sigmoid(x @ w + b)
    p_all[kidx] = loqo_p  # a labelled pair never judges itself
    p_adapted: list[float | None] = [None] * n
    decisions: list[int | None] = [None] * n
    for j, i in enumerate(idx):
        p_adapted[i] = float(p_all[j])
        decisions[i] = int(p_all[j] >= 0.5)
    weights = {nm: float(v) for nm, v in zip(names, w, strict=True)}
    applied, reason, warning = _decide(weights, loqo)
    return result(
        applied,
        reason,
        p_adapted=p_adapted,
        decisions=decisions,
        weights=weights,
        intercept=b,
        loqo=loqo,
        warning=warning,
    )
