"""Reasons on request for pooled judging: verdicts and P(yes) first, a reason only for the
pairs someone will read.

In probability mode a reason is a second call per pair (a short generation that explains
the verdict already chosen), and with the embedded judge it costs more than the verdict.
A comparison or an experiment judges hundreds of pooled pairs and shows a few dozen, so
:func:`judge_pool` asks for verdicts only (``explain`` off) unless ``--explain`` asked for
every reason; :func:`explain_shown` then asks for the reasons of the pairs the report shows
(each differing query's top passages of every system the block shows: an experiment's two),
through the same engine
(``reasons/`` in the report folder: cached under the explaining config's key, resumable)
and writes them into the report. A verdict is the same either way: the probability pass
does not depend on whether a reason follows (bit-identical P(yes) on the embedded judge).

:func:`explain_pairs` is the one way a reason is asked for pooled pairs (the report's here; a
server's review queue and the pair a reviewer opens in :mod:`judge.server`), and
:func:`read_reasons` reads every reason asked so far from the report folder. A verdict whose
reason could not be had (the explaining generation failed) is neither cached nor kept in
``reasons/``, so asking again asks the judge again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from judge.backends import Backend
from judge.judging import JudgeConfig, PassageVerdict, VerdictStore, resolve_config
from judge.store import atomic_write_lines, recover_output
from judge.systems._comparison import ComparisonReport
from judge.systems._pool import PoolRun, PoolVerdicts, judge_pool, verdicts_first
from judge.systems._render import ReportData, differing_queries, example_systems

__all__ = [
    "REASONS_DIR",
    "explain_pairs",
    "explain_shown",
    "read_reasons",
    "reasons_config",
    "shown_pairs",
    "verdicts_first",
]

#: Where :func:`explain_shown` keeps its input and output in the report folder.
REASONS_DIR = "reasons"


def reasons_config(config: JudgeConfig, backend: Backend, *, listwise: bool = False) -> JudgeConfig | None:
    """The config reasons on request are asked with (``config`` made concrete for
    ``backend``, ``explain`` on), or None when a pool judged with ``config`` gets none on
    request: ``explain`` was set (True: every verdict carries its reason; False: none is
    wanted), listwise judging, or a config that resolves without reasons (probability mode
    chosen explicitly; generated verdicts carry their reasons)."""
    if config.explain is not None or listwise:
        return None
    judged = resolve_config(config, backend)
    return judged if judged.explain else None


class _ReasonedOnly:
    """The verdict cache as reasons on request use it: a cached verdict without its reason is
    a miss, and a verdict whose reason failed is not stored (so asking again asks again)."""

    def __init__(self, inner: VerdictStore) -> None:
        self.inner = inner
        self.stats = getattr(inner, "stats", None)

    async def get(self, key: str) -> PassageVerdict | None:
        hit = await self.inner.get(key)
        return hit if hit is not None and hit.reason else None

    async def put(self, key: str, verdict: PassageVerdict) -> None:
        if verdict.reason:
            await self.inner.put(key, verdict)


def _drop_unreasoned(output: Path) -> None:
    """Remove from an earlier ``reasons/`` output the queries with a verdict that has no
    reason (its explaining generation failed), so the engine asks them again."""
    if not output.exists():
        return
    records = recover_output(output)
    kept = [r for r in records if all(v.get("reason") for v in r.get("verdicts", []))]
    if len(kept) != len(records):
        atomic_write_lines(output, kept)


async def explain_pairs(
    report_dir: str | os.PathLike[str],
    name: str,
    lines: Sequence[Mapping[str, Any]],
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None,
    run: PoolRun,
) -> PoolVerdicts:
    """Ask the reasons of the pairs in ``lines`` (dataset lines as ``pool.input.jsonl`` has
    them: one per query, its passages under their docnos) through the pool's engine, with
    ``config`` and ``explain`` on (the cache key of an explaining config):
    ``reasons/NAME.input.jsonl`` into ``reasons/NAME.judged.jsonl`` of the report folder
    (``NAME`` may name a subfolder). Resumable; a pair whose reason failed is asked again
    next time. Returns the explained verdicts and the calls made."""
    folder = Path(report_dir) / REASONS_DIR
    output = folder / f"{name}.judged.jsonl"
    output.parent.mkdir(parents=True, exist_ok=True)
    _drop_unreasoned(output)
    return await judge_pool(
        folder / f"{name}.input.jsonl",
        output,
        lines,
        backend,
        replace(config, explain=True),
        store=_ReasonedOnly(store) if store is not None else None,
        run=replace(run, listwise=False, retry_unjudged=False),
    )


def read_reasons(report_dir: str | os.PathLike[str]) -> dict[tuple[str, str], PassageVerdict]:
    """Every explained verdict with a reason in ``reasons/`` of the report folder, by
    (query id, docno). Read only: a file another task is appending to is read up to its last
    complete line, never repaired."""
    found: dict[tuple[str, str], PassageVerdict] = {}
    folder = Path(report_dir) / REASONS_DIR
    for path in sorted(folder.rglob("*.judged.jsonl")) if folder.is_dir() else []:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            for docno, raw in zip(record.get("docnos", []), record.get("verdicts", []), strict=False):
                verdict = PassageVerdict.model_validate(raw, strict=False)
                if verdict.judged and verdict.reason:
                    found[(str(record["id"]), str(docno))] = verdict
    return found


def shown_pairs(data: ReportData) -> dict[str, list[str]]:
    """``{qid: [docno, ...]}``: the judge's verdicts (judged, without a reason) that the
    report shows: the top ``top_passages`` of each system the example block shows
    (:func:`~judge.systems._render.example_systems`: every system of a comparison, an
    experiment's best and baseline or runner-up) on each query where those differ most.
    Human labels and unjudged pairs need no reason."""
    examples = example_systems(data)
    _, rows = differing_queries(data, examples)
    shown = examples.systems
    wanted: dict[str, list[str]] = {}
    for qid, _ in rows:
        judged = data.verdicts.verdicts.get(qid, {})
        for system in shown:
            ranking = system.queries.get(qid)
            for docno in ranking.docnos[: data.top_passages] if ranking is not None else []:
                verdict = judged.get(docno)
                docs = wanted.setdefault(qid, [])
                if verdict is not None and verdict.judged and not verdict.reason and docno not in docs:
                    docs.append(docno)
    return {qid: docs for qid, docs in wanted.items() if docs}


async def explain_shown(
    comparison: ComparisonReport,
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None,
    run: PoolRun,
) -> int:
    """Ask for the reasons of the pairs the report shows (:func:`shown_pairs`), put each
    into its pooled verdict when the explained verdict agrees, re-write the report; return
    the calls made, also counted in the report's pool calls (0 when ``config`` is not
    probability mode or nothing lacks a reason)."""
    data = comparison.data
    wanted = shown_pairs(data) if config.probability else {}
    if not wanted:
        return 0
    lines: list[dict[str, Any]] = [
        {
            "id": qid,
            "query": data.inputs.queries[qid],
            "retrieval_context": [{"id": d, "text": data.inputs.passages[qid][d].text} for d in docs],
        }
        for qid, docs in wanted.items()
    ]
    got = await explain_pairs(comparison.folder.path, "reasons", lines, backend, config, store=store, run=run)
    for qid, by_docno in got.verdicts.items():
        pooled = data.verdicts.verdicts[qid]
        for docno, explained in by_docno.items():
            verdict = pooled[docno]
            if explained.judged and explained.verdict == verdict.verdict and explained.reason:
                pooled[docno] = verdict.model_copy(update={"reason": explained.reason})
    report = comparison.report
    pool = report.pool.model_copy(update={"calls": report.pool.calls + got.calls})
    comparison.with_report(report.model_copy(update={"pool": pool}))
    comparison.write()
    return got.calls
