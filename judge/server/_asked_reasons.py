"""Reasons on request of a comparison's pooled pairs: the review queue's first items (asked
when the comparison finishes) and any pair the review page opens, through
:func:`judge.systems.explain_pairs` (kept in the report folder's ``reasons/``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from judge.backends import Backend
from judge.batch import (
    RunSpec,
    comparison_review_queue,
)
from judge.judging import JudgeConfig, PassageVerdict
from judge.server._comparisons import _Collect, _pool_run, _read_inputs, iter_pool_records, system_rankings
from judge.server._job_files import complete_lines
from judge.server._job_kind import Runtime
from judge.store import atomic_write_text, trec_token
from judge.systems import (
    REASONS_DIR,
    PoolVerdicts,
    ReportFolder,
    explain_pairs,
    read_reasons,
    reasons_config,
)

# ------------------------------------------------------------- reasons on request
#: The review queue's first items whose reasons a finished comparison asks beside its report's
#: (the review page opens on them); any other pair's reason is asked when a reviewer opens it.
QUEUE_REASONS = 10
#: ``reasons/asked/DIGEST.*`` of a comparison: one pair each, asked when the review page opened it
ASKED_DIR = "asked"


def explaining_config(backend: Backend, spec: RunSpec, options: Mapping[str, Any]) -> JudgeConfig | None:
    """The config a comparison job's reasons on request are asked with; None: the job gets
    none on request (``explain`` set, listwise, or probability mode chosen explicitly)."""
    listwise = bool(options.get("listwise") or options.get("listwise_template"))
    return reasons_config(spec.config, backend, listwise=listwise)


def explained(job_dir: Path) -> dict[tuple[str, str], PassageVerdict]:
    """Every reason asked so far for a comparison's pooled pairs (its report's, its queue's,
    the pairs opened on the review page), by (query id, docno) and (query token, docno)."""
    found = read_reasons(job_dir)
    return {**found, **{(trec_token(q), d): v for (q, d), v in found.items()}}


def pool_lines(
    job_dir: Path, pairs: Mapping[str, Sequence[str]], options: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Dataset lines of ``pairs`` (``{query id: [docno]}``) with the texts the pool was judged
    on: the pool input's lines (``pool.input.jsonl``) cut to them, in the pool's order; a
    pair it lacks (an adaptive comparison judges in rounds) from the systems' saved records
    (``options``: the job's)."""
    lines, _ = complete_lines(ReportFolder(job_dir).pool_input)
    out: dict[str, dict[str, Any]] = {}
    for raw in lines:
        if not raw.strip():
            continue
        line = json.loads(raw)
        wanted = set(pairs.get(str(line["id"]), ()))
        context = [p for p in line["retrieval_context"] if str(p["id"]) in wanted]
        if context:
            out[str(line["id"])] = {**line, "retrieval_context": context}
    rest = {
        q: [d for d in docs if d not in {str(p["id"]) for p in out.get(q, {}).get("retrieval_context", [])}]
        for q, docs in pairs.items()
    }
    if options is not None and options.get("systems") and any(rest.values()):
        inputs = _read_inputs(job_dir, {**options, "strict": False}, _Collect({}))
        for qid, docs in rest.items():
            texts = inputs.passages.get(qid, {})
            context = [{"id": d, "text": texts[d].text} for d in docs if d in texts]
            if context:
                line = out.setdefault(qid, {"id": qid, "query": inputs.queries[qid], "retrieval_context": []})
                line["retrieval_context"] = [*line["retrieval_context"], *context]
    return list(out.values())


def queue_head_pairs(
    job_dir: Path, options: Mapping[str, Any], labels: Callable[[Any], Any] | None
) -> dict[str, list[str]]:
    """``{query id: [docno]}``: the judged verdicts without a reason among the first
    :data:`QUEUE_REASONS` items of the comparison's review queue (as the review page lists
    it: ``labels`` gives the label store's labels of the job's queries)."""
    records = list(iter_pool_records(job_dir))
    found = labels({str(r["id"]) for r in records})[0] if labels is not None and records else None
    items = comparison_review_queue(records, system_rankings(job_dir, options), found, limit=QUEUE_REASONS)
    by_token = {trec_token(r["id"]): r for r in records}
    have = explained(job_dir)
    pairs: dict[str, list[str]] = {}
    for item in items:
        record = by_token.get(item.qid)
        index = item.candidate.extra.get("index")
        if record is None or not isinstance(index, int):
            continue
        verdict = record["verdicts"][index]
        qid, docno = str(record["id"]), item.docno
        if verdict.get("verdict") == "unjudged" or verdict.get("reason") or (qid, docno) in have:
            continue
        pairs.setdefault(qid, []).append(docno)
    return pairs


def _asked_paths(job_dir: Path, qid: str, docno: str) -> tuple[str, Path]:
    digest = hashlib.sha256(f"{qid}\t{docno}".encode()).hexdigest()[:24]
    name = f"{ASKED_DIR}/{digest}"
    return name, job_dir / REASONS_DIR / name


def asked_by(job_dir: Path, qid: str, docno: str) -> dict[str, Any] | None:
    """Who asked a pair's reason on the review page, and when (None: not asked there)."""
    _, base = _asked_paths(job_dir, qid, docno)
    try:
        found: dict[str, Any] = json.loads(base.with_suffix(".asked.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return found


async def explain_one(
    job_dir: Path,
    qid: str,
    docno: str,
    rt: Runtime,
    spec: RunSpec,
    options: Mapping[str, Any],
    *,
    settings: Mapping[str, Any],
) -> PassageVerdict | None:
    """Ask one pooled pair's reason (``reasons/asked/``, the explaining config's cache key)
    through the server's backend, cache and engine (``rt``) with the job's ``spec``: the
    explained verdict (``cached`` when it came from the cache), or None when the job gets
    no reasons on request. A verdict without its reason leaves nothing behind, so the next
    ask calls the judge again; an error that dooms every request propagates."""
    explaining = explaining_config(rt.backend, spec, options)
    if explaining is None:
        return None
    name, base = _asked_paths(job_dir, qid, docno)
    run = _pool_run(options, spec, concurrency=rt.concurrency, settings=settings, executor=rt.executor)
    lines = await asyncio.to_thread(pool_lines, job_dir, {qid: [docno]}, options)
    got: PoolVerdicts | None = None
    try:
        got = await explain_pairs(job_dir, name, lines, rt.backend, explaining, store=rt.store, run=run)
    finally:
        verdict = None if got is None else got.verdicts.get(qid, {}).get(docno)
        if verdict is None or not verdict.judged or not verdict.reason:
            for suffix in (".input.jsonl", ".judged.jsonl"):
                base.with_suffix(suffix).unlink(missing_ok=True)
    return verdict


def record_asked(job_dir: Path, qid: str, docno: str, who: str, when: str, calls: int) -> dict[str, Any]:
    """Keep who asked a pair's reason on the review page and when (the server's clock)."""
    _, base = _asked_paths(job_dir, qid, docno)
    entry = {"query_id": qid, "docno": docno, "asked_by": who, "asked_at": when, "calls": calls}
    atomic_write_text(base.with_suffix(".asked.json"), json.dumps(entry, ensure_ascii=False) + "\n")
    return entry
