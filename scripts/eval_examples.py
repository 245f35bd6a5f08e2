#!/usr/bin/env python
"""Does a judge agree better with people when it is shown their labels?

Cohen's kappa of a judge (default: the embedded model, probability mode, ``binary.en.v2`` /
``binary.zh.v2`` at their calibrated thresholds: the binary defaults when docs/agreement.md's
figures were measured, pinned so they stay true) against human labels, with
0, 2, 4 or 8 worked examples in each prompt, chosen by the product's own rule
(:class:`judge.judging.ExampleBank`: balanced yes/no, shortest first within the token
budget, never the passage itself).

Protocols:

``same`` (TREC DL 2019 passages, RGB zh): ``--queries`` queries with enough labels of
both kinds; per seed, each query's labelled passages are shuffled and split into a test
set (``--test`` passages, half relevant where the labels allow) and the example pool (the
rest, at most ``--pool``); every test passage is judged with 0, 2, 4, 8 examples from its
query's pool (the same test passages for every count: the differences are paired). A
query's test passages are judged one after another (the examples block is one prefix).

``nearest`` (QBQTC, KUAKE-QTR: one labelled pair per query): ``--test`` queries, one pair
each, balanced over relevant/not; ``--pool`` other queries, one labelled pair each, are the
labels; each test pair is shown the pairs of the labelled queries most similar to its query
by the embedded BM25 (``--examples-from nearest``), never its own.

Relevant means grade >= the dataset's level (DL 2019: 2; RGB: 1; QBQTC: 2; KUAKE: 2), the
stated mapping of the labels to the binary template, both for the examples shown and for
the agreement measured.

Intervals: 95% percentile bootstrap over queries (same: the (seed, query) clusters; nearest:
the pairs), 1000 resamples, seed 0; the difference to zero-shot is paired on the same test
passages. Cost: the mean prompt tokens and the median seconds per judged passage (as the
backend reports them; the median leaves out the model's load on the first call; the load
average at the start and the end of each run is recorded in OUT/runs.jsonl).

Commands::

    # validate the pipeline with a perfect judge (the labels themselves): kappa 1 everywhere
    python scripts/eval_examples.py run --backend oracle --datasets dl19 --queries 3 --test 4
    # the measurement (embedded judge; resumable: verdicts are appended to OUT/verdicts.jsonl)
    python scripts/eval_examples.py run --datasets dl19,rgb --shots 0,2,4,8 --seeds 1,2,3
    python scripts/eval_examples.py run --protocol nearest --datasets qbqtc,kuake --shots 0,4
    python scripts/eval_examples.py report            # tables from the recorded verdicts
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's judge, not another installed one
DEFAULT_OUT = REPO / "runs" / "eval_examples"
DEFAULT_BACKEND = "local:qwen2.5-coder-1.5b-q4km"
RESAMPLES = 1000


def _data_root() -> Path:
    env = os.environ.get("JUDGE_SHARED_DATA")
    for candidate in (Path(env) if env else None, REPO.parent / "shared" / "data", Path("/work/shared/data")):
        if candidate is not None and candidate.is_dir():
            return candidate
    return REPO.parent / "shared" / "data"


def _eval_judge() -> Any:
    spec = importlib.util.spec_from_file_location("eval_judge", REPO / "scripts" / "eval_judge.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["eval_judge"] = module
    spec.loader.exec_module(module)
    return module


EJ = _eval_judge()


# --------------------------------------------------------------------------- the slices


@dataclass(frozen=True)
class Case:
    """One test passage of one run: judged with ``examples`` (a tuple of Examples)."""

    dataset: str
    protocol: str
    seed: int
    query_id: str
    query: str
    pair_id: str
    text: str
    relevant: int
    examples: tuple[Any, ...]


def _relevant(pair: Any, level: int) -> int:
    return 1 if pair.grade >= level else 0


def same_query_cases(
    dataset: str,
    pairs: Sequence[Any],
    shots: Sequence[int],
    seeds: Sequence[int],
    n_queries: int,
    n_test: int,
    pool: int,
) -> dict[int, list[Case]]:
    """``{shots: [Case...]}`` of the same-query protocol (see the module docstring)."""
    from judge.judging import ExampleSpec, bank_of

    level = EJ.DATASETS[dataset].level
    by_query: dict[str, list[Any]] = defaultdict(list)
    for p in sorted(pairs, key=lambda p: p.pair_id):
        by_query[p.query_id].append(p)
    need = n_test + max(shots)
    eligible = sorted(
        q
        for q, ps in by_query.items()
        if len(ps) >= need
        and min(sum(_relevant(p, level) for p in ps), sum(1 - _relevant(p, level) for p in ps)) >= 2
    )
    chosen = [eligible[i] for i in np.random.default_rng(0).permutation(len(eligible))[:n_queries]]
    out: dict[int, list[Case]] = {k: [] for k in shots}
    for seed in seeds:
        for qi, qid in enumerate(chosen):
            rng = np.random.default_rng([seed, qi])
            ps = [by_query[qid][j] for j in rng.permutation(len(by_query[qid]))]
            yes = [p for p in ps if _relevant(p, level)]
            no = [p for p in ps if not _relevant(p, level)]
            n_yes = min(len(yes) - 1, max(1, n_test // 2))  # keep one of each kind for the pool
            n_no = min(len(no) - 1, n_test - n_yes)
            test = yes[:n_yes] + no[:n_no]
            # the example pool: the query's other labels, both kinds (at most pool // 2 each)
            rest = yes[n_yes:][: pool // 2] + no[n_no:][: pool - pool // 2]
            query = ps[0].query
            for k in shots:
                bank = bank_of(
                    ExampleSpec(n=k),
                    {qid: {p.pair_id: _relevant(p, level) for p in rest}},
                    {qid: query},
                    {qid: {p.pair_id: p.text for p in rest}},
                    mapping={"graded": {"level": level}} if len(EJ.DATASETS[dataset].grades) > 2 else {},
                )
                for p in sorted(test, key=lambda p: p.pair_id):
                    examples = bank.for_passage(qid, p.pair_id, p.text) if k else ()
                    out[k].append(
                        Case(
                            dataset,
                            "same",
                            seed,
                            qid,
                            query,
                            p.pair_id,
                            p.text,
                            _relevant(p, level),
                            examples,
                        )
                    )
    return out


def nearest_cases(
    dataset: str, pairs: Sequence[Any], shots: Sequence[int], seeds: Sequence[int], n_test: int, pool: int
) -> dict[int, list[Case]]:
    """``{shots: [Case...]}`` of the nearest-query protocol (one pair per query)."""
    from judge.judging import ExampleSpec, bank_of
    from judge.systems import with_neighbours

    level = EJ.DATASETS[dataset].level
    by_query: dict[str, list[Any]] = defaultdict(list)
    for p in sorted(pairs, key=lambda p: p.pair_id):
        by_query[p.query_id].append(p)
    out: dict[int, list[Case]] = {k: [] for k in shots}
    for seed in seeds:
        rng = np.random.default_rng([seed, 7])
        names = sorted(by_query)
        order = [names[i] for i in rng.permutation(len(names))]
        one = {q: by_query[q][int(rng.integers(len(by_query[q])))] for q in order}
        yes = [q for q in order if _relevant(one[q], level)]
        no = [q for q in order if not _relevant(one[q], level)]
        test_q = yes[: n_test // 2] + no[: n_test - n_test // 2]
        taken = set(test_q)
        rest = [q for q in order if q not in taken]
        lab_q = [q for q in rest if _relevant(one[q], level)][: pool // 2]
        lab_q += [q for q in rest if not _relevant(one[q], level)][: pool - len(lab_q)]
        queries = {q: one[q].query for q in (*test_q, *lab_q)}
        for k in shots:
            bank = bank_of(
                ExampleSpec(n=k, source="nearest") if k else ExampleSpec(),
                {q: {one[q].pair_id: _relevant(one[q], level)} for q in lab_q},
                queries,
                {q: {one[q].pair_id: one[q].text} for q in lab_q},
            )
            if k:
                bank = with_neighbours(bank)
            for q in test_q:
                p = one[q]
                examples = bank.for_passage(q, p.pair_id, p.text) if k else ()
                out[k].append(
                    Case(
                        dataset, "nearest", seed, q, p.query, p.pair_id, p.text, _relevant(p, level), examples
                    )
                )
    return out


# --------------------------------------------------------------------------- judging


def _key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (
        rec["dataset"],
        rec["protocol"],
        rec["seed"],
        rec["shots"],
        rec["pair_id"],
        rec["backend"],
        rec["template_hash"],
        tuple(rec["examples"]),
    )


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line
    return out


def _oracle_backend(cases: Sequence[Case], out: Path) -> Any:
    """A perfect judge: the labels themselves, through the qrels-backed backend."""
    from judge.backends import make_backend

    path = out / "oracle.qrels"
    out.mkdir(parents=True, exist_ok=True)
    lines = {f"{'_'.join(c.query_id.split())} 0 {c.pair_id} {c.relevant}\n" for c in cases}
    path.write_text("".join(sorted(lines)), encoding="utf-8")
    return make_backend(f"qrels:{path}")


async def judge_cases(
    backend: Any, cases: Sequence[Case], shots: int, out: Path, done: set[tuple[Any, ...]]
) -> None:
    from judge.judging import JudgeConfig, Passage, judge_passage, load_template

    path = out / "verdicts.jsonl"
    started = time.perf_counter()
    count = 0
    todo = len(cases)
    for c in cases:  # in order: a query's test passages one after another
        language = EJ.DATASETS[c.dataset].language
        template = load_template(f"binary.{language}.v2")  # pinned: the documented figures' template
        config = JudgeConfig(language=language, probability=True, explain=False, template=template.id)
        key = (c.dataset, c.protocol, c.seed, shots, c.pair_id, backend.name, template.hash)
        key += (tuple(e.id for e in c.examples),)
        if key in done:
            todo -= 1
            continue
        v = await judge_passage(
            backend,
            c.query,
            Passage(c.text, id=c.pair_id, query_id=c.query_id),
            0,
            config,
            examples=c.examples,
        )
        rec = {
            "dataset": c.dataset,
            "protocol": c.protocol,
            "seed": c.seed,
            "shots": shots,
            "query_id": c.query_id,
            "pair_id": c.pair_id,
            "relevant": c.relevant,
            "examples": [e.id for e in c.examples],
            "examples_from": sorted({e.query_id for e in c.examples}),
            "verdict": v.verdict,
            "p_yes": v.p_yes,
            "prompt_tokens": v.tokens.prompt_tokens,
            "latency_s": round(v.latency_s, 4),
            "backend": backend.name,
            "template_id": v.template_id,
            "template_hash": v.template_hash,
            "error": v.error,
        }
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        count += 1
        rate = (time.perf_counter() - started) / count
        print(f"  {c.dataset} {c.query_id} {shots}-shot: {count}/{todo} ({rate:.1f} s each)", file=sys.stderr)


def build_cases(args: argparse.Namespace) -> dict[str, dict[int, list[Case]]]:
    shots = [int(x) for x in args.shots.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    root = Path(args.data)
    out: dict[str, dict[int, list[Case]]] = {}
    for name in args.datasets.split(","):
        pairs = EJ.LOADERS[name](root)
        if args.protocol == "same":
            out[name] = same_query_cases(name, pairs, shots, seeds, args.queries, args.test, args.pool)
        else:
            out[name] = nearest_cases(name, pairs, shots, seeds, args.test, args.pool)
    return out


async def cmd_run(args: argparse.Namespace) -> int:
    from judge.backends import make_backend

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = build_cases(args)
    every = [c for per in cases.values() for cs in per.values() for c in cs]
    backend = _oracle_backend(every, out) if args.backend == "oracle" else make_backend(args.backend)
    meta = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "load_start": os.getloadavg(),
        "argv": sys.argv[1:],
    }
    done = {_key(r) for r in read_records(out / "verdicts.jsonl") if r.get("verdict") != "unjudged"}
    try:
        for per in cases.values():
            # query by query, each example count's passages one after another (one examples
            # block, one prefix), so whatever finishes is paired per query
            by_query: dict[tuple[int, str], list[tuple[int, Case]]] = defaultdict(list)
            for shots, cs in per.items():
                for c in cs:
                    by_query[(c.seed, c.query_id)].append((shots, c))
            for items in by_query.values():
                for shots in sorted({k for k, _ in items}):
                    await judge_cases(backend, [c for k, c in items if k == shots], shots, out, done)
    finally:
        await backend.aclose()
    meta |= {
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "load_end": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    with open(out / "runs.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(meta) + "\n")
    return cmd_report(args)


# --------------------------------------------------------------------------- figures


def _kappa(human: np.ndarray, judge: np.ndarray) -> float:
    from judge.metrics._agreement import AgreementUndefinedError, cohen_kappa

    try:
        return float(cohen_kappa(human, judge))
    except AgreementUndefinedError:
        return math.nan


def _cluster_ci(
    rows: Sequence[dict[str, Any]], stat: Any, *, cluster: Any, seed: int = 0
) -> tuple[float, float, float]:
    """(value, low, high): ``stat(rows)`` and its 95% percentile bootstrap over clusters."""
    value = stat(rows)
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[cluster(r)].append(r)
    keys = list(groups)
    if len(keys) < 3:
        return value, math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(RESAMPLES):
        pick = rng.integers(len(keys), size=len(keys))
        sample = [r for i in pick for r in groups[keys[i]]]
        s = stat(sample)
        if not math.isnan(s):
            draws.append(s)
    if len(draws) < RESAMPLES // 2:
        return value, math.nan, math.nan
    return value, float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def _k(rows: Sequence[dict[str, Any]]) -> float:
    return _kappa(
        np.array([r["relevant"] for r in rows]), np.array([1 if r["verdict"] == "yes" else 0 for r in rows])
    )


def _auc(rows: Sequence[dict[str, Any]]) -> float:
    from judge.metrics._agreement import AgreementUndefinedError, roc_auc

    rs = [r for r in rows if r.get("p_yes") is not None]
    try:
        return float(roc_auc(np.array([r["relevant"] for r in rs]), np.array([r["p_yes"] for r in rs])))
    except (AgreementUndefinedError, ValueError):
        return math.nan


def loqo_kappa(rows: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """(kappa, mean threshold): every query's verdicts at the threshold tuned on the other
    queries' (leave one query out, over every seed; ``eval_judge.tune_threshold``, the rule
    the calibration uses): the agreement a threshold made for prompts with this many
    examples would give on a query it was not tuned on."""
    rs = [r for r in rows if r.get("p_yes") is not None]
    queries = sorted({r["query_id"] for r in rs})
    if len(queries) < 2:
        return math.nan, math.nan
    human, judged, used = [], [], []
    for q in queries:
        rest = [r for r in rs if r["query_id"] != q]
        t = EJ.tune_threshold(
            np.array([r["relevant"] for r in rest]) == 1, np.array([r["p_yes"] for r in rest], dtype=float)
        )
        used.append(t)
        for r in rs:
            if r["query_id"] == q:
                human.append(r["relevant"])
                judged.append(1 if r["p_yes"] >= t else 0)
    return _kappa(np.array(human), np.array(judged)), float(np.mean(used))


def _fmt(v: float, lo: float = math.nan, hi: float = math.nan) -> str:
    if math.isnan(v):
        return "undefined"
    return f"{v:.3f}" if math.isnan(lo) else f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def _by_query(r: dict[str, Any]) -> Any:
    return (r["seed"], r["query_id"])


def _by_pair(r: dict[str, Any]) -> Any:
    return (r["seed"], r["pair_id"])


def _by_query_of_pair(p: tuple[dict[str, Any], dict[str, Any]]) -> Any:
    return _by_query(p[0])


def _by_pair_of_pair(p: tuple[dict[str, Any], dict[str, Any]]) -> Any:
    return _by_pair(p[0])


def report_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    judged = [r for r in records if r["verdict"] in ("yes", "no")]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in judged:
        groups[(r["dataset"], r["protocol"], r["backend"], r["shots"])].append(r)
    rows = []
    for (dataset, protocol, backend, shots), rs in sorted(groups.items()):
        cluster = _by_query if protocol == "same" else _by_pair
        kappa = _cluster_ci(rs, _k, cluster=cluster)
        base = {(r["seed"], r["pair_id"]): r for r in groups.get((dataset, protocol, backend, 0), [])}
        paired = [(r, base[(r["seed"], r["pair_id"])]) for r in rs if (r["seed"], r["pair_id"]) in base]

        def diff(ps: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> float:
            return _k([a for a, _ in ps]) - _k([b for _, b in ps])

        delta = (
            _cluster_ci(paired, diff, cluster=_by_query_of_pair if protocol == "same" else _by_pair_of_pair)
            if shots and paired
            else (math.nan, math.nan, math.nan)
        )
        rows.append(
            {
                "dataset": dataset,
                "protocol": protocol,
                "backend": backend,
                "shots": shots,
                "passages": len(rs),
                "queries": len({(r["seed"], r["query_id"]) for r in rs}),
                "seeds": len({r["seed"] for r in rs}),
                "kappa": kappa,
                "delta": delta,
                "auc": _auc(rs),
                "loqo": loqo_kappa(rs) if protocol == "same" else (math.nan, math.nan),
                "yes_rate": sum(r["verdict"] == "yes" for r in rs) / len(rs),
                "human_yes": sum(r["relevant"] for r in rs) / len(rs),
                "shown": sum(len(r["examples"]) for r in rs) / len(rs),
                "tokens": sum(r["prompt_tokens"] for r in rs) / len(rs),
                "seconds": float(np.median([r["latency_s"] for r in rs])),
            }
        )
    return rows


def print_report(rows: Sequence[dict[str, Any]], file: Any = sys.stdout) -> None:
    print(
        "| set | protocol | examples | passages (queries) | κ [95% CI] | Δκ vs 0 [95% CI] | AUC "
        "| κ, threshold tuned on the other queries (mean t) | judge yes "
        "| people yes | examples shown | prompt tokens | median s / passage |",
        file=file,
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", file=file)
    for r in rows:
        print(
            f"| {r['dataset']} | {r['protocol']} | {r['shots']} | {r['passages']} ({r['queries']}) | "
            f"{_fmt(*r['kappa'])} | {_fmt(*r['delta']) if r['shots'] else '—'} | {_fmt(r['auc'])} | "
            f"{_loqo(r['loqo'])} | {r['yes_rate']:.2f} | "
            f"{r['human_yes']:.2f} | {r['shown']:.1f} | {r['tokens']:.0f} | {r['seconds']:.2f} |",
            file=file,
        )


def _loqo(value: tuple[float, float]) -> str:
    k, t = value
    return "—" if math.isnan(t) else f"{_fmt(k)} ({t:.3f})"


def common_records(records: Sequence[dict[str, Any]], shots: Sequence[int]) -> list[dict[str, Any]]:
    """The records of the test passages judged with every count in ``shots`` (one table of
    one set of passages), those counts only."""
    have: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    for r in records:
        if r["verdict"] in ("yes", "no"):
            have[(r["dataset"], r["protocol"], r["backend"], r["seed"], r["pair_id"])].add(r["shots"])
    want = set(shots)
    return [
        r
        for r in records
        if r["shots"] in want
        and have[(r["dataset"], r["protocol"], r["backend"], r["seed"], r["pair_id"])] >= want
    ]


def cmd_report(args: argparse.Namespace) -> int:
    records = read_records(Path(args.out) / "verdicts.jsonl")
    if args.backend_filter:
        records = [r for r in records if r["backend"] == args.backend_filter]
    if getattr(args, "common", None):
        records = common_records(records, [int(x) for x in args.common.split(",")])
    print_report(report_rows(records))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="judge the slices (resumable), then print the tables")
    run.add_argument("--backend", default=DEFAULT_BACKEND, help="a backend spec, or 'oracle' (the labels)")
    run.add_argument("--protocol", choices=("same", "nearest"), default="same")
    run.add_argument("--datasets", default="dl19,rgb")
    run.add_argument("--shots", default="0,2,4,8", help="examples per prompt, comma-separated (0 first)")
    run.add_argument("--seeds", default="1,2,3", help="splits of each query's labels, comma-separated")
    run.add_argument("--queries", type=int, default=10, help="same: queries per set")
    run.add_argument("--test", type=int, default=6, help="same: test passages per query; nearest: test pairs")
    run.add_argument(
        "--pool", type=int, default=16, help="same: example pool per query; nearest: labelled queries"
    )
    run.add_argument("--data", default=str(_data_root()))
    run.add_argument("--out", default=str(DEFAULT_OUT))
    run.add_argument("--backend-filter", default=None, help=argparse.SUPPRESS)
    rep = sub.add_parser("report", help="the tables from the recorded verdicts")
    rep.add_argument("--out", default=str(DEFAULT_OUT))
    rep.add_argument("--backend-filter", default=None, metavar="NAME", help="only this backend's verdicts")
    rep.add_argument(
        "--common",
        default=None,
        metavar="0,2,4,8",
        help="only the test passages judged with every one of these counts (one set of passages per table)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return asyncio.run(cmd_run(args))
    return cmd_report(args)


if __name__ == "__main__":
    raise SystemExit(main())
