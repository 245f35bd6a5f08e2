"""Judgments in and out of Quepid and OpenSearch's Search Relevance Workbench (SRW):
``judge labels import/export`` in the CSV, SRW and RRE formats (the label store's side:
:mod:`judge.store._label_exchange`) and ``judge export REPORT_DIR``, a comparison's or an
experiment's judged pool as a judgment list for those tools."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from judge.io import EXCHANGE_SCALES, InputError

EXPORT_FORMATS = ("trec", "csv", "srw", "rre")
SCALE_CHOICES = ("binary", "graded", *(s for s in EXCHANGE_SCALES if s != "binary"))


def read_query_texts(path: str | None, *, field: str = "--queries") -> dict[str, str] | None:
    """``{query id: text}`` of a query set (JSONL or TSV, :func:`judge.search.read_queries`),
    None without one."""
    if path is None:
        return None
    from judge.search import read_queries

    if not Path(path).is_file():
        raise InputError("no such file", path=path, field=field)
    return {q.id: q.query for q in read_queries(path)}


def run_query_texts(args: argparse.Namespace) -> dict[str, str]:
    """The run's own queries, id -> text, as its labels are looked up: a comparison's by
    TREC qid (the systems' datasets), ``judge score``'s and ``stability``'s by the record's
    id (its dataset). Bad lines are skipped here: the run itself reports them."""
    from judge.io import iter_dataset, parse_field_map

    field_map = parse_field_map(getattr(args, "map", None) or [])
    if getattr(args, "systems", None):
        from judge.systems import SystemsOptions, parse_system_args, systems_query_texts

        paths = parse_system_args(args.systems)
        return systems_query_texts(paths, SystemsOptions(field_map=field_map), always=True) or {}
    path = getattr(args, "input", None) or getattr(args, "dataset", None)
    if not path or not Path(path).is_file():
        raise InputError(
            "a CSV/SRW/RRE --labels file needs the run's dataset for its query texts", field="--labels"
        )
    texts: dict[str, str] = {}
    for item in iter_dataset(path, field_map=field_map):
        if not isinstance(item, InputError):
            texts.setdefault(item.id, item.query)
    return texts


def _write_out(output: str, text: str) -> None:
    if output == "-":
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8", newline="")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", path=output, field="-o") from None


# ---------------------------------------------------------------------------- judge labels
def import_labels(args: argparse.Namespace) -> int | None:
    """``judge labels import`` of a CSV, SRW or RRE file, or of TREC qrels on an exchange
    scale; None: the file is for the label files' reader (TREC qrels, JSONL)."""
    from judge.store import LabelStore, label_file_format, read_exchange_labels

    fmt = label_file_format(args.file)
    exchange_scale = args.scale not in (None, "binary", "graded")
    if fmt == "jsonl" or (fmt == "trec" and not exchange_scale):
        if args.queries is not None and fmt == "trec":
            raise InputError(
                "TREC qrels name queries by id: --queries is for CSV, SRW and RRE", field="--queries"
            )
        return None
    read = read_exchange_labels(
        args.file,
        queries=read_query_texts(args.queries),
        reviewer=args.reviewer,
        scale=args.scale,
        collection=args.collection,
        fmt=fmt,
    )
    with LabelStore(args.store) as store:
        stored = store.put_many(read.labels)
    shown = {"imported": len(stored), "file": args.file, "collection": args.collection, "format": fmt}
    print(json.dumps(shown | {"scale": read.scale}, ensure_ascii=False))
    return 0


def export_labels(args: argparse.Namespace) -> int:
    """``judge labels export --format trec|csv|srw|rre`` (trec: the qrels export)."""
    from judge.metrics import ScaleError
    from judge.store import LabelStore, labels_to_exchange

    with LabelStore(args.store) as store:
        lset = store.label_set(collection=args.collection)
    try:
        n, text = labels_to_exchange(
            lset,
            None,
            args.format,
            queries=read_query_texts(args.queries),
            scale=args.scale,
            level=args.level,
            name=f"judge labels {args.collection}",
        )
    except ScaleError as exc:
        raise InputError(exc.message, field="--level") from None
    _write_out(args.output, text)
    print(f"judge labels: exported {n} label(s) as {args.format}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------- judge export
def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export",
        help="a comparison's or experiment's judged pool as a judgment list (TREC, CSV, SRW, RRE)",
        description="Write the judged pool of a compare-systems or experiment report folder (one row "
        "per line of its pool.qrels, query texts from its query set or systems) as TREC qrels, the "
        "query,docid,rating CSV of Quepid and SRW, SRW's judgment list JSON or RRE ratings, to load "
        "judge's verdicts into Quepid or SRW as an LLM judgment list. SRW and RRE files say which "
        "ratings were the judge's and which were people's; CSV and TREC have no room for it.",
    )
    p.add_argument("report_dir", metavar="REPORT_DIR", help="a compare-systems or experiment output folder")
    p.add_argument("--format", choices=EXPORT_FORMATS, required=True)
    p.add_argument("-o", "--output", required=True, help="output file ('-': stdout)")
    p.add_argument(
        "--scale",
        choices=SCALE_CHOICES,
        default=None,
        metavar="SCALE",
        help="write the pool's grades on this scale, one of " + ", ".join(SCALE_CHOICES) + " (the "
        "stated inverse mapping; default: the "
        "pool's own, binary 0/1 or graded 0-3)",
    )
    p.add_argument(
        "--queries",
        default=None,
        metavar="QUERY_SET",
        help="query set for the texts (default: the experiment's, or the systems' datasets)",
    )
    p.set_defaults(func=run_export_pool)


def run_export_pool(args: argparse.Namespace) -> int:
    from judge.systems import pool_judgment_list

    listing = pool_judgment_list(
        Path(args.report_dir), args.format, scale=args.scale, queries=read_query_texts(args.queries)
    )
    _write_out(args.output, listing.text)
    print(
        f"judge export: {listing.pairs} pooled pair(s) as {args.format} ({listing.people} by people)",
        file=sys.stderr,
    )
    return 0
