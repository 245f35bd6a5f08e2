"""The report of ``judge compare-systems`` as pydantic models: schema ``judge.systems/1``.

``report.json`` is :meth:`SystemsReport.to_json` (field ``schema`` first). Other tools read
it; the keys the issue fixed are never renamed. Extra keys (``path``, ``ci``, ``n``,
``calls_saved``, ``warnings`` ...) only add information.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from judge.metrics import significance as decide_significance

SCHEMA = "judge.systems/1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SystemSummary(_Model):
    """One system: ``queries`` evaluated against the pool (``judge trec``'s ``num_q``);
    ``measures``: each measure's mean under its ``judge trec --json`` name, plus
    ``map_isolated`` (label-free AP as ``judge score`` computes it; None when nothing was
    judged); ``ci``: a percentile bootstrap interval of each pooled mean. The means are the
    tested figure (``conventions.tested_figure``: ``expected``, the judge's P(yes) as the
    relevance, or ``thresholded``); ``thresholded``: the thresholded means beside them when
    the expected ones are tested; ``per_query``: the primary measure's value per query id."""

    path: str
    queries: int
    queries_in_file: int
    measures: dict[str, float | int | None]
    ci: dict[str, tuple[float, float] | None] = Field(default_factory=dict)
    # the thresholded means (trec_eval over pool.qrels) when the tested figure is the expected one
    thresholded: dict[str, float | int | None] | None = None
    # query id -> the primary measure's tested value (conventions.per_query): what the tests read
    per_query: dict[str, float] | None = None
    # prediction-powered figures from --sample-labels (judge.batch.ppi_block's shape); None without
    ppi: dict[str, Any] | None = None


class PoolSummary(_Model):
    """What was judged. ``pairs``: (query, passage) pairs over all systems (within
    ``--depth``); ``unique_pairs``: distinct ones = ``human_labels + judged + unjudged``;
    ``calls``: LLM requests the run that wrote this report made (0 on a re-run);
    ``calls_saved``: ``pairs - unique_pairs``, the judgments pooling did not ask twice."""

    queries: int
    pairs: int
    unique_pairs: int
    human_labels: int
    judged: int
    unjudged: int
    calls: int
    calls_saved: int


class AdaptiveDecision(_Model):
    """``--until-decided``: one comparison's decision under the prior over the pairs not
    judged. ``decision``: ``better|worse, significant|not significant`` or ``tie`` (Holm p
    < ``alpha`` of the report's randomization test); ``confidence``: share of the Monte
    Carlo draws with that decision; ``decided``: confidence >= the asked one;
    ``expected_diff``: the mean difference over the draws; ``judged_pairs``: pairs judged
    when it became decided for good (None: undecided) against ``pool_pairs`` (the full
    pool's)."""

    decided: bool
    decision: str
    sign: int
    significant: bool
    confidence: float
    expected_diff: float
    judged_pairs: int | None
    pool_pairs: int


class AdaptiveSummary(_Model):
    """``--until-decided``: what adaptive judging did. ``judged_pairs`` of ``pool_pairs``
    (``fraction``) were sent to the judge in ``rounds`` rounds of ``batch``; ``calls``: LLM
    requests this run made; ``decided``/``undecided``: comparisons; ``stop``: why it
    stopped (``decided``, ``budget`` or ``pool exhausted``)."""

    confidence: float
    alpha: float
    budget: int | None
    batch: int
    draws: int
    rounds: int
    judged_pairs: int
    pool_pairs: int
    fraction: float | None
    calls: int
    decided: int
    undecided: int
    stop: str
    prior: str
    # the figure the decisions were made on (expected: each judged pair by its probabilities)
    figure: str | None = None


class SystemComparison(_Model):
    """``system`` against ``baseline`` on ``measure`` over the ``n`` queries both answered
    and every system has: means, ``diff`` (system - baseline), the seeded paired
    randomization test (``p_value``) with the interval of that same test
    (``randomization_ci_low`` / ``_high``: the shifts it does not reject, so it excludes 0
    exactly when ``p_value`` < 1 - confidence; None when unbounded) and its Holm adjustment
    over every comparison (``p_holm``), the paired t-test (``t_test_p``), a percentile
    bootstrap CI of ``diff`` (``ci_low`` / ``ci_high``; another method, which can disagree
    with the test near the boundary), per-query
    wins / ties / losses of ``system``, and ``order_stability`` (share of P(yes) resamples
    of the pool in which the sign of ``diff`` holds; None without probabilities).
    ``p_method``: ``exact`` (every sign assignment; seed and resamples unused) or ``monte
    carlo``, with the standard errors of ``p_value`` and ``p_holm`` (``p_value_se``,
    ``p_holm_se``: 0 when exact); :meth:`significance` is the decision on ``p_holm`` at a
    level, ``decision`` the report's own (``significant``, ``not significant`` or
    ``undecided``, at 1 - confidence) for readers that do not run Python (the service's pages)."""

    baseline: str
    system: str
    measure: str
    n: int
    baseline_mean: float
    system_mean: float
    diff: float
    p_value: float
    p_holm: float | None
    t_test_p: float | None
    t_test_p_holm: float | None
    ci_low: float
    ci_high: float
    randomization_ci_low: float | None = None
    randomization_ci_high: float | None = None
    p_method: str = "exact"
    p_value_se: float = 0.0
    p_holm_se: float | None = None
    decision: str | None = None
    wins: int
    ties: int
    losses: int
    order_stability: float | None
    adaptive: AdaptiveDecision | None = None

    def significance(self, alpha: float) -> str:
        """``significant``, ``not significant`` or ``undecided`` (a Monte Carlo Holm p within
        its error of ``alpha``): :func:`judge.metrics.significance`, the one rule every
        report and check decides by."""
        return decide_significance(self.p_holm, self.p_holm_se, alpha)


class ExperimentConfiguration(_Model):
    """One configuration of an experiment (``judge experiment``): its system ``name`` in the
    comparison, the configuration's ``hash`` (its identity: a run with that hash is reused),
    ``engine``, ``depth`` and ``params`` (every knob), the ``run`` it searched (dataset JSONL;
    ``trec``: the TREC run beside it), queries searched this time vs reused, ``objective``:
    its mean of the experiment's objective measure on the pool, ``coverage``: judged
    coverage@k (share of its top k passages with a verdict or a human label, over all its
    queries; key ``k``), and ``trial`` (0-based, with ``--trials``)."""

    name: str
    hash: str
    source: str | None
    engine: str
    depth: int
    params: dict[str, Any]
    run: str
    trec: str | None
    queries_searched: int
    queries_reused: int
    objective: float | None
    coverage: dict[str, float | None]
    trial: int | None = None


class PairDifference(_Model):
    """Two configurations of an experiment on its objective (the tested figure) over the
    ``n`` queries both scored: ``diff`` = mean of ``b`` - mean of ``a``, the paired
    randomization test's ``p_value`` and its Holm adjustment over every pair (``p_holm``)."""

    a: str
    b: str
    n: int
    diff: float
    p_value: float
    p_holm: float | None


class ExperimentSummary(_Model):
    """What ``judge experiment`` adds to the comparison report: the query set, how the
    configurations were chosen (``strategy``: ``configs``, ``grid`` or ``trials``; ``space``:
    the knobs as given), the ``objective`` measure and the ``best`` configuration by it
    (``best_vs_baseline``: the decision of its paired test against the baseline, the first
    configuration), every configuration, the ``knobs`` that vary, ``heatmap`` (PNG file in
    the report folder; None: fewer or more than two knobs vary, or no matplotlib), the
    pairs and calls apart: ``nominal_pairs`` (configurations x queries x the depth pooled,
    ``min(configuration depth, --depth)``: what judging every result of every configuration
    separately would ask), ``pairs`` (the unique pooled pairs sent to the judge, human labels
    aside) and ``pairs_ratio`` (pairs / nominal); ``calls``: the judge's provider calls over
    the whole experiment, every run of it in this folder (``calls.json`` keeps the count across
    interruptions and resumes; a verdict from the cache costs none; with reasons a pair costs
    two), ``calls_this_run`` and ``calls_per_pair`` (calls / pairs). ``calls_ratio``: calls /
    nominal pairs (kept for older readers; it mixes calls with pairs). ``pairwise``: every
    pair of configurations on the objective (:class:`PairDifference`, Holm over all pairs);
    ``tie_group``: the best and the configurations its test cannot tell from it."""

    query_set: str
    queries: int
    strategy: str
    space: list[str]
    seed: int | None
    objective: str
    best: str | None
    best_value: float | None
    best_vs_baseline: str | None
    configurations: list[ExperimentConfiguration]
    knobs: list[str]
    heatmap: str | None
    calls: int
    nominal_pairs: int
    calls_ratio: float | None
    pairs: int | None = None
    pairs_ratio: float | None = None
    calls_this_run: int | None = None
    calls_per_pair: float | None = None
    depth: int | None = None
    # every pair of configurations on the objective, Holm over all pairs; the best's tie group
    pairwise: list[PairDifference] = Field(default_factory=list)
    tie_group: list[str] | None = None


class SystemsReport(_Model):
    """The whole report (``report.json``)."""

    schema_: Literal["judge.systems/1"] = Field(default="judge.systems/1", alias="schema")
    systems: dict[str, SystemSummary]
    pool: PoolSummary
    comparisons: list[SystemComparison]
    conventions: dict[str, Any]
    not_in_all_systems: list[str]
    warnings: list[str] = Field(default_factory=list)
    adaptive: AdaptiveSummary | None = None
    experiment: ExperimentSummary | None = None

    def ranked(self, measure: str) -> list[str]:
        """The systems with a finite mean of ``measure``, best first (ties in the report's
        order, so the first of equals leads): an experiment's best is the first."""
        scored = []
        for name, s in self.systems.items():
            value = s.measures.get(measure)
            if isinstance(value, int | float) and math.isfinite(value):
                scored.append((name, float(value)))
        return [name for name, _ in sorted(scored, key=lambda item: -item[1])]

    def to_json(self) -> dict[str, Any]:
        """The ``report.json`` object (``schema`` first, NaN/inf as null)."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return data

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, indent=2, allow_nan=False) + "\n"
