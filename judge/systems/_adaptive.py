"""Adaptive judging (``compare-systems --until-decided``): judge only what the decisions need.

The idea is Carterette, Allan and Sitaraman's "minimal test collections" (SIGIR 2006): judge
first the pooled pairs whose relevance most changes the difference between two systems, and
stop when the outcome is certain under a prior over the pairs not judged yet.

**Decision.** A comparison is one system against the baseline on one measure, as the report
makes it. Its decision is the pair (sign of the mean difference, significant or not), where
significant means the Holm-adjusted (over every comparison) paired randomization p-value of
the report is below ``alpha`` (0.05). The p-values are computed exactly as the report
computes them (:func:`judge.metrics.permutation_test`: exact when enumerable, else the same
seed, resamples and sign flips), per query scores through the measure registry (the figures
of ``judge trec``), so with every pair known the decision is the report's own.

**Uncertainty.** Every pooled pair not judged yet is relevant with a prior probability: the
P(yes) of a cheap first judge where one was given (clamped to [0.02, 0.98]), else a
rank-based prior fitted on the pairs known so far (human labels and verdicts,
:func:`rank_prior`): the share of relevant pairs per bucket of the best rank any system gave
the passage, shifted on the logit scale by the passage's *group* (which systems pooled it:
passages only one system found may be better or worse than the rest) by the group's
observed-vs-expected log odds. The group's shift is uncertain (sd ``1 / sqrt(1 + n p (1 -
p))`` for ``n`` known pairs of the group): each draw shifts every group by its own normal
draw, so the pairs of one group move together and an unjudged group keeps the decision
open until some of it is judged. ``draws`` label states are drawn (seeded); the confidence
of a comparison is the share of draws whose decision is the most common one
(:func:`decide`). A comparison is *decided* when that share is at least the asked
confidence.

**Order.** A pair's weight for a comparison is how much its relevance changes the paired
difference: ``|Δ(relevant) - Δ(not relevant)| / n`` over a few drawn states of the other
pairs (Carterette's weights, computed through the registry so they hold for any measure).
Its priority is the share of each undecided comparison's variance it carries,
``sum_c w_c² p (1 - p) / Var_c`` (:func:`pair_priorities`); each round judges the
``batch`` pairs of highest priority.

**Stop.** When every comparison is decided, the budget (pairs sent to the judge) is spent or
nothing is left to judge. Judging goes through the pool engine (:func:`judge_pool` ->
:func:`judge.batch.score_dataset`) one round file at a time (``adaptive/round-NNN.*``): a
re-run chooses the same pairs (same seed, same verdicts) and resumes from those files and
the verdict cache without a call.

The pure parts work on arrays (:class:`Problem`) and are tested without a judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from judge.backends import Backend
from judge.io import JudgedRanking
from judge.judging import JudgeConfig, PassageVerdict, VerdictStore
from judge.metrics import Measure, evaluate, exact_sign_flip_p, expected_pooled_values, has_expected_form
from judge.systems._expected import verdict_row
from judge.systems._inputs import Inputs
from judge.systems._pool import Pool, PoolRun, judge_pool
from judge.systems._scoring import judge_grade

ALPHA = 0.05
PRIOR_CLAMP = (0.02, 0.98)
RANK_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100)
UNKNOWN = -1  # a pooled pair whose label is drawn
ABSENT = -3  # a pair that is not in the qrels (asked, left unjudged)
_ZERO = 1e-12


# ---------------------------------------------------------------------------- the problem
@dataclass
class ProblemQuery:
    """One query: ``labels`` per docno (a grade, :data:`UNKNOWN` or :data:`ABSENT`),
    ``prior`` P(relevant) per docno (read where unknown), ``ranks[s]`` the docno index of
    each passage system ``s`` ranked (-1: not in the pool) and ``best_rank`` per docno (the
    best 1-based rank any system gave it; 0 for labelled passages no system ranked)."""

    token: str
    docnos: list[str]
    labels: npt.NDArray[np.int64]
    prior: npt.NDArray[np.float64]
    ranks: list[npt.NDArray[np.intp]]
    best_rank: npt.NDArray[np.int64]
    cheap: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    group: npt.NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    soft: dict[int, npt.NDArray[np.float64]] = field(default_factory=dict)
    """Judged pairs' distributions over grades (docno index -> row), read when the problem
    decides on the expected figure."""

    def unknown(self) -> npt.NDArray[np.intp]:
        return np.flatnonzero(self.labels == UNKNOWN)


@dataclass
class Problem:
    """Every comparison's data: queries (in trec_eval's order: tokens bytewise), systems
    (the first is the baseline), measures, the relevance level and the grade a drawn
    "relevant" gets (1 binary; the judge's grade threshold graded)."""

    queries: list[ProblemQuery]
    systems: list[str]
    measures: tuple[Measure, ...]
    level: int = 1
    yes_grade: int = 1
    resamples: int = 10_000
    seed: int = 0
    alpha: float = ALPHA
    group_sd: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    expected: bool = False
    """Decide on the expected figure (a judged pair counts by its distribution over grades,
    ``soft``), as the report tests it; False: on the thresholded grades."""
    width: int = 4

    @property
    def groups(self) -> int:
        return max((int(q.group.max()) + 1 for q in self.queries if q.group.shape[0]), default=0)

    @property
    def comparisons(self) -> list[tuple[int, int]]:
        """(system index, measure index) in the report's order: systems, then measures."""
        return [(s, m) for s in range(1, len(self.systems)) for m in range(len(self.measures))]

    def unknown_count(self) -> int:
        return sum(int(q.unknown().shape[0]) for q in self.queries)


def order_tokens(tokens: Sequence[str]) -> list[str]:
    """Query tokens in trec_eval's order (bytewise), the order the report pairs queries in."""
    return sorted(tokens, key=lambda t: t.encode("utf-8"))


# ---------------------------------------------------------------------------- the prior
def _bucket(rank: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    return np.searchsorted(np.array(RANK_BUCKETS), np.maximum(rank, 1), side="left").astype(np.intp)


def _logit(p: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    q = np.clip(p, 1e-6, 1 - 1e-6)
    return np.asarray(np.log(q / (1 - q)), dtype=np.float64)


def _sigmoid(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=np.float64)


def rank_prior(problem: Problem, *, smoothing: float = 2.0) -> tuple[float, list[float]]:
    """Fit the prior on the known pooled pairs (``best_rank >= 1``; relevant = grade >=
    level) and write it into every unknown pair's ``prior`` that has no cheap judge's
    P(yes); set ``problem.group_sd``. Bucket share: (relevant + s * overall) / (known + s)
    with overall = (relevant + 1) / (known + 2). Group shift: log((R + 1) / (n - R + 1)) -
    log((E + 1) / (n - E + 1)) for R relevant of n known pairs in the group where the
    buckets expect E; its sd 1 / sqrt(1 + n p (1 - p)), p = (R + 1) / (n + 2). Returns
    (overall share, share per bucket)."""
    n_b = np.zeros(len(RANK_BUCKETS) + 1)
    r_b = np.zeros(len(RANK_BUCKETS) + 1)
    for q in problem.queries:
        known = (q.labels >= 0) & (q.best_rank >= 1)
        if not known.any():
            continue
        b = _bucket(q.best_rank[known])
        np.add.at(n_b, b, 1.0)
        np.add.at(r_b, b, (q.labels[known] >= problem.level).astype(np.float64))
    overall = (float(r_b.sum()) + 1.0) / (float(n_b.sum()) + 2.0)
    per_bucket = (r_b + smoothing * overall) / (n_b + smoothing)
    n_g = np.zeros(problem.groups)
    r_g = np.zeros(problem.groups)
    e_g = np.zeros(problem.groups)
    for q in problem.queries:
        known = (q.labels >= 0) & (q.best_rank >= 1) & (q.group >= 0)
        if not known.any():
            continue
        g = q.group[known]
        np.add.at(n_g, g, 1.0)
        np.add.at(r_g, g, (q.labels[known] >= problem.level).astype(np.float64))
        np.add.at(e_g, g, per_bucket[_bucket(q.best_rank[known])])
    shift = np.log((r_g + 1) / (n_g - r_g + 1)) - np.log((e_g + 1) / (n_g - e_g + 1))
    share = (r_g + 1) / (n_g + 2)
    problem.group_sd = 1.0 / np.sqrt(1.0 + n_g * share * (1 - share))
    for q in problem.queries:
        todo = q.labels == UNKNOWN
        if q.cheap.shape[0] == q.labels.shape[0]:
            todo &= ~q.cheap
        if todo.any():
            base = _logit(per_bucket[_bucket(q.best_rank[todo])])
            g = q.group[todo]
            q.prior[todo] = _sigmoid(base + np.where(g >= 0, shift[np.maximum(g, 0)], 0.0))
    return overall, [float(x) for x in per_bucket]


# ---------------------------------------------------------------------------- drawing and scoring
def draw_states(problem: Problem, rng: np.random.Generator, draws: int) -> list[npt.NDArray[np.int64]]:
    """Per query a (draws, docnos) array of grades: known labels as they are, unknown ones
    drawn relevant (``yes_grade``) with their prior, else 0; each draw first shifts every
    group's log odds by a normal draw of sd ``group_sd`` (pairs without a group, e.g. with a
    cheap judge's P(yes), are not shifted). A query with nothing unknown gets one row (it is
    the same in every draw)."""
    sd = np.append(np.asarray(problem.group_sd, dtype=np.float64), 0.0)  # index -1: no shift
    z = rng.standard_normal((draws, sd.shape[0])) * sd[None, :]
    out: list[npt.NDArray[np.int64]] = []
    for q in problem.queries:
        unknown = q.unknown()
        if unknown.shape[0] == 0:
            out.append(q.labels[None, :].copy())
            continue
        rows = np.repeat(q.labels[None, :], draws, axis=0)
        groups = q.group[unknown] if q.group.shape[0] else np.full(unknown.shape[0], -1, dtype=np.intp)
        if q.cheap.shape[0]:
            groups = np.where(q.cheap[unknown], -1, groups)
        p = _sigmoid(_logit(q.prior[unknown])[None, :] + z[:, groups])
        u = rng.random((draws, unknown.shape[0]))
        rows[:, unknown] = np.where(u < p, problem.yes_grade, 0)
        out.append(rows)
    return out


def _ranking(state: npt.NDArray[np.int64], ranks: npt.NDArray[np.intp], qid: str) -> JudgedRanking:
    present = state != ABSENT
    graded = np.where(present, state, -1)
    ranked = np.where(ranks >= 0, graded[np.maximum(ranks, 0)], -1).astype(np.int64)
    return JudgedRanking(qid=qid, grades=ranked, qrels=state[present])


def _evaluate_states(
    problem: Problem, system: int, states: Sequence[tuple[int, npt.NDArray[np.int64]]]
) -> npt.NDArray[np.float64]:
    """``[measure, k]`` values of ``system`` on each (query index, state); each distinct
    state of a query is evaluated once."""
    index: dict[tuple[int, bytes], int] = {}
    rankings: list[JudgedRanking] = []
    where: list[int] = []
    for qi, state in states:
        key = (qi, state.tobytes())
        at = index.get(key)
        if at is None:
            at = index[key] = len(rankings)
            rankings.append(_ranking(state, problem.queries[qi].ranks[system], f"{at:09d}"))
        where.append(at)
    if not rankings:
        return np.zeros((len(problem.measures), 0))
    ev = evaluate(problem.measures, rankings, relevance_level=problem.level)
    cols = np.stack([ev.query_scores(m) for m in problem.measures], axis=0)
    if problem.expected:
        _expected_columns(problem, system, [key for key in index], cols)
    return np.asarray(cols[:, np.array(where, dtype=np.intp)], dtype=np.float64)


def _expected_columns(
    problem: Problem, system: int, keys: Sequence[tuple[int, bytes]], cols: npt.NDArray[np.float64]
) -> None:
    """Overwrite ``cols`` ([measure, distinct state]) with the expected figure of each
    measure that has one: known pairs by their distribution (``soft``, else a certainty at
    their grade), drawn pairs at their drawn grade, absent pairs left out of the pool."""
    forms = [i for i, m in enumerate(problem.measures) if has_expected_form(m)]
    if not forms:
        return
    chosen = [problem.measures[i] for i in forms]
    for at, (qi, raw) in enumerate(keys):
        q = problem.queries[qi]
        state = np.frombuffer(raw, dtype=np.int64)
        present = state != ABSENT
        rows = np.zeros((state.shape[0], problem.width), dtype=np.float64)
        graded = np.flatnonzero(state >= 0)
        rows[graded, state[graded]] = 1.0
        for j, row in q.soft.items():
            if state[j] >= 0:
                rows[j] = row
        ranks = q.ranks[system]
        ranked = np.where((ranks >= 0)[:, None], rows[np.maximum(ranks, 0)], 0.0)
        cols[forms, at] = expected_pooled_values(chosen, ranked, rows[present], level=problem.level)


def score_states(
    problem: Problem, states: Sequence[npt.NDArray[np.int64]], draws: int
) -> npt.NDArray[np.float64]:
    """Per-query values ``[system, measure, draw, query]`` of every drawn state, through
    the measure registry (:func:`judge.metrics.evaluate`, as ``judge trec`` scores)."""
    n_s, n_m, n_q = len(problem.systems), len(problem.measures), len(problem.queries)
    values = np.zeros((n_s, n_m, draws, n_q))
    flat = [(qi, rows[r]) for qi, rows in enumerate(states) for r in range(rows.shape[0])]
    for s in range(n_s):
        cols = _evaluate_states(problem, s, flat)
        at = 0
        for qi, rows in enumerate(states):
            n_rows = rows.shape[0]
            block = cols[:, at : at + n_rows]
            values[s, :, :, qi] = block if n_rows == draws else np.repeat(block, draws, axis=1)
            at += n_rows
    return values


# ---------------------------------------------------------------------------- decisions
class SignFlips:
    """The p-values of :func:`judge.metrics.permutation_test` for ``n`` queries, ``resamples``
    and ``seed``, for many difference vectors at once: exact (every sign assignment) for a
    vector with at most :data:`judge.metrics.EXACT_LIMIT` non-zero differences, else from the
    same random sign flips (the same random stream)."""

    def __init__(self, n: int, resamples: int, seed: int) -> None:
        self.n = n
        self.resamples = resamples
        self.seed = seed
        self._signs: npt.NDArray[np.float64] | None = None

    @property
    def signs(self) -> npt.NDArray[np.float64]:
        if self._signs is None:  # drawn on first use: exact tests need none
            rng = np.random.default_rng(self.seed)
            self._signs = np.where(rng.random((self.resamples, self.n)) < 0.5, -1.0, 1.0).astype(np.float64)
        return self._signs

    def p_values(self, d: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Two-sided p of each column of ``d`` ([query, draw]): exact, or ``(b + 1) / (R + 1)``."""
        out = np.empty(d.shape[1])
        exact: dict[bytes, float | None] = {}
        random_columns: list[int] = []
        for k in range(d.shape[1]):
            column = np.ascontiguousarray(d[:, k])
            key = column.tobytes()
            if key not in exact:
                exact[key] = exact_sign_flip_p(column)
            p = exact[key]
            if p is None:
                random_columns.append(k)
            else:
                out[k] = p
        if random_columns:
            sub = d[:, random_columns]
            n = sub.shape[0]
            observed = sub.mean(axis=0)
            tolerance = 1e-12 * np.maximum(np.abs(sub).mean(axis=0), 1e-300)
            threshold = np.abs(observed) - tolerance
            means = (self.signs @ sub) / n
            extreme = np.count_nonzero(np.abs(means) >= threshold[None, :], axis=0)
            out[random_columns] = (extreme + 1) / (self.resamples + 1)
        return out


def holm_columns(p: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Holm's adjustment of each column of ``p`` ([comparison, draw]), as
    :func:`judge.metrics.holm` adjusts one family."""
    m = p.shape[0]
    order = np.argsort(p, axis=0, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=0)
    factors = (m - np.arange(m))[:, None]
    stepped = np.maximum.accumulate(np.minimum(1.0, factors * sorted_p), axis=0)
    out = np.empty_like(p)
    np.put_along_axis(out, order, stepped, axis=0)
    return out


@dataclass(frozen=True)
class Decision:
    """One comparison's decision under the prior: ``sign`` of the mean difference (-1, 0,
    1), ``significant`` (Holm p < alpha), ``confidence`` (share of draws with this
    decision), ``expected_diff`` (mean difference over the draws) and ``variance`` (its
    variance over the draws)."""

    sign: int
    significant: bool
    confidence: float
    expected_diff: float
    variance: float

    @property
    def label(self) -> str:
        if self.sign == 0:
            return "tie"
        word = "better" if self.sign > 0 else "worse"
        return f"{word}, significant" if self.significant else f"{word}, not significant"


def decide(problem: Problem, values: npt.NDArray[np.float64], flips: SignFlips) -> list[Decision]:
    """Each comparison's :class:`Decision` over the draws in ``values``."""
    comps = problem.comparisons
    if not comps:
        return []
    draws = values.shape[2]
    diffs = [values[s, m].T - values[0, m].T for s, m in comps]  # [query, draw]
    p = np.stack([flips.p_values(d) for d in diffs], axis=0)
    significant = holm_columns(p) < problem.alpha
    out: list[Decision] = []
    for i, d in enumerate(diffs):
        mean = d.mean(axis=0)
        sign = np.where(np.abs(mean) <= _ZERO, 0, np.sign(mean)).astype(np.int64)
        code = sign * 2 + significant[i].astype(np.int64)
        kinds, counts = np.unique(code, return_counts=True)
        best = int(kinds[int(np.argmax(counts))])
        out.append(
            Decision(
                sign=best // 2,  # codes: sign * 2 + significant, sign in -1..1
                significant=bool(best % 2),
                confidence=float(counts.max()) / draws,
                expected_diff=float(mean.mean()),
                variance=float(mean.var()),
            )
        )
    return out


# ---------------------------------------------------------------------------- which pairs next
def pair_priorities(
    problem: Problem,
    states: Sequence[npt.NDArray[np.int64]],
    decisions: Sequence[Decision],
    *,
    bases: int = 3,
) -> list[tuple[float, int, int]]:
    """``(priority, query index, docno index)`` of every unknown pair, highest first (ties:
    query order, then docno order). Over ``bases`` drawn states, each unknown pair is set
    relevant and not relevant in turn; the change of each undecided comparison's per-query
    difference, divided by the number of queries, is its weight ``w_c``; the priority is
    ``sum_c w_c² p (1 - p) / Var_c`` over undecided comparisons (``Var_c``: the variance of
    the comparison's mean difference over the draws)."""
    comps = problem.comparisons
    open_c = [i for i, d in enumerate(decisions) if d.confidence < 1.0 or d.variance > 0]
    n_q = len(problem.queries)
    out: list[tuple[float, int, int]] = []
    jobs: list[tuple[int, int, int, npt.NDArray[np.int64]]] = []  # (query, doc, value, state)
    for qi, (q, rows) in enumerate(zip(problem.queries, states, strict=True)):
        for j in q.unknown():
            for b in range(min(bases, rows.shape[0])):
                for value in (problem.yes_grade, 0):
                    state = rows[b].copy()
                    state[j] = value
                    jobs.append((qi, int(j), value, state))
    if not jobs or not open_c:
        return [(0.0, qi, int(j)) for qi, q in enumerate(problem.queries) for j in q.unknown()]
    states_of_jobs = [(qi, state) for qi, _, _, state in jobs]
    vals = np.stack([_evaluate_states(problem, s, states_of_jobs) for s in range(len(problem.systems))])
    weights: dict[tuple[int, int], npt.NDArray[np.float64]] = {}
    counts: dict[tuple[int, int], int] = {}
    k = 0
    while k < len(jobs):
        qi, j, _, _ = jobs[k]
        yes, no = k, k + 1  # jobs come in (relevant, not relevant) pairs
        w = np.array(
            [
                abs((vals[s, m, yes] - vals[0, m, yes]) - (vals[s, m, no] - vals[0, m, no])) / n_q
                for s, m in (comps[c] for c in open_c)
            ]
        )
        weights[(qi, j)] = weights.get((qi, j), 0.0) + w
        counts[(qi, j)] = counts.get((qi, j), 0) + 1
        k += 2
    var = np.array([max(decisions[c].variance, 1e-12) for c in open_c])
    for (qi, j), w_sum in weights.items():
        w = w_sum / counts[(qi, j)]
        p = float(problem.queries[qi].prior[j])
        out.append((float(np.sum(w * w * p * (1.0 - p) / var)), qi, j))
    out.sort(key=lambda t: (-t[0], t[1], t[2]))
    return out


# ---------------------------------------------------------------------------- one round
@dataclass
class RoundState:
    """What one evaluation of the problem gave: the decisions and the pairs to judge next."""

    decisions: list[Decision]
    next_pairs: list[tuple[int, int]]
    prior_overall: float


def evaluate_round(
    problem: Problem,
    *,
    confidence: float,
    draws: int,
    batch: int,
    rng: np.random.Generator,
    flips: SignFlips,
) -> RoundState:
    """Fit the prior, draw, decide; when something is undecided and unknown, choose the next
    ``batch`` pairs."""
    overall, _ = rank_prior(problem)
    states = draw_states(problem, rng, draws)
    values = score_states(problem, states, draws)
    decisions = decide(problem, values, flips)
    undecided = any(d.confidence < confidence for d in decisions)
    chosen: list[tuple[int, int]] = []
    if undecided and batch > 0 and problem.unknown_count():
        ranked = pair_priorities(problem, states, [d for d in decisions])
        chosen = [(qi, j) for _, qi, j in ranked[:batch]]
    return RoundState(decisions=decisions, next_pairs=chosen, prior_overall=overall)


def simulate(
    problem: Problem,
    oracle: Callable[[int, int], int],
    *,
    confidence: float = 0.95,
    draws: int = 200,
    batch: int = 10,
    budget: int | None = None,
    seed: int = 0,
    soft_oracle: Callable[[int, int], npt.NDArray[np.float64] | None] | None = None,
) -> tuple[list[Decision], int]:
    """The whole loop with labels from ``oracle(query index, docno index)`` (pure: for tests
    and the benchmark); ``soft_oracle``: the judged pair's distribution over grades (with
    ``problem.expected``). Returns the final decisions and how many pairs were judged."""
    rng = np.random.default_rng(seed)
    flips = SignFlips(len(problem.queries), problem.resamples, problem.seed)
    judged = 0
    while True:
        room = batch if budget is None else min(batch, budget - judged)
        state = evaluate_round(problem, confidence=confidence, draws=draws, batch=room, rng=rng, flips=flips)
        if not state.next_pairs:
            return state.decisions, judged
        for qi, j in state.next_pairs:
            problem.queries[qi].labels[j] = oracle(qi, j)
            row = soft_oracle(qi, j) if soft_oracle is not None else None
            if row is not None:
                problem.queries[qi].soft[j] = row
            judged += 1


# ---------------------------------------------------------------------------- the pool driver
@dataclass(frozen=True)
class AdaptiveOptions:
    """``--until-decided``: ``confidence`` each decision must hold with; ``budget``: most
    pairs sent to the judge (None: the whole pool); ``batch``: pairs per round (None:
    max(8, pool / 25)); ``draws``: Monte Carlo draws per round; ``prior``: a cheap judge's
    P(yes) per (query id, docno)."""

    confidence: float = 0.95
    budget: int | None = None
    batch: int | None = None
    draws: int = 200
    prior: Mapping[tuple[str, str], float] | None = None


@dataclass
class AdaptiveOutcome:
    """What adaptive judging did: the verdicts of every pair it sent (by query id and
    docno), each comparison's final :class:`Decision` and ``decided_at`` (pairs judged when
    it became decided for good; None: undecided), ``judged_pairs`` (pairs sent to the
    judge, this run or earlier ones), ``pool_pairs`` (what the full pool sends), ``calls``
    (requests this run made), ``rounds``, ``batch`` and ``budget_spent``."""

    verdicts: dict[str, dict[str, PassageVerdict]]
    decisions: list[Decision]
    decided_at: list[int | None]
    judged_pairs: int
    pool_pairs: int
    calls: int
    rounds: int
    batch: int
    budget_spent: bool
    prior: str
    figure: str = "thresholded"


def build_problem(
    pool: Pool,
    inputs: Inputs,
    measures: Sequence[Measure],
    *,
    level: int,
    yes_grade: int,
    seed: int,
    resamples: int,
    prior: Mapping[tuple[str, str], float] | None = None,
    depth: int | None = None,
) -> tuple[Problem, list[str]]:
    """The :class:`Problem` of a pool before any verdict: human labels known, every pair to
    judge unknown. Only queries every system has take part (as in the report's tests).
    Returns it and each problem query's id."""
    excluded = set(inputs.not_in_all())
    by_token = {q.token: q for q in pool.queries if q.qid not in excluded}
    queries: list[ProblemQuery] = []
    qids: list[str] = []
    signatures: dict[int, int] = {}  # which systems pooled a passage (bit mask) -> group
    low, high = PRIOR_CLAMP
    for token in order_tokens(list(by_token)):
        pq = by_token[token]
        docnos = list(pq.human) + [d for d in pq.pooled if d not in pq.human]
        where = {d: i for i, d in enumerate(docnos)}
        labels = np.array([pq.human.get(d, UNKNOWN) for d in docnos], dtype=np.int64)
        ranks: list[npt.NDArray[np.intp]] = []
        best = np.zeros(len(docnos), dtype=np.int64)
        masks = [0] * len(docnos)
        pooled = set(pq.pooled)
        for bit, system in enumerate(inputs.systems):
            sq = system.queries[pq.qid]
            idx = np.array([where.get(d, -1) for d in sq.docnos], dtype=np.intp)
            ranks.append(idx)
            for r, i in enumerate(idx.tolist()):
                if i < 0 or docnos[i] not in pooled:
                    continue
                if depth is None or r < depth:
                    masks[i] |= 1 << bit
                if best[i] == 0 or r + 1 < best[i]:
                    best[i] = r + 1
        group = np.array(
            [signatures.setdefault(m, len(signatures)) if m else -1 for m in masks], dtype=np.intp
        )
        p = np.full(len(docnos), 0.5)
        cheap = np.zeros(len(docnos), dtype=np.bool_)
        if prior:
            for i, d in enumerate(docnos):
                value = prior.get((pq.qid, d))
                if value is not None and labels[i] == UNKNOWN:
                    p[i] = min(max(float(value), low), high)
                    cheap[i] = True
        queries.append(ProblemQuery(token, docnos, labels, p, ranks, best, cheap, group))
        qids.append(pq.qid)
    problem = Problem(
        queries=queries,
        systems=[s.name for s in inputs.systems],
        measures=tuple(measures),
        level=level,
        yes_grade=yes_grade,
        resamples=resamples,
        seed=seed,
    )
    return problem, qids


def _round_lines(
    problem: Problem,
    qids: Sequence[str],
    chosen: Sequence[tuple[int, int]],
    inputs: Inputs,
    query_text: Mapping[str, str],
) -> list[dict[str, object]]:
    by_query: dict[int, list[int]] = {}
    for qi, j in chosen:
        by_query.setdefault(qi, []).append(j)
    lines: list[dict[str, object]] = []
    for qi in sorted(by_query):
        qid = qids[qi]
        docnos = [problem.queries[qi].docnos[j] for j in sorted(by_query[qi])]
        passages = inputs.passages[qid]
        lines.append(
            {
                "id": qid,
                "query": query_text[qid],
                "retrieval_context": [{"id": d, "text": passages[d].text} for d in docnos],
            }
        )
    return lines


async def judge_adaptively(
    pool: Pool,
    inputs: Inputs,
    measures: Sequence[Measure],
    out_dir: Path,
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None,
    run: PoolRun,
    options: AdaptiveOptions,
    level: int,
    seed: int,
    resamples: int,
    depth: int | None = None,
    expected: bool = False,
) -> AdaptiveOutcome:
    """Judge the pool round by round until every decision holds (see the module docstring);
    every round through :func:`judge_pool` (the batch engine: cached, resumable).
    ``expected``: decide on the expected figure (each judged pair by its P(yes) or grade
    probabilities), the figure the report tests."""
    mode = config.mode
    yes_grade = config.grade_threshold if mode == "graded" else 1
    problem, qids = build_problem(
        pool,
        inputs,
        measures,
        level=level,
        yes_grade=yes_grade,
        seed=seed,
        resamples=resamples,
        prior=options.prior,
        depth=depth,
    )
    problem.expected = expected
    problem.width = max([3, *(g for q in pool.queries for g in q.human.values())]) + 1
    pool_pairs = sum(len(q.to_judge) for q in pool.queries)
    batch = options.batch if options.batch is not None else max(8, math.ceil(pool_pairs / 25))
    rng = np.random.default_rng(seed)
    flips = SignFlips(len(problem.queries), resamples, seed)
    rounds_dir = out_dir / "adaptive"
    rounds_dir.mkdir(parents=True, exist_ok=True)
    verdicts: dict[str, dict[str, PassageVerdict]] = {}
    decided_at: list[int | None] = [None] * len(problem.comparisons)
    judged = calls = rounds = 0
    budget_spent = False
    while True:
        room = batch if options.budget is None else max(0, min(batch, options.budget - judged))
        state = evaluate_round(
            problem, confidence=options.confidence, draws=options.draws, batch=room, rng=rng, flips=flips
        )
        for c, d in enumerate(state.decisions):
            if d.confidence >= options.confidence:
                decided_at[c] = judged if decided_at[c] is None else decided_at[c]
            else:
                decided_at[c] = None
        if not state.next_pairs:
            undecided = any(d is None for d in decided_at)
            budget_spent = undecided and options.budget is not None and judged >= options.budget
            break
        rounds += 1
        lines = _round_lines(problem, qids, state.next_pairs, inputs, inputs.queries)
        stem = rounds_dir / f"round-{rounds:03d}"
        got = await judge_pool(
            stem.with_suffix(".input.jsonl"),
            stem.with_suffix(".judged.jsonl"),
            lines,
            backend,
            config,
            store=store,
            run=run,
        )
        calls += got.calls
        for qi, j in state.next_pairs:
            qid, docno = qids[qi], problem.queries[qi].docnos[j]
            v = got.verdicts.get(qid, {}).get(docno)
            grade = judge_grade(v, mode) if v is not None else None
            problem.queries[qi].labels[j] = ABSENT if grade is None else grade
            if v is not None:
                verdicts.setdefault(qid, {})[docno] = v
                row = verdict_row(v, mode, problem.width) if expected and grade is not None else None
                if row is not None:
                    problem.queries[qi].soft[j] = row
            judged += 1
    prior = (
        "P(yes) of the cheap judge where given (clamped to [0.02, 0.98]), else rank-based"
        if options.prior
        else "rank-based: share relevant per best-rank bucket of the known pairs, shifted per group of "
        "systems that pooled the passage (uncertain shift, drawn per draw)"
    )
    return AdaptiveOutcome(
        verdicts=verdicts,
        decisions=state.decisions,
        decided_at=decided_at,
        judged_pairs=judged,
        pool_pairs=pool_pairs,
        calls=calls,
        rounds=rounds,
        batch=batch,
        budget_spent=budget_spent,
        prior=prior,
        figure="expected" if expected and any(q.soft for q in problem.queries) else "thresholded",
    )
