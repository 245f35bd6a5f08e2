#!/usr/bin/env python
"""P(yes) of every passage of a dataset with the embedded judge, and the difference between
two such probes (two llama.cpp builds, or two machines).

    python scripts/probe_p_yes.py probe -o out/native.json            # datasets/sample.jsonl
    PYTHONPATH=/path/to/other/build python scripts/probe_p_yes.py probe -o out/portable.json
    python scripts/probe_p_yes.py compare out/native.json out/portable.json

``probe`` judges every passage in probability mode (no reason: only the forward pass whose
P(yes) decides the verdict) with the default template and calibrated threshold, and writes
P(yes), the verdicts, hard mAP, expected mAP and the backend fingerprint. ``compare``
prints the largest |delta P(yes)|, the flipped verdicts, delta hard mAP and delta expected
mAP (docs/embedded_determinism.md quotes its output).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


async def probe(dataset: Path, output: Path, threads: int | None) -> None:
    import numpy as np

    from judge.backends._local import LocalBackend
    from judge.judging import JudgeConfig, Passage
    from judge.judging._config import resolve_config
    from judge.judging._core import judge_passage
    from judge.metrics import average_precision
    from judge.metrics._expected_ranking import expected_average_precision

    backend = LocalBackend(n_threads=threads)
    backend.load()
    config = resolve_config(JudgeConfig(probability=True, explain=False), backend)
    rows = [json.loads(line) for line in dataset.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries: list[dict[str, Any]] = []
    started = time.perf_counter()
    for row in rows:
        p_yes: list[float] = []
        for i, passage in enumerate(row["retrieval_context"]):
            v = await judge_passage(backend, row["query"], Passage(passage["text"], passage["id"]), i, config)
            p_yes.append(float(v.p_yes if v.p_yes is not None else float("nan")))
        rel = np.array([p >= config.decision_threshold for p in p_yes])
        queries.append(
            {
                "id": row["id"],
                "p_yes": p_yes,
                "ap": average_precision(rel),
                "expected_ap": expected_average_precision(p_yes),
            }
        )
    seconds = time.perf_counter() - started
    out = {
        "fingerprint": backend.fingerprint,
        "threshold": config.decision_threshold,
        "template": config.template_id(),
        "seconds": seconds,
        "map": float(np.mean([q["ap"] for q in queries])),
        "expected_map": float(np.mean([q["expected_ap"] for q in queries])),
        "queries": queries,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    n = sum(len(q["p_yes"]) for q in queries)
    print(f"{n} passages in {seconds:.1f} s; mAP {out['map']:.4f}, expected mAP {out['expected_map']:.4f}")
    print(out["fingerprint"])


def compare(a_path: Path, b_path: Path, margin: float) -> dict[str, Any]:
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (a_path, b_path))
    threshold = a["threshold"]
    diffs: list[tuple[float, str, int, float, float]] = []
    for qa, qb in zip(a["queries"], b["queries"], strict=True):
        for i, (pa, pb) in enumerate(zip(qa["p_yes"], qb["p_yes"], strict=True)):
            diffs.append((abs(pa - pb), qa["id"], i, pa, pb))
    flips = [d for d in diffs if (d[3] >= threshold) != (d[4] >= threshold)]
    near = sum(1 for d in diffs if abs(d[3] - threshold) <= margin)
    result = {
        "a": a["fingerprint"],
        "b": b["fingerprint"],
        "passages": len(diffs),
        "identical_p_yes": sum(1 for d in diffs if d[0] == 0.0),
        "max_abs_delta_p_yes": max(d[0] for d in diffs),
        "mean_abs_delta_p_yes": sum(d[0] for d in diffs) / len(diffs),
        "flipped_verdicts": [{"query": d[1], "index": d[2], "p_yes_a": d[3], "p_yes_b": d[4]} for d in flips],
        "borderline_in_a": near,
        "map": [a["map"], b["map"]],
        "delta_map": b["map"] - a["map"],
        "expected_map": [a["expected_map"], b["expected_map"]],
        "delta_expected_map": b["expected_map"] - a["expected_map"],
        "seconds": [a["seconds"], b["seconds"]],
    }
    print(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--dataset", type=Path, default=REPO / "datasets" / "sample.jsonl")
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument("--threads", type=int, default=None)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--margin", type=float, default=0.02)
    args = parser.parse_args(argv)
    if args.command == "probe":
        asyncio.run(probe(args.dataset, args.output, args.threads))
    else:
        compare(args.a, args.b, args.margin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
