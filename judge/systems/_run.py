"""``compare-systems`` end to end: read, pool, judge, score, compare, write the report.

:func:`run_comparison` (the report with its views) and :func:`run_compare_systems` (the
report) take a resolved backend and store (the CLI, the server and the public API make
them); :func:`acompare_systems` / :func:`compare_systems` are the public API.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Unpack

from judge.backends import Backend, synchronous
from judge.io import InputError, RejectsReporter
from judge.judging import (
    LANGUAGE_RULE,
    JudgeConfig,
    PassageVerdict,
    VerdictStore,
    bind_language,
    load_template,
    resolve_config,
    template_for,
)
from judge.metrics import (
    INTERVAL_EXACT_LIMIT,
    MC_MARGIN,
    PERMUTATION_CONVENTION,
    Evaluation,
    significance,
)
from judge.store import atomic_write_text
from judge.systems._adapt_pool import ADAPT_ORDER_NOTE, check_pool_adapt, pool_adapt_labels
from judge.systems._adaptive import ALPHA, AdaptiveOptions, AdaptiveOutcome, judge_adaptively
from judge.systems._comparison import ComparisonReport, ReportFolder
from judge.systems._example_bank import check_pool_examples, pool_example_bank
from judge.systems._expected import expected_evaluation, grade_rows, tested_figure
from judge.systems._inputs import Inputs, check_name, check_paths, read_systems
from judge.systems._label_scale import PoolScale
from judge.systems._model import (
    AdaptiveDecision,
    AdaptiveSummary,
    PoolSummary,
    SystemComparison,
    SystemsReport,
    SystemSummary,
)
from judge.systems._options import (
    SystemsOptions,
    label_grades,
    pool_scale,
    qrels_file_convention,
    query_texts,
    read_human_labels,
)
from judge.systems._pool import (
    Pool,
    PoolRun,
    PoolVerdicts,
    build_pool,
    check_pool_complete,
    judge_pool,
    pool_dataset_lines,
)
from judge.systems._pooled_call import PooledKeywords, pooled_call
from judge.systems._ppi_report import CHOICE, check_sample_pairs, system_ppi
from judge.systems._reasons import explain_shown, reasons_config
from judge.systems._scoring import (
    Paired,
    compare_systems_paired,
    evaluate_files,
    map_isolated,
    mean_ci,
    order_stability,
    parse_measures,
    pool_qrels,
    stability_models,
    trec_conventions,
    write_pool_files,
)

DEFAULT_REPORT_DIR = "systems-report"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _pooled_config(config: JudgeConfig, backend: Backend, listwise: bool) -> JudgeConfig:
    """The config the engine judges with (listwise judging generates its verdicts)."""
    if listwise:
        config = replace(config, probability=False)
    return resolve_config(config, backend)


def _cascade_of(backend: Backend) -> tuple[Backend, Backend] | None:
    """(cheap, expensive) of a cascade backend, each under the wrapper's call policy."""
    from judge.backends import CascadeBackend, ResilientBackend

    inner = backend.inner if isinstance(backend, ResilientBackend) else backend
    if not isinstance(inner, CascadeBackend):
        return None
    if isinstance(backend, ResilientBackend):
        return (
            ResilientBackend(inner.cheap, policy=backend.policy),
            ResilientBackend(inner.expensive, policy=backend.policy),
        )
    return inner.cheap, inner.expensive


def template_languages(config: JudgeConfig, verdicts: PoolVerdicts) -> dict[str, Any]:
    """The conventions about templates: the one template (``template_id``/``template_hash``),
    or with ``language="auto"`` each language's template, the rule, and how many pooled
    queries each language judged (read from the templates their verdicts record)."""
    if config.language != "auto" or config.template:
        template = template_for(config)
        return {"language": config.language, "template_id": template.id, "template_hash": template.hash}
    ids = config.template_ids()
    by_id = {tid: lang for lang, tid in ids.items()}
    counts = dict.fromkeys(ids, 0)
    for by_docno in verdicts.verdicts.values():
        used = next((v.template_id for v in by_docno.values() if v.template_id in by_id), None)
        if used is not None:
            counts[by_id[used]] += 1
    return {
        "language": "auto",
        "language_rule": LANGUAGE_RULE,
        "template_id": None,
        "template_hash": None,
        "template_ids": ids,
        "template_hashes": {lang: load_template(tid).hash for lang, tid in ids.items()},
        "languages": counts,
    }


def p_yes_thresholds(config: JudgeConfig) -> dict[str, float]:
    """Template id -> the P(yes) threshold its verdicts were decided with (binary
    probability mode; empty otherwise)."""
    if not config.probability or config.mode != "binary":
        return {}
    if config.language != "auto" or config.template:
        return {template_for(config).id: config.decision_threshold}
    out: dict[str, float] = {}
    for lang in ("zh", "en"):
        bound = bind_language(config, "", language=lang)
        out[template_for(bound).id] = bound.decision_threshold
    return out


async def run_compare_systems(
    systems: Mapping[str, str | os.PathLike[str]],
    report_dir: str | os.PathLike[str],
    backend: Backend,
    config: JudgeConfig,
    **kwargs: Any,
) -> SystemsReport:
    """Pool, judge, score and compare ``systems``; the report (see :func:`run_comparison`)."""
    return (await run_comparison(systems, report_dir, backend, config, **kwargs)).report


def _adaptation_of(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The pool run's ``adaptation`` block with what was measured of the order
    (:data:`ADAPT_ORDER_NOTE`); None without ``--adapt``."""
    found = (summary or {}).get("adaptation")
    return None if found is None else {**found, "order": ADAPT_ORDER_NOTE}


def _with_adaptation(run: PoolRun, pool: Pool) -> PoolRun:
    """``run`` with what ``--adapt`` learns from: the pool's labelled pairs, the judge's
    log-odds only (never the encoder's columns: :data:`ADAPT_ORDER_NOTE`)."""
    return replace(run, adapt=pool_adapt_labels(pool), adapt_features=None)


async def run_comparison(
    systems: Mapping[str, str | os.PathLike[str]],
    report_dir: str | os.PathLike[str],
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None = None,
    options: SystemsOptions | None = None,
    pool_run: PoolRun | None = None,
    prior: Mapping[tuple[str, str], float] | None = None,
    objective: str | None = None,
) -> ComparisonReport:
    """Pool, judge, score and compare ``systems`` (name -> dataset path; the first is the
    baseline); write every file into ``report_dir``; return the report and its views. ``prior``: P(yes)
    per (query id, docno) from a cheap judge, the prior of ``until_decided``. ``objective``: an
    experiment's objective measure (:func:`run_experiment`): the example block, and so the
    reasons on request, compare only its best configuration with the baseline or runner-up."""
    opts = options or SystemsOptions()
    run = pool_run or PoolRun()
    opts.check()
    check_pool_examples(run, opts, config)
    check_pool_adapt(run, opts, config)
    measures = parse_measures(opts.measures)
    paths = {check_name(name): Path(path) for name, path in systems.items()}
    check_paths(paths)
    out = Path(report_dir)
    folder, cheap_folder = ReportFolder(out), ReportFolder(out / "cheap")
    if out.exists() and not out.is_dir():
        raise InputError("the report directory is a file", path=str(out))
    if not opts.qrels_by_text:
        human, scale = read_human_labels(opts, config)
    out.mkdir(parents=True, exist_ok=True)
    reporter = RejectsReporter(folder.input_rejects, command=run.command)
    try:
        inputs = read_systems(
            paths,
            field_map=opts.field_map,
            max_passage_chars=opts.max_passage_chars,
            strict=opts.strict,
            reporter=reporter,
        )
    finally:
        reporter.close()
    if opts.qrels_by_text:  # a CSV/SRW --qrels: its query texts are the systems' queries
        human, scale = read_human_labels(opts, config, query_texts(inputs))
    pool = build_pool(inputs, depth=opts.depth, human=human, labels=label_grades(opts, inputs, config))
    if opts.sample_labels is not None:  # a sample pair outside the pool: exit 2 before any call
        check_sample_pairs(opts.sample_labels, pool)
    run = replace(run, examples=pool_example_bank(run.spec.examples, pool, inputs, config, scale.mapping))
    if run.spec.adapt:
        run = _with_adaptation(run, pool)
    judged_config = _pooled_config(config, backend, run.listwise)
    adaptive: AdaptiveOutcome | None = None
    if opts.until_decided:
        judge_with, adaptive_config = backend, judged_config
        cheap_verdicts: dict[str, dict[str, PassageVerdict]] = {}
        cheap_calls = 0
        cascade = _cascade_of(backend)
        if cascade is not None and prior is None:
            # The cheap judge on the whole pool gives every pair its P(yes); the expensive
            # judge gets only the pairs the decisions still need.
            cheap, judge_with = cascade
            cheap_config = resolve_config(replace(judged_config, probability=True), cheap)
            got = await judge_pool(
                cheap_folder.pool_input,
                cheap_folder.pool_judged,
                pool_dataset_lines(pool, inputs),
                cheap,
                cheap_config,
                store=store,
                run=replace(run, max_passage_chars=opts.max_passage_chars, listwise=False),
            )
            cheap_verdicts, cheap_calls = got.verdicts, got.calls
            prior = {
                (qid, d): float(v.p_yes)
                for qid, vs in got.verdicts.items()
                for d, v in vs.items()
                if v.judged and v.p_yes is not None
            }
            adaptive_config = resolve_config(config, judge_with)
        adaptive = await judge_adaptively(
            pool,
            inputs,
            measures,
            out,
            judge_with,
            adaptive_config,
            store=store,
            run=replace(run, max_passage_chars=opts.max_passage_chars),
            options=AdaptiveOptions(
                confidence=opts.confidence,
                budget=opts.budget,
                batch=opts.adaptive_batch,
                draws=opts.adaptive_draws,
                prior=prior,
            ),
            level=scale.level,
            seed=opts.seed,
            resamples=opts.resamples,
            depth=opts.depth,
            expected=opts.test_figure == "expected",
        )
        merged = {qid: dict(vs) for qid, vs in cheap_verdicts.items()}
        for qid, vs in adaptive.verdicts.items():
            merged.setdefault(qid, {}).update(vs)
        adaptive.calls += cheap_calls
        verdicts = PoolVerdicts(verdicts=merged, mode=judged_config.mode, calls=adaptive.calls, summary=None)
        # pool.judged.jsonl: every record the rounds wrote (the cheap pass first), so readers of
        # the pool (the server's results, read_pool_verdicts) see what was judged.
        sources = [cheap_folder.pool_judged] if cheap_verdicts else []
        sources += [out / "adaptive" / f"round-{i:03d}.judged.jsonl" for i in range(1, adaptive.rounds + 1)]
        atomic_write_text(
            folder.pool_judged, "".join(p.read_text(encoding="utf-8") for p in sources if p.exists())
        )
    else:
        verdicts = await judge_pool(
            folder.pool_input,
            folder.pool_judged,
            pool_dataset_lines(pool, inputs, labelled=run.adapt is not None),
            backend,
            config,
            store=store,
            run=replace(run, max_passage_chars=opts.max_passage_chars),
        )
        check_pool_complete(pool, verdicts)
    # CPU-bound (tests, resamples, files): off the event loop, so a server stays responsive.
    comparison = await asyncio.to_thread(
        score_and_report,
        inputs,
        pool,
        verdicts,
        out,
        judged_config,
        measures=measures,
        options=opts,
        backend_name=backend.name,
        adaptive=adaptive,
        scale=scale,
        objective=objective,
    )
    explaining = reasons_config(config, backend, listwise=run.listwise)
    if explaining is not None:  # reasons on request: the pairs shown
        await explain_shown(comparison, backend, explaining, store=store, run=run)
    return comparison


def _adaptive_summary(outcome: AdaptiveOutcome, options: SystemsOptions) -> AdaptiveSummary:
    decided = sum(d is not None for d in outcome.decided_at)
    undecided = len(outcome.decided_at) - decided
    if not undecided:
        stop = "decided"
    elif outcome.budget_spent:
        stop = "budget"
    else:
        stop = "pool exhausted"
    return AdaptiveSummary(
        confidence=options.confidence,
        alpha=ALPHA,
        budget=options.budget,
        batch=outcome.batch,
        draws=options.adaptive_draws,
        rounds=outcome.rounds,
        judged_pairs=outcome.judged_pairs,
        pool_pairs=outcome.pool_pairs,
        fraction=round(outcome.judged_pairs / outcome.pool_pairs, 4) if outcome.pool_pairs else None,
        calls=outcome.calls,
        decided=decided,
        undecided=undecided,
        stop=stop,
        prior=outcome.prior,
        figure=outcome.figure,
    )


def _adaptive_decisions(
    outcome: AdaptiveOutcome | None, names: Sequence[str], measures: Sequence[Any]
) -> dict[tuple[str, str], AdaptiveDecision]:
    if outcome is None:
        return {}
    keys = [(s, m.trec_name) for s in names[1:] for m in measures]
    return {
        key: AdaptiveDecision(
            decided=at is not None,
            decision=d.label,
            sign=d.sign,
            significant=d.significant,
            confidence=round(d.confidence, 4),
            expected_diff=d.expected_diff,
            judged_pairs=at,
            pool_pairs=outcome.pool_pairs,
        )
        for key, d, at in zip(keys, outcome.decisions, outcome.decided_at, strict=True)
    }


def primary_measure(names: Sequence[str], objective: str | None) -> str | None:
    """The measure the per-query views use: an experiment's objective, else ``map`` if
    compared, else the first (as :attr:`ReportData.primary`)."""
    if objective in names:
        return objective
    return "map" if "map" in names else (names[0] if names else None)


def per_query_values(ev: Evaluation | None, measure: str | None, inputs: Inputs) -> dict[str, float] | None:
    """``{query id: value}`` of ``measure`` in ``ev`` (the tested figure), trec_eval's order."""
    if ev is None or measure is None or measure not in ev.scores:
        return None
    by_token = {t: q for q, t in inputs.tokens.items()}
    return {by_token.get(t, t): float(v) for t, v in zip(ev.qids, ev.scores[measure].tolist(), strict=True)}


def _means(ev: Evaluation | None, measures: Sequence[Any]) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {}
    for m in measures:
        value = ev.all.get(m.trec_name) if ev is not None else None
        out[m.trec_name] = value if isinstance(value, int | float) else None
    return out


def score_and_report(
    inputs: Inputs,
    pool: Pool,
    verdicts: PoolVerdicts,
    out: Path,
    config: JudgeConfig,
    *,
    measures: Sequence[Any],
    options: SystemsOptions,
    backend_name: str,
    adaptive: AdaptiveOutcome | None = None,
    scale: PoolScale | None = None,
    objective: str | None = None,
) -> ComparisonReport:
    """Everything after judging: pooled files, metrics, comparisons, report files.
    ``scale``: how the labels met (None: resolved here from ``options``, no human labels);
    ``objective``: an experiment's (see :func:`run_comparison`)."""
    mode = config.mode
    if scale is None:
        scale = pool_scale(options, config, None)
    level = scale.level
    qrels = pool_qrels(pool, verdicts, mode)
    qrels_path, run_paths = write_pool_files(out, inputs, qrels)
    names = [s.name for s in inputs.systems]
    thresholded: dict[str, Evaluation | None] = {
        name: evaluate_files(qrels_path, run_paths[name], measures, level) for name in names
    }
    figure = tested_figure(options.test_figure, rows := grade_rows(pool, verdicts, qrels, mode), measures)
    # What every mean, interval, ranking and test below reads: the tested figure.
    evaluations = (
        {s.name: expected_evaluation(thresholded[s.name], s, inputs, rows, level) for s in inputs.systems}
        if figure.used == "expected"
        else thresholded
    )
    primary = primary_measure([m.trec_name for m in measures], objective)
    warnings = list(inputs.warnings)
    if inputs.rejected:
        warnings.append(f"{inputs.rejected} input line(s) rejected (see input.rejects.jsonl)")
    caution = ((verdicts.summary or {}).get("examples") or {}).get("warning")
    if caution:  # --examples where the docs measured them to hurt (the judge's summary says so)
        warnings.append(f"--examples: {caution}")
    refused = ((verdicts.summary or {}).get("adaptation") or {}).get("warning")
    if refused:  # --adapt's rule inverted the judge and was not applied: on stderr too
        warnings.append(f"--adapt: {refused}")
    summaries: dict[str, SystemSummary] = {}
    for system in inputs.systems:
        ev = evaluations[system.name]
        means: dict[str, float | int | None] = {}
        cis: dict[str, tuple[float, float] | None] = {}
        for m in measures:
            value = ev.all.get(m.trec_name) if ev is not None else None
            means[m.trec_name] = value if isinstance(value, int | float) else None
            cis[m.trec_name] = (
                mean_ci(
                    ev.query_scores(m),
                    confidence=options.confidence,
                    resamples=options.resamples,
                    seed=options.seed,
                )
                if ev is not None
                else None
            )
        means["map_isolated"] = map_isolated(system, pool, verdicts, config, level)
        summaries[system.name] = SystemSummary(
            path=str(system.path),
            queries=len(ev.qids) if ev is not None else 0,
            queries_in_file=len(system.queries),
            measures=means,
            ci=cis,
            thresholded=_means(thresholded[system.name], measures) if figure.used == "expected" else None,
            per_query=per_query_values(ev, primary, inputs),
        )
    if options.sample_labels is not None:
        cutoffs = sorted({m.cutoff for m in measures if m.name in ("P", "ndcg_cut") and m.cutoff} or {5, 10})
        ppi = system_ppi(options.sample_labels, inputs, pool, verdicts, level=level, mode=mode, k=cutoffs)
        for name, block in ppi.items():
            summaries[name] = summaries[name].model_copy(update={"ppi": block})
    not_in_all = inputs.not_in_all()
    excluded = {inputs.tokens[q] for q in not_in_all}
    paired: list[Paired] = compare_systems_paired(
        names,
        evaluations,
        measures,
        excluded,
        seed=options.seed,
        resamples=options.resamples,
        confidence=options.confidence,
        warnings=warnings,
    )
    models = stability_models(pool, verdicts, qrels, mode, config.grade_threshold)
    stability = order_stability(
        paired,
        inputs,
        models,
        measures,
        mode=mode,
        level=level,
        seed=options.seed,
        resamples=options.stability_resamples,
    )
    decisions = _adaptive_decisions(adaptive, names, measures)
    comparisons = [
        SystemComparison(
            baseline=p.comparison.baseline,
            system=p.comparison.system,
            measure=p.comparison.measure,
            n=p.comparison.n,
            baseline_mean=p.comparison.mean_baseline,
            system_mean=p.comparison.mean_system,
            diff=p.comparison.difference,
            p_value=p.comparison.p_permutation,
            p_holm=p.comparison.p_permutation_holm,
            t_test_p=_finite(p.comparison.p_t_test),
            t_test_p_holm=_finite(p.comparison.p_t_test_holm),
            ci_low=p.comparison.ci_low,
            ci_high=p.comparison.ci_high,
            randomization_ci_low=_finite(p.test_interval[0]),
            randomization_ci_high=_finite(p.test_interval[1]),
            p_method=p.comparison.p_permutation_method,
            p_value_se=p.comparison.p_permutation_se,
            p_holm_se=p.comparison.p_permutation_holm_se,
            decision=significance(
                p.comparison.p_permutation_holm, p.comparison.p_permutation_holm_se, 1 - options.confidence
            ),
            wins=p.wins,
            ties=p.ties,
            losses=p.losses,
            order_stability=stability[(p.comparison.system, p.comparison.measure)],
            adaptive=decisions.get((p.comparison.system, p.comparison.measure)),
        )
        for p in paired
    ]
    languages = template_languages(config, verdicts)
    thresholds = p_yes_thresholds(config)
    unjudged = verdicts.unjudged()
    pool_summary = PoolSummary(
        queries=len(pool.queries),
        pairs=pool.pairs,
        unique_pairs=pool.unique_pairs,
        human_labels=pool.human_labels,
        judged=verdicts.judged(),
        unjudged=unjudged,
        calls=verdicts.calls,
        calls_saved=pool.pairs - pool.unique_pairs,
    )
    if adaptive is not None and adaptive.judged_pairs < adaptive.pool_pairs:
        warnings.append(
            f"--until-decided judged {adaptive.judged_pairs} of {adaptive.pool_pairs} pooled pairs; "
            "the others are left out of pool.qrels, so the means and tests above count them as not relevant; "
            "each comparison's decision under the prior is in its 'adaptive' entry"
        )
    if unjudged:
        warnings.append(
            f"{unjudged} pooled pair(s) are unjudged (left out of pool.qrels, so scored as not relevant); "
            "rerun with --retry-unjudged to ask again"
        )
    conventions: dict[str, Any] = {
        "baseline": names[0],
        "mode": mode,
        "backend": backend_name,
        **languages,
        "decision": (
            "yes iff P(yes) >= the template's threshold (p_yes_thresholds)"
            if thresholds
            else "graded: grade by argmax of the grade probabilities"
            if config.probability
            else "generated verdicts"
        ),
        "p_yes_thresholds": thresholds,
        **figure.conventions(),
        "per_query_measure": primary,
        "per_query": f"systems[*].per_query: each query's {primary} (query id -> the tested figure), "
        "the values the paired tests read; their mean is the system's figure",
        "pooling": "union of every system's passages"
        if options.depth is None
        else f"union of every system's top {options.depth} passages",
        "depth": options.depth,
        "passage_identity": "id when given, else the exact text (docno h + sha256(text)[:16])",
        "human_labels": str(options.qrels) if options.qrels is not None else None,
        **({"human_labels_file": file} if (file := qrels_file_convention(options)) is not None else {}),
        "review_labels": options.labels.source if options.labels is not None else None,
        **(
            {"sample_labels": {"source": options.sample_labels.labels.path, "choice": CHOICE}}
            if options.sample_labels is not None
            else {}
        ),
        # --examples: how many, from where, the labels found and (nearest) which queries lent them
        "examples": (verdicts.summary or {}).get("examples"),
        # --adapt: the rule the pool's labels taught, and whether it decided the pool
        "adaptation": _adaptation_of(verdicts.summary),
        "qrels_grades": "graded: the judge's grade 0-3" if mode == "graded" else "binary: yes=1, no=0",
        **scale.conventions(human_pairs=pool.human_labels),
        "measures": [m.trec_name for m in measures],
        "measure_params": {m.trec_name: m.params for m in measures},
        **trec_conventions(level),
        "map_isolated": "label-free AP of judge score: each list alone, denominator = relevant passages "
        "that list holds, unjudged dropped; mean over queries with a judged passage",
        "system_queries": "queries of the system with a judgment in the pool (judge trec's num_q)",
        "paired_queries": "queries scored for both systems and present in every system",
        "seed": options.seed,
        "resamples": options.resamples,
        "permutation_test": PERMUTATION_CONVENTION,
        "t_test": "scipy.stats.ttest_rel (two-sided)",
        "confidence": options.confidence,
        "randomization_interval": f"{options.confidence:g} interval of the randomization test itself: "
        "the shifts of the mean difference it does not reject (every sign assignment up to "
        f"{INTERVAL_EXACT_LIMIT} queries, else the test's seeded sign flips); "
        "excludes 0 exactly when "
        f"p < {1 - options.confidence:.2g}; null bound = unbounded (too few queries)",
        "bootstrap": f"percentile, {options.confidence:g} CI of the mean difference (system - baseline); "
        "another method than the test: near the boundary it may exclude 0 while the test does not reject",
        "significance": f"Holm-adjusted randomization p < {1 - options.confidence:.2g}; "
        f"undecided when a Monte Carlo p is within {MC_MARGIN:g} standard errors of it",
        "multiple_comparisons": f"Holm over {len(comparisons)} comparisons (systems x measures)",
        "wins": "queries where the system scores higher than the baseline (ties: equal)",
        "order_stability": (
            f"{options.stability_resamples} redraws of every pooled judge verdict from its P(yes) "
            "(graded: from its grade probabilities), seed "
            f"{options.seed}; share in which sign(diff) holds; null without probabilities; "
            f"the {pool.human_labels} pooled pair(s) fixed by human labels are never redrawn"
        ),
        **(
            {
                "adaptive": "pairs judged in rounds, the pair that most changes an undecided comparison's "
                "difference first (Carterette et al. 2006 weights through the measure registry); "
                f"stop when every decision (sign, Holm p < {ALPHA}) holds in >= {options.confidence:g} of "
                f"{options.adaptive_draws} seeded draws of the pairs not judged from the prior"
            }
            if adaptive is not None
            else {}
        ),
        "reproduce": f"judge trec -l {level} -m {' -m '.join(m.trec_name for m in measures)} "
        "REPORT_DIR/pool.qrels REPORT_DIR/runs/NAME.run",
    }
    report = SystemsReport(
        systems=summaries,
        pool=pool_summary,
        comparisons=comparisons,
        conventions=conventions,
        not_in_all_systems=not_in_all,
        warnings=warnings,
        adaptive=_adaptive_summary(adaptive, options) if adaptive is not None else None,
    )
    comparison = ComparisonReport(
        out,
        report,
        inputs,
        pool,
        verdicts,
        evaluations,
        measures=measures,
        paired=paired,
        top_queries=options.top_queries,
        top_passages=options.top_passages,
        objective=objective,
    )
    comparison.write()
    return comparison


# ---------------------------------------------------------------------------- public API
async def acompare_systems(
    systems: Mapping[str, str | os.PathLike[str]],
    output_dir: str | os.PathLike[str] = DEFAULT_REPORT_DIR,
    **keywords: Unpack[PooledKeywords],
) -> SystemsReport:
    """Judge the pooled passages of several retrieval systems once and compare them.

    ``systems``: name -> dataset in ``judge score``'s input format (JSONL, gzip ok); the
    first is the baseline. Writes ``report.json`` (schema ``judge.systems/1``),
    ``report.md``, ``report.html``, ``pool.judged.jsonl``, ``pool.qrels`` and
    ``runs/NAME.run`` into ``output_dir`` (default ``./systems-report``) and returns the
    report. The keywords (:class:`~judge.systems.PooledKeywords`, shared with
    :func:`judge.experiment`): ``backend``, ``mode``, ``config``, ``qrels`` (human labels
    fill the pool first), ``qrels_level`` (graded labels with a binary judge: grade >= L is
    relevant; default an explicit ``relevance_level``, else refused), ``qrels_yes_grade``
    (0/1 labels with a graded judge: the grade a 1 stands for), ``qrels_scale`` (a
    Quepid/SRW ``qrels`` list's rating scale), ``depth``, ``measures``,
    ``relevance_level``, ``cache`` (True: the default verdict cache; a path; a
    VerdictStore; False: none), ``seed`` (0), ``resamples`` (10000),
    ``stability_resamples`` (1000), ``confidence`` (0.95), ``strict``, ``concurrency``,
    ``retry_unjudged``, ``base_url``; ``until_decided`` (judge only until every decision
    holds with ``confidence``; ``budget``: most pairs judged, ``batch``: pairs per round,
    ``draws``: Monte Carlo draws, 200); ``cascade="CHEAP,EXPENSIVE"`` with ``margin`` (0.1:
    the cheap judge first, the expensive one where the cheap P(yes) is within ``margin`` of
    the threshold, or with ``until_decided`` the pairs the decisions still need).
    Re-running resumes: judged pairs cost nothing.
    """
    async with pooled_call(keywords, name="compare_systems") as call:
        return await run_compare_systems(
            systems,
            output_dir,
            call.backend,
            call.config,
            store=call.store,
            options=call.options,
            pool_run=call.run,
        )


compare_systems = synchronous(acompare_systems, "compare_systems")
