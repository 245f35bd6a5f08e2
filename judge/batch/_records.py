"""Output records (one JSON object per query) and the run summary computed from them.

A record holds everything needed to (a) report the query, (b) recompute the summary and
(c) re-ask its unjudged passages without the input file (``--retry-unjudged``): the query,
each passage's docno, the texts of the unjudged passages, the ground truth as given.

Conventions (echoed in every record and in the summary):

* judge metrics are computed on the *judged* passages in input order; unjudged passages
  are dropped from the ranking (never counted as irrelevant);
* a passage is relevant for AP / RR / P@k when its verdict is ``yes`` (in graded mode the
  judging layer sets ``yes`` iff ``grade >= grade_threshold``); NDCG uses the grade
  (binary: yes = 1) as gain;
* ground-truth metrics use the input ranking and the given ground truth: qrels grades
  (``expected_ids`` = grade 1); relevant iff grade >= 1; AP's denominator and NDCG's ideal
  ranking come from the ground truth (trec_eval's conventions);
* means are over the queries where the metric is defined (a query with no judged passage
  has no judge AP and is counted in ``queries_without_judged``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from judge.batch._extra_fields import summarize_extras
from judge.io import DatasetRecord
from judge.judging import JudgeResult, PassageVerdict, expected_metrics, judged_list, mean_expected
from judge.metrics import (
    REDUNDANCY_CONVENTIONS,
    JudgedList,
    Measure,
    NamedMeasure,
    ScaleMapping,
    judge_measure,
    parse_named_measures,
    redundancy_by_k,
    resolve_mapping,
    scale_of_labels,
    truth_measure,
    truth_values,
)

RECORD_VERSION = 1

#: ``--qrels-level``: where a graded ground truth meets the judge's yes/no (agreement), a
#: grade >= this level is relevant (stated in every record and the summary).
DEFAULT_QRELS_LEVEL = 1

JUDGE_CONVENTIONS: dict[str, str] = {
    "unjudged": "dropped from the ranking (never scored as irrelevant)",
    "relevant": "verdict == 'yes' (graded: grade >= grade_threshold)",
    "ndcg_gain": "grade (binary: yes=1, no=0), linear gain, log2 discount",
    "ndcg_ideal": "judged list re-sorted by gain",
    "ap_denominator": "relevant among the judged retrieved passages",
    "expected": (
        "each metric's expectation when every judged passage is relevant with its P(yes), "
        "independently (only with probabilities); no threshold decides it, so it is the figure "
        "to compare across machines, builds and thresholds; the hard figures count the "
        "verdicts as decided and are the ones ground_truth (hand labels) checks"
    ),
}

GROUND_TRUTH_CONVENTIONS: dict[str, str] = {
    "source": "qrels grades; expected_ids as grade 1",
    "relevant": "grade >= 1",
    "ap_denominator": "relevant passages in the ground truth (trec_eval)",
    "ndcg_ideal": "ground-truth grades sorted (trec_eval ndcg_cut)",
    "unmatched_passage": "a retrieved passage absent from the ground truth has grade 0",
}


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _values(values: Mapping[str, float | None]) -> dict[str, float | None]:
    return {name: _round(value) for name, value in values.items()}


def judge_rank_metrics(verdicts: Sequence[PassageVerdict] | JudgedList, k: Sequence[int]) -> dict[str, Any]:
    """RR and P@k on the judged passages (unjudged dropped): registry ``recip_rank`` and
    ``P_k`` with the label-free conventions."""
    listed = verdicts if isinstance(verdicts, JudgedList) else judged_list(verdicts, "binary")
    return {
        "rr": _round(listed.value(judge_measure("recip_rank"))),
        "precision": {str(c): _round(listed.value(judge_measure(f"P_{c}"))) for c in k},
    }


def ground_truth_metrics(
    docnos: Sequence[str],
    truth: Mapping[str, int],
    k: Sequence[int],
    *,
    measures: Sequence[str] = (),
) -> dict[str, Any]:
    """trec_eval-style metrics of the input ranking against the ground truth (registry
    measures with trec_eval's conventions; a passage absent from the ground truth has grade 0).
    ``measures``: more registry measures, under ``measures`` by the names given."""
    grades = [int(truth.get(d, 0)) for d in docnos]
    fixed = {
        "ap": truth_measure("map"),
        "rr": truth_measure("recip_rank"),
        "n_relevant": truth_measure("num_rel"),
    }
    for c in k:
        for key, family in (("ndcg", "ndcg_cut"), ("precision", "P"), ("recall", "recall")):
            fixed[f"{key}@{c}"] = truth_measure(f"{family}_{c}")
    v = truth_values(grades, truth, fixed)
    out: dict[str, Any] = {
        "ap": _round(v["ap"]),
        "ndcg": {str(c): _round(v[f"ndcg@{c}"]) for c in k},
        "rr": _round(v["rr"]),
        "precision": {str(c): _round(v[f"precision@{c}"]) for c in k},
        "recall": {str(c): _round(v[f"recall@{c}"]) for c in k},
        "n_relevant": int(v["n_relevant"]),
    }
    named = parse_named_measures(measures)
    if named:
        out["measures"] = _values(truth_values(grades, truth, {m.name: m.truth for m in named}))
    return out


def truth_mapping(truth: Mapping[str, int], level: int = DEFAULT_QRELS_LEVEL) -> ScaleMapping:
    """How the ground truth meets the judge's yes/no verdicts: graded labels (any grade > 1)
    made binary at ``level`` (grade >= level is relevant), 0/1 labels as they are."""
    source = scale_of_labels(g for g in truth.values() if g >= 0)
    return resolve_mapping(
        source, "binary", level=level, source_name="the ground truth", level_field="--qrels-level"
    )


def agreement_counts(
    verdicts: Sequence[PassageVerdict],
    docnos: Sequence[str],
    truth: Mapping[str, int],
    level: int = DEFAULT_QRELS_LEVEL,
) -> dict[str, int]:
    """Judge-vs-ground-truth counts on judged passages: tp, fp, fn, tn; a ground-truth grade
    is relevant as :func:`truth_mapping` says (grade >= ``level``)."""
    mapping = truth_mapping(truth, level)
    c = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for v, d in zip(verdicts, docnos, strict=True):
        if not v.judged:
            continue
        judge_rel = v.verdict == "yes"
        true_rel = mapping.apply(truth.get(d, 0)) >= 1
        c[("t" if judge_rel == true_rel else "f") + ("p" if judge_rel else "n")] += 1
    return c


def build_record(
    rec: DatasetRecord,
    result: JudgeResult,
    k: Sequence[int],
    *,
    measures: Sequence[str] = (),
    qrels_level: int = DEFAULT_QRELS_LEVEL,
) -> dict[str, Any]:
    """The output line for one scored query."""
    docnos = [p.docno for p in rec.passages]
    unjudged_passages = [
        {"index": i, "id": p.id, "text": p.text, "truncated": p.truncated}
        for i, (p, v) in enumerate(zip(rec.passages, result.verdicts, strict=True))
        if not v.judged
    ]
    out: dict[str, Any] = {
        "id": rec.id,
        "line": rec.line,
        "query": rec.query,
        "v": RECORD_VERSION,
        "docnos": docnos,
        "expected_ids": list(rec.expected_ids) if rec.expected_ids is not None else None,
        "qrels": rec.qrels,
        "unjudged_passages": unjudged_passages,
        # over the list as retrieved: a passage dropped as a repeat still counts at its rank
        "redundancy": {
            c: _round(x) for c, x in redundancy_by_k(rec.retrieved_texts(max(k, default=0)), k).items()
        },
    }
    if rec.duplicates:  # passages left out as repeats of an earlier docno, as judge search counts them
        out["dropped"] = {
            "duplicate_ids": rec.duplicates,
            "retrieved": len(rec.retrieved),
            "still_counted_in": ["redundancy"],
        }
    return finish_record(out, result, k, measures=measures, qrels_level=qrels_level)


def finish_record(
    base: dict[str, Any],
    result: JudgeResult,
    k: Sequence[int],
    *,
    measures: Sequence[str] = (),
    qrels_level: int = DEFAULT_QRELS_LEVEL,
) -> dict[str, Any]:
    """Fill a record's result fields from ``result`` (used for new and re-judged queries).

    ``measures``: registry measures (``P@3`` ...) recorded under ``measures`` (judge
    verdicts, label-free conventions) and ``ground_truth.measures``, by the names given.
    """
    out = dict(base)
    verdicts = result.verdicts
    named = parse_named_measures(measures)
    listed = judged_list(verdicts, result.mode)
    out.update(
        {
            "mode": result.mode,
            "backend": result.backend,
            "n_passages": len(verdicts),
            "unjudged": result.unjudged,
            "truncated": sum(1 for v in verdicts if v.truncated),
            "score": _round(result.score),
            "ap": _round(result.ap),
            "ndcg": {str(c): _round(val) for c, val in result.ndcg.items()},
            **judge_rank_metrics(listed, k),
            # probability-weighted metrics (judge.judging._expected_verdicts): threshold-free
            "expected": expected_metrics(verdicts, result.mode, k),
            "usage": result.usage.model_dump(),
            "verdicts": [v.model_dump(mode="json") for v in verdicts],
            "conventions": dict(result.conventions),
        }
    )
    if named:
        out["measures"] = _values(listed.values(named))
    truth = truth_of(out)
    if truth is not None:
        gt = ground_truth_metrics(out["docnos"], truth, k, measures=measures)
        gt["agreement"] = agreement_counts(verdicts, out["docnos"], truth, qrels_level)
        gt["agreement_rule"] = truth_mapping(truth, qrels_level).describe()
        out["ground_truth"] = gt
    else:
        out["ground_truth"] = None
    return out


def truth_of(record: Mapping[str, Any]) -> dict[str, int] | None:
    """A record's ground truth as docno -> grade (its ``qrels``, else its ``expected_ids`` as
    grade 1), None when it has neither."""
    if record.get("qrels") is not None:
        return {str(a): int(b) for a, b in record["qrels"].items()}
    if record.get("expected_ids") is not None:
        return dict.fromkeys((str(x) for x in record["expected_ids"]), 1)
    return None


def _expected_of(record: Mapping[str, Any], k: Sequence[int]) -> dict[str, Any] | None:
    """A record's ``expected`` block (recomputed for records written before it existed)."""
    if "expected" in record:
        return record["expected"]  # type: ignore[no-any-return]
    return expected_metrics(record["verdicts"], str(record.get("mode", "binary")), k)


def verdicts_of(record: Mapping[str, Any]) -> list[PassageVerdict]:
    return [PassageVerdict.model_validate_json(json.dumps(v)) for v in record["verdicts"]]


def _mean(values: Iterable[float | None]) -> float | None:
    xs = [float(x) for x in values if x is not None]
    return round(math.fsum(xs) / len(xs), 6) if xs else None


def _aggregate(measure: Measure, values: Iterable[float | None]) -> float | None:
    """A measure's value over the queries where it is defined: the mean (as every summary
    figure), or the sum / geometric mean for measures trec_eval aggregates so."""
    if measure.aggregate == "mean":
        return _mean(values)
    xs = [float(x) for x in values if x is not None]
    return round(measure.combine(xs), 6) if xs else None


def _judge_measures_of(record: Mapping[str, Any], named: Sequence[NamedMeasure]) -> dict[str, float | None]:
    """A record's judge values of ``named``: as stored, else computed from its verdicts (a
    record written by a run that chose other measures)."""
    stored: Mapping[str, float | None] = record.get("measures") or {}
    missing = [m for m in named if m.name not in stored]
    if not missing:
        return {m.name: stored[m.name] for m in named}
    listed = judged_list(verdicts_of(record), record.get("mode", "binary"))
    computed = _values(listed.values(missing))
    return {m.name: stored[m.name] if m.name in stored else computed[m.name] for m in named}


def _truth_measures_of(record: Mapping[str, Any], named: Sequence[NamedMeasure]) -> dict[str, float | None]:
    stored: Mapping[str, float | None] = record["ground_truth"].get("measures") or {}
    missing = {m.name: m.truth for m in named if m.name not in stored}
    truth = truth_of(record)
    computed: dict[str, float | None] = {}
    if missing and truth is not None:
        grades = [int(truth.get(str(d), 0)) for d in record["docnos"]]
        computed = _values(truth_values(grades, truth, missing))
    return {m.name: stored[m.name] if m.name in stored else computed.get(m.name) for m in named}


def summarize_records(
    records: Sequence[Mapping[str, Any]], k: Sequence[int], *, measures: Sequence[str] = ()
) -> dict[str, Any]:
    """The run summary (metrics part), computed from the output file's records only.

    ``measures``: registry measures reported under ``judge.measures`` (and
    ``ground_truth.measures``) by the names given, with their conventions under
    ``conventions.measures``.
    """
    named = parse_named_measures(measures)
    ks = [str(c) for c in k]
    verdict_counts: Counter[str] = Counter()
    grade_counts: Counter[str] = Counter()
    for r in records:
        for v in r["verdicts"]:
            verdict_counts[v["verdict"]] += 1
            if v.get("grade") is not None:
                grade_counts[str(v["grade"])] += 1
    scores = [r["score"] for r in records if r.get("score") is not None]
    bins = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    hist = [0] * (len(bins) - 1)
    for s in scores:
        idx = min(int(s * 5), 4)
        hist[idx] += 1
    usage_keys = ("calls", "cached", "retries", "prompt_tokens", "completion_tokens", "cost")
    usage: dict[str, float] = dict.fromkeys(usage_keys, 0)
    currency = "CNY"
    for r in records:
        u = r.get("usage") or {}
        for key in usage_keys:
            usage[key] += u.get(key, 0)
        currency = u.get("currency", currency)
    usage["cost"] = round(float(usage["cost"]), 6)
    n_passages = sum(int(r["n_passages"]) for r in records)
    unjudged = sum(int(r["unjudged"]) for r in records)
    summary: dict[str, Any] = {
        "queries": len(records),
        "passages": n_passages,
        "judged": n_passages - unjudged,
        "unjudged": unjudged,
        "queries_with_unjudged": sum(1 for r in records if r["unjudged"]),
        "queries_without_judged": sum(1 for r in records if r.get("ap") is None),
        "truncated_passages": sum(int(r.get("truncated", 0)) for r in records),
        "judge": {
            "map": _mean(r.get("ap") for r in records),
            "ndcg": {c: _mean((r.get("ndcg") or {}).get(c) for r in records) for c in ks},
            "mean_score": _mean(scores),
            "mrr": _mean(r.get("rr") for r in records),
            "precision": {c: _mean((r.get("precision") or {}).get(c) for r in records) for c in ks},
            "expected": mean_expected((_expected_of(r, k) for r in records), k),
        },
        "languages": dict(
            sorted(Counter(str((r.get("conventions") or {}).get("language", "?")) for r in records).items())
        ),
        "score_distribution": {"bins": bins, "counts": hist},
        "verdicts": dict(sorted(verdict_counts.items())),
        "grades": dict(sorted(grade_counts.items())) if grade_counts else None,
        "usage": {**usage, "currency": currency},
        "conventions": {"judge": JUDGE_CONVENTIONS, "mean": "over queries where the metric is defined"},
    }
    if named:
        per_record = [_judge_measures_of(r, named) for r in records]
        summary["judge"]["measures"] = {
            m.name: _aggregate(m.judge, (v[m.name] for v in per_record)) for m in named
        }
        summary["conventions"]["measures"] = {
            m.name: {"judge": m.judge_conventions, "ground_truth": m.truth_conventions} for m in named
        }
    summary["redundancy"] = {c: _mean((r.get("redundancy") or {}).get(c) for r in records) for c in ks}
    summary["conventions"]["redundancy"] = REDUNDANCY_CONVENTIONS
    gt_records = [r for r in records if r.get("ground_truth")]
    if gt_records:
        agree: Counter[str] = Counter()
        for r in gt_records:
            agree.update(r["ground_truth"].get("agreement", {}))
        total = sum(agree.values())
        gt_values = [_truth_measures_of(r, named) for r in gt_records] if named else []
        summary["ground_truth"] = {
            "queries": len(gt_records),
            "map": _mean(r["ground_truth"]["ap"] for r in gt_records),
            "ndcg": {c: _mean(r["ground_truth"]["ndcg"].get(c) for r in gt_records) for c in ks},
            "mrr": _mean(r["ground_truth"]["rr"] for r in gt_records),
            "precision": {c: _mean(r["ground_truth"]["precision"].get(c) for r in gt_records) for c in ks},
            "recall": {c: _mean(r["ground_truth"]["recall"].get(c) for r in gt_records) for c in ks},
            **(
                {"measures": {m.name: _aggregate(m.truth, (v[m.name] for v in gt_values)) for m in named}}
                if named
                else {}
            ),
            "judge_agreement": {
                **dict(agree),
                "accuracy": round((agree["tp"] + agree["tn"]) / total, 6) if total else None,
            },
        }
        rules = sorted(
            {str(r["ground_truth"].get("agreement_rule", "grade >= 1 is relevant")) for r in gt_records}
        )
        summary["conventions"]["ground_truth"] = {
            **GROUND_TRUTH_CONVENTIONS,
            "judge_agreement": "the judge's yes/no against the ground truth put on the binary scale: "
            + "; ".join(rules),
        }
    else:
        summary["ground_truth"] = None
    summary.update(summarize_extras(records, k))
    human = human_label_counts(records)
    if human is not None:
        summary["human_labels"] = human
    return summary


def label_changed(verdict: Mapping[str, Any]) -> bool:
    """Whether a verdict decided by a person (a record's verdict with ``source`` human)
    differs from the judge's own (``replaced``). A label that decided a passage the judge was
    never asked (``--examples``: ``replaced`` is ``unjudged`` and no attempt was made)
    changes nothing."""
    old = verdict.get("replaced") or {}
    if old.get("verdict") == "unjudged" and not verdict.get("attempts"):
        return False
    return bool(old.get("verdict") != verdict.get("verdict") or old.get("grade") != verdict.get("grade"))


def human_label_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"passages", "changed", "queries", "reviewers"}`` decided by people in ``records``
    (None when no verdict came from a person): the summary's ``human_labels`` block."""
    passages = changed = queries = 0
    reviewers: set[str] = set()
    for r in records:
        here = 0
        for v in r["verdicts"]:
            if v.get("source") != "human":
                continue
            here += 1
            reviewers.add(str(v.get("reviewer")))
            changed += label_changed(v)
        passages += here
        queries += 1 if here else 0
    if not passages:
        return None
    return {
        "passages": passages,
        "changed": changed,
        "queries": queries,
        "reviewers": sorted(reviewers),
        "convention": "a human label replaces the judge's verdict; P(yes) = 1/0 in expected metrics",
    }
