"""``judge labels`` (export, import, list, conflicts) and ``judge calibrate``, plus the
``--labels FILE|store`` flags that ``score``, ``stability`` and ``compare-systems`` share.

Labels live in the label store (``$JUDGE_HOME/labels.sqlite``, or ``--labels-store PATH``);
``--labels store`` reads it, ``--labels FILE`` reads a TREC qrels file or a JSONL labels
export instead (see :mod:`judge.store._label_model`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from judge.cli._exchange import SCALE_CHOICES
from judge.io import InputError

STORE = "store"


# ---------------------------------------------------------------------------- shared flags
def add_label_flags(p: argparse.ArgumentParser, *, level_help: str | None = None) -> None:
    """``--labels FILE|store`` and the flags that qualify it."""
    p.add_argument(
        "--labels",
        default=None,
        metavar="FILE|store",
        help="human labels that override the judge's verdicts: a TREC qrels file, a JSONL labels "
        "export, or 'store' (the label store)",
    )
    p.add_argument(
        "--labels-store", default=None, metavar="PATH", help="label store (default $JUDGE_HOME/labels.sqlite)"
    )
    p.add_argument(
        "--labels-collection", default="default", metavar="NAME", help="label collection (default 'default')"
    )
    p.add_argument(
        "--labels-reviewer", default="qrels", metavar="NAME", help="reviewer name for a qrels --labels file"
    )
    p.add_argument(
        "--labels-scale",
        choices=SCALE_CHOICES,
        default=None,
        metavar="SCALE",
        help="the ratings' scale of a CSV/SRW/RRE --labels file: quepid-0-3, quepid-1-10, srw-0-1, "
        "graded-0-3 or binary (default: detected where unambiguous)",
    )
    p.add_argument(
        "--labels-level",
        type=int,
        default=None,
        metavar="L",
        help=level_help or "graded labels on a binary judge: grade >= L counts as relevant",
    )
    p.add_argument(
        "--labels-yes-grade",
        type=int,
        default=None,
        metavar="G",
        help="binary labels on a graded judge: a 'yes' stands for grade G",
    )


def label_set_of(args: argparse.Namespace) -> Any:
    """The :class:`judge.store.LabelSet` the flags name, or None without ``--labels``."""
    from judge.store import LabelSet, LabelStore, read_label_file

    if not getattr(args, "labels", None):
        return None
    if args.labels == STORE:
        with LabelStore(args.labels_store) as store:
            return store.label_set(collection=args.labels_collection)
    from judge.store import label_file_format, read_exchange_labels

    fmt = label_file_format(args.labels)
    if fmt in ("csv", "srw", "rre"):  # query texts: the run's own queries
        from judge.cli._exchange import run_query_texts

        read = read_exchange_labels(
            args.labels,
            queries=run_query_texts(args),
            reviewer=args.labels_reviewer,
            scale=getattr(args, "labels_scale", None),
            collection=args.labels_collection,
            fmt=fmt,
            queries_field="the run's queries",
            scale_field="--labels-scale",
        )
        return LabelSet(read.labels, source=f"labels file {args.labels} ({fmt}, {read.scale})")
    labels = read_label_file(args.labels, reviewer=args.labels_reviewer, collection=args.labels_collection)
    return LabelSet(labels, source=f"labels file {args.labels}")


def calibrated_threshold(name: str | None, config: Any, store_path: str | None) -> Any:
    """``config`` with the P(yes) threshold of the named calibration
    (:func:`judge.store.calibrated_config`); errors name ``--calibration``."""
    from judge.store import calibrated_config

    return calibrated_config(config, name, path=store_path, field="--calibration")


# ---------------------------------------------------------------------------- judge labels
def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "labels",
        help="human labels: export, import, list, conflicts",
        description="Manage the label store of human relevance labels ($JUDGE_HOME/labels.sqlite).",
    )
    sub = p.add_subparsers(dest="labels_command", metavar="ACTION")
    sub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--store", default=None, metavar="PATH", help="label store (default $JUDGE_HOME/labels.sqlite)"
        )
        q.add_argument("--collection", default="default", help="label collection (default 'default')")

    e = sub.add_parser(
        "export", help="write the labels as TREC qrels, JSONL, or a Quepid/SRW/RRE judgment list"
    )
    common(e)
    e.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    e.add_argument(
        "--format",
        choices=("qrels", "trec", "jsonl", "csv", "srw", "rre"),
        default="qrels",
        help="qrels/trec (resolved), jsonl (all), or the query,docid,rating CSV of Quepid and SRW, "
        "SRW's judgment list JSON, RRE ratings JSON (resolved; query texts from the labels or --queries)",
    )
    e.add_argument(
        "--scale",
        choices=SCALE_CHOICES,
        default=None,
        metavar="SCALE",
        help="put labels on this scale: binary or graded (csv/srw/rre/trec: also quepid-0-3, "
        "quepid-1-10, srw-0-1, by the stated mappings of docs/guides/judgments-exchange.md)",
    )
    e.add_argument(
        "--queries",
        default=None,
        metavar="QUERY_SET",
        help="csv/srw/rre: query set giving each query id its text",
    )
    e.add_argument("--level", type=int, default=None, help="qrels --scale binary: grade >= L is relevant")
    e.add_argument("--history", action="store_true", help="jsonl: every change, not only the latest labels")
    e.add_argument(
        "--sample",
        action="store_true",
        help="the sample file of one sampled run: every pair the sample mode drew over it, as 'qid 0 "
        "docno label inclusion' (the --sample-labels file; the latest label per pair, -1 for a drawn "
        "pair nobody labelled; inclusion: the union over the run's draws)",
    )
    e.add_argument(
        "--job",
        default=None,
        metavar="OUTPUT.jsonl",
        help="--sample: the output 'judge labels sample' drew from (needed when several were sampled)",
    )
    e.set_defaults(func=run_export)

    i = sub.add_parser(
        "import", help="read labels from TREC qrels, a JSONL export, or a Quepid/SRW/RRE judgment list"
    )
    common(i)
    i.add_argument(
        "file",
        help="TREC qrels, JSONL labels export, query,docid,rating CSV, SRW judgment list or RRE "
        "ratings (detected from the content)",
    )
    i.add_argument(
        "--queries",
        default=None,
        metavar="QUERY_SET",
        help="CSV/SRW/RRE: the query set whose ids the query texts stand for",
    )
    i.add_argument(
        "--reviewer",
        default=None,
        help="reviewer name (required for qrels; for JSONL, the reviewer of lines that name none)",
    )
    i.add_argument(
        "--scale",
        choices=SCALE_CHOICES,
        default=None,
        metavar="SCALE",
        help="the ratings' scale: binary, graded, graded-0-3, quepid-0-3, quepid-1-10 or srw-0-1 "
        "(default: inferred where unambiguous; CSV/SRW/RRE ratings 0/1 "
        "only or 1-3 only need it)",
    )
    i.set_defaults(func=run_import)

    ls = sub.add_parser("list", help="list each reviewer's latest labels")
    common(ls)
    ls.add_argument("--qid", default=None)
    ls.add_argument("--reviewer", default=None)
    ls.set_defaults(func=run_list)

    c = sub.add_parser("conflicts", help="list passages whose reviewers disagree")
    common(c)
    c.set_defaults(func=run_conflicts)

    sm = sub.add_parser(
        "sample",
        help="review queue, sample mode: draw a job's pairs with known inclusion probabilities",
        description="Draw about N judged pairs of a judge score output for review, each independently "
        "with a known probability (uniform, or proportional to the judge's uncertainty), and record "
        "each draw with its probability in the label store; 'judge labels export --sample' then writes "
        "the drawn pairs' labels for --sample-labels (weighted by 1/probability). Drawing again over "
        "the same output draws independently and records each pair's union probability "
        "1 - prod(1 - p_i). Prints one JSON object per pair this draw took.",
    )
    common(sm)
    sm.add_argument("output", metavar="OUTPUT.jsonl", help="a judge score output")
    sm.add_argument("--n", type=float, required=True, help="expected number of pairs to draw")
    sm.add_argument("--design", choices=("uniform", "uncertainty"), default="uniform")
    sm.add_argument("--seed", type=int, default=0)
    sm.set_defaults(func=run_sample)

    cal = subparsers.add_parser(
        "calibrate",
        help="refit a template's P(yes) threshold on human labels (named calibration)",
        description=(
            "Refit the P(yes) threshold of a template on labelled items with k-fold "
            "cross-validation (stratified, seeded folds): report Cohen's kappa at the current and "
            "at the refit threshold on each held-out fold, their mean gain and its noise band "
            "(+- 2 corrected standard errors over folds). Only when the gain is above the band's "
            "zero is the result stored as a named calibration in the label store (select it with "
            "--calibration NAME); otherwise it says the refit does not help and stores nothing "
            "unless --force. The shipped default (prompts/calibration.toml) is never changed."
        ),
    )
    cal.add_argument("--labels", required=True, metavar="FILE|store", help="qrels, JSONL export or 'store'")
    cal.add_argument("--labels-store", default=None, metavar="PATH")
    cal.add_argument("--labels-collection", default="default", metavar="NAME")
    cal.add_argument("--labels-reviewer", default="qrels", metavar="NAME")
    cal.add_argument(
        "--labels-level", type=int, default=None, metavar="L", help="graded labels: grade >= L is relevant"
    )
    cal.add_argument("--template", required=True, help="template id the threshold is for")
    cal.add_argument(
        "--judged",
        action="append",
        default=[],
        metavar="OUTPUT.jsonl",
        help="judge score output(s) holding the P(yes) of the labelled passages (else the P(yes) "
        "the store's labels recorded)",
    )
    cal.add_argument("--name", default=None, help="calibration name (default: TEMPLATE.reviewed)")
    cal.add_argument("--folds", type=int, default=5)
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument("--dry-run", action="store_true", help="report only; store nothing")
    cal.add_argument(
        "--force",
        action="store_true",
        help="store the calibration even when it is not better than the current threshold beyond noise",
    )
    cal.set_defaults(func=run_calibrate)


def _out(path: str) -> Any:
    return sys.stdout if path == "-" else Path(path).open("w", encoding="utf-8")


def run_export(args: argparse.Namespace) -> int:
    import tempfile

    from judge.metrics import ScaleError
    from judge.store import LabelStore, labels_to_jsonl, labels_to_qrels

    if args.sample:
        return _export_sample(args)
    if args.format in ("trec", "csv", "srw", "rre") or args.scale not in (None, "binary", "graded"):
        from judge.cli._exchange import export_labels

        if args.format in ("qrels", "jsonl"):
            raise InputError(f"--scale {args.scale} is for --format csv, srw, rre or trec", field="--scale")
        return export_labels(args)
    with LabelStore(args.store) as store:
        history = store.history(collection=args.collection) if args.history else []
        latest = store.latest(collection=args.collection)
        lset = store.label_set(collection=args.collection)

    def writer(path: Path | str) -> int:
        if args.format == "jsonl":
            return labels_to_jsonl(history if args.history else latest, path)
        try:
            return labels_to_qrels(lset, path, scale=args.scale, level=args.level)
        except ScaleError as exc:
            raise InputError(exc.message, field="--level") from None

    if args.output != "-":
        try:
            n = writer(args.output)
        except OSError as exc:  # a folder, a read-only place: bad usage, not a traceback
            raise InputError(f"cannot write: {exc.strerror}", path=args.output, field="-o") from None
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "labels"
            n = writer(path)
            sys.stdout.write(path.read_text(encoding="utf-8"))
    print(f"judge labels: exported {n} label(s)", file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    from judge.cli._exchange import import_labels
    from judge.store import LabelStore, read_label_file

    done = import_labels(args)
    if done is not None:
        return done
    if args.scale not in (None, "binary", "graded"):
        raise InputError(f"--scale {args.scale} is not a scale of a JSONL labels export", field="--scale")
    labels = read_label_file(args.file, reviewer=args.reviewer, scale=args.scale, collection=args.collection)
    with LabelStore(args.store) as store:
        stored = store.put_many(labels)
    print(json.dumps({"imported": len(stored), "file": args.file, "collection": args.collection}))
    return 0


def run_list(args: argparse.Namespace) -> int:
    from judge.store import LabelStore

    with LabelStore(args.store) as store:
        for lab in store.latest(collection=args.collection, qid=args.qid, reviewer=args.reviewer):
            print(json.dumps(lab.as_dict(), ensure_ascii=False, sort_keys=True))
    return 0


def run_conflicts(args: argparse.Namespace) -> int:
    from judge.store import LabelStore

    with LabelStore(args.store) as store:
        conflicts = store.conflicts(collection=args.collection)
    for c in conflicts:
        print(
            json.dumps(
                {"qid": c.qid, "docno": c.docno, "labels": dict(c.labels), "scales": dict(c.scales)},
                ensure_ascii=False,
            )
        )
    print(f"judge labels: {len(conflicts)} conflict(s)", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------- calibrate
def _judged_p_yes(paths: Sequence[str]) -> dict[tuple[str, str], tuple[float, str]]:
    """(qid, docno) -> (the judge's own P(yes), template id) from ``judge score`` outputs."""
    from judge.judging import PassageVerdict, judge_verdict_of
    from judge.store import recover_output

    out: dict[tuple[str, str], tuple[float, str]] = {}
    for path in paths:
        if not Path(path).is_file():
            raise InputError("no such file", path=path, field="--judged")
        for r in recover_output(path):
            for v, docno in zip(r["verdicts"], r["docnos"], strict=True):
                base = judge_verdict_of(PassageVerdict.model_validate(v, strict=False))
                if base.p_yes is not None:
                    out.setdefault((str(r["id"]), str(docno)), (float(base.p_yes), base.template_id))
    return out


def _check_calibrate_flags(args: argparse.Namespace) -> None:
    """``--folds``, ``--seed`` and ``--name`` as ``POST /v1/jobs/{id}/calibrate`` bounds them,
    before any label is read (exit 2 naming the flag)."""
    from judge.store import MAX_SQLITE_INT

    if not 2 <= args.folds <= 20:
        raise InputError(f"must be in 2..20, got {args.folds}", field="--folds")
    if not 0 <= args.seed <= MAX_SQLITE_INT:
        raise InputError(f"must be in 0..{MAX_SQLITE_INT}, got {args.seed}", field="--seed")
    if args.name is not None and not re.fullmatch(r"[\w.\-]{1,100}", args.name):
        raise InputError("1 to 100 letters, digits, '.', '_' or '-'", field="--name")


def run_calibrate(args: argparse.Namespace) -> int:
    from judge.judging import TemplateError, load_template
    from judge.metrics import CalibrationError, ScaleError, calibrate_threshold, resolve_mapping
    from judge.store import Calibration, LabelStore

    _check_calibrate_flags(args)
    try:
        template = load_template(args.template)
    except TemplateError as exc:
        raise InputError(str(exc), field="--template") from None
    labels = label_set_of(args)
    judged = _judged_p_yes(args.judged)
    p_yes: list[float] = []
    truth: list[int] = []
    for item in labels:
        lab = item.label
        found = judged.get(lab.key)
        if found is not None:
            p, tid = found
        elif lab.judge_p_yes is not None:
            p, tid = lab.judge_p_yes, lab.template_id or ""
        else:
            continue
        if tid != template.id:
            continue
        try:
            mapping = resolve_mapping(
                lab.scale,
                "binary",
                level=args.labels_level,
                source_name="graded labels",
                target_name="a P(yes) threshold",
                level_field="--labels-level",
            )
        except ScaleError as exc:
            raise InputError(exc.message, field="--labels-level") from None
        p_yes.append(p)
        truth.append(mapping.apply(item.value))
    current = template.decision_threshold
    try:
        result = calibrate_threshold(
            p_yes, truth, current_threshold=current, folds=args.folds, seed=args.seed
        )
    except CalibrationError as exc:
        raise InputError(f"{exc.message} (template {template.id})", field="--labels") from None
    name = args.name or f"{template.id}.reviewed"
    report = {"name": name, "template_id": template.id, "template_hash": template.hash, **result.as_dict()}
    store_it = not args.dry_run and (result.helps or args.force)
    if store_it:
        with LabelStore(args.labels_store) as store:
            store.save_calibration(
                Calibration(
                    name=name,
                    template_id=template.id,
                    threshold=result.threshold,
                    template_hash=template.hash,
                    previous_threshold=current,
                    report=result.as_dict(),
                )
            )
    report["stored"] = store_it
    print(json.dumps(report, ensure_ascii=False, indent=2))
    if store_it:
        tail = f"; stored as {name!r} (select with --calibration {name})"
        if not result.helps:
            tail += " although it does not help (--force)"
    elif args.dry_run:
        tail = "; not stored (--dry-run)"
    else:
        tail = "; not stored: keep the current threshold (--force stores it anyway)"
    print(
        f"judge calibrate: {template.id} threshold {current:g} -> {result.threshold:g} "
        f"({result.n} labels, {result.folds} stratified folds, seed {result.seed}); {result.verdict}{tail}",
        file=sys.stderr,
    )
    return 0


def sample_job_key(output: str) -> str:
    """The job a CLI draw is recorded under: the output's resolved path (one key however the
    path is written)."""
    return str(Path(output).resolve())


def run_sample(args: argparse.Namespace) -> int:
    from judge.batch import draw_sample
    from judge.store import LabelStore, recover_output

    path = Path(args.output)
    if not path.exists():
        raise InputError("no such file", path=str(path))
    records = recover_output(path)
    job = sample_job_key(args.output)
    with LabelStore(args.store) as store:
        draw = draw_sample(
            store,
            job,
            records,
            expected=args.n,
            design=args.design,
            seed=args.seed,
            collection=args.collection,
        )
        frame, number, taken, added = draw.frame, draw.number, draw.taken, draw.added
        union = {(q, d): p for q, d, p, _ in store.sample_draws(collection=args.collection, job=job)}
    for i in frame:
        if not i.drawn:
            continue
        shown = {
            "qid": i.qid,
            "docno": i.docno,
            "inclusion": round(union[(i.qid, i.docno)], 6),
            "query": i.query,
        }
        print(json.dumps(shown | {"verdict": i.verdict, "p_yes": i.p_yes}, ensure_ascii=False))
    print(
        f"judge labels sample: draw {number + 1} over {args.output} took {taken} pair(s) ({added} new), "
        f"design {args.design}; {len(union)} drawn in all"
        + (", each at its union probability over the draws" if number else ""),
        file=sys.stderr,
    )
    return 0


def _export_sample(args: argparse.Namespace) -> int:
    """``export --sample``: every pair the sample mode drew over one output, with its latest
    label (-1: none) and union inclusion probability; the unlabelled ones named on stderr."""
    from judge.store import LabelStore, sample_job, sample_label_lines

    with LabelStore(args.store) as store:
        given = None if args.job is None else sample_job_key(args.job)
        if given is not None and given not in store.sample_jobs(collection=args.collection):
            given = args.job  # a service job id, or a store written elsewhere: the key as given
        job = sample_job(store, given, collection=args.collection, field="--job")
        export = sample_label_lines(store, job=job, collection=args.collection)
    out = _out(args.output)
    try:
        out.writelines(export.lines)
    finally:
        if out is not sys.stdout:
            out.close()
    print(
        f"judge labels: exported the sample of {job}: {export.labelled} labelled, "
        f"{len(export.unlabelled)} drawn pair(s) left unlabelled",
        file=sys.stderr,
    )
    for q, d in export.unlabelled:
        print(f"  unlabelled: {q}\t{d}", file=sys.stderr)
    if export.unlabelled:
        print(
            "judge labels: --sample-labels gives no interval while drawn pairs are unlabelled: label them "
            "and export again, or pass --allow-unlabelled for a conservative interval that holds whatever "
            "labels they have",
            file=sys.stderr,
        )
    return 0
