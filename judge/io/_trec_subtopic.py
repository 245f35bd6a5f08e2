"""TREC diversity qrels (``qid subtopic docno grade``, as ndeval reads them) and their join
with a run: the per-subtopic judgements the diversity measures need. Read by the same
column reader as ordinary qrels (:mod:`judge.io._trec`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from judge.io._errors import InputError
from judge.io._trec import (
    _NOT_IN_POOL,
    _UNJUDGED_IN_POOL,
    Qrels,
    Run,
    _as_strings,
    _decode,
    _parse_ints,
    _read_columns,
)

__all__ = [
    "SubtopicJudgements",
    "SubtopicQrels",
    "SubtopicRanking",
    "join_run_subtopic_qrels",
    "read_subtopic_qrels",
]

_SUBTOPIC_QRELS_COLUMNS = ("qid", "subtopic", "docno", "grade")
_NO_JUDGEMENT = -(2**63)  # a (document, subtopic) pair without a qrels line (below any grade)


@dataclass(frozen=True)
class SubtopicJudgements:
    """One query's subtopic judgements aligned with a ranking (see
    :class:`judge.metrics._diversity.SubtopicMatrix`).

    ``ranked``: (retrieved documents in rank order, subtopics) grades, -2**63 where the pair
    has no judgement; ``pool``: the same for every judged document, rows in docno byte
    order; ``in_pool``: whether each retrieved document is judged for any subtopic;
    ``subtopics``: the column ids.
    """

    ranked: npt.NDArray[np.int64]
    pool: npt.NDArray[np.int64]
    in_pool: npt.NDArray[np.bool_]
    subtopics: tuple[str, ...]


@dataclass(frozen=True)
class _SubtopicQuery:
    docnos: list[bytes]  # sorted bytewise
    rows: dict[bytes, int]
    grades: npt.NDArray[np.int64]  # (docs, subtopics), -1 = no judgement
    subtopics: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class SubtopicQrels:
    """Diversity qrels (``qid subtopic docno grade``), grouped by query (qids in byte order).

    Each query's subtopic columns are in order of first appearance in the file (across
    queries, as pyndeval numbers them). :meth:`collapsed` gives ordinary qrels with each
    document's largest subtopic grade, for the non-diversity measures.
    """

    queries: dict[str, _SubtopicQuery]
    path: str = "<memory>"

    @property
    def query_ids(self) -> list[str]:
        return list(self.queries)

    def __len__(self) -> int:
        return len(self.queries)

    def query(self, qid: str) -> dict[str, dict[str, int]]:
        """``{docno: {subtopic: grade}}`` of one query (empty if absent)."""
        q = self.queries.get(qid)
        if q is None:
            return {}
        out: dict[str, dict[str, int]] = {}
        for docno, row in zip(q.docnos, q.grades.tolist(), strict=True):
            out[_decode(docno)] = {s: g for s, g in zip(q.subtopics, row, strict=True) if g != _NO_JUDGEMENT}
        return out

    def collapsed(self) -> Qrels:
        """Ordinary qrels: a document's grade is its largest grade over the subtopics."""
        judgements = {
            qid: {_decode(d): int(_max_judged(row)) for d, row in zip(q.docnos, q.grades, strict=True)}
            for qid, q in self.queries.items()
        }
        out = Qrels.from_mapping(judgements)
        return Qrels(out.qids, out.offsets, out.docnos, out.grades, out.keys, self.path)

    @classmethod
    def from_lines(
        cls,
        lines: Sequence[tuple[str, str, str, int]],
        *,
        path: str = "<memory>",
        numbers: Sequence[int] | None = None,
    ) -> SubtopicQrels:
        """Build from ``(qid, subtopic, docno, grade)`` tuples; ``numbers`` are their line
        numbers for errors. A (qid, subtopic, docno) given twice is an InputError."""
        order: dict[str, int] = {}
        by_query: dict[bytes, dict[bytes, dict[str, int]]] = {}
        seen: dict[tuple[bytes, str, bytes], int] = {}
        for i, (qid, subtopic, docno, grade) in enumerate(lines):
            line = numbers[i] if numbers is not None else i + 1
            key = (qid.encode(), subtopic, docno.encode())
            if key in seen:
                raise InputError(
                    f"duplicate judgement of docno {docno!r} for query {qid!r}, subtopic {subtopic!r} "
                    f"(first at line {seen[key]})",
                    path=path,
                    line=line,
                    field="docno",
                )
            seen[key] = line
            order.setdefault(subtopic, len(order))
            by_query.setdefault(key[0], {}).setdefault(key[2], {})[subtopic] = int(grade)
        queries: dict[str, _SubtopicQuery] = {}
        for qid_b in sorted(by_query):
            docs = by_query[qid_b]
            subtopics = sorted({s for grades in docs.values() for s in grades}, key=order.__getitem__)
            column = {s: j for j, s in enumerate(subtopics)}
            docnos = sorted(docs)
            matrix = np.full((len(docnos), len(subtopics)), _NO_JUDGEMENT, dtype=np.int64)
            for r, d in enumerate(docnos):
                for s, g in docs[d].items():
                    matrix[r, column[s]] = g
            queries[_decode(qid_b)] = _SubtopicQuery(
                docnos, {d: r for r, d in enumerate(docnos)}, matrix, tuple(subtopics)
            )
        return cls(queries, path)


def _max_judged(row: npt.NDArray[np.int64]) -> int:
    judged = row[row != _NO_JUDGEMENT]
    return int(judged.max()) if judged.shape[0] else 0


def read_subtopic_qrels(path: str | os.PathLike[str]) -> SubtopicQrels:
    """Read TREC diversity qrels (``qid subtopic docno grade``, as ndeval): one line per
    (document, subtopic) judgement; the second column is the subtopic id."""
    where = str(path)
    columns, lines, _ = _read_columns(path, names=_SUBTOPIC_QRELS_COLUMNS, wanted=(0, 1, 2, 3))
    grades = _parse_ints(columns.pop(3), lines, path=where, field="grade").tolist()
    qids = [_decode(x) for x in _as_strings(columns[0]).tolist()]
    subtopics = [_decode(x) for x in _as_strings(columns[1]).tolist()]
    docnos = [_decode(x) for x in _as_strings(columns[2]).tolist()]
    rows = list(zip(qids, subtopics, docnos, grades, strict=True))
    return SubtopicQrels.from_lines(rows, path=where, numbers=lines.tolist())


@dataclass(frozen=True)
class SubtopicRanking:
    """A :class:`JudgedRanking` (ordinary grades: each document's largest subtopic grade)
    that also carries the per-subtopic judgements the diversity measures need."""

    qid: str
    grades: npt.NDArray[np.int64] | None
    qrels: npt.NDArray[np.int64]
    subtopics: SubtopicJudgements


def join_run_subtopic_qrels(
    qrels: SubtopicQrels, run: Run, *, complete: bool = False, max_docs: int | None = None
) -> Iterator[SubtopicRanking]:
    """:func:`join_run_qrels` for diversity qrels: the same queries in the same order, each
    with its subtopic matrices (a query missing from the run has an empty ranking)."""
    if max_docs is not None and max_docs < 1:
        raise ValueError(f"max_docs must be a positive integer, got {max_docs}")
    for qid, q in qrels.queries.items():
        collapsed = np.array([_max_judged(row) for row in q.grades], dtype=np.int64)
        rows = run._rows(qid)
        if rows is None and not complete:
            continue
        if rows is None:
            empty = np.zeros((0, q.grades.shape[1]), dtype=np.int64)
            judgements = SubtopicJudgements(empty, q.grades, np.zeros(0, dtype=np.bool_), q.subtopics)
            yield SubtopicRanking(qid, None, collapsed, judgements)
            continue
        docs = run.docnos[rows].tolist()
        if max_docs is not None:
            docs = docs[:max_docs]
        where = [q.rows.get(bytes(d), -1) for d in docs]
        in_pool = np.array([w >= 0 for w in where], dtype=np.bool_)
        ranked = np.full((len(docs), q.grades.shape[1]), _NO_JUDGEMENT, dtype=np.int64)
        if in_pool.any():
            ranked[in_pool] = q.grades[np.array([w for w in where if w >= 0], dtype=np.intp)]
        grades = np.full(len(docs), _NOT_IN_POOL, dtype=np.int64)
        grades[in_pool] = collapsed[np.array([w for w in where if w >= 0], dtype=np.intp)]
        grades[in_pool & (grades < 0)] = _UNJUDGED_IN_POOL
        judgements = SubtopicJudgements(ranked, q.grades, in_pool, q.subtopics)
        yield SubtopicRanking(qid, grades, collapsed, judgements)
