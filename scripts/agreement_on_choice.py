"""Agreement on the choice: does the judge pick the configuration human labels pick?

A grid of embedded-engine (BM25) configurations is run on a query set with ``judge
experiment`` (pooled, each pair judged once). The configurations are ordered twice by
nDCG@10: by the judge's pool (the experiment's report) and by the human labels (each
configuration's TREC run scored against the labels' qrels, as ``judge trec`` does). Printed
and written as JSON: Kendall's tau between the two orders (scipy), the judge's best, the
labels' best and its tie group (configurations whose per-query nDCG@10 under the labels is
not significantly different from the labels' best: paired randomization test, Holm over the
comparisons, p >= 0.05), and whether the judge's best is in that group.

Corpora (built at run time from ../shared/data, see scripts/experiment_data.py): ``dl19``
(NIST's graded qrels) and ``zh`` (zh_rgb: positives relevant, negatives not).

    nice -n 10 python scripts/agreement_on_choice.py --corpus dl19 --queries 20 --depth 5 \\
        --grid k1=0.4,1.2,2.5 --grid b=0.3,0.9 --backend local --work /tmp/jbench/dl19
    # validate the script first with a perfect judge:
    python scripts/agreement_on_choice.py --corpus dl19 --backend qrels --work /tmp/jbench/dl19

``--backend qrels`` uses the corpus's own labels as the judge (the orders must agree, tau
1 up to ties). Re-running resumes: every judged pair is in the work directory's cache.
``dl19`` is judged with ``binary.en.v2`` (the English default when docs/agreement.md's figures
were measured, pinned so they and the cached verdicts stay valid); ``zh`` with the Chinese
default.

``--ppi-share S`` (e.g. 0.10) adds the prediction-powered variant: a uniform sample of S of
the pool's judged pairs (seed ``--seed``) is labelled from the corpus's qrels (relevant =
grade >= ``--ppi-level``, default 2 on dl19, 1 on zh), and every configuration's nDCG@10 and
P@10 are corrected by the labels on its pairs (:func:`judge.batch.ppi_block`, the label-free
conventions of ``judge score``). ``ppi`` in the result: Kendall's tau of the order by the
corrected nDCG@10 (and, beside it, by the judge's own label-free nDCG@10 on the same
pairs), and by the corrected and the judge's P@10; each order against the labels' nDCG@10
order; the corrected order's best and whether it is in the labels' tie group. With
``--draws N`` the sample is drawn N times (seeds ``seed .. seed+N-1``) and tau averaged.
``--examples N`` (after the zero-shot run of the same ``--work``, whose pool it reads): for
every query, N of its pooled pairs that the labels grade (balanced relevant / not relevant at
``--ppi-level`` where the labels allow, drawn with ``--seed``) become its worked examples:
written as a qrels file, they are given to ``judge experiment --qrels FILE --examples N``, so
those pairs take their labels (a labelled passage is never judged) and every other pooled
passage of the query is judged with them in its prompt. The labels' order is the same as
zero-shot (every configuration scored against all the labels). Because the example pairs now
carry true labels, the script also runs a control at no judge cost: the zero-shot verdicts
with the same pairs' labels filled in (``--qrels FILE`` without ``--examples``, reading the
zero-shot cache). ``examples`` in the result compares the three: zero-shot, control, examples.
``--adapt N`` (after the zero-shot run, as ``--examples``): N labelled pooled pairs per query,
drawn the same way, over ``--draws`` seeds; the control fills them in, the adapted run also
learns the decision rule from them (``judge experiment --qrels FILE --adapt``), both from the
zero-shot cache (no judge call); ``adapt`` in the result: each order's τ against the labels',
the adaptation block, and κ / ROC AUC on the held-out pooled pairs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from experiment_data import ensure_index, prepare_dl19, prepare_zh, write_config
from scipy.stats import kendalltau

from judge.batch import SampleLabelOptions, ppi_block
from judge.io import SampleLabel, SampleLabels, join_run_qrels, read_qrels, read_run
from judge.judging import JudgeConfig
from judge.metrics import (
    cohen_kappa,
    compare_scores,
    evaluate,
    holm_adjust,
    parse_measure_args,
    roc_auc,
    significance,
)
from judge.systems import aexperiment

MEASURE = "ndcg_cut_10"
# Pinned verdict template per corpus (None: the language's default); see the module doc.
TEMPLATE: dict[str, str | None] = {"dl19": "binary.en.v2", "zh": None}


def label_scores(qrels_path: Path, trec_path: Path) -> dict[str, float]:
    """Per query nDCG@10 of one run under the labels."""
    (m,) = parse_measure_args([MEASURE])
    ev = evaluate([m], join_run_qrels(read_qrels(qrels_path), read_run(trec_path)))
    return dict(zip(ev.qids, (float(x) for x in ev.query_scores(m)), strict=True))


def tie_group(
    per_query: dict[str, dict[str, float]], best: str, seed: int
) -> tuple[list[str], dict[str, float]]:
    """Configurations not significantly different from ``best`` (Holm p >= 0.05; a Monte
    Carlo Holm p within twice its error of 0.05 is undecided and kept in the group)."""
    others = [n for n in per_query if n != best]
    qids = sorted(set.intersection(*(set(v) for v in per_query.values())))
    comps = [
        compare_scores(
            np.array([per_query[best][q] for q in qids]),
            np.array([per_query[n][q] for q in qids]),
            measure=MEASURE,
            baseline_name=best,
            system_name=n,
            seed=seed,
        )
        for n in others
    ]
    adjusted = holm_adjust(comps) if comps else []
    p = {c.system: float(c.p_permutation_holm if c.p_permutation_holm is not None else 1.0) for c in adjusted}
    decided = {c.system: significance(c.p_permutation_holm, c.p_permutation_holm_se, 0.05) for c in adjusted}
    return [best, *(n for n in others if decided[n] != "significant")], p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", choices=("dl19", "zh"), required=True)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument(
        "--offset", type=int, default=0, help="dl19: skip the first N judged queries (20: the held-out set)"
    )
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--grid", action="append", default=None)
    ap.add_argument("--backend", default="local", help="a backend spec, or 'qrels' (the corpus's labels)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=None, help="result JSON (default WORK/agreement-BACKEND.json)"
    )
    ap.add_argument("--ppi-share", type=float, default=None, help="prediction-powered variant: label share")
    ap.add_argument("--ppi-level", type=int, default=None, help="labels: grade >= L is relevant")
    ap.add_argument("--draws", type=int, default=1, help="--ppi-share: samples drawn (tau averaged)")
    ap.add_argument("--examples", type=int, default=None, help="same-query demonstrations per query")
    ap.add_argument("--adapt", type=int, default=None, help="labels per query that --adapt learns from")
    ap.add_argument(
        "--adapt-features",
        choices=("log-odds", "all", "no-similarity", "no-feedback"),
        default="log-odds",
        help="--adapt: the encoder's columns the comparison's rule reads (an ablation; default "
        "log-odds, as shipped: none)",
    )
    args = ap.parse_args()
    grid = args.grid or ["k1=0.4,1.2,2.5", "b=0.3,0.9"]
    if args.corpus == "dl19":
        paths = prepare_dl19(args.work, limit=args.queries, offset=args.offset)
        ensure_index(paths, "en")
    else:
        paths = prepare_zh(args.work, limit=args.queries)
        ensure_index(paths, "zh")
    config = write_config(args.work, args.depth)
    backend_name = "qrels" if args.backend == "qrels" else args.backend.replace(":", "_").replace("/", "_")
    backend = f"qrels:{paths['qrels']}:2" if args.backend == "qrels" and args.corpus == "dl19" else (
        f"qrels:{paths['qrels']}" if args.backend == "qrels" else args.backend
    )  # fmt: skip
    level = args.ppi_level if args.ppi_level is not None else (2 if args.corpus == "dl19" else 1)
    out_dir = args.work / f"experiment-{backend_name}"
    if args.examples:
        return examples_variant(paths, config, out_dir, grid, backend, backend_name, args, level)
    if args.adapt:
        return adapt_variant(paths, config, out_dir, grid, backend, backend_name, args, level)
    started = time.monotonic()
    report = aexperiment_sync(paths["queries"], config, out_dir, grid, backend, args)
    elapsed = time.monotonic() - started
    e = report.experiment
    assert e is not None
    per_query = {c.name: label_scores(paths["qrels"], Path(str(c.trec))) for c in e.configurations}
    label_means = {n: float(np.mean(list(v.values()))) for n, v in per_query.items()}
    label_best = max(label_means, key=lambda n: label_means[n])
    group, p = tie_group(per_query, label_best, args.seed)
    result = {
        "corpus": args.corpus,
        "backend": backend,
        "queries": e.queries,
        "depth": args.depth,
        "grid": grid,
        **choice(report, label_means, group),
        "label_best": label_best,
        "label_tie_group": group,
        "holm_p_vs_label_best": p,
        "seconds": round(elapsed, 1),
    }
    if args.ppi_share is not None:
        result["ppi"] = ppi_variant(
            out_dir, e.configurations, paths["qrels"], per_query, label_means, group, args, level
        )
    out = args.out or args.work / f"agreement-{backend_name}{'' if args.ppi_share is None else '-ppi'}.json"
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def choice(report: Any, label_means: dict[str, float], group: list[str]) -> dict[str, Any]:
    """One run's order against the labels': tau, its best and whether it is in the tie group."""
    e = report.experiment
    judge_means = {c.name: c.objective for c in e.configurations}
    names = list(judge_means)
    tau = kendalltau([judge_means[n] or 0.0 for n in names], [label_means[n] for n in names])
    return {
        "configurations": {n: {"judge": judge_means[n], "labels": label_means[n]} for n in names},
        "kendall_tau": None if np.isnan(tau.statistic) else float(tau.statistic),
        "kendall_p": None if np.isnan(tau.pvalue) else float(tau.pvalue),
        "judge_best": e.best,
        "judge_best_in_tie_group": e.best in group,
        "judge_calls": e.calls,
        "unique_pairs": report.pool.unique_pairs,
        "nominal_pairs": e.nominal_pairs,
    }


def pooled_pairs(out_dir: Path) -> dict[str, list[str]]:
    """``{qid: [docno, ...]}``: a finished run's pool (``pool.judged.jsonl``)."""
    pool: dict[str, list[str]] = {}
    for qid, docno in _pool_verdicts(out_dir):
        pool.setdefault(qid, []).append(docno)
    return pool


def draw_examples(
    pool: dict[str, list[str]], grades: dict[tuple[str, str], int], n: int, level: int, seed: int
) -> dict[str, list[tuple[str, int]]]:
    """Per query, up to ``n`` of its pooled labelled pairs, taken alternately from the relevant
    (grade >= ``level``) and the not relevant ones in a seeded random order (balanced where
    the labels allow, the other kind filling in when one runs out)."""
    rng = np.random.default_rng(seed)
    chosen: dict[str, list[tuple[str, int]]] = {}
    for qid in sorted(pool):
        graded = sorted(d for d in set(pool[qid]) if (qid, d) in grades)
        yes = [d for d in graded if grades[(qid, d)] >= level]
        no = [d for d in graded if grades[(qid, d)] < level]
        yes = [yes[i] for i in rng.permutation(len(yes))]
        no = [no[i] for i in rng.permutation(len(no))]
        picked: list[str] = []
        while len(picked) < n and (yes or no):
            first, second = (yes, no) if len(picked) % 2 == 0 else (no, yes)
            picked.append((first or second).pop(0))
        chosen[qid] = [(d, grades[(qid, d)]) for d in picked]
    return chosen


def _pool_verdicts(out_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    verdicts: dict[tuple[str, str], dict[str, Any]] = {}
    for line in (out_dir / "pool.judged.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            for docno, v in zip(rec["docnos"], rec["verdicts"], strict=True):
                verdicts[(str(rec["id"]), str(docno))] = v
    return verdicts


def test_pair_agreement(
    zero_dir: Path,
    examples_dir: Path,
    grades: dict[tuple[str, str], int],
    examples: dict[str, list[tuple[str, int]]],
    level: int,
) -> dict[str, Any]:
    """Judge against labels on the test pairs (the pooled pairs the labels grade, the example
    pairs left out), judged both zero-shot and with examples: people's and the judge's share
    of relevant, Cohen's kappa at the template's threshold, ROC AUC of P(yes), and the best
    kappa any threshold reaches (an oracle figure: how much a re-tuned threshold could
    recover)."""
    shown = {(q, d) for q, pairs in examples.items() for d, _ in pairs}
    zero, ex = _pool_verdicts(zero_dir), _pool_verdicts(examples_dir)
    keys = sorted(
        k for k in zero
        if k in grades and k not in shown
        and zero[k].get("verdict") in ("yes", "no") and ex.get(k, {}).get("verdict") in ("yes", "no")
    )  # fmt: skip
    truth = np.array([grades[k] >= level for k in keys])
    out: dict[str, Any] = {"pairs": len(keys), "people_yes": float(truth.mean()) if keys else None}
    for name, src in (("zero_shot", zero), ("examples", ex)):
        said = np.array([src[k]["verdict"] == "yes" for k in keys])
        p = np.array([float(src[k].get("p_yes") or 0.0) for k in keys])
        oracle = max((cohen_kappa(truth, p >= t), float(t)) for t in np.unique(p)) if keys else (None, None)
        out[name] = {
            "judge_yes": float(said.mean()) if keys else None,
            "kappa": cohen_kappa(truth, said) if keys else None,
            "auc": roc_auc(truth, p) if keys else None,
            "best_kappa_any_threshold": oracle[0],
            "at_threshold": oracle[1],
        }
    return out


def examples_variant(
    paths: dict[str, Path],
    config: Path,
    zero_dir: Path,
    grid: list[str],
    backend: str,
    backend_name: str,
    args: argparse.Namespace,
    level: int,
) -> int:
    """Zero-shot, the control (zero-shot verdicts with the example pairs' labels filled in)
    and the judge with ``--examples N`` worked examples per query, each order against the
    labels' (see the module's docstring)."""
    zero_json = args.work / f"agreement-{backend_name}.json"
    if not (zero_dir / "pool.judged.jsonl").exists() or not zero_json.exists():
        print(f"--examples: run the zero-shot protocol first in {args.work} (no --examples)", file=sys.stderr)
        return 2
    zero = json.loads(zero_json.read_text(encoding="utf-8"))
    qrels = read_qrels(paths["qrels"])
    grades = {(q, d): int(g) for q, docs in qrels.to_dict().items() for d, g in docs.items()}
    examples = draw_examples(pooled_pairs(zero_dir), grades, args.examples, level, args.seed)
    tag = f"examples{args.examples}-seed{args.seed}"
    ex_qrels = args.work / f"{tag}.qrels"
    ex_qrels.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, pairs in examples.items() for d, g in pairs), encoding="utf-8"
    )
    label_means = {n: v["labels"] for n, v in zero["configurations"].items()}
    group = zero["label_tie_group"]
    shared = {"qrels": ex_qrels, "qrels_level": level}
    started = time.monotonic()
    control = aexperiment_sync(
        paths["queries"], config, args.work / f"control-{backend_name}-{tag}", grid, backend, args,
        cache=args.work / f"cache-{zero_dir.name}.sqlite", **shared,
    )  # fmt: skip
    with_examples = aexperiment_sync(
        paths["queries"], config, args.work / f"experiment-{backend_name}-{tag}", grid, backend, args,
        examples=args.examples, **shared,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    yes = sum(1 for pairs in examples.values() for _, g in pairs if g >= level)
    result = {
        "corpus": args.corpus,
        "backend": backend,
        "depth": args.depth,
        "grid": grid,
        "examples_per_query": args.examples,
        "seed": args.seed,
        "example_pairs": {"total": sum(len(p) for p in examples.values()), "relevant": yes},
        "label_best": zero["label_best"],
        "label_tie_group": group,
        "zero_shot": {
            k: zero[k] for k in ("kendall_tau", "judge_best", "judge_best_in_tie_group", "judge_calls")
        },
        "control": choice(control, label_means, group),
        "examples": choice(with_examples, label_means, group),
        "test_pairs": test_pair_agreement(
            zero_dir, args.work / f"experiment-{backend_name}-{tag}", grades, examples, level
        ),
        "seconds": round(elapsed, 1),
    }
    out = args.out or args.work / f"agreement-{backend_name}-{tag}.json"
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def held_out_agreement(
    zero_dir: Path,
    adapted_dir: Path,
    grades: dict[tuple[str, str], int],
    shown: set[tuple[str, str]],
    level: int,
) -> dict[str, Any]:
    """κ and ROC AUC on the pooled pairs the labels grade but the run was not given (the
    held-out pairs): the judge alone (its verdicts, P(yes)) against adapted (the adapted run's
    verdicts, ``p_adapted`` where the rule was applied, else P(yes))."""
    zero, ad = _pool_verdicts(zero_dir), _pool_verdicts(adapted_dir)
    keys = sorted(
        k for k in zero
        if k in grades and k not in shown and zero[k].get("verdict") in ("yes", "no") and k in ad
    )  # fmt: skip
    truth = np.array([grades[k] >= level for k in keys])
    out: dict[str, Any] = {"pairs": len(keys), "people_yes": float(truth.mean()) if keys else None}
    for name, said, score in (
        ("alone", [zero[k]["verdict"] == "yes" for k in keys], [float(zero[k]["p_yes"]) for k in keys]),
        (
            "adapted",
            [ad[k]["verdict"] == "yes" for k in keys],
            [float(ad[k].get("p_adapted") or ad[k]["p_yes"]) for k in keys],
        ),
    ):
        out[name] = {
            "judge_yes": float(np.mean(said)) if keys else None,
            "kappa": cohen_kappa(truth, np.array(said)) if keys else None,
            "auc": roc_auc(truth, np.array(score)) if keys else None,
        }
    return out


def _ablate_encoder(which: str, zero_dir: Path) -> None:
    """The ablation of ``--adapt-features``: a comparison's rule reads the judge's log-odds
    only (``log-odds``, as shipped); the others hand it the encoder's columns as ``judge
    score --adapt`` computes them (``all``; ``no-similarity`` / ``no-feedback``: one column
    dropped), over the pooled passages' texts (the zero-shot run's ``pool.input.jsonl``), by
    wrapping the comparison's ``_with_adaptation``."""
    if which == "log-odds":
        return
    import dataclasses

    import judge.systems._run as run_module
    from judge.systems import default_encoder, encoder_features

    texts: dict[tuple[str, str], str] = {}
    for line in (zero_dir / "pool.input.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            for p in rec["retrieval_context"]:
                texts[(str(rec["id"]), str(p["id"]))] = p["text"]
    made = encoder_features(texts, default_encoder())
    drop = {"no-similarity": "similarity", "no-feedback": "feedback"}.get(which)
    shipped = vars(run_module)["_with_adaptation"]

    def with_encoder(run: Any, pool: Any) -> Any:
        features = lambda pairs: {k: v for k, v in made(pairs).items() if k != drop}  # noqa: E731
        return dataclasses.replace(shipped(run, pool), adapt_features=features)

    vars(run_module)["_with_adaptation"] = with_encoder


def adapt_variant(
    paths: dict[str, Path],
    config: Path,
    zero_dir: Path,
    grid: list[str],
    backend: str,
    backend_name: str,
    args: argparse.Namespace,
    level: int,
) -> int:
    """The order of the configurations with ``--adapt``: for each of ``--draws``
    seeds (from ``--seed``), ``--adapt N`` pooled pairs per query the labels grade (balanced,
    as ``--examples`` draws them) are the team's labels; the control fills them into the
    zero-shot pool (``--qrels FILE``), the adapted run also lets them teach the decision rule
    (``--qrels FILE --adapt``). Both read the zero-shot run's cache: no judge call. Each
    order is compared with the labels' (every configuration scored against all the labels),
    and the held-out pooled pairs' κ and ROC AUC alone and adapted."""
    zero_json = args.work / f"agreement-{backend_name}.json"
    if not (zero_dir / "pool.judged.jsonl").exists() or not zero_json.exists():
        print(f"--adapt: run the zero-shot protocol first in {args.work} (no --adapt)", file=sys.stderr)
        return 2
    _ablate_encoder(args.adapt_features, zero_dir)
    zero = json.loads(zero_json.read_text(encoding="utf-8"))
    qrels = read_qrels(paths["qrels"])
    grades = {(q, d): int(g) for q, docs in qrels.to_dict().items() for d, g in docs.items()}
    label_means = {n: v["labels"] for n, v in zero["configurations"].items()}
    group = zero["label_tie_group"]
    cache = args.work / f"cache-{zero_dir.name}.sqlite"
    draws: list[dict[str, Any]] = []
    started = time.monotonic()
    for seed in range(args.seed, args.seed + args.draws):
        labels = draw_examples(pooled_pairs(zero_dir), grades, args.adapt, level, seed)
        tag = f"adapt{args.adapt}-{args.adapt_features}-seed{seed}"
        label_file = args.work / f"{tag}.qrels"
        label_file.write_text(
            "".join(f"{q} 0 {d} {g}\n" for q, pairs in labels.items() for d, g in pairs), encoding="utf-8"
        )
        shared = {"qrels": label_file, "qrels_level": level, "cache": cache}
        control = aexperiment_sync(
            paths["queries"],
            config,
            args.work / f"control-{backend_name}-{tag}",
            grid,
            backend,
            args,
            **shared,
        )
        adapted_dir = args.work / f"experiment-{backend_name}-{tag}"
        adapted = aexperiment_sync(
            paths["queries"], config, adapted_dir, grid, backend, args, adapt=True, **shared
        )
        block = json.loads((adapted_dir / "pool.judged.summary.json").read_text(encoding="utf-8")).get(
            "adaptation", {}
        )
        shown = {(q, d) for q, pairs in labels.items() for d, _ in pairs}
        draws.append(
            {
                "seed": seed,
                "label_pairs": len(shown),
                "relevant": sum(1 for pairs in labels.values() for _, g in pairs if g >= level),
                "control": choice(control, label_means, group),
                "adapted": choice(adapted, label_means, group),
                "adaptation": {
                    k: block.get(k) for k in ("applied", "reason", "features", "labels", "queries", "weights")
                }
                | {"leave_one_query_out": block.get("leave_one_query_out")},
                "held_out": held_out_agreement(zero_dir, adapted_dir, grades, shown, level),
            }
        )
    result = {
        "corpus": args.corpus,
        "backend": backend,
        "depth": args.depth,
        "grid": grid,
        "labels_per_query": args.adapt,
        "adapt_features": args.adapt_features,
        "label_best": zero["label_best"],
        "label_tie_group": group,
        "zero_shot": {k: zero[k] for k in ("kendall_tau", "judge_best", "judge_best_in_tie_group")},
        "mean_tau_control": float(np.mean([d["control"]["kendall_tau"] or 0.0 for d in draws])),
        "mean_tau_adapted": float(np.mean([d["adapted"]["kendall_tau"] or 0.0 for d in draws])),
        "draws": draws,
        "seconds": round(time.monotonic() - started, 1),
    }
    out = args.out or args.work / f"agreement-{backend_name}-adapt{args.adapt}-{args.adapt_features}.json"
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def _tau(a: dict[str, float], b: dict[str, float]) -> float | None:
    names = list(a)
    t = kendalltau([a[n] for n in names], [b[n] for n in names]).statistic
    return None if np.isnan(t) else float(t)


def ppi_variant(
    out_dir: Path,
    configurations: list,  # type: ignore[type-arg]
    qrels_path: Path,
    per_query: dict[str, dict[str, float]],
    label_means: dict[str, float],
    group: list[str],
    args: argparse.Namespace,
    level: int,
) -> dict[str, object]:
    """Each configuration's judge and prediction-powered nDCG@10 / P@10 from uniform samples of
    the pool's judged pairs labelled from the qrels; tau of their orders against the labels'."""
    pool = _pool_verdicts(out_dir)
    qrels = read_qrels(qrels_path)
    grades = {(q, d): int(g) for q, docs in qrels.to_dict().items() for d, g in docs.items()}
    records: dict[str, list[dict[str, object]]] = {}
    for c in configurations:
        ranked: dict[str, list[tuple[float, str]]] = {}
        for line in Path(str(c.trec)).read_text(encoding="utf-8").splitlines():
            if line.strip():
                qid, _, docno, _, score, _ = line.split()
                if (qid, docno) in pool:
                    ranked.setdefault(qid, []).append((float(score), docno))
        records[c.name] = [
            {"id": q, "mode": "binary", "docnos": [d for _, d in sorted(r, key=lambda x: -x[0])],
             "verdicts": [pool[(q, d)] for _, d in sorted(r, key=lambda x: -x[0])]}
            for q, r in ranked.items()
        ]  # fmt: skip
    judged = sorted(k for k, v in pool.items() if v.get("verdict") in ("yes", "no"))
    n = max(2, round(args.ppi_share * len(judged)))
    draws = []
    for draw in range(args.draws):
        rng = np.random.default_rng(args.seed + draw)
        chosen = [judged[i] for i in sorted(rng.choice(len(judged), size=n, replace=False))]
        labels = tuple(SampleLabel(q, d, grades.get((q, d), 0), i + 1) for i, (q, d) in enumerate(chosen))
        figures = {}
        for name, recs in records.items():
            mine = {(str(r["id"]), str(d)) for r in recs for d in r["docnos"]}  # type: ignore[attr-defined]
            sample = SampleLabels("<drawn>", tuple(x for x in labels if (x.qid, x.docno) in mine))
            # corrected nDCG is what this protocol measures: computed, although reports withhold it
            figures[name] = ppi_block(recs, SampleLabelOptions(sample, level=level), (10,), withhold=False)
        ppi_ndcg = {n_: float(f["ndcg"]["10"]["estimate"]) for n_, f in figures.items()}
        judge_ndcg = {n_: float(f["ndcg"]["10"]["judge"]) for n_, f in figures.items()}
        ppi_p10 = {n_: float(f["precision"]["10"]["estimate"]) for n_, f in figures.items()}
        judge_p10 = {n_: float(f["precision"]["10"]["judge"]) for n_, f in figures.items()}
        best = max(ppi_ndcg, key=lambda k: ppi_ndcg[k])
        draws.append({
            "seed": args.seed + draw,
            "tau_ppi": _tau(ppi_ndcg, label_means),
            "tau_judge_label_free": _tau(judge_ndcg, label_means),
            "tau_ppi_p10": _tau(ppi_p10, label_means),
            "tau_judge_p10": _tau(judge_p10, label_means),
            "ppi_best": best,
            "ppi_best_in_tie_group": best in group,
            "configurations": {n_: {"judge": judge_ndcg[n_], "ppi": ppi_ndcg[n_],
                                    "p10_ppi": f["precision"]["10"]} for n_, f in figures.items()},
        })  # fmt: skip
    taus = [d["tau_ppi"] for d in draws if d["tau_ppi"] is not None]
    return {
        "share": args.ppi_share,
        "labels_per_draw": n,
        "pool_judged_pairs": len(judged),
        "level": level,
        "measure": "nDCG@10, label-free conventions (ideal from the judged list), calibrated rectifier",
        "mean_tau_ppi": float(np.mean(taus)) if taus else None,
        "mean_tau_judge_label_free": float(np.mean([d["tau_judge_label_free"] or 0.0 for d in draws])),
        "mean_tau_ppi_p10": float(np.mean([d["tau_ppi_p10"] or 0.0 for d in draws])),
        "mean_tau_judge_p10": float(np.mean([d["tau_judge_p10"] or 0.0 for d in draws])),
        "ppi_best_in_tie_group_share": float(np.mean([d["ppi_best_in_tie_group"] for d in draws])),
        "draws": draws,
    }


def aexperiment_sync(
    queries: Path,
    config: Path,
    out: Path,
    grid: list[str],
    backend: str,
    args: argparse.Namespace,
    *,
    cache: Path | None = None,
    **more: Any,
) -> Any:
    """``judge.experiment`` of the grid, verdicts only; ``cache`` default: the run's own
    (``WORK/cache-OUT.sqlite``); ``more``: more keywords (``qrels``, ``examples``)."""
    import asyncio

    return asyncio.run(
        aexperiment(
            queries,
            config,
            out,
            grid=grid,
            backend=backend,
            measures=[MEASURE, "map"],
            # verdicts only: no reason is generated (the decision is the same, the call shorter)
            config=JudgeConfig(explain=False, template=TEMPLATE.get(args.corpus)),
            cache=cache or args.work / f"cache-{out.name}.sqlite",
            seed=args.seed,
            stability_resamples=0,
            **more,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
