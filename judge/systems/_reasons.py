"""Reasons on request for pooled judging: verdicts and P(yes) first, a reason only for the
pairs someone will read.

In probability mode a reason is a second call per pair (a short generation that explains
the verdict already chosen), and with the embedded judge it costs more than the verdict.
A comparison or an experiment judges hundreds of pooled pairs and shows a few dozen, so
:func:`judge_pool` asks for verdicts only (``explain`` off) unless ``--explain`` asked for
every reason; :func:`explain_shown` then asks for the reasons of the pairs the report shows
(each differing query's top passages of every system), through the same engine
(``reasons/`` in the report folder: cached under the explaining config's key, resumable)
and writes them into the report. A verdict is the same either way: the probability pass
does not depend on whether a reason follows (bit-identical P(yes) on the embedded judge).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from judge.backends import Backend
from judge.judging import JudgeConfig, VerdictStore
from judge.systems._comparison import ComparisonReport
from judge.systems._pool import PoolRun, judge_pool, verdicts_first
from judge.systems._render import ReportData, differing_queries

__all__ = ["REASONS_DIR", "explain_shown", "shown_pairs", "verdicts_first"]

#: Where :func:`explain_shown` keeps its input and output in the report folder.
REASONS_DIR = "reasons"


def shown_pairs(data: ReportData) -> dict[str, list[str]]:
    """``{qid: [docno, ...]}``: the judge's verdicts (judged, without a reason) that the
    report shows: every system's top ``top_passages`` of each query where the systems
    differ most. Human labels and unjudged pairs need no reason."""
    _, rows = differing_queries(data)
    wanted: dict[str, list[str]] = {}
    for qid, _ in rows:
        judged = data.verdicts.verdicts.get(qid, {})
        for system in data.inputs.systems:
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
    folder = comparison.folder.path / REASONS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    got = await judge_pool(
        folder / "reasons.input.jsonl",
        folder / "reasons.judged.jsonl",
        lines,
        backend,
        replace(config, explain=True),
        store=store,
        run=replace(run, listwise=False, retry_unjudged=False),
    )
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
