"""Scoring systems against the judged pool, exactly as ``judge trec`` scores a run.

* ``pool.qrels``: human labels (all of a pooled query's, retrieved or not) and the judge's
  verdicts (the grade in graded mode, 1/0 in binary mode); unjudged pairs are left out
  (so trec_eval counts them as not relevant).
* ``runs/NAME.run``: each system's ranking in input order, scores ``n, n-1, ..., 1`` (so
  trec_eval's sort by score keeps the order), the tag is the system's name.
* Each system is evaluated by reading those two files back with :func:`judge.io.read_qrels`
  / :func:`judge.io.read_run` and calling :func:`judge.metrics.evaluate` on
  :func:`judge.io.join_run_qrels`, the path ``judge trec`` takes: its means are the report's.
* ``map_isolated``: each query's AP from the judging layer's :func:`judge.judging.summarize`
  over the system's own list (unjudged dropped, denominator = relevant passages the list
  holds), averaged as ``judge score`` averages it.
* Comparisons: :func:`judge.metrics.compare_scores` and :func:`judge.metrics.holm_adjust`,
  the machinery of ``judge compare``.
* ``order_stability``: every pooled verdict with a probability redrawn from it (seeded),
  the comparisons recomputed; the share of redraws in which the sign of the difference holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from judge.io import InputError, JudgedRanking, join_run_qrels, read_qrels, read_run, write_qrels, write_run
from judge.judging import JudgeConfig, PassageVerdict, summarize
from judge.metrics import (
    Comparison,
    Evaluation,
    Measure,
    compare_scores,
    evaluate,
    holm_adjust,
    parse_measure_args,
    percentile_bootstrap_mean,
    permutation_interval,
)
from judge.systems._inputs import Inputs, SystemInput
from judge.systems._pool import Pool, PoolVerdicts

DEFAULT_MEASURES = ("map", "ndcg_cut_10", "P_5", "recall_10", "recip_rank")
TIES = "score descending, then docno descending (trec_eval); scores n..1 keep the input order"
_ZERO = 1e-12


def parse_measures(texts: Sequence[str] | None) -> tuple[Measure, ...]:
    """Registry measures with a per-query mean (as ``judge compare`` takes them)."""
    try:
        measures = parse_measure_args(list(texts) if texts else list(DEFAULT_MEASURES))
    except ValueError as exc:
        raise InputError(str(exc), field="-m") from None
    for m in measures:
        if m.aggregate not in ("mean", "sum") or m.is_string:
            raise InputError(f"{m.trec_name} has no per-query mean to compare", field="-m")
    # Report columns follow the order asked for (-m order; the defaults in their listed
    # order); the measures one argument expands to (a nickname) keep trec_eval's order.
    order: dict[str, int] = {}
    for text in texts or DEFAULT_MEASURES:
        for m in parse_measure_args([text]):
            order.setdefault(m.trec_name, len(order))
    return tuple(sorted(measures, key=lambda m: order.get(m.trec_name, len(order))))


# ---------------------------------------------------------------------------- pooled files
def judge_grade(v: PassageVerdict, mode: str) -> int | None:
    """A judged verdict as a qrels grade (None: unjudged)."""
    if not v.judged:
        return None
    if mode == "graded" and v.grade is not None:
        return int(v.grade)
    return 1 if v.verdict == "yes" else 0


def pool_qrels(pool: Pool, verdicts: PoolVerdicts, mode: str) -> dict[str, dict[str, int]]:
    """``{qid token: {docno: grade}}``: human labels first, then the judge's verdicts."""
    out: dict[str, dict[str, int]] = {}
    for q in pool.queries:
        docs = dict(q.human)
        judged = verdicts.verdicts.get(q.qid, {})
        for d in q.to_judge:
            v = judged.get(d)
            grade = judge_grade(v, mode) if v is not None else None
            if grade is not None:
                docs[d] = grade
        if docs:
            out[q.token] = docs
    return out


def system_run(system: SystemInput, tokens: Mapping[str, str]) -> dict[str, list[tuple[str, float]]]:
    """A system's rankings as ``{qid token: [(docno, score)]}``, scores n..1."""
    return {
        tokens[sq.qid]: [(d, float(len(sq.docnos) - i)) for i, d in enumerate(sq.docnos)]
        for sq in system.queries.values()
    }


def write_pool_files(
    report_dir: Path, inputs: Inputs, qrels: Mapping[str, Mapping[str, int]]
) -> tuple[Path, dict[str, Path]]:
    """``pool.qrels`` and ``runs/NAME.run``; returns their paths."""
    qrels_path = report_dir / "pool.qrels"
    write_qrels(qrels_path, qrels)
    runs_dir = report_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Path] = {}
    for system in inputs.systems:
        path = runs_dir / f"{system.name}.run"
        write_run(path, system_run(system, inputs.tokens), run_id=system.name)
        runs[system.name] = path
    return qrels_path, runs


def trec_conventions(level: int) -> dict[str, object]:
    """The conventions ``judge trec`` echoes for these options (no -c, no -M)."""
    return {
        "relevance_level": level,
        "complete": False,
        "missing_queries": "skipped (only queries in both files)",
        "max_docs_per_query": None,
        "ties": TIES,
        "ap_denominator": "qrels (the relevant passages in the pool)",
        "idcg": "qrels (the pool's grades)",
        "gain": "linear",
        "unjudged": "nonrelevant (not in pool.qrels)",
    }


def evaluate_files(
    qrels_path: Path, run_path: Path, measures: Sequence[Measure], level: int
) -> Evaluation | None:
    """``judge trec -l LEVEL QRELS RUN`` in process; None when no query can be scored
    (nothing judged for any query of the run)."""
    if qrels_path.stat().st_size == 0:
        return None
    qrels = read_qrels(qrels_path)
    run = read_run(run_path)
    try:
        return evaluate(
            measures,
            join_run_qrels(qrels, run),
            run_id=run.run_id,
            relevance_level=level,
            conventions=trec_conventions(level),
        )
    except ValueError:
        return None


# ---------------------------------------------------------------------------- isolated AP
def _label_verdict(index: int, docno: str, grade: int, level: int) -> PassageVerdict:
    return PassageVerdict(
        index=index,
        passage_id=docno,
        verdict="yes" if grade >= level else "no",
        grade=min(max(grade, 0), 3),
        template_id="qrels",
        template_hash="",
        backend="human",
    )


def _missing_verdict(index: int, docno: str) -> PassageVerdict:
    return PassageVerdict(
        index=index,
        passage_id=docno,
        verdict="unjudged",
        template_id="",
        template_hash="",
        backend="",
        error="not in the judged pool (below --depth, or no verdict)",
    )


def system_verdicts(
    system: SystemInput, qid: str, pool: Pool, verdicts: PoolVerdicts, level: int
) -> list[PassageVerdict]:
    """The verdict of each passage of one system's ranking (rank order): the human label,
    else the judge's verdict, else unjudged (below the depth)."""
    human = pool.labels(qid)
    judged = verdicts.verdicts.get(qid, {})
    out: list[PassageVerdict] = []
    for i, d in enumerate(system.queries[qid].docnos):
        if d in human:
            out.append(_label_verdict(i, d, human[d], level))
        elif d in judged:
            out.append(judged[d].model_copy(update={"index": i}))
        else:
            out.append(_missing_verdict(i, d))
    return out


def map_isolated(
    system: SystemInput, pool: Pool, verdicts: PoolVerdicts, config: JudgeConfig, level: int
) -> float | None:
    """Mean label-free AP of one system, as ``judge score`` reports ``map``: per query
    :func:`judge.judging.summarize` on the system's own verdicts, rounded to 6 digits,
    averaged over the queries with a judged passage and rounded."""
    aps: list[float] = []
    for qid, sq in system.queries.items():
        result = summarize(
            sq.query, system_verdicts(system, qid, pool, verdicts, level), config, "pool", k=(10,)
        )
        if result.ap is not None:
            aps.append(round(float(result.ap), 6))
    return round(math.fsum(aps) / len(aps), 6) if aps else None


# ---------------------------------------------------------------------------- comparisons
@dataclass
class Paired:
    """One comparison with its per-query differences (system - baseline) on ``qids``."""

    comparison: Comparison
    qids: tuple[str, ...]
    differences: npt.NDArray[np.float64]
    test_interval: tuple[float, float] = (math.nan, math.nan)

    @property
    def wins(self) -> int:
        return int(np.count_nonzero(self.differences > _ZERO))

    @property
    def losses(self) -> int:
        return int(np.count_nonzero(self.differences < -_ZERO))

    @property
    def ties(self) -> int:
        return int(self.differences.shape[0]) - self.wins - self.losses


def common_queries(base: Evaluation, other: Evaluation, excluded: set[str]) -> list[str]:
    """Query tokens evaluated for both, in the baseline's (trec_eval) order, minus ``excluded``."""
    evaluated = set(other.qids)
    return [q for q in base.qids if q in evaluated and q not in excluded]


def compare_systems_paired(
    names: Sequence[str],
    evaluations: Mapping[str, Evaluation | None],
    measures: Sequence[Measure],
    excluded: set[str],
    *,
    seed: int,
    resamples: int,
    confidence: float,
    warnings: list[str],
) -> list[Paired]:
    """Every system against the first on every measure, Holm-adjusted over all of them, each
    with the interval of its randomization test (:func:`judge.metrics.permutation_interval`)."""
    base_name = names[0]
    base = evaluations[base_name]
    out: list[Paired] = []
    for name in names[1:]:
        other = evaluations[name]
        if base is None or other is None:
            warnings.append(f"{name} vs {base_name}: no query could be scored for both; not compared")
            continue
        common = common_queries(base, other, excluded)
        if not common:
            warnings.append(f"{name} vs {base_name}: no query in common; not compared")
            continue
        bi = {q: i for i, q in enumerate(base.qids)}
        oi = {q: i for i, q in enumerate(other.qids)}
        a_idx = np.array([bi[q] for q in common])
        b_idx = np.array([oi[q] for q in common])
        for m in measures:
            a = base.query_scores(m)[a_idx]
            b = other.query_scores(m)[b_idx]
            comparison = compare_scores(
                a,
                b,
                measure=m.trec_name,
                baseline_name=base_name,
                system_name=name,
                resamples=resamples,
                seed=seed,
                confidence=confidence,
            )
            interval = permutation_interval(a, b, confidence=confidence, resamples=resamples, seed=seed)
            out.append(Paired(comparison, tuple(common), b - a, interval))
    adjusted = holm_adjust([p.comparison for p in out])
    return [Paired(c, p.qids, p.differences, p.test_interval) for c, p in zip(adjusted, out, strict=True)]


def mean_ci(
    values: npt.NDArray[np.float64], *, confidence: float, resamples: int, seed: int
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of a system's mean (the chart's whiskers)."""
    if values.shape[0] == 0:
        return None
    if values.shape[0] < 2 or np.all(values == values[0]):
        m = float(values.mean())
        return (m, m)
    low, high, _ = percentile_bootstrap_mean(values, confidence=confidence, resamples=resamples, seed=seed)
    return (low, high)


# ---------------------------------------------------------------------------- judge noise
@dataclass
class _QueryModel:
    """One query of ``pool.qrels`` for redraws: its docnos, observed grades, the slots
    with a probability and how to redraw them."""

    token: str
    docnos: list[str]
    grades: npt.NDArray[np.int64]
    slots: npt.NDArray[np.intp]  # indices into docnos/grades with a probability
    p_yes: npt.NDArray[np.float64]  # binary redraw: P(relevant) per slot
    cdf: npt.NDArray[np.float64] | None  # graded redraw: cumulative P(grade 0..3) per slot
    flip: tuple[int, int] | None  # graded without per-grade probs: grades for (no, yes)


def _graded_cdf(v: PassageVerdict) -> npt.NDArray[np.float64] | None:
    if v.probs is None or not all(str(g) in v.probs for g in range(4)):
        return None
    p = np.array([float(v.probs[str(g)]) for g in range(4)], dtype=np.float64)
    total = float(p.sum())
    if total <= 0:
        return None
    return np.cumsum(p / total)


def stability_models(
    pool: Pool,
    verdicts: PoolVerdicts,
    qrels: Mapping[str, Mapping[str, int]],
    mode: str,
    grade_threshold: int,
) -> list[_QueryModel] | None:
    """Per query of the pool qrels, the redraw model; None when no verdict has P(yes)."""
    models: list[_QueryModel] = []
    any_prob = False
    for q in pool.queries:
        docs = qrels.get(q.token)
        if not docs:
            continue
        docnos = list(docs)
        grades = np.array([docs[d] for d in docnos], dtype=np.int64)
        judged = verdicts.verdicts.get(q.qid, {})
        slots: list[int] = []
        p_yes: list[float] = []
        cdfs: list[npt.NDArray[np.float64]] = []
        graded_cdf = mode == "graded"
        for i, d in enumerate(docnos):
            if d in q.human:
                continue
            v = judged.get(d)
            if v is None or not v.judged or v.p_yes is None:
                continue
            slots.append(i)
            p_yes.append(min(max(float(v.p_yes), 0.0), 1.0))
            if graded_cdf:
                cdf = _graded_cdf(v)
                if cdf is None:
                    graded_cdf = False
                else:
                    cdfs.append(cdf)
        if slots:
            any_prob = True
        models.append(
            _QueryModel(
                token=q.token,
                docnos=docnos,
                grades=grades,
                slots=np.array(slots, dtype=np.intp),
                p_yes=np.array(p_yes, dtype=np.float64),
                cdf=np.array(cdfs) if graded_cdf and slots else None,
                flip=(grade_threshold - 1, grade_threshold) if mode == "graded" else None,
            )
        )
    return models if any_prob else None


def _redraw(model: _QueryModel, rng: np.random.Generator, mode: str) -> npt.NDArray[np.int64]:
    grades = model.grades.copy()
    n = model.slots.shape[0]
    if n == 0:
        return grades
    u: npt.NDArray[np.float64] = np.asarray(rng.random(n), dtype=np.float64)
    if model.cdf is not None:
        grades[model.slots] = np.minimum((u[:, None] >= model.cdf).sum(axis=1), 3)
    elif mode == "graded" and model.flip is not None:
        # Only P(yes) known: a redrawn yes keeps a yes grade (or the threshold), a no keeps
        # a no grade (or threshold - 1).
        relevant = u < model.p_yes
        current = grades[model.slots]
        no_grade, yes_grade = model.flip
        grades[model.slots] = np.where(
            relevant,
            np.where(current >= yes_grade, current, yes_grade),
            np.where(current < yes_grade, current, no_grade),
        )
    else:
        grades[model.slots] = (u < model.p_yes).astype(np.int64)
    return grades


def _system_index(
    system: SystemInput, models: Sequence[_QueryModel], tokens: Mapping[str, str]
) -> dict[str, npt.NDArray[np.intp]]:
    """Per query token the system ranks: each retrieved docno's position in the model's
    docnos (-1: not in the pool qrels)."""
    by_token = {tokens[q]: sq for q, sq in system.queries.items()}
    out: dict[str, npt.NDArray[np.intp]] = {}
    for model in models:
        sq = by_token.get(model.token)
        if sq is None:
            continue
        where = {d: i for i, d in enumerate(model.docnos)}
        out[model.token] = np.array([where.get(d, -1) for d in sq.docnos], dtype=np.intp)
    return out


class _DrawScorer:
    """Per-query measure values of one system on redrawn grades, through the registry.

    A query's values depend only on its redrawn grades, so they are memoised by those
    grades: confident verdicts redraw to the same grades again and again, and each
    distinct state is evaluated once."""

    def __init__(
        self, index: Mapping[str, npt.NDArray[np.intp]], measures: Sequence[Measure], level: int
    ) -> None:
        self.index = index
        self.measures = tuple(measures)
        self.level = level
        self.memo: dict[tuple[str, bytes], npt.NDArray[np.float64]] = {}

    def score(self, drawn: Mapping[str, npt.NDArray[np.int64]]) -> dict[str, npt.NDArray[np.float64]]:
        """``token -> values`` (one per measure, in ``measures`` order)."""
        out: dict[str, npt.NDArray[np.float64]] = {}
        missing: list[tuple[tuple[str, bytes], JudgedRanking]] = []
        for token, idx in self.index.items():
            grades = drawn[token]
            key = (token, grades.tobytes())
            hit = self.memo.get(key)
            if hit is not None:
                out[token] = hit
                continue
            ranked = np.where(idx >= 0, grades[np.maximum(idx, 0)], -1).astype(np.int64)
            missing.append((key, JudgedRanking(qid=token, grades=ranked, qrels=grades)))
        if missing:
            ev = evaluate(self.measures, [q for _, q in missing], relevance_level=self.level)
            columns = np.stack([ev.query_scores(m) for m in self.measures], axis=1)
            for row, (key, _) in enumerate(missing):
                self.memo[key] = columns[row]
                out[key[0]] = columns[row]
        return out


def order_stability(
    paired: Sequence[Paired],
    inputs: Inputs,
    models: Sequence[_QueryModel] | None,
    measures: Sequence[Measure],
    *,
    mode: str,
    level: int,
    seed: int,
    resamples: int,
) -> dict[tuple[str, str], float | None]:
    """``(system, measure) -> share`` of ``resamples`` redraws of the pool in which the sign
    of the mean difference equals the observed one; None for all without probabilities."""
    keys = [(p.comparison.system, p.comparison.measure) for p in paired]
    if models is None or resamples < 1 or not paired:
        return dict.fromkeys(keys, None)
    by_name = {s.name: s for s in inputs.systems}
    names = sorted({p.comparison.baseline for p in paired} | {p.comparison.system for p in paired})
    wanted = {q for p in paired for q in p.qids}
    column = {m.trec_name: i for i, m in enumerate(measures)}
    scorers = {
        name: _DrawScorer(
            {t: idx for t, idx in _system_index(by_name[name], models, inputs.tokens).items() if t in wanted},
            measures,
            level,
        )
        for name in names
    }
    observed = [_sign(float(p.differences.mean())) for p in paired]
    held = [0] * len(paired)
    rng = np.random.default_rng(seed)
    for _ in range(resamples):
        drawn = {model.token: _redraw(model, rng, mode) for model in models}
        values = {name: scorer.score(drawn) for name, scorer in scorers.items()}
        for i, p in enumerate(paired):
            c = p.comparison
            j = column[c.measure]
            base, other = values[c.baseline], values[c.system]
            diff = math.fsum(float(other[q][j]) - float(base[q][j]) for q in p.qids) / len(p.qids)
            if _sign(diff) == observed[i]:
                held[i] += 1
    return {k: held[i] / resamples for i, k in enumerate(keys)}


def _sign(x: float) -> int:
    return 0 if abs(x) <= _ZERO else (1 if x > 0 else -1)
