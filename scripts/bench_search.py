#!/usr/bin/env python
"""Search benchmark: the embedded engine on TREC DL 2019 and the runner's overhead.

1. Embedded engine on the 10,818 DL 2019 passages (``../shared/data/trec_dl19``; read by
   path, converted to ``{"id", "text"}`` in a temporary folder, never copied into the repo):
   indexing time and peak memory (tracemalloc's peak of Python allocations, and the
   process's peak RSS), search time for the 43 judged queries at depth 100 (Lucene BM25,
   k1 1.2, b 0.75), and nDCG@10 against NIST's qrels (judge's trec_eval-exact evaluation)
   over a k1 x b grid, every point from the same index (score matrices built from the
   stored tokens, never re-tokenised).
2. Runner overhead: queries/s of ``judge.search.arun_search`` (the engine behind a
   configuration, retries, rate limiter, one JSONL line per query written and flushed, the
   TREC run and metadata) against a plain ``httpx`` client loop sending the same requests
   with the same concurrency and keeping only the ids, side by side, alternating, against
   one local server: the ``http`` engine on an aiohttp server in a child process answering
   a canned 10-hit JSON body, and the ``opensearch`` engine on osmem-server with 2,000
   short documents indexed.

Run: ``nice -n 10 python scripts/bench_search.py`` (a few minutes on 2 cores; ``--quick`` for
a smaller look). Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from _dl19 import DL19, QRELS, dl19_corpus, dl19_judged_queries  # noqa: E402

from judge.io import join_run_qrels, read_qrels, read_run  # noqa: E402
from judge.metrics import evaluate, parse_measure_args  # noqa: E402
from judge.search import (  # noqa: E402
    Query,
    SearchOptions,
    arun_search,
    build_index,
    config_from_dict,
    run_search,
)


def ndcg10(qrels_path: Path, trec: Path) -> float:
    qrels = read_qrels(qrels_path)
    run = read_run(trec)
    ev = evaluate(parse_measure_args(["ndcg_cut_10"]), join_run_qrels(qrels, run), run_id=run.run_id)
    return float(next(iter(ev.all.values())))


def embedded(work: Path, quick: bool) -> None:
    docs = dl19_corpus(work / "dl19.jsonl")
    qrels_path = DL19 / QRELS
    queries = [Query(qid, text) for qid, text in dl19_judged_queries()]
    tracemalloc.start()
    started, cpu_started = time.perf_counter(), time.process_time()
    info = build_index(docs, work / "index", language="en")
    build_s, build_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("## Embedded engine on TREC DL 2019 passages\n")
    print(
        f"- documents {info.documents}, distinct tokens {info.vocabulary}, tokens/doc {info.avg_doc_tokens}"
    )
    print(
        f"- indexing: {build_s:.1f} s wall, {build_cpu:.1f} s CPU (tracemalloc slows it), Python peak "
        f"allocations {peak / 2**20:.0f} MiB, process peak RSS {rss_mb:.0f} MiB"
    )
    base = config_from_dict({"index": str(work / "index"), "depth": 100}, name="bm25")
    # Cold: a fresh process-level index handle is already open from build; time the 43 queries.
    times, cpu = [], []
    for i in range(3):
        started, cpu_started = time.perf_counter(), time.process_time()
        run = run_search(queries, base, work / f"base{i}.jsonl", options=SearchOptions(concurrency=1))
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    print(
        f"- search: {len(queries)} queries at depth 100 in {median(times):.2f} s "
        f"wall, {median(cpu):.2f} s CPU (median of 3 runs, files written; "
        f"{len(queries) / median(times):.0f} queries/s)"
    )
    print(f"- nDCG@10 at k1 1.2, b 0.75 (Lucene): {ndcg10(qrels_path, run.trec_path):.4f}\n")
    k1s = (0.6, 0.9, 1.2, 1.5) if not quick else (0.6, 1.2)
    bs = (0.3, 0.5, 0.75, 0.9) if not quick else (0.3, 0.75)
    print("nDCG@10 over the grid (rows k1, columns b):\n")
    print("| k1 \\ b | " + " | ".join(f"{b:g}" for b in bs) + " |")
    print("|---|" + "---|" * len(bs))
    grid_started = time.perf_counter()
    best = (0.0, 0.0, 0.0)
    worst = (1.0, 0.0, 0.0)
    for k1 in k1s:
        cells = []
        for b in bs:
            cfg = base.with_params({"k1": k1, "b": b})
            r = run_search(queries, cfg, work / f"grid-{k1}-{b}.jsonl", options=SearchOptions(concurrency=1))
            value = ndcg10(qrels_path, r.trec_path)
            best = max(best, (value, k1, b))
            worst = min(worst, (value, k1, b))
            cells.append(f"{value:.4f}")
        print(f"| {k1:g} | " + " | ".join(cells) + " |")
    print(
        f"\n- grid of {len(k1s) * len(bs)} points in {time.perf_counter() - grid_started:.1f} s "
        "(each point's score matrix built once from the stored tokens); "
        f"best {best[0]:.4f} (k1 {best[1]:g}, b {best[2]:g}), "
        f"worst {worst[0]:.4f} (k1 {worst[1]:g}, b {worst[2]:g})\n"
    )


# ---------------------------------------------------------------- runner overhead
SERVER = r"""
import json, sys
from aiohttp import web
hits = [{"_id": f"d{i}", "_score": 10.0 - i, "_source": {"text": f"passage {i} about things"}}
        for i in range(10)]
body = json.dumps({"took": 1, "hits": {"hits": hits}}).encode()
async def search(request):
    await request.read()
    return web.Response(body=body, content_type="application/json")
app = web.Application()
app.router.add_post("/passages/_search", search)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


async def plain_loop(url: str, queries: list[Query], concurrency: int, depth: int) -> float:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:

        async def one(q: Query) -> list[str]:
            async with sem:
                body = json.dumps({"size": depth, "query": {"match": {"text": q.query}}})
                r = await client.post(
                    url, content=body.encode(), headers={"Content-Type": "application/json"}
                )
                return [h["_id"] for h in r.json()["hits"]["hits"]]

        started = time.perf_counter()
        await asyncio.gather(*(one(q) for q in queries))
        return len(queries) / (time.perf_counter() - started)


async def runner(cfg: Any, queries: list[Query], concurrency: int, out: Path) -> float:
    for suffix in (".jsonl", ".trec", ".meta.json"):
        out.with_suffix(suffix).unlink(missing_ok=True)
    started = time.perf_counter()
    await arun_search(queries, cfg, out, options=SearchOptions(concurrency=concurrency))
    return len(queries) / (time.perf_counter() - started)


def compare(
    name: str, url: str, cfg: Any, queries: list[Query], work: Path, concurrency: int, rounds: int
) -> None:
    plain, ours = [], []
    asyncio.run(plain_loop(url, queries[:50], concurrency, cfg.depth))  # warm up
    for i in range(rounds):
        if i % 2 == 0:
            plain.append(asyncio.run(plain_loop(url, queries, concurrency, cfg.depth)))
            ours.append(asyncio.run(runner(cfg, queries, concurrency, work / f"{name}.jsonl")))
        else:
            ours.append(asyncio.run(runner(cfg, queries, concurrency, work / f"{name}.jsonl")))
            plain.append(asyncio.run(plain_loop(url, queries, concurrency, cfg.depth)))
    p, o = median(plain), median(ours)
    print(f"| {name} | {len(queries)} | {concurrency} | {p:.0f} | {o:.0f} | {o / p:.0%} |")


def overhead(work: Path, quick: bool, n: int | None, rounds: int | None) -> None:
    n = n or (500 if quick else 2000)
    rounds = rounds or (3 if quick else 5)
    queries = [Query(f"q{i}", f"query number {i} about things") for i in range(n)]
    print("## Runner overhead (queries/s, median of alternating rounds)\n")
    print("| engine | queries | concurrency | plain httpx loop | judge.search runner | ratio |")
    print("|---|---|---|---|---|---|")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}/passages/_search"
        cfg = config_from_dict(
            {
                "engine": "http",
                "url": url,
                "method": "POST",
                "body": '{"size": {{depth}}, "query": {"match": {"text": {{query|json}}}}}',
                "response": {"ids": "hits.hits[*]._id", "text": "hits.hits[*]._source.text"},
            },
            name="http",
        )
        compare("http (aiohttp server)", url, cfg, queries, work, 8, rounds)
    finally:
        proc.terminate()
        proc.wait(10)
    from osmem_server import OsmemServer, _request

    with OsmemServer.start(japanese=False, addr="127.0.0.1:0") as server, server.clone() as clone:
        lines = []
        for i in range(2000):
            lines.append(json.dumps({"index": {"_index": "passages", "_id": f"d{i}"}}))
            lines.append(json.dumps({"text": f"passage number {i} about things and stuff {i % 37}"}))
        import urllib.request

        req = urllib.request.Request(
            f"{clone.url}/_bulk?refresh=true",
            data=("\n".join(lines) + "\n").encode(),
            headers={"Content-Type": "application/x-ndjson"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=60).read()
        assert _request("GET", f"{clone.url}/passages/_count")["count"] == 2000
        cfg = config_from_dict(
            {"engine": "opensearch", "url": clone.url, "index": "passages"}, name="opensearch"
        )
        compare("opensearch (osmem-server)", f"{clone.url}/passages/_search", cfg, queries, work, 8, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-embedded", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--queries", type=int, default=None, help="queries per overhead round (default 2000)")
    parser.add_argument("--rounds", type=int, default=None, help="overhead rounds per side (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        work = Path(tmp)
        if not args.skip_embedded:
            if not (DL19 / "dl2019_document.jsonl").is_file():
                print(f"skipping the embedded engine: {DL19} not found")
            else:
                embedded(work, args.quick)
        if not args.skip_overhead:
            overhead(work, args.quick, args.queries, args.rounds)


if __name__ == "__main__":
    main()
