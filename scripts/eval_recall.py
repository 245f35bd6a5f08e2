#!/usr/bin/env python
"""Does contextual recall separate contexts that hold the answer from ones that don't?

Data: RGB's Chinese ``zh_refine.json`` (``../shared/data/zh_rgb``, read by path, never
copied): per query a reference answer (``answer``), passages that contain it (``positive``)
and passages on the same topic that do not (``negative``). For each of the first ``--n``
queries (in file order, ``--offset`` to skip some) two contexts are scored with
:func:`judge.judging._recall.contextual_recall`: the first ``--k`` positive passages and the
first ``--k`` negative passages, against the same reference answer (its items joined with
``、``; alternatives of one item with ``或``), so the claims are extracted once per query and
shared by both contexts.

Reported: mean recall@k on each side, the number of queries where the positive context
scores higher / equal / lower, ROC AUC of recall@k as a score separating positive from
negative contexts (ties count one half), ROC AUC of a finer score from the same verdicts
(per context, the mean over claims of the highest P(yes) among the passages asked), and
the calls and seconds spent.

Resumable: every judged query is appended to ``--out`` (JSONL); a re-run skips them, and
all verdicts are also in the verdict cache (``--cache``), so an interrupted query costs only
the calls it had not finished. Run it in the background:

    nohup python scripts/eval_recall.py --n 40 > runs/eval_recall.log 2>&1 &
    python scripts/eval_recall.py --report          # the table, from --out only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_RGB = Path("shared") / "data" / "zh_rgb" / "zh_refine.json"
# ../shared beside the checkout (a git worktree one level deeper looks one more level up)
DATA = next((p / _RGB for p in (ROOT.parent, ROOT.parent.parent) if (p / _RGB).is_file()), ROOT.parent / _RGB)


def reference_of(answer: list[Any]) -> str:
    """RGB's answer list as one reference text: items joined with 、, alternatives with 或."""
    parts = []
    for item in answer:
        if isinstance(item, list):
            parts.append("或".join(str(x) for x in item))
        else:
            parts.append(str(item))
    return "、".join(parts)


def load_rows(path: Path, n: int, offset: int) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
    return rows[offset : offset + n]


def done_ids(out: Path) -> set[int]:
    ids: set[int] = set()
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            try:
                ids.add(int(json.loads(line)["id"]))
            except (ValueError, KeyError, json.JSONDecodeError):
                continue  # a torn last line
    return ids


async def judge_rows(args: argparse.Namespace) -> None:
    from judge.backends import make_backend
    from judge.judging import JudgeConfig
    from judge.judging._recall import contextual_recall
    from judge.store import SQLiteVerdictStore

    rows = load_rows(Path(args.data), args.n, args.offset)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    skip = done_ids(out)
    backend = make_backend(args.backend)
    config = JudgeConfig(language="zh", explain=args.explain)
    store = SQLiteVerdictStore(args.cache)
    print(
        f"eval_recall: judge {backend.name}, {len(rows)} queries, {len(skip)} already done", file=sys.stderr
    )
    try:
        for row in rows:
            if int(row["id"]) in skip:
                continue
            reference = reference_of(row["answer"])
            started = time.monotonic()
            record: dict[str, Any] = {"id": row["id"], "query": row["query"], "reference": reference}
            for side in ("positive", "negative"):
                passages = [str(p) for p in row[side][: args.k]]
                if not passages:
                    record[side] = None
                    continue
                result = await contextual_recall(
                    backend, row["query"], passages, reference, config, store=store, k=(args.k,)
                )
                record[side] = {
                    "recall": result.recall.get(args.k),
                    "claims": [c.claim for c in result.claims],
                    "status": [c.status for c in result.claims],
                    "support_rank": [c.support_rank for c in result.claims],
                    # the highest P(yes) over the passages asked, per claim (probability mode)
                    "max_p_yes": [
                        max((x.p_yes for x in c.checks if x.p_yes is not None), default=None)
                        for c in result.claims
                    ],
                    "error": result.error,
                    "usage": result.usage.model_dump(),
                }
            record["seconds"] = round(time.monotonic() - started, 2)
            with out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            pos, neg = record["positive"], record["negative"]
            print(
                f"{row['id']}: recall+ {pos and pos['recall']} recall- {neg and neg['recall']} "
                f"({record['seconds']} s) {pos and pos['claims']}",
                file=sys.stderr,
            )
    finally:
        await store.aclose()
        await backend.aclose()


def roc_auc(pos: list[float], neg: list[float]) -> float | None:
    """P(score of a positive > score of a negative), ties counted one half."""
    if not pos or not neg:
        return None
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def report(out: Path, k: int) -> str:
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
    pairs = [
        (r["positive"]["recall"], r["negative"]["recall"])
        for r in records
        if r.get("positive")
        and r.get("negative")
        and r["positive"]["recall"] is not None
        and r["negative"]["recall"] is not None
    ]
    pos = [p for p, _ in pairs]
    neg = [q for _, q in pairs]
    no_claims = sum(1 for r in records if r.get("positive") and r["positive"]["error"])
    calls = sum(r[s]["usage"]["calls"] for r in records for s in ("positive", "negative") if r.get(s))
    n_claims = [len(r["positive"]["claims"]) for r in records if r.get("positive")]
    seconds = sum(r.get("seconds", 0) for r in records)
    auc = roc_auc(pos, neg)
    # A finer score from the same verdicts: per context the mean over claims of the highest
    # P(yes) among the passages asked (probability mode only; breaks recall's many ties).
    soft: dict[str, list[float]] = {"positive": [], "negative": []}
    for r in records:
        for side in soft:
            values = (r.get(side) or {}).get("max_p_yes") or []
            if values and all(v is not None for v in values):
                soft[side].append(math.fsum(values) / len(values))
    soft_auc = roc_auc(soft["positive"], soft["negative"])

    def mean(xs: list[float]) -> str:
        return f"{math.fsum(xs) / len(xs):.3f}" if xs else "n/a"

    higher = sum(p > q for p, q in pairs)
    equal = sum(p == q for p, q in pairs)
    lines = [
        f"| queries | claims/query | mean recall@{k} positive | mean recall@{k} negative "
        "| positive > / = / < negative | ROC AUC | ROC AUC, max P(yes) | no claims | calls | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {len(pairs)} | {mean([float(x) for x in n_claims])} | {mean(pos)} | {mean(neg)} "
        f"| {higher} / {equal} / {len(pairs) - higher - equal} "
        f"| {'n/a' if auc is None else f'{auc:.3f}'} | {'n/a' if soft_auc is None else f'{soft_auc:.3f}'} "
        f"| {no_claims} | {calls} | {seconds:.0f} |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=str(DATA), help="RGB zh_refine.json (default: ../shared/data/zh_rgb)"
    )
    parser.add_argument("--n", type=int, default=40, help="queries (default 40)")
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--k", type=int, default=5, help="passages per context (default 5)")
    parser.add_argument(
        "--backend", default="local:qwen2.5-coder-1.5b-q4km", help="judge spec (default: the embedded model)"
    )
    parser.add_argument("--explain", action="store_true", help="also generate a reason per verdict (slower)")
    parser.add_argument("--out", default=str(ROOT / "runs" / "eval_recall" / "recall.jsonl"))
    parser.add_argument("--cache", default=str(ROOT / "runs" / "eval_recall" / "cache.sqlite"))
    parser.add_argument("--report", action="store_true", help="only print the table from --out")
    args = parser.parse_args(argv)
    if not args.report:
        if not Path(args.data).is_file():
            print(f"eval_recall: no data at {args.data}", file=sys.stderr)
            return 2
        asyncio.run(judge_rows(args))
    print(report(Path(args.out), args.k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
