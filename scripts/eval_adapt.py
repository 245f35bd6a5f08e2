#!/usr/bin/env python
"""Do a team's labels make the judge agree better? ``--adapt`` measured on held-out passages.

The slices (``slices``): per set, ``--queries`` queries with enough labels of both kinds,
each with a fixed, seeded list of passages (relevant and not interleaved, so its first 12
hold as many of each kind as the labels allow, the next 4 extend it for 8 labels). They are
written as a ``judge score`` dataset (``OUT/SET.jsonl``, no labels in it) and the people's
grades beside it (``OUT/SET.truth.json``). Relevant = grade >= 2 on DL 2019, KUAKE-QTR and
QBQTC, positive on RGB.

The judging (``judge``): the product's own path, ``judge score`` with the embedded judge's
defaults in probability mode without reasons (``--no-explain``): every passage's P(yes)
goes into the verdict cache, so the adapted runs below cost no call.

The measurement (``report``): per set, label count L (4 or 8 per query) and seed (1, 2, 3),
L passages of every query are the team's labels (half relevant where the query allows),
chosen by the seed; the others are held out. The judge alone (P(yes) at the template's
threshold) and adapted (:func:`judge.metrics.fit_adaptation` fitted on the labels, applied
to the held-out passages) are compared on the held-out passages only: κ and ROC AUC, the
paired difference with a 95% bootstrap interval over queries (1,000 resamples, seed 0).

Commands::

    python scripts/eval_adapt.py slices --out /work/helpers/adapt-data
    nice -n 5 python scripts/eval_adapt.py judge --out /work/helpers/adapt-data --sets dl19,rgb --first 12
    python scripts/eval_adapt.py report --out /work/helpers/adapt-data

The pooled slices (``pooled``): the passages a BM25 sweep retrieved, judged by the sweep
itself (``scripts/agreement_on_choice.py``, zero-shot), so they cost no judging here::

    python scripts/eval_adapt.py pooled --corpus dl19 --work /tmp/jbench/aoc-dl19 --out runs/eval_adapt
    python scripts/eval_adapt.py pooled --corpus zh --work /tmp/jbench/aoc-zh --out runs/eval_adapt
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "scripts"):  # this checkout's judge; the scripts' shared helpers
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
DEFAULT_OUT = REPO / "runs" / "eval_adapt"
SETS = ("dl19", "rgb", "kuake", "qbqtc", "dl19pool", "rgbpool")
FULL_SLICES = ("dl19", "rgb", "dl19pool", "rgbpool")
"""Sets whose queries hold 4 and 8 labels with passages to spare (the others: half the
queries labelled, the rest held out)."""
MAX_CHARS = 1500


def _data_root() -> Path:
    from _dl19 import shared_data

    return shared_data()


def _eval_judge() -> Any:
    import eval_judge

    return eval_judge


# --------------------------------------------------------------------------- the slices


def interleave(yes: Sequence[Any], no: Sequence[Any], size: int) -> list[Any]:
    """Up to ``size`` items alternating yes/no (yes first) while both last, then the rest of
    the longer list: every prefix is as balanced as the two lists allow."""
    out: list[Any] = []
    i = j = 0
    while len(out) < size and (i < len(yes) or j < len(no)):
        take_yes = i < len(yes) and (j >= len(no) or i <= j)
        if take_yes:
            out.append(yes[i])
            i += 1
        else:
            out.append(no[j])
            j += 1
    return out


def build_slices(name: str, pairs: Sequence[Any], level: int, n_queries: int, size: int) -> list[Any]:
    """``[(qid, query, [pair...])]``: ``n_queries`` queries (seeded choice among those with
    at least 4 relevant and 4 not, or fewer on sets with few passages per query), each with
    an interleaved list of up to ``size`` passages."""
    by_query: dict[str, list[Any]] = defaultdict(list)
    for p in sorted(pairs, key=lambda p: p.pair_id):
        by_query[p.query_id].append(p)
    need = 4 if name in ("dl19", "rgb") else 1
    minimum = 12 if name in ("dl19", "rgb") else 3
    eligible = sorted(
        q
        for q, ps in by_query.items()
        if len(ps) >= minimum
        and sum(p.grade >= level for p in ps) >= min(need, 2 if name == "rgb" else need)
        and sum(p.grade < level for p in ps) >= need
    )
    rng = np.random.default_rng(43)
    chosen = [eligible[i] for i in rng.permutation(len(eligible))[:n_queries]]
    out = []
    for qi, qid in enumerate(chosen):
        r = np.random.default_rng([43, qi])
        ps = [by_query[qid][j] for j in r.permutation(len(by_query[qid]))]
        yes = [p for p in ps if p.grade >= level]
        no = [p for p in ps if p.grade < level]
        out.append((qid, ps[0].query, interleave(yes, no, size)))
    return out


def cmd_slices(args: argparse.Namespace) -> int:
    ej = _eval_judge()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(args.data)
    for name in args.sets.split(","):
        spec = ej.DATASETS[name]
        pairs = ej.LOADERS[name](root)
        size = 16 if name in ("dl19", "rgb") else 4
        n = args.queries if name in ("dl19", "rgb") else args.queries_short
        slices = build_slices(name, pairs, spec.level, n, size)
        truth: dict[str, dict[str, int]] = {}
        with (out / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            for qid, query, ps in slices:
                docs = [{"id": p.pair_id.split(":", 1)[-1], "text": p.text[:MAX_CHARS]} for p in ps]
                fh.write(
                    json.dumps({"id": qid, "query": query, "retrieval_context": docs}, ensure_ascii=False)
                )
                fh.write("\n")
                truth[qid] = {d["id"]: p.grade for d, p in zip(docs, ps, strict=True)}
        (out / f"{name}.truth.json").write_text(
            json.dumps({"level": spec.level, "language": spec.language, "grades": truth}, ensure_ascii=False),
            encoding="utf-8",
        )
        rel = sum(g >= spec.level for q in truth.values() for g in q.values())
        total = sum(len(q) for q in truth.values())
        print(f"{name}: {len(truth)} queries, {total} passages, {rel} relevant", file=sys.stderr)
    return 0


def cmd_pooled(args: argparse.Namespace) -> int:
    """A pooled slice (``dl19pool``, ``rgbpool``): the passages a BM25 sweep retrieved, as
    ``--adapt`` meets them in ``judge experiment``, from a finished zero-shot run of
    ``scripts/agreement_on_choice.py --corpus dl19|zh`` (``--work``). Queries with at least
    12 pooled passages the labels grade, 2 of them relevant and 2 not, chosen with seed 43;
    each query's graded pooled passages in a seeded order (not balanced: the pool's own share
    of relevant). Writes ``SET.jsonl``, ``SET.truth.json`` and the pool's verdicts on them as
    ``SET.pool.judged.jsonl`` (the sweep's template and threshold), so the report needs no
    judging. Relevant: grade >= 2 on DL 2019 (NIST's qrels), positive on RGB."""
    work = Path(args.work)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = next(iter(sorted(work.glob("experiment-local*"))), None)
    if run_dir is None or not (run_dir / "pool.judged.jsonl").exists():
        print(f"no finished embedded-judge experiment under {work}", file=sys.stderr)
        return 2
    name, level, language = ("dl19pool", 2, "en") if args.corpus == "dl19" else ("rgbpool", 1, "zh")
    qrels = _data_root() / "trec_dl19" / "2019qrels-pass.txt" if args.corpus == "dl19" else work / "qrels.txt"
    grades: dict[str, dict[str, int]] = defaultdict(dict)
    for line in qrels.read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, _, docno, grade = line.split()
            grades[qid][docno] = int(grade)
    records = [
        json.loads(x) for x in (run_dir / "pool.judged.jsonl").read_text(encoding="utf-8").splitlines() if x
    ]
    eligible = []
    for r in sorted(records, key=lambda r: str(r["id"])):
        qid = str(r["id"])
        graded = [d for d in r["docnos"] if d in grades[qid]]
        rel = sum(grades[qid][d] >= level for d in graded)
        if len(graded) >= 12 and rel >= 2 and len(graded) - rel >= 2:
            eligible.append(r)
    rng = np.random.default_rng(43)
    chosen = [eligible[i] for i in rng.permutation(len(eligible))[: args.queries]]
    wanted = {str(r["id"]): r for r in chosen}
    texts: dict[str, str] = {}
    need = {d for r in chosen for d in r["docnos"]}
    with (work / "docs.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            o = json.loads(line)
            if str(o["id"]) in need:
                texts[str(o["id"])] = o["text"]
    truth: dict[str, dict[str, int]] = {}
    with (
        (out / f"{name}.jsonl").open("w", encoding="utf-8") as data,
        (out / f"{name}.pool.judged.jsonl").open("w", encoding="utf-8") as judged,
    ):
        for qi, (qid, r) in enumerate(wanted.items()):
            by_doc = dict(zip(r["docnos"], r["verdicts"], strict=True))
            graded = [d for d in r["docnos"] if d in grades[qid]]
            order = [graded[j] for j in np.random.default_rng([43, qi]).permutation(len(graded))]
            docs = [{"id": d, "text": texts[d][:MAX_CHARS]} for d in order]
            data.write(
                json.dumps({"id": qid, "query": r["query"], "retrieval_context": docs}, ensure_ascii=False)
                + "\n"
            )
            judged.write(
                json.dumps(
                    {
                        "id": qid,
                        "docnos": order,
                        "verdicts": [by_doc[d] for d in order],
                        "conventions": r["conventions"],
                    }
                )
                + "\n"
            )
            truth[qid] = {d: grades[qid][d] for d in order}
    (out / f"{name}.truth.json").write_text(
        json.dumps({"level": level, "language": language, "grades": truth}), encoding="utf-8"
    )
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(work.glob("agreement-local*.json"))]
    zero = [r for r in runs if "judge_calls" in r]  # the zero-shot run (not --adapt/--examples)
    if zero:  # the sweep's own seconds per judge call: the cost table's yardstick
        run = zero[0]
        (out / f"{name}.judge-seconds.json").write_text(
            json.dumps({"seconds": run["seconds"], "calls": run["judge_calls"]}), encoding="utf-8"
        )
    rel = sum(g >= level for q in truth.values() for g in q.values())
    total = sum(len(q) for q in truth.values())
    print(f"{name}: {len(truth)} queries, {total} passages, {rel} relevant", file=sys.stderr)
    return 0


def prefix_dataset(out: Path, name: str, first: int, queries: int = 0) -> Path:
    """``OUT/SET[.qN][.firstM].jsonl``: the first ``queries`` queries (0: all), each with its
    first ``first`` passages (0: all)."""
    stem = name + (f".q{queries}" if queries else "") + (f".first{first}" if first else "")
    path = out / f"{stem}.jsonl"
    lines = (out / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    with path.open("w", encoding="utf-8") as dst:
        for line in lines[:queries] if queries else lines:
            obj = json.loads(line)
            if first:
                obj["retrieval_context"] = obj["retrieval_context"][:first]
            dst.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return path


def cmd_judge(args: argparse.Namespace) -> int:
    out = Path(args.out)
    for name in args.sets.split(","):
        data = (
            prefix_dataset(out, name, args.first, args.queries)
            if args.first or args.queries
            else out / f"{name}.jsonl"
        )
        cmd = [
            sys.executable,
            "-m",
            "judge",
            "score",
            str(data),
            "-o",
            str(out / f"{data.stem}.judged.jsonl"),
            "--no-explain",
            "--probability",
            "--max-passage-chars",
            str(MAX_CHARS),
            "--no-recall",
            "--progress-interval",
            "60",
        ]
        print(" ".join(cmd), file=sys.stderr, flush=True)
        rc = subprocess.call(cmd)
        if rc:
            return rc
    return 0


# --------------------------------------------------------------------------- the measurement


def read_judged(out: Path, name: str, queries: int = 0) -> dict[str, list[dict[str, Any]]]:
    """``{qid: [{"docno", "p_yes", "t"}...]}`` in the slice's order (its first ``queries``
    queries; 0: all), each query from the judged output holding most of its passages
    (``SET.judged.jsonl``, ``SET.first12.judged.jsonl``, ``SET.q12.judged.jsonl`` ...)."""
    order = [
        str(json.loads(x)["id"]) for x in (out / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    if queries:
        order = order[:queries]
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob(f"{name}.*judged.jsonl")):
        if not path.name.startswith(f"{name}."):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            t = float((r.get("conventions") or {}).get("p_yes_threshold", 0.5))
            rows = []
            for v, docno in zip(r["verdicts"], r["docnos"], strict=True):
                base = v["replaced"] if v.get("source") == "human" and v.get("replaced") else v
                rows.append({"docno": docno, "p_yes": base.get("p_yes"), "t": t})
            if len(rows) > len(found.get(str(r["id"]), [])):
                found[str(r["id"])] = rows
    return {q: found[q] for q in order if q in found}


def judge_seconds(out: Path, name: str) -> float:
    """Wall seconds per judged passage of the set's judging runs (their summaries), the
    embedded judge's cost per passage on this machine at the time."""
    wall = asked = 0.0
    pooled = out / f"{name}.judge-seconds.json"
    if pooled.exists():  # a pooled slice: the sweep's seconds per call
        run = json.loads(pooled.read_text(encoding="utf-8"))
        return float(run["seconds"]) / float(run["calls"])
    for path in out.glob(f"{name}.*judged.summary.json"):
        run = json.loads(path.read_text(encoding="utf-8"))["this_run"]
        wall += float(run["wall_time_s"])
        asked += float(run["passages_asked"])
    return wall / asked if asked else math.nan


def choose_labels(rel: Sequence[int], n_labels: int, seed: int, qi: int) -> list[bool]:
    """Which passages of a query are labels: ``n_labels`` of them, half relevant where the
    query allows (always leaving one of each kind unlabelled when it has two), by the seed."""
    rng = np.random.default_rng([seed, qi, 43])
    yes = [i for i in rng.permutation(len(rel)) if rel[i]]
    no = [i for i in rng.permutation(len(rel)) if not rel[i]]
    n_yes = min(n_labels // 2, max(0, len(yes) - 1))
    n_no = min(n_labels - n_yes, max(0, len(no) - 1))
    n_yes = min(n_labels - n_no, max(0, len(yes) - 1))
    chosen = set(yes[:n_yes]) | set(no[:n_no])
    return [i in chosen for i in range(len(rel))]


def _encoder_sims(out: Path, name: str, table: dict[str, list[dict[str, Any]]]) -> tuple[Any, Any, float]:
    """(passage x passage cosine per query, query-passage cosine per query, seconds per
    passage), with the bundled encoder; (None, None, nan) when it is not installed."""
    import time

    try:
        from judge.search import get_encoder

        enc = get_encoder()
    except Exception as exc:
        print(f"no encoder ({exc}); the feedback features are left out", file=sys.stderr)
        return None, None, math.nan
    texts: dict[str, tuple[str, dict[str, str]]] = {}
    for line in (out / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        texts[str(obj["id"])] = (obj["query"], {d["id"]: d["text"] for d in obj["retrieval_context"]})
    sims: dict[str, Any] = {}
    qsims: dict[str, Any] = {}
    enc.passages(["warm up"])  # the model's load is not the features' cost
    started = time.perf_counter()
    count = 0
    for qid, rows in table.items():
        query, docs = texts[qid]
        vectors = enc.passages([docs[r["docno"]] for r in rows])
        qv = enc.queries([query])[0]
        sims[qid] = vectors @ vectors.T
        qsims[qid] = vectors @ qv
        count += len(rows)
    return sims, qsims, (time.perf_counter() - started) / max(1, count)


def product_seconds(out: Path, name: str, truth: dict[str, Any]) -> float:
    """Seconds per passage of the product's own step (:func:`judge.batch.adapt_records`:
    features, the fit, leave-one-query-out with 1,000 bootstrap resamples, the records
    decided again) on the set's first judged output, with seed 1's 4 labels per query."""
    import time

    from judge.batch import adapt_records
    from judge.store import Label, LabelSet

    path = next(iter(sorted(out.glob(f"{name}.*judged.jsonl"))), None)
    if path is None:
        return math.nan
    records = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    if not records or "line" not in records[0]:
        return math.nan  # not a `judge score` output (the pooled slice's verdicts)
    labels = []
    for qi, r in enumerate(sorted(records, key=lambda r: str(r["id"]))):
        qid = str(r["id"])
        rel = [int(truth["grades"][qid][d] >= truth["level"]) for d in r["docnos"]]
        for docno, y, c in zip(r["docnos"], rel, choose_labels(rel, 4, 1, qi), strict=True):
            if c:
                labels.append(Label(qid, docno, y, "eval"))
    started = time.perf_counter()
    adapt_records(records, LabelSet(labels))
    return (time.perf_counter() - started) / sum(len(r["docnos"]) for r in records)


VARIANTS = (
    "alone",
    "threshold",
    "centred",
    "centred+similarity",
    "centred+feedback",
    "centred+similarity+feedback",
)
SHIPPED = {
    "log-odds only (no `dense` extra), as shipped": "centred",
    "with the encoder, as shipped": "centred+similarity+feedback",
}
"""What ``--adapt`` does without and with the encoder: the variant's rule, applied only in
the seeds where its leave-one-query-out κ on the labels beat the judge alone's."""


def run_variant(
    variant: str,
    p: Sequence[float],
    groups: Sequence[str],
    labels: Sequence[int | None],
    t: Sequence[float],
    extras: dict[str, list[float]],
) -> tuple[list[int], list[float], bool]:
    """(decisions, scores, applied by the product's rule) of one variant on one split."""
    from judge.metrics import fit_adaptation

    if variant == "alone":
        return [int(a >= b) for a, b in zip(p, t, strict=True)], list(p), False
    extra = {name: extras[name] for name in ("similarity", "feedback") if name in variant}
    fit = fit_adaptation(
        list(p),
        list(groups),
        list(labels),
        list(t),
        extra=extra,
        use_centred=variant != "threshold",
        resamples=0,
    )
    if not fit.p_adapted or fit.p_adapted[0] is None:
        return [int(a >= b) for a, b in zip(p, t, strict=True)], list(p), False
    return [int(d or 0) for d in fit.decisions], [float(x or 0.0) for x in fit.p_adapted], fit.applied


def split_rows(
    name: str,
    table: dict[str, list[dict[str, Any]]],
    grades: dict[str, dict[str, int]],
    level: int,
    n_labels: int,
    seed: int,
    sims: Any,
    qsims: Any,
) -> list[dict[str, Any]]:
    """Every held-out pair of one split with each variant's decision and score."""
    from judge.metrics import centre_by_query, relevance_feedback

    size = 12 if n_labels == 4 else 16
    p: list[float] = []
    groups: list[str] = []
    labels: list[int | None] = []
    rel: list[int] = []
    t: list[float] = []
    fb: list[float] = []
    qs: list[float] = []
    short = n_labels == 0  # few passages per query: half the queries labelled, the rest held out
    half = set(
        sorted(table)[i] for i in np.random.default_rng([seed, 43]).permutation(len(table))[: len(table) // 2]
    )
    for qi, (qid, rows) in enumerate(sorted(table.items())):
        rows = [r for r in rows[:size] if r["p_yes"] is not None]
        if not short and len(rows) < n_labels + 2:
            continue
        r_q = [int(grades[qid][r["docno"]] >= level) for r in rows]
        chosen = [qid in half] * len(rows) if short else choose_labels(r_q, n_labels, seed, qi)
        lab = [y if c else None for y, c in zip(r_q, chosen, strict=True)]
        if sims is not None:
            keep = [i for i, r in enumerate(table[qid]) if r in rows]
            sub = sims[qid][np.ix_(keep, keep)]
            fb += list(relevance_feedback(sub, [qid] * len(rows), [-1 if y is None else y for y in lab]))
            qs += [float(qsims[qid][i]) for i in keep]
        p += [r["p_yes"] for r in rows]
        groups += [qid] * len(rows)
        labels += lab
        rel += r_q
        t += [r["t"] for r in rows]
    extras = {"feedback": fb, "similarity": list(centre_by_query(qs, groups)) if qs else []}
    out = [
        {"set": name, "labels": n_labels, "seed": seed, "qid": g, "relevant": y, "labelled": lab is not None}
        for g, y, lab in zip(groups, rel, labels, strict=True)
    ]
    for variant in VARIANTS:
        if sims is None and ("feedback" in variant or "similarity" in variant):
            continue
        decisions, scores, applied = run_variant(variant, p, groups, labels, t, extras)
        for row, d, sc in zip(out, decisions, scores, strict=True):
            row[variant] = (d, sc, applied)
    return [r for r in out if not r["labelled"]]


def _kappa_of(rows: Sequence[dict[str, Any]], variant: str) -> float:
    y = np.array([r["relevant"] for r in rows], dtype=float)
    d = np.array([r[variant][0] for r in rows], dtype=float)
    po = float(np.mean(y == d))
    pe = float(y.mean() * d.mean() + (1 - y.mean()) * (1 - d.mean()))
    return math.nan if pe >= 1 else (po - pe) / (1 - pe)


def _auc_of(rows: Sequence[dict[str, Any]], variant: str) -> float:
    """The mean over the splits (seeds) of each split's ROC AUC: a split's rule is one
    monotone map of its scores, pooling splits would mix three scales."""
    values = [
        _auc_one([r for r in rows if r["seed"] == s], variant) for s in sorted({r["seed"] for r in rows})
    ]
    good = [v for v in values if not math.isnan(v)]
    return float(np.mean(good)) if good else math.nan


def _auc_one(rows: Sequence[dict[str, Any]], variant: str) -> float:
    y = np.array([r["relevant"] for r in rows])
    s = np.array([r[variant][1] for r in rows], dtype=float)
    pos, neg = s[y == 1], s[y == 0]
    if not pos.size or not neg.size:
        return math.nan
    return float(
        ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum())
        / (pos.size * neg.size)
    )


def paired(
    rows: Sequence[dict[str, Any]], stat: Any, a: str, b: str, resamples: int = 1000
) -> tuple[float, float, float]:
    """``stat(b) - stat(a)`` and its 95% bootstrap interval over queries (every seed's
    held-out pairs of a query resampled together), seed 0."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["qid"]].append(r)
    keys = sorted(groups)
    value = stat(rows, b) - stat(rows, a)
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(resamples):
        sample = [r for i in rng.integers(len(keys), size=len(keys)) for r in groups[keys[i]]]
        d = stat(sample, b) - stat(sample, a)
        if not math.isnan(d):
            draws.append(d)
    if len(draws) < resamples // 2:
        return value, math.nan, math.nan
    return value, float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def _f(v: float, lo: float = math.nan, hi: float = math.nan) -> str:
    if math.isnan(v):
        return "—"
    return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" if not math.isnan(lo) else f"{v:.3f}"


def cmd_report(args: argparse.Namespace) -> int:
    out = Path(args.out)
    all_rows: list[dict[str, Any]] = []
    costs: list[str] = []
    for name in args.sets.split(","):
        table = read_judged(out, name, args.queries)
        if not table:
            continue
        truth = json.loads((out / f"{name}.truth.json").read_text(encoding="utf-8"))
        sims, qsims, enc_s = _encoder_sims(out, name, table) if args.encoder else (None, None, math.nan)
        judge_s = judge_seconds(out, name)
        import time

        started = time.perf_counter()
        fits = 0
        for n_labels in (4, 8) if name in FULL_SLICES else (0,):
            for seed in (1, 2, 3):
                all_rows += split_rows(
                    name, table, truth["grades"], truth["level"], n_labels, seed, sims, qsims
                )
                fits += 1
        n_pass = sum(len(v) for v in table.values())
        fit_s = (time.perf_counter() - started) / max(1, fits * n_pass)
        prod_s = product_seconds(out, name, truth)
        costs.append(
            f"| {name} | {judge_s:.2f} | {prod_s * 1000:.2f} ms ({prod_s / judge_s:.2%}) | "
            f"{fit_s * 1000:.2f} ms ({fit_s / judge_s:.2%}) | "
            + (f"{enc_s * 1000:.1f} ms ({enc_s / judge_s:.2%}) |" if not math.isnan(enc_s) else "— |")
        )
    print(
        "| set | labels / query | seeds | held-out pairs (queries) | variant | κ alone | κ | Δκ [95% CI] "
        "| AUC alone | AUC | ΔAUC [95% CI] | applied (LOQO rule) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in all_rows:
        for shipped, variant in SHIPPED.items():
            if variant in r:
                d, sc, applied = r[variant]
                r[shipped] = (d, sc, applied) if applied else (*r["alone"][:2], False)
    for (name, n_labels), rows in sorted(_by(all_rows, lambda r: (r["set"], r["labels"])).items()):
        for variant in (*VARIANTS[1:], *SHIPPED):
            if variant not in rows[0]:
                continue
            dk = paired(rows, _kappa_of, "alone", variant)
            da = paired(rows, _auc_of, "alone", variant)
            applied = len({(r["seed"]) for r in rows if r[variant][2]})
            print(
                f"| {name} | {n_labels or 'every pair of half the queries'} | 3 | "
                f"{len(rows)} ({len({r['qid'] for r in rows})}) | {variant} | "
                f"{_kappa_of(rows, 'alone'):.3f} | {_kappa_of(rows, variant):.3f} | {_f(*dk)} | "
                f"{_auc_of(rows, 'alone'):.3f} | {_auc_of(rows, variant):.3f} | {_f(*da)} | "
                f"{applied} of 3 seeds |"
            )
    print()
    print(
        "| set | s per judged passage | judge.batch.adapt_records per passage | each variant's features + fit"
        " per passage (script) | encoder per passage |"
    )
    print("|---|---|---|---|---|")
    for line in costs:
        print(line)
    return 0


def _by(rows: Sequence[dict[str, Any]], key: Any) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[key(r)].append(r)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("slices", help="write the slices (datasets and grades) under --out")
    s.add_argument("--sets", default=",".join(SETS))
    s.add_argument("--queries", type=int, default=12, help="queries of DL 2019 and RGB")
    s.add_argument("--queries-short", type=int, default=40, help="queries of KUAKE-QTR and QBQTC")
    s.add_argument("--data", default=str(_data_root()))
    s.add_argument("--out", default=str(DEFAULT_OUT))
    o = sub.add_parser("pooled", help="a pooled slice from a finished sweep (no judging)")
    o.add_argument("--corpus", choices=("dl19", "zh"), default="dl19")
    o.add_argument("--work", required=True, help="agreement_on_choice.py --corpus CORPUS --work DIR")
    o.add_argument("--queries", type=int, default=12)
    o.add_argument("--out", default=str(DEFAULT_OUT))
    j = sub.add_parser("judge", help="judge the slices with `judge score` (cached, resumable)")
    j.add_argument("--sets", default="dl19,rgb")
    j.add_argument("--first", type=int, default=0, help="only every query's first N passages")
    j.add_argument("--queries", type=int, default=0, help="only the first N queries")
    j.add_argument("--out", default=str(DEFAULT_OUT))
    r = sub.add_parser("report", help="the held-out tables from the judged slices")
    r.add_argument("--sets", default=",".join(SETS))
    r.add_argument("--queries", type=int, default=0, help="only each set's first N queries (0: all)")
    r.add_argument("--out", default=str(DEFAULT_OUT))
    r.add_argument(
        "--no-encoder", dest="encoder", action="store_false", help="leave the encoder's features out"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "slices":
        return cmd_slices(args)
    if args.command == "judge":
        return cmd_judge(args)
    if args.command == "pooled":
        return cmd_pooled(args)
    return cmd_report(args)


if __name__ == "__main__":
    raise SystemExit(main())
