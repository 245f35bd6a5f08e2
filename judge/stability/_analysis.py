"""The analysis of a stability run (pure: runs in, report dict out): every across-run
figure, the agreement of the runs, the least stable queries and passages, judge noise
beside query-sampling noise, the borderline verdicts and the pass/fail check.


Conventions (echoed under ``conventions`` in the report)
--------------------------------------------------------
* NDCG@k takes its IDCG from the run's own judged list; the dataset's qrels/expected ids
  are not used (they are ground truth about the passages, not about the judge), so every
  figure depends on the judge's verdicts only.
* A query none of whose passages could be judged (AP None) is left out of that run's
  averages; the count is reported per run as ``unjudged_queries``.
* A passage's *label* in a run is its verdict (``yes``/``no``/``unjudged``) in binary mode
  and its grade (``0``-``3``/``unjudged``) in graded mode. The flip rate counts a passage as
  unstable when its label is not identical in every run (``unjudged`` is a label here).
* Agreement statistics treat ``unjudged`` as a missing rating: Fleiss' kappa uses only the
  passages judged in every run; Krippendorff's alpha (nominal for binary, ordinal for
  graded) uses all ratings, missing ones left out.
* Relative spread with a zero mean: 0 if all runs are equal, else infinite (a breach).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from judge.io import DatasetRecord
from judge.judging import LANGUAGES, JudgeConfig, JudgeResult, bind_language, is_borderline
from judge.stability._figures import MAP_FIGURE, SCORE_FIGURE, StabilityMetric, figure_metrics
from judge.stability._stability_types import (
    REPORT_SCHEMA,
    RunResult,
    StabilityOptions,
    StabilityReport,
    run_file_name,
)
from judge.stability._stats import (
    Interval,
    bootstrap_mean_ci,
    coefficient_of_variation,
    deviation_rate,
    fleiss_kappa_from_labels,
    flip_rate,
    krippendorff_alpha,
    queries_needed,
    relative_spread,
    value_range,
)

if TYPE_CHECKING:
    from judge.metrics import AlphaLevel

__all__ = ["analyse"]


def _num(value: float | None) -> float | None:
    """JSON-safe float: nan and inf become None (the report documents when that happens)."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _sd(values: Sequence[float] | np.ndarray[Any, np.dtype[np.float64]]) -> float:
    """Sample standard deviation (ddof=1); exactly 0 when all values are equal or < 2."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2 or float(arr.max() - arr.min()) == 0.0:
        return 0.0
    return float(arr.std(ddof=1))


def _figure_summary(values: Sequence[float]) -> dict[str, Any]:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) != len(values) or not finite:
        return {
            "values": [_num(v) for v in values],
            "mean": None,
            "min": None,
            "max": None,
            "range": None,
            "sd": None,
            "relative_spread": None,
            "cv": None,
        }
    arr = np.asarray(finite, dtype=np.float64)
    return {
        "values": [float(v) for v in finite],
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "range": value_range(arr),
        "sd": _sd(arr),
        "relative_spread": _num(relative_spread(arr)),
        "cv": _num(coefficient_of_variation(arr)),
    }


def _interval_dict(iv: Interval) -> dict[str, Any]:
    return {
        "estimate": _num(iv.estimate),
        "low": _num(iv.low),
        "high": _num(iv.high),
        "half_width": _num(iv.half_width),
        "se": _num(iv.se),
        "n_queries": iv.n,
        "confidence": iv.confidence,
    }


Label = str


def _label(result: JudgeResult, index: int, mode: str) -> Label:
    v = result.verdicts[index]
    if v.verdict == "unjudged":
        return "unjudged"
    if mode == "graded":
        return str(v.grade)
    return v.verdict


def _labels(runs: Sequence[RunResult], records: Sequence[DatasetRecord], mode: str) -> list[list[Label]]:
    """runs x passages labels, passages in dataset order (query by query)."""
    table: list[list[Label]] = []
    for run in runs:
        row: list[Label] = []
        for rec, res in zip(records, run.results, strict=True):
            if len(res.verdicts) != len(rec.passages):
                raise ValueError(
                    f"query {rec.id}: {len(res.verdicts)} verdicts for {len(rec.passages)} passages"
                )
            row.extend(_label(res, i, mode) for i in range(len(rec.passages)))
        table.append(row)
    return table


def _agreement(labels: list[list[Label]], mode: str) -> dict[str, Any]:
    n_passages = len(labels[0]) if labels else 0
    cols = [[row[j] for row in labels] for j in range(n_passages)]
    complete = [j for j, col in enumerate(cols) if "unjudged" not in col]
    categories = ["0", "1", "2", "3"] if mode == "graded" else ["no", "yes"]
    kappa = fleiss_kappa_from_labels([[row[j] for j in complete] for row in labels], categories)
    value_of: Mapping[str, float] = (
        {"0": 0.0, "1": 1.0, "2": 2.0, "3": 3.0} if mode == "graded" else {"no": 0.0, "yes": 1.0}
    )
    matrix = np.array([[value_of.get(x, math.nan) for x in row] for row in labels], dtype=np.float64).reshape(
        len(labels), n_passages
    )
    level: AlphaLevel = "ordinal" if mode == "graded" else "nominal"
    alpha = krippendorff_alpha(
        matrix, level=level, value_domain=[0.0, 1.0, 2.0, 3.0] if mode == "graded" else None
    )
    unstable = sum(1 for col in cols if len(set(col)) > 1)
    return {
        "labels": "grade" if mode == "graded" else "verdict",
        "passages": n_passages,
        "unstable_passages": unstable,
        "flip_rate": flip_rate(labels),
        "deviation_rate": deviation_rate(labels),
        "fleiss_kappa": _num(kappa),
        "fleiss_subjects": len(complete),
        "krippendorff_alpha": _num(alpha),
        "alpha_level": level,
        "unjudged_ratings": sum(row.count("unjudged") for row in labels),
    }


def _per_query_values(runs: Sequence[RunResult], metric: StabilityMetric) -> list[list[float | None]]:
    """queries x runs values of a per-query metric."""
    n_queries = len(runs[0].results)
    return [[metric.per_query(run.results[q]) for run in runs] for q in range(n_queries)]


def _range_of(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None]
    return value_range(present) if len(present) > 1 else 0.0


def _unstable_queries(
    runs: Sequence[RunResult],
    records: Sequence[DatasetRecord],
    checked: StabilityMetric,
    top: int,
) -> tuple[list[dict[str, Any]], list[float], list[float]]:
    ap = _per_query_values(runs, MAP_FIGURE)
    score = _per_query_values(runs, SCORE_FIGURE)
    chk = _per_query_values(runs, checked)
    rows: list[dict[str, Any]] = []
    for q, rec in enumerate(records):
        rows.append(
            {
                "id": rec.id,
                "query": rec.query,
                "metric": checked.per_query_name,
                "values": chk[q],
                "range": _range_of(chk[q]),
                "ap": ap[q],
                "ap_range": _range_of(ap[q]),
                "score": score[q],
                "score_range": _range_of(score[q]),
            }
        )
    ap_ranges = [r["ap_range"] for r in rows]
    score_ranges = [r["score_range"] for r in rows]
    moving = [r for r in rows if r["range"] > 0 or r["ap_range"] > 0 or r["score_range"] > 0]
    moving.sort(key=lambda r: (-r["range"], -r["ap_range"], -r["score_range"], r["id"]))
    return moving[:top], ap_ranges, score_ranges


def _snippet(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _unstable_passages(
    runs: Sequence[RunResult], records: Sequence[DatasetRecord], mode: str, top: int
) -> list[dict[str, Any]]:
    rows: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for q, rec in enumerate(records):
        for i, passage in enumerate(rec.passages):
            labels = [_label(run.results[q], i, mode) for run in runs]
            if len(set(labels)) == 1:
                continue
            counts = Counter(labels)
            minority = len(labels) - counts.most_common(1)[0][1]
            p_yes = [run.results[q].verdicts[i].p_yes for run in runs]
            p_present = [p for p in p_yes if p is not None]
            p_range = value_range(p_present) if len(p_present) > 1 else 0.0
            row = {
                "query_id": rec.id,
                "index": i,
                "passage_id": passage.id,
                "labels": labels,
                "p_yes": p_yes,
                "minority": minority,
                "text": _snippet(passage.text),
            }
            rows.append(((-minority, -p_range, q, i), row))
    rows.sort(key=lambda item: item[0])
    return [row for _, row in rows[:top]]


def _noise(
    runs: Sequence[RunResult],
    checked: StabilityMetric,
    options: StabilityOptions,
    run_values: Sequence[float],
) -> tuple[dict[str, Any], list[Interval]]:
    """Judge noise (run to run) beside query-sampling noise (bootstrap over queries).

    * judge noise: the standard deviation (ddof=1) of the checked figure across runs, and
      its range;
    * query-sampling noise: the percentile bootstrap interval (``confidence``, seeded) of
      the mean over queries of each query's value averaged over the runs; its standard
      error is the bootstrap distribution's standard deviation;
    * ``dominant``: ``query_sampling`` when its SE exceeds the judge SD, ``judge`` when the
      judge SD is larger, ``none`` when both are 0;
    * ``queries_needed``: queries for a CI half-width <= ``threshold * |mean|`` (the same
      relative tolerance as the stability check), ``ceil(n * (h / target)^2)``;
      ``queries_needed_comparison``: the same for the difference of two independent systems'
      means (its half-width is sqrt(2) times larger): ``ceil(2 n (h / target)^2)``.
    """
    per_query = _per_query_values(runs, checked)
    averaged = [
        float(np.mean([v for v in row if v is not None]))
        for row in per_query
        if any(v is not None for v in row)
    ]
    seed, conf, n_res = options.bootstrap_seed, options.confidence, options.bootstrap_resamples
    pooled = bootstrap_mean_ci(averaged, confidence=conf, n_resamples=n_res, seed=seed)
    per_run = [
        bootstrap_mean_ci(
            [v for v in (checked.per_query(r) for r in run.results) if v is not None],
            confidence=conf,
            n_resamples=n_res,
            seed=seed,
        )
        for run in runs
    ]
    finite = [v for v in run_values if math.isfinite(v)]
    judge_sd = _sd(finite)
    judge_range = value_range(finite) if finite else 0.0
    query_se = pooled.se
    if not math.isfinite(query_se):
        dominant = "unknown"
    elif judge_sd == 0.0 and query_se == 0.0:
        dominant = "none"
    elif query_se >= judge_sd:
        dominant = "query_sampling"
    else:
        dominant = "judge"
    ratio = query_se / judge_sd if judge_sd > 0 and math.isfinite(query_se) else math.inf
    mean = float(np.mean(finite)) if finite else math.nan
    target = options.threshold * abs(mean) if math.isfinite(mean) else math.nan
    hw = pooled.half_width
    single = queries_needed(pooled.n, hw, target)
    comparison = queries_needed(pooled.n, math.sqrt(2.0) * hw, target)
    data = {
        "metric": checked.name,
        "judge": {"sd": judge_sd, "range": judge_range, "half_range": judge_range / 2.0},
        "query_sampling": _interval_dict(pooled),
        "dominant": dominant,
        "query_se_over_judge_sd": _num(ratio),
        "target_half_width": _num(target),
        "queries_needed": single,
        "queries_needed_comparison": comparison,
        "formula": (
            "queries_needed = ceil(n * (half_width / (threshold * |mean|))^2); "
            "comparison of two independent systems: ceil(2 * n * (half_width / (threshold * |mean|))^2)"
        ),
    }
    return data, per_run


def _thresholds(config: JudgeConfig) -> float | list[float]:
    """The decision threshold of ``config`` (``auto``: of each language's template)."""
    if config.p_yes_threshold is not None:
        return config.p_yes_threshold
    values = sorted({bind_language(config, "", language=lang).decision_threshold for lang in LANGUAGES})
    return values[0] if len(values) == 1 else values


def _borderline(
    runs: Sequence[RunResult], records: Sequence[DatasetRecord], config: JudgeConfig, margin: float
) -> dict[str, Any]:
    """Verdicts within ``margin`` of the decision threshold in any run: identical runs on
    one machine cannot show it, but these are the verdicts another machine's float kernels
    may flip (docs/embedded_determinism.md)."""
    listed: dict[tuple[int, int], dict[str, Any]] = {}
    thresholds: set[float] = set()
    if config.probability:
        for run in runs:
            for q, (record, result) in enumerate(zip(records, run.results, strict=True)):
                # each query against its own threshold (``auto``: its language's template's)
                given = result.conventions.get("p_yes_threshold", config.p_yes_threshold)
                threshold = float(given) if given is not None else 0.5
                thresholds.add(threshold)
                for v in result.verdicts:
                    if (q, v.index) in listed:
                        continue
                    if is_borderline(v, threshold, margin, config.grade_threshold):
                        listed[(q, v.index)] = {
                            "query_id": record.id,
                            "index": v.index,
                            "passage_id": v.passage_id,
                            "verdict": v.verdict,
                            "p_yes": v.p_yes,
                        }
    return {
        "margin": margin,
        # one threshold, or (language auto) each language's template's
        "threshold": (
            next(iter(thresholds))
            if len(thresholds) == 1
            else sorted(thresholds)
            if thresholds
            else _thresholds(config)
        ),
        "count": len(listed),
        "note": "liable to flip on a machine whose llama.cpp kernels round differently",
        "verdicts": [listed[key] for key in sorted(listed)],
    }


def _conventions(options: StabilityOptions, mode: str) -> dict[str, str]:
    return {
        "cache": "bypassed (store=None): every run asks the backend",
        "relative_spread": (
            "(max - min) / |mean| across runs; mean 0: 0 if all equal else infinite (null in JSON, a breach)"
        ),
        "cv": "sample standard deviation (ddof=1) / |mean| across runs; null when infinite",
        "ndcg": "IDCG from each run's judged list (the dataset's qrels are not used)",
        "query_without_judged_passages": "left out of that run's averages (counted as unjudged_queries)",
        "labels": "grade 0-3 or unjudged" if mode == "graded" else "yes, no or unjudged",
        "flip_rate": "share of passages whose label is not identical in every run",
        "deviation_rate": "share of (passage, run) labels that differ from the passage's most common label",
        "fleiss_kappa": (
            "runs as raters, passages judged in every run as subjects; "
            "null when undefined (one category only)"
        ),
        "krippendorff_alpha": (
            ("ordinal" if mode == "graded" else "nominal")
            + " level, unjudged = missing; null when undefined (fewer than two distinct values)"
        ),
        "bootstrap": (
            f"percentile bootstrap over queries, {options.bootstrap_resamples} resamples, "
            f"seed {options.bootstrap_seed}, confidence {options.confidence}"
        ),
        "check": f"relative spread of {options.metric} <= threshold",
    }


def analyse(
    runs: Sequence[RunResult],
    records: Sequence[DatasetRecord],
    config: JudgeConfig,
    options: StabilityOptions,
    *,
    dataset: str = "",
    backend: str = "",
    runs_dir: Path | None = None,
    parallel_runs: bool = True,
    created: datetime | None = None,
    fingerprint: str | None = None,
) -> StabilityReport:
    """Every across-run figure of a stability run (pure apart from the clock)."""
    if len(runs) < 2:
        raise ValueError("analyse needs at least 2 runs")
    runs = sorted(runs, key=lambda r: r.index)
    checked = options.checked
    metrics = figure_metrics(options.k, checked, probability=bool(config.probability))
    per_run_figures = {m.name: [run.figure(m) for run in runs] for m in metrics}
    figures = {name: _figure_summary(values) for name, values in per_run_figures.items()}
    noise, per_run_ci = _noise(runs, checked, options, per_run_figures[checked.name])

    run_rows: list[dict[str, Any]] = []
    for run, ci in zip(runs, per_run_ci, strict=True):
        row: dict[str, Any] = {"run": run.index}
        for m in metrics:
            row[m.name] = _num(per_run_figures[m.name][runs.index(run)])
        row["ci"] = _interval_dict(ci)
        row["queries"] = len(run.results)
        row["unjudged_queries"] = sum(1 for r in run.results if r.ap is None)
        row["unjudged_passages"] = sum(r.unjudged for r in run.results)
        row["calls"] = sum(r.usage.calls for r in run.results)
        row["prompt_tokens"] = sum(r.usage.prompt_tokens for r in run.results)
        row["completion_tokens"] = sum(r.usage.completion_tokens for r in run.results)
        row["cost"] = sum(r.usage.cost for r in run.results)
        row["elapsed_s"] = run.elapsed_s
        row["file"] = f"runs/{run_file_name(run.index)}" if runs_dir is not None else None
        run_rows.append(row)

    labels = _labels(runs, records, config.mode)
    agreement = _agreement(labels, config.mode)
    top_queries, ap_ranges, score_ranges = _unstable_queries(runs, records, checked, options.top)
    top_passages = _unstable_passages(runs, records, config.mode, options.top)

    checked_values = per_run_figures[checked.name]
    if any(not math.isfinite(v) for v in checked_values):
        spread = math.inf  # a run with no figure at all cannot pass
    else:
        spread = relative_spread(checked_values)
    passed = math.isfinite(spread) and spread <= options.threshold
    stamp = (created or datetime.now(UTC)).isoformat(timespec="seconds")
    data: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "created": stamp,
        "dataset": {
            "path": dataset,
            "queries": len(records),
            "passages": sum(len(r.passages) for r in records),
        },
        "backend": backend,
        "judge_config": asdict(config),
        "settings": {
            "runs": len(runs),
            "threshold": options.threshold,
            "metric": checked.name,
            "k": list(options.k),
            "concurrency": options.concurrency,
            "parallel_runs": parallel_runs,
            "confidence": options.confidence,
            "bootstrap_resamples": options.bootstrap_resamples,
            "bootstrap_seed": options.bootstrap_seed,
            "top": options.top,
        },
        "conventions": {
            **_conventions(options, config.mode),
            "measures": {m.name: m.conventions for m in metrics},
        },
        "check": {
            "metric": checked.name,
            "threshold": options.threshold,
            "relative_spread": _num(spread),
            "spread_infinite": math.isinf(spread),
            "passed": passed,
            "status": "pass" if passed else "breach",
        },
        "runs": run_rows,
        "figures": figures,
        "agreement": agreement,
        "noise": noise,
        "query_ranges": {"ap": ap_ranges, "score": score_ranges},
        "unstable_queries": top_queries,
        "unstable_passages": top_passages,
        "backend_fingerprint": fingerprint,
        "borderline": _borderline(runs, records, config, options.borderline_margin),
    }
    json.dumps(data, allow_nan=False)  # the report must be strict JSON
    return StabilityReport(data, tuple(runs), tuple(records), config, options)
