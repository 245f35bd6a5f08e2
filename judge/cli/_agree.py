"""``judge agree``: how well a judge's relevance labels agree with human ones.

    judge agree HUMAN_QRELS JUDGE_QRELS [-l LEVEL] [--json] [--runs RUN ...] [-m MEASURE]

Both files are TREC qrels (``qid iter docno grade``). Agreement is computed over the
(query, document) pairs **both** files label; pairs only one file labels are counted and
reported, never guessed. Reported: Cohen's kappa (unweighted and quadratic-weighted, over
the union of the grades either side used), Krippendorff's alpha (ordinal; value domain =
the grades present), exact agreement, the confusion matrix (rows human, columns judge) and
the binary kappa at relevance level ``-l`` (relevant = grade >= LEVEL, default 1 as in
trec_eval).

With ``--runs`` every run is scored with ``-m`` (default ``ndcg_cut_10``, trec_eval
semantics, averaged over the queries each qrels file judges) once under the human qrels
and once under the judge's, and Kendall's tau-b and Spearman's rho between the two lists
of system scores are reported (``--overlap-only`` scores both on the common pairs only).

A measure with no value for this input (e.g. kappa when both sides gave every pair the
same grade) is printed as ``undefined`` with the reason (``null`` plus the reason in
``undefined`` with ``--json``); nothing is ever printed as NaN.

Exit codes: 0 done; 2 bad input (unreadable or malformed file, no pair labelled by both,
fewer than two runs).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from judge.io import InputError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "agree",
        help="agreement between human and judge qrels (kappa, alpha, confusion matrix, system ranking)",
        description=(
            "Compare a judge's relevance labels with human ones over the query-document pairs both "
            "qrels files label: Cohen's kappa (unweighted, quadratic), Krippendorff's alpha (ordinal), "
            "exact agreement, confusion matrix, binary kappa at -l. With --runs: Kendall's tau and "
            "Spearman's rho between the systems' scores under the two qrels."
        ),
        epilog="exit codes: 0 done; 2 bad input/usage",
    )
    p.add_argument("human", metavar="HUMAN_QRELS", help="reference (human) qrels file")
    p.add_argument("judge", metavar="JUDGE_QRELS", help="the judge's qrels file")
    p.add_argument(
        "-l",
        "--level",
        type=int,
        default=1,
        metavar="LEVEL",
        help="relevant = grade >= LEVEL, for the binary kappa and binary measures (default 1)",
    )
    p.add_argument("--runs", nargs="+", metavar="RUN", help="TREC run files to rank under both qrels (>= 2)")
    p.add_argument(
        "-m",
        "--measure",
        default="ndcg_cut_10",
        help="measure for --runs, trec_eval name (default ndcg_cut_10)",
    )
    p.add_argument(
        "--overlap-only",
        action="store_true",
        help="with --runs: score runs on the pairs both files label only (default: each file as is)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run_agree)


def _pairs(qrels: Any) -> dict[tuple[str, str], int]:
    return {(qid, doc): grade for qid, docs in qrels.to_dict().items() for doc, grade in docs.items()}


class _Report:
    """Values by name, with the reason when a value is undefined."""

    def __init__(self) -> None:
        self.values: dict[str, float | None] = {}
        self.undefined: dict[str, str] = {}

    def add(self, name: str, fn: Callable[[], float]) -> None:
        from judge.metrics import AgreementUndefinedError

        try:
            value = fn()
        except AgreementUndefinedError as exc:
            self.values[name] = None
            self.undefined[name] = str(exc)
            return
        if not math.isfinite(value):  # defensive: never let a NaN through
            self.values[name] = None
            self.undefined[name] = "not a finite number"
            return
        self.values[name] = value


def agreement_report(
    human: Mapping[tuple[str, str], int], judged: Mapping[tuple[str, str], int], level: int
) -> dict[str, Any]:
    """Counts, conventions, measures and confusion matrix for two ``{(qid, docno): grade}``."""
    from judge.metrics import (
        binary_kappa,
        cohen_kappa,
        confusion_matrix,
        exact_agreement,
        krippendorff_alpha,
    )

    common = sorted(human.keys() & judged.keys())
    h = np.array([human[k] for k in common], dtype=np.int64)
    j = np.array([judged[k] for k in common], dtype=np.int64)
    labels = np.union1d(h, j).astype(np.int64)
    report = _Report()
    report.add("kappa", lambda: cohen_kappa(h, j))
    report.add("kappa_quadratic", lambda: cohen_kappa(h, j, weights="quadratic"))
    report.add(
        "alpha_ordinal",
        lambda: krippendorff_alpha(
            np.vstack([h, j]).astype(np.float64), level="ordinal", value_domain=labels
        ),
    )
    report.add("exact_agreement", lambda: exact_agreement(h, j))
    report.add("binary_kappa", lambda: binary_kappa(h, j, level))
    return {
        "pairs": {
            "both": len(common),
            "only_human": len(human.keys() - judged.keys()),
            "only_judge": len(judged.keys() - human.keys()),
            "queries_both": len({q for q, _ in common}),
        },
        "conventions": {
            "pairs": "labelled by both files",
            "kappa_labels": "union of the grades either side used",
            "kappa_quadratic_weights": "(grade_h - grade_j)^2",
            "alpha": "Krippendorff, ordinal, 2 raters, value domain = grades present",
            "binary_relevant": f"grade >= {level}",
            "relevance_level": level,
        },
        "measures": report.values,
        "undefined": report.undefined,
        "confusion": {
            "rows": "human",
            "columns": "judge",
            "labels": labels.tolist(),
            "matrix": confusion_matrix(h, j, labels).tolist(),
        },
    }


def ranking_report(
    human: Any,
    judged: Any,
    run_paths: Sequence[str],
    measure_name: str,
    level: int,
    overlap_only: bool,
) -> dict[str, Any]:
    """Each run's score under both qrels, and tau/rho between the two score lists."""
    from judge.io import Qrels, join_run_qrels, read_run
    from judge.metrics import evaluate, kendall_tau, parse_measure, spearman_rho

    if len(run_paths) < 2:
        raise InputError("needs at least two runs to compare system rankings", field="--runs")
    try:
        measure = parse_measure(measure_name)
    except ValueError as exc:
        raise InputError(str(exc), field="--measure") from exc
    if overlap_only:
        hp, jp = _pairs(human), _pairs(judged)
        common = hp.keys() & jp.keys()
        human = Qrels.from_mapping(_nest({k: hp[k] for k in common}))
        judged = Qrels.from_mapping(_nest({k: jp[k] for k in common}))
    runs: list[dict[str, Any]] = []
    for path in run_paths:
        run = read_run(path)
        scores: dict[str, float] = {}
        for side, qrels in (("human", human), ("judge", judged)):
            try:
                ev = evaluate([measure], join_run_qrels(qrels, run), run_id=run.run_id, relevance_level=level)
            except ValueError as exc:
                raise InputError(f"cannot score this run under the {side} qrels: {exc}", path=path) from exc
            scores[side] = float(ev.all[measure.trec_name])
        runs.append(
            {"path": str(path), "run_id": run.run_id, "human": scores["human"], "judge": scores["judge"]}
        )
    x = np.array([r["human"] for r in runs])
    y = np.array([r["judge"] for r in runs])
    report = _Report()
    report.add("kendall_tau_b", lambda: kendall_tau(x, y))
    report.add("spearman_rho", lambda: spearman_rho(x, y))
    return {
        "measure": measure.trec_name,
        "relevance_level": level,
        "qrels_scope": "pairs both files label" if overlap_only else "each qrels file as is",
        "runs": runs,
        "correlations": report.values,
        "undefined": report.undefined,
    }


def _nest(flat: Mapping[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (qid, doc), grade in flat.items():
        out.setdefault(qid, {})[doc] = grade
    return out


def run_agree(args: argparse.Namespace) -> int:
    from judge.io import read_qrels

    human = read_qrels(args.human)
    judged = read_qrels(args.judge)
    hp, jp = _pairs(human), _pairs(judged)
    if not hp.keys() & jp.keys():
        raise InputError(
            f"no query-document pair is labelled in both {args.human} and {args.judge} "
            f"({len(hp)} and {len(jp)} pairs)",
            path=args.judge,
        )
    out: dict[str, Any] = {"human": str(args.human), "judge": str(args.judge)}
    out.update(agreement_report(hp, jp, args.level))
    if args.runs:
        out["ranking"] = ranking_report(human, judged, args.runs, args.measure, args.level, args.overlap_only)
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(format_report(out), end="")
    return 0


_NAMES = (
    ("kappa", "Cohen's kappa (unweighted)"),
    ("kappa_quadratic", "Cohen's kappa (quadratic weights)"),
    ("alpha_ordinal", "Krippendorff's alpha (ordinal)"),
    ("exact_agreement", "exact agreement"),
    ("binary_kappa", "binary kappa (relevant = grade >= {level})"),
)


def _value(values: Mapping[str, float | None], undefined: Mapping[str, str], key: str) -> str:
    value = values.get(key)
    return f"undefined ({undefined.get(key, '')})" if value is None else f"{value:.4f}"


def format_report(out: Mapping[str, Any]) -> str:
    """The human-readable report (what ``judge agree`` prints without ``--json``)."""
    pairs = out["pairs"]
    level = out["conventions"]["relevance_level"]
    lines = [
        f"human qrels: {out['human']}",
        f"judge qrels: {out['judge']}",
        f"pairs labelled by both: {pairs['both']} ({pairs['queries_both']} queries); "
        f"only human: {pairs['only_human']}; only judge: {pairs['only_judge']}",
        "",
    ]
    width = max(len(label.format(level=level)) for _, label in _NAMES)
    for key, label in _NAMES:
        lines.append(
            f"{label.format(level=level):<{width}}  {_value(out['measures'], out['undefined'], key)}"
        )
    conf = out["confusion"]
    labels = [str(x) for x in conf["labels"]]
    cell = max([len(str(v)) for row in conf["matrix"] for v in row] + [len(x) for x in labels] + [5])
    lines += ["", "confusion matrix (rows: human grade, columns: judge grade)"]
    lines.append(" " * (cell + 2) + " ".join(f"{x:>{cell}}" for x in labels))
    for label, row in zip(labels, conf["matrix"], strict=True):
        lines.append(f"{label:>{cell}}  " + " ".join(f"{v:>{cell}}" for v in row))
    ranking = out.get("ranking")
    if ranking:
        lines += [
            "",
            f"system ranking by {ranking['measure']} (relevance level {ranking['relevance_level']}; "
            f"{ranking['qrels_scope']})",
        ]
        name_w = max(len(r["path"]) for r in ranking["runs"])
        lines.append(f"{'run':<{name_w}}  {'human':>8}  {'judge':>8}")
        for r in ranking["runs"]:
            lines.append(f"{r['path']:<{name_w}}  {r['human']:>8.4f}  {r['judge']:>8.4f}")
        corr, undef = ranking["correlations"], ranking["undefined"]
        lines.append(f"Kendall's tau-b  {_value(corr, undef, 'kendall_tau_b')}")
        lines.append(f"Spearman's rho   {_value(corr, undef, 'spearman_rho')}")
    return "\n".join(lines) + "\n"
