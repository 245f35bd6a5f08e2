"""Two systems (or an experiment's two configurations) side by side, query by query: what
the viewer's experiment page shows when two configurations are chosen.

Computed from the report folder (:meth:`ComparisonReport.load`): per query, each
configuration's ranked list within the pool's depth with each passage's verdict (a human
label where the pool has one), grade, P(yes), the threshold P(yes) was compared with and its
reason when one was asked (the pool's verdict, else ``reasons/`` of the folder), the passages
only one of the two returned marked, and the per-query value of the primary measure (an
experiment's objective) for both and their difference (``b`` minus ``a``). Queries come
largest disagreement first (the absolute difference, then the query id); a query either
configuration could not be scored on comes last with a null difference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from judge.io import InputError
from judge.judging import PassageVerdict
from judge.systems._comparison import ComparisonReport
from judge.systems._inputs import SystemInput
from judge.systems._options import SystemsOptions
from judge.systems._reasons import read_reasons
from judge.systems._render import ReportData, passage_entry
from judge.systems._scoring import system_verdicts

__all__ = ["comparison_pair", "pair_view"]


def pair_view(
    folder: str | os.PathLike[str], a: str, b: str, options: SystemsOptions | None = None
) -> dict[str, Any]:
    """The side-by-side view of systems ``a`` and ``b`` of the comparison (or experiment)
    written in ``folder`` (:class:`FileNotFoundError` before its report is written; an
    :class:`~judge.io.InputError` naming ``a`` or ``b`` for a name it does not have)."""
    comparison = ComparisonReport.load(folder, options)
    return comparison_pair(comparison, a, b, reasons=read_reasons(folder))


def _per_query(data: ReportData, name: str, measure: str) -> dict[str, float]:
    ev = data.evaluations.get(name)
    if ev is None:
        return {}
    out: dict[str, float] = {}
    for token, values in ev.per_query.items():
        value = values.get(measure)
        if isinstance(value, int | float):
            out[token] = float(value)
    return out


def _passages(
    data: ReportData,
    system: SystemInput,
    qid: str,
    depth: int | None,
    other: set[str],
    reasons: Mapping[tuple[str, str], PassageVerdict],
) -> list[dict[str, Any]]:
    sq = system.queries.get(qid)
    if sq is None:
        return []
    shown = []
    verdicts = system_verdicts(system, qid, data.pool, data.verdicts, data.level)
    for rank, (v, docno) in enumerate(zip(verdicts, sq.docnos, strict=True), start=1):
        if depth is not None and rank > depth:
            break
        asked = reasons.get((qid, docno))
        reason = v.reason if v.judged and v.reason else (asked.reason if asked is not None else None)
        shown.append(passage_entry(data, qid, docno, rank, v, reason or None) | {"only": docno not in other})
    return shown


def _disagreement(row: Mapping[str, Any]) -> tuple[bool, float, str]:
    """Largest absolute difference first, then the query id; no difference last."""
    diff = row["diff"]
    return diff is None, -abs(float(diff or 0.0)), str(row["id"])


def comparison_pair(
    comparison: ComparisonReport,
    a: str,
    b: str,
    *,
    reasons: Mapping[tuple[str, str], PassageVerdict] | None = None,
) -> dict[str, Any]:
    """:func:`pair_view` of a loaded comparison (``reasons``: those asked after the verdicts,
    by (query id, docno))."""
    data = comparison.data
    systems = {s.name: s for s in data.inputs.systems}
    for name, field in ((a, "a"), (b, "b")):
        if name not in systems:
            raise InputError(
                f"no configuration {name!r} in this report (it has {', '.join(systems)})", field=field
            )
    measure = data.primary
    depth = comparison.report.conventions.get("depth")
    depth = int(depth) if isinstance(depth, int) else None
    values_a = _per_query(data, a, measure) if measure else {}
    values_b = _per_query(data, b, measure) if measure else {}
    found = reasons or {}
    rows = []
    for qid, text in data.inputs.queries.items():
        token = data.inputs.tokens[qid]
        sa, sb = systems[a].queries.get(qid), systems[b].queries.get(qid)
        docs_a = set((sa.docnos[:depth] if depth else sa.docnos) if sa else [])
        docs_b = set((sb.docnos[:depth] if depth else sb.docnos) if sb else [])
        va, vb = values_a.get(token), values_b.get(token)
        rows.append(
            {
                "id": qid,
                "query": text,
                "a": {"value": va, "passages": _passages(data, systems[a], qid, depth, docs_b, found)},
                "b": {"value": vb, "passages": _passages(data, systems[b], qid, depth, docs_a, found)},
                "diff": None if va is None or vb is None else vb - va,
                "only_a": len(docs_a - docs_b),
                "only_b": len(docs_b - docs_a),
            }
        )
    rows.sort(key=_disagreement)
    return {"measure": measure, "a": a, "b": b, "depth": depth, "queries": rows}
