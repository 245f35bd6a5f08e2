#!/usr/bin/env python
"""Does labelling what the review queue offers first move a job's mAP toward the truth
faster than labelling at random?

Input: a ``judge score`` output whose dataset carried ground-truth qrels (e.g.
``judge score datasets/sample.jsonl -o /tmp/sample.judged.jsonl`` with the embedded judge).
The ground truth plays the reviewer: a labelled passage gets its qrels grade, made binary at
``--level`` (default 1, the ground truth's own relevance level) on a binary job.

For ``--n`` labels (default 10) the script reports the job's mAP and its distance to the
ground-truth mAP (``summary.ground_truth.map``, trec_eval conventions):

* ``none``: no label (the judge alone);
* ``queue``: the first n items of :func:`judge.batch.job_review_queue` (every fifth an audit
  item drawn uniformly, seed ``--seed``), and the mean over ``--draws`` queue seeds;
* ``queue_no_audit``: the first n priority items (no audit draws);
* ``random``: n judged passages drawn uniformly, averaged over ``--draws`` seeded draws.

Labels go through :func:`judge.batch.apply_labels`, the code ``judge score --labels`` uses.

Each row also has ``ap_error``: the mean over queries of |the job's AP - the ground truth's
AP|. **Read that one.** The judge's false yes and false no partly cancel in the mean mAP;
fixing some of them un-cancels the rest, so the mAP distance can grow while every query's AP
gets closer to the truth (docs/guides/review-measurement.md has the figures).

``--compare B.judged.jsonl`` (a second system on the same queries) adds ``comparison``: the
decision (which system wins on mAP, and whether significantly: paired t-test over per-query
AP, p < 0.05) by the judge alone, with ``--n`` labels from one queue over both systems'
passages, and how often ``--draws`` random label sets give the truth's decision.

``--dl19-run RUN --simulate-judge OUT`` builds the dataset from a TREC DL 2019 passage run in
``--dl19-dir`` (default ``../shared/data/trec_dl19``): each NIST-judged query's top
``--depth`` passages that have text, NIST's graded qrels as the ground truth. ``--level``
only sets the labels' level; the ground truth's AP is computed at level 1.

``--simulate-judge OUT.jsonl`` first writes such an output without an LLM: the dataset is
scored by the batch engine with a scripted probability-mode backend whose P(yes) is
``sigmoid(b[grade] + N(0, sigma))`` per passage (seeded; ``b`` = -0.9, 0.8, 2.0, 3.0 and
``sigma`` = 1.2 make it say yes to about a quarter of grade-0 and three quarters of grade-1
passages, like the embedded judge on TREC DL19). Use it only where the embedded judge
cannot run; the README says which judge its figures come from. With ``--dl19-run`` its
verdicts are decided on ``binary.en.v2``'s threshold (0.834, the English default when
docs/guides/review-measurement.md's figures were measured; pinned so they stay true).

Run: ``python scripts/eval_review_queue.py /tmp/sample.judged.jsonl``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judge.batch import apply_labels, job_review_queue, summarize_records
from judge.store import Label, LabelSet, recover_output, trec_token

K = (5, 10)


def _truth(record: Mapping[str, Any]) -> dict[str, int]:
    if record.get("qrels") is not None:
        return {str(d): int(g) for d, g in record["qrels"].items()}
    if record.get("expected_ids") is not None:
        return dict.fromkeys((str(x) for x in record["expected_ids"]), 1)
    raise SystemExit(f"query {record.get('id')!r} has no ground truth (qrels or expected_ids)")


def _label(record: Mapping[str, Any], docno: str, level: int) -> Label:
    grade = _truth(record).get(docno, 0)
    if record.get("mode") == "graded":
        return Label(trec_token(record["id"]), docno, grade, "ground-truth", scale="graded")
    return Label(trec_token(record["id"]), docno, 1 if grade >= level else 0, "ground-truth")


def _labelled(
    records: Sequence[Mapping[str, Any]], picks: Sequence[tuple[str, str]], level: int
) -> list[Mapping[str, Any]]:
    """``records`` with the ground truth's labels on ``picks`` applied (as ``--labels``)."""
    by_qid = {trec_token(r["id"]): r for r in records}
    labels = LabelSet([_label(by_qid[q], d, level) for q, d in picks if q in by_qid])
    return list(apply_labels(records, labels, k=K).records)


def per_query_ap(records: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """qid -> (the job's AP, the ground truth's AP), from judged output records."""
    out: dict[str, tuple[float, float]] = {}
    for r in records:
        gt = r.get("ground_truth") or {}
        if r.get("ap") is None or gt.get("ap") is None:
            continue
        out[trec_token(r["id"])] = (float(r["ap"]), float(gt["ap"]))
    return out


def ap_error(records: Sequence[Mapping[str, Any]]) -> float:
    """Mean over queries of |the job's AP - the ground truth's AP|."""
    pairs = per_query_ap(records).values()
    return statistics.fmean(abs(a - t) for a, t in pairs) if pairs else 0.0


def _map_with(
    records: Sequence[Mapping[str, Any]], picks: Sequence[tuple[str, str]], level: int
) -> tuple[float, float]:
    """(the job's mAP, its mean per-query |AP error|) with ``picks`` labelled."""
    out = _labelled(records, picks, level)
    return float(summarize_records(out, K)["judge"]["map"]), ap_error(out)


def evaluate(
    records: Sequence[Mapping[str, Any]], *, n: int = 10, draws: int = 20, seed: int = 0, level: int = 1
) -> dict[str, Any]:
    """The figures described in the module doc."""
    summary = summarize_records(records, K)
    gt = summary["ground_truth"]
    if gt is None:
        raise SystemExit("the judged file carries no ground truth")
    truth_map = float(gt["map"])
    judged = [
        (trec_token(r["id"]), str(d))
        for r in records
        for v, d in zip(r["verdicts"], r["docnos"], strict=True)
        if v["verdict"] != "unjudged"
    ]

    def row(runs: Sequence[tuple[float, float]]) -> dict[str, Any]:
        values = [m for m, _ in runs]
        errors = [abs(x - truth_map) for x in values]
        ap_errors = [e for _, e in runs]
        return {
            "map": round(statistics.fmean(values), 6),
            "abs_error": round(statistics.fmean(errors), 6),
            "abs_error_sd": round(statistics.stdev(errors), 6) if len(errors) > 1 else 0.0,
            "ap_error": round(statistics.fmean(ap_errors), 6),
            "ap_error_sd": round(statistics.stdev(ap_errors), 6) if len(ap_errors) > 1 else 0.0,
            "runs": len(values),
        }

    queue = job_review_queue(records, seed=seed, limit=n)
    queue_seeds = [
        _map_with(
            records, [(i.qid, i.docno) for i in job_review_queue(records, seed=seed + s, limit=n)], level
        )
        for s in range(draws)
    ]
    no_audit = job_review_queue(records, seed=seed, limit=n, audit_every=0)
    randoms = [
        _map_with(records, random.Random(seed + s).sample(judged, min(n, len(judged))), level)
        for s in range(draws)
    ]
    return {
        "queries": len(records),
        "judged_passages": len(judged),
        "labels": n,
        "level": level,
        "ground_truth_map": round(truth_map, 6),
        "none": row([(float(summary["judge"]["map"]), ap_error(records))]),
        "queue": row([_map_with(records, [(i.qid, i.docno) for i in queue], level)]),
        "queue_over_seeds": row(queue_seeds),
        "queue_no_audit": row([_map_with(records, [(i.qid, i.docno) for i in no_audit], level)]),
        "random": row(randoms),
        "queue_items": [
            {"qid": i.qid, "docno": i.docno, "p_yes": i.candidate.p_yes, "audit": i.audit} for i in queue
        ],
        "seed": seed,
        "draws": draws,
    }


def decision(
    records_a: Sequence[Mapping[str, Any]], records_b: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Which of two systems wins on mAP and whether significantly (paired t-test over the
    queries both answered, p < 0.05), by the job's AP and by the ground truth's."""
    from judge.metrics import paired_t_test

    a, b = per_query_ap(records_a), per_query_ap(records_b)
    qids = sorted(set(a) & set(b))
    out: dict[str, Any] = {"queries": len(qids)}
    for name, idx in (("judged", 0), ("truth", 1)):
        xa = [a[q][idx] for q in qids]
        xb = [b[q][idx] for q in qids]
        test = paired_t_test(xa, xb)
        diff = statistics.fmean(xb) - statistics.fmean(xa) if qids else 0.0
        out[name] = {
            "map_a": round(statistics.fmean(xa), 6) if qids else None,
            "map_b": round(statistics.fmean(xb), 6) if qids else None,
            "diff": round(diff, 6),
            "winner": "b" if diff > 0 else "a" if diff < 0 else "tie",
            "p_value": None if math.isnan(test.p_value) else round(test.p_value, 6),
            "significant": bool(test.p_value < 0.05) if not math.isnan(test.p_value) else False,
        }
    j, t = out["judged"], out["truth"]
    out["same_winner_as_truth"] = j["winner"] == t["winner"]
    out["same_decision_as_truth"] = (j["winner"], j["significant"]) == (t["winner"], t["significant"])
    return out


def compare(
    records_a: Sequence[Mapping[str, Any]],
    records_b: Sequence[Mapping[str, Any]],
    *,
    n: int = 10,
    draws: int = 20,
    seed: int = 0,
    level: int = 1,
) -> dict[str, Any]:
    """A comparison of two systems' judged outputs (same queries): the decision with no
    label, with ``n`` labels from one review queue over both systems' passages (a label
    applies to the passage in both lists), and with ``n`` random labels (``draws`` draws:
    how often the decision matches the truth's)."""
    pooled = [*records_a, *records_b]
    picks: list[tuple[str, str]] = []
    for item in job_review_queue(pooled, seed=seed, limit=None):
        if (item.qid, item.docno) not in picks:
            picks.append((item.qid, item.docno))
        if len(picks) == n:
            break
    judged = sorted(
        {
            (trec_token(r["id"]), str(d))
            for r in pooled
            for v, d in zip(r["verdicts"], r["docnos"], strict=True)
            if v["verdict"] != "unjudged"
        }
    )
    randoms = []
    for s in range(draws):
        pick = random.Random(seed + s).sample(judged, min(n, len(judged)))
        randoms.append(decision(_labelled(records_a, pick, level), _labelled(records_b, pick, level)))
    return {
        "labels": n,
        "none": decision(records_a, records_b),
        "queue": decision(_labelled(records_a, picks, level), _labelled(records_b, picks, level)),
        "random_same_winner_rate": round(statistics.fmean(d["same_winner_as_truth"] for d in randoms), 4),
        "random_same_decision_rate": round(statistics.fmean(d["same_decision_as_truth"] for d in randoms), 4),
        "draws": draws,
    }


# ---------------------------------------------------------------------------- TREC DL 2019
def dl19_dataset(
    data_dir: Path, run_name: str, out: Path, *, depth: int = 10, queries: int | None = None
) -> int:
    """A ``judge score`` dataset from a TREC DL 2019 passage run: for each query NIST judged,
    the run's top ``depth`` passages that have text in ``dl2019_document.jsonl`` (the judged
    ones; others are left out, as a condensed list), with NIST's graded qrels as ground
    truth. Returns the number of records written."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (data_dir / "2019qrels-pass.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, _, docno, grade = line.split()
            qrels.setdefault(qid, {})[docno] = int(grade)
    texts: dict[str, str] = {}
    with open(data_dir / "dl2019_document.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                doc = json.loads(line)
                texts[str(doc["docid"])] = str(doc["doc"])
    query_text = dict(
        line.split("\t", 1)
        for line in (data_dir / "msmarco-test2019-queries.tsv").read_text(encoding="utf-8").splitlines()
        if line.strip()
    )
    ranked: dict[str, list[tuple[float, str]]] = {}
    for line in (data_dir / f"{run_name}.run").read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, _, docno, _rank, score, _tag = line.split()
            if qid in qrels and docno in texts:
                ranked.setdefault(qid, []).append((float(score), docno))
    written = 0
    with open(out, "w", encoding="utf-8") as fh:
        for qid in sorted(ranked)[:queries]:
            # trec_eval's order: score descending, ties by docno descending
            top = [d for _, d in sorted(ranked[qid], key=lambda x: (-x[0], tuple(-ord(c) for c in x[1])))]
            top = top[:depth]
            record = {
                "id": qid,
                "query": query_text[qid].strip(),
                "retrieval_context": [{"id": d, "text": texts[d]} for d in top],
                "qrels": {d: g for d, g in qrels[qid].items() if d in top},
            }
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            written += 1
    return written


# ---------------------------------------------------------------------------- simulated judge
_BIAS = (-0.9, 0.8, 2.0, 3.0)
_SIGMA = 1.2


def simulate_judged(dataset: Path, out: Path, *, seed: int = 0, template: str | None = None) -> None:
    """Score ``dataset`` with the batch engine and a scripted probability-mode backend (see
    the module doc) into ``out``; ``template``: the verdict template (default: the language's
    default), whose calibrated threshold decides the verdicts."""
    from judge.backends import ChatRequest, ScriptedBackend
    from judge.batch import BatchOptions, score_dataset
    from judge.io import read_dataset
    from judge.judging import JudgeConfig

    grades: dict[str, int] = {}
    for rec in read_dataset(dataset):
        truth = rec.ground_truth() or {}
        for p in rec.passages:
            grades[p.text] = int(truth.get(p.docno, 0))

    def reply(request: ChatRequest, _index: int) -> Any:
        prompt = next(m.content for m in request.messages if m.role == "user")
        text = max((t for t in grades if t in prompt), key=len)
        rng = random.Random(f"{seed}|{text}")
        z = _BIAS[grades[text]] + rng.gauss(0.0, _SIGMA)
        p_yes = 1.0 / (1.0 + math.exp(-z))
        assert request.candidates is not None, "the simulated judge answers in probability mode only"
        return {"yes": p_yes, "no": 1.0 - p_yes}

    backend = ScriptedBackend(reply, name="fake:simulated-judge", supports_probabilities=True)
    config = JudgeConfig(probability=True, explain=False, template=template)
    out.unlink(missing_ok=True)
    asyncio.run(
        score_dataset(dataset, out, backend, config, store=None, options=BatchOptions(progress="quiet"))
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("judged", nargs="?", help="judge score output (JSONL) with ground truth")
    ap.add_argument("--n", type=int, default=10, help="labels to spend (default 10)")
    ap.add_argument("--draws", type=int, default=20, help="random draws / queue seeds (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", type=int, default=1, help="ground-truth grade >= L is relevant (default 1)")
    ap.add_argument(
        "--simulate-judge", metavar="OUT.jsonl", default=None, help="write a simulated judged file first"
    )
    ap.add_argument("--dataset", default="datasets/sample.jsonl", help="dataset for --simulate-judge")
    ap.add_argument("--judge-seed", type=int, default=0, help="seed of the simulated judge")
    ap.add_argument(
        "--compare",
        metavar="B.judged.jsonl",
        default=None,
        help="a second system's judged output on the same queries: also report the decisions",
    )
    ap.add_argument(
        "--dl19-run",
        metavar="RUN",
        default=None,
        help="with --simulate-judge: build the dataset from this TREC DL 2019 run (e.g. ICT-BERT2) first",
    )
    ap.add_argument("--dl19-dir", default="../shared/data/trec_dl19", help="TREC DL 2019 folder")
    ap.add_argument("--depth", type=int, default=10, help="--dl19-run: passages per query (default 10)")
    args = ap.parse_args(argv)
    path = args.judged
    if args.simulate_judge:
        dataset, template = Path(args.dataset), None
        if args.dl19_run:
            dataset = Path(args.simulate_judge).with_suffix(".dataset.jsonl")
            dl19_dataset(Path(args.dl19_dir), args.dl19_run, dataset, depth=args.depth)
            template = "binary.en.v2"  # pinned: the documented DL 2019 figures were measured on it
        simulate_judged(dataset, Path(args.simulate_judge), seed=args.judge_seed, template=template)
        path = path or args.simulate_judge
    if not path:
        ap.error("give a judged file or --simulate-judge OUT.jsonl")
    records = recover_output(path)
    if not records:
        raise SystemExit(f"{path}: no records")
    report = evaluate(records, n=args.n, draws=args.draws, seed=args.seed, level=args.level)
    report["judged_file"] = str(path)
    if args.compare:
        other = recover_output(args.compare)
        report["comparison"] = compare(
            records, other, n=args.n, draws=args.draws, seed=args.seed, level=args.level
        )
        report["comparison"]["b_file"] = str(args.compare)
    print(json.dumps(report, ensure_ascii=False, indent=2))
    q, r = report["queue"]["abs_error"], report["random"]["abs_error"]
    print(
        f"per-query |AP error| (read this one): judge alone {report['none']['ap_error']:.4f}; "
        f"{args.n} queue labels {report['queue']['ap_error']:.4f}; "
        f"{args.n} random labels {report['random']['ap_error']:.4f}",
        file=sys.stderr,
    )
    print(
        f"ground-truth mAP {report['ground_truth_map']:.4f}; "
        f"judge alone |error| {report['none']['abs_error']:.4f}; "
        f"{args.n} queue labels {q:.4f} (over {args.draws} queue seeds "
        f"{report['queue_over_seeds']['abs_error']:.4f}); {args.n} random labels {r:.4f} "
        f"(mean of {args.draws} draws)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
