"""Benchmark: the label routes' cost with a big label store (not a test; numbers for docs).

Runs ``judge serve``'s app in process (FastAPI's test client, no network) on a fake judge,
makes one scoring job of ``--queries`` x 4 passages (10,000 passages by default), then
measures, first on the empty label store and again after ``--labels`` (1,000,000 by default)
labels were written into it (other queries of the same collection):

* one label ``POST /v1/jobs/{id}/labels`` (p50 / p99 over ``--posts`` labels),
* ``GET /v1/jobs/{id}`` right after a label (the job's figures as the POST left them) and
  uncached (the job's figures recomputed from its records and its labels),
* one page of ``GET /v1/labels?history=true`` (1000 labels) deep in the store, and the first
  page of ``GET /v1/labels``,
* the process's resident memory (RSS) before and after the measurements.

The two phases side by side give the ratio: how much the cost grows with the store.

    python scripts/bench_labels.py                 # 1,000,000 labels, 10,000 passages
    python scripts/bench_labels.py --labels 100000 --queries 500   # quicker
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MARK = "[相关]"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def make_app(tmp: Path) -> Any:
    from judge.backends import RuleBackend, ensure_resilient
    from judge.server import KeyRing, Runtime, ServerConfig, create_app

    runtime = Runtime(
        backend=ensure_resilient(RuleBackend.keyword(MARK), concurrency=8, max_retries=0),
        store=None,
        jobs_dir=tmp / "jobs",
        concurrency=8,
    )
    defaults = {
        "mode": "binary",
        "language": "zh",
        "template": None,
        "probability": None,
        "p_yes_threshold": None,
        "explain": None,
        "k": [5, 10],
        "listwise": False,
        "listwise_template": None,
        "max_passage_chars": 8000,
        "map": {},
    }
    config = ServerConfig(
        db_path=tmp / "server.sqlite",
        jobs_dir=tmp / "jobs",
        runtime=runtime,
        defaults=defaults,
        keys=KeyRing([]),
        max_body_bytes=256 * 1024 * 1024,
        max_passages=10_000,
    )
    return create_app(config)


def job_records(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"q{i}",
            "query": f"第{i}个问题",
            "retrieval_context": [
                {"id": f"d{j}", "text": f"第{i}个问题的第{j}段{MARK if (i + j) % 3 == 0 else ''}"}
                for j in range(4)
            ],
        }
        for i in range(n)
    ]


def fill_store(path: Path, n: int) -> float:
    """``n`` labels on other queries of the collection, written in transactions of 50,000."""
    from judge.store import Label, LabelStore

    t0 = time.perf_counter()
    with LabelStore(path) as store:
        batch = 50_000
        for start in range(0, n, batch):
            store.put_many(
                Label(f"other{i // 10}", f"d{i % 10}", i % 2, f"r{i % 3}")
                for i in range(start, min(n, start + batch))
            )
    return time.perf_counter() - t0


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def measure(client: Any, job_id: str, queries: int, posts: int, offset: int) -> dict[str, Any]:
    post_ms: list[float] = []
    view_ms: list[float] = []
    for n in range(posts):
        i = (offset + n * 7) % queries
        body = {"query_id": f"q{i}", "docno": f"d{n % 4}", "label": n % 2}

        def post(body: dict[str, Any] = body) -> None:
            r = client.post(f"/v1/jobs/{job_id}/labels", json=body)
            assert r.status_code == 201, r.text

        post_ms.append(timed(post))
        view_ms.append(timed(lambda: client.get(f"/v1/jobs/{job_id}").raise_for_status()))
    review = client.app.state.judge.review

    def uncached() -> None:
        review._cache.clear()
        client.get(f"/v1/jobs/{job_id}").raise_for_status()

    uncached_ms = [timed(uncached) for _ in range(3)]
    first = client.get("/v1/labels?history=true&limit=1000").json()
    cursor = first["next"]
    history_ms: list[float] = []
    for _ in range(5):
        if cursor is None:
            break
        t0 = time.perf_counter()
        page = client.get(f"/v1/labels?history=true&limit=1000&cursor={cursor}").json()
        history_ms.append((time.perf_counter() - t0) * 1000)
        cursor = page["next"]
    latest_ms = [timed(lambda: client.get("/v1/labels?limit=1000").raise_for_status()) for _ in range(5)]
    return {
        "label_post_ms": {"p50": statistics.median(post_ms), "p99": p99(post_ms), "n": len(post_ms)},
        "job_view_after_label_ms": {"p50": statistics.median(view_ms), "p99": p99(view_ms)},
        "job_view_uncached_ms": {"median": statistics.median(uncached_ms)},
        "history_page_ms": {"median": statistics.median(history_ms) if history_ms else None},
        "latest_page_ms": {"median": statistics.median(latest_ms)},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=2500, help="queries of the job (4 passages each)")
    p.add_argument("--posts", type=int, default=200)
    args = p.parse_args(argv)
    from fastapi.testclient import TestClient

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with TestClient(make_app(tmp)) as client:
            body = {"records": job_records(args.queries), "options": {"k": [5, 10]}}
            t0 = time.perf_counter()
            r = client.post("/v1/jobs", json=body)
            assert r.status_code == 202, r.text
            job_id = r.json()["id"]
            deadline = time.monotonic() + 1800
            while client.get(f"/v1/jobs/{job_id}").json()["status"] not in ("done", "failed", "cancelled"):
                if time.monotonic() > deadline:
                    raise SystemExit("the job did not finish in 30 minutes")
                time.sleep(0.2)
            job_s = time.perf_counter() - t0
            rss0 = rss_mb()
            empty = measure(client, job_id, args.queries, args.posts, 0)
            rss1 = rss_mb()
            fill_s = fill_store(tmp / "labels.sqlite", args.labels)
            rss2 = rss_mb()
            full = measure(client, job_id, args.queries, args.posts, 1)
            rss3 = rss_mb()
            size_mb = sum(f.stat().st_size for f in tmp.glob("labels.sqlite*")) / 1e6
    report = {
        "passages": args.queries * 4,
        "stored_labels": args.labels,
        "store_mb": round(size_mb, 1),
        "job_s": round(job_s, 1),
        "fill_s": round(fill_s, 1),
        "empty_store": empty,
        "full_store": full,
        "ratio_full_over_empty": {
            "label_post_p99": round(full["label_post_ms"]["p99"] / empty["label_post_ms"]["p99"], 2),
            "job_view_p99": round(
                full["job_view_after_label_ms"]["p99"] / empty["job_view_after_label_ms"]["p99"], 2
            ),
        },
        "rss_mb": {
            "before_empty": round(rss0, 1),
            "after_empty": round(rss1, 1),
            "after_fill": round(rss2, 1),
            "after_full": round(rss3, 1),
        },
    }

    def rounded(x: Any) -> Any:
        if isinstance(x, float):
            return round(x, 1)
        if isinstance(x, dict):
            return {k: rounded(v) for k, v in x.items()}
        return x

    json.dump(rounded(report), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
