"""Query sets: the queries a search configuration is run on.

JSONL, one query a line::

    {"id": "q1", "query": "小狗贫血的表现", "qrels": {"d7": 2, "d9": 0}}

(``qrels`` optional: passage id -> integer grade), or TSV ``qid<TAB>query``. A TREC qrels
file (``qid iter docno grade``) may be given beside; its grades are added to the queries'
(a grade given twice must agree). Gzip is read transparently. Every problem is a
:class:`SearchError` naming the file, the 1-based line and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.io import InputError, id_problem, json_problem, open_binary, read_qrels
from judge.search._search_errors import SearchError


@dataclass(frozen=True)
class Query:
    """One query of a query set; ``qrels`` (passage id -> grade) when the set grades it."""

    id: str
    query: str
    qrels: dict[str, int] | None = None


_BOM = b"\xef\xbb\xbf"


def qid_problem(qid: str) -> str | None:
    """Why ``qid`` cannot be a query id (None: it can): what ``judge score`` refuses in an
    id (:func:`judge.io.id_problem`: empty, control characters, too long), and whitespace
    (a TREC run's qid is one token)."""
    problem = id_problem(qid)
    if problem is None and any(ch.isspace() for ch in qid):
        problem = "must be one token without whitespace (a TREC qid)"
    return None if problem is None else f"{problem}, got {_shown(qid)}"


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 60 else repr(value[:40]) + f"...({len(value)} characters)"


def _grade(value: Any, path: str, line: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SearchError(
            f"a grade must be an integer, got {type(value).__name__}", path=path, line=line, field=field
        )
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise SearchError(f"a grade must be an integer, got {value!r}", path=path, line=line, field=field)
        value = int(value)
    return int(value)


def _qrels(value: Any, path: str, line: int) -> dict[str, int]:
    if not isinstance(value, dict):
        raise SearchError(
            f"must be an object mapping passage id to an integer grade, got {type(value).__name__}",
            path=path,
            line=line,
            field="qrels",
        )
    out: dict[str, int] = {}
    for docno, grade in value.items():
        problem = id_problem(str(docno))
        if problem is not None:
            raise SearchError(f"a passage id {problem}", path=path, line=line, field="qrels")
        out[str(docno)] = _grade(grade, path, line, f"qrels.{docno}")
    return out


def _jsonl_query(raw: bytes, path: str, line: int) -> Query:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SearchError(f"invalid UTF-8 at byte {exc.start}", path=path, line=line) from None
    try:
        obj: Any = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
        raise SearchError(f"not valid JSON ({msg})", path=path, line=line) from None
    if not isinstance(obj, dict):
        raise SearchError(f"expected a JSON object, got {type(obj).__name__}", path=path, line=line)
    problem = json_problem(obj, text)
    if problem is not None:
        raise SearchError(problem[1], path=path, line=line, field=problem[0] or None)
    if "id" not in obj:
        raise SearchError("missing", path=path, line=line, field="id")
    qid = obj["id"]
    if isinstance(qid, bool) or not isinstance(qid, str | int):
        raise SearchError(
            f"must be a string or an integer, got {type(qid).__name__}", path=path, line=line, field="id"
        )
    qid = str(qid)
    bad_id = qid_problem(qid)
    if bad_id is not None:
        raise SearchError(bad_id, path=path, line=line, field="id")
    if "query" not in obj:
        raise SearchError("missing", path=path, line=line, field="query")
    query = obj["query"]
    if not isinstance(query, str):
        raise SearchError(
            f"must be a string, got {type(query).__name__}", path=path, line=line, field="query"
        )
    if not query.strip():
        raise SearchError("must not be empty", path=path, line=line, field="query")
    qrels = None if obj.get("qrels") is None else _qrels(obj["qrels"], path, line)
    return Query(qid, query, qrels)


def _tsv_query(raw: bytes, path: str, line: int) -> Query:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SearchError(f"invalid UTF-8 at byte {exc.start}", path=path, line=line) from None
    qid, sep, query = text.partition("\t")
    if not sep:
        raise SearchError("expected qid<TAB>query", path=path, line=line, field="query")
    qid = qid.strip(" \t")
    problem = qid_problem(qid)
    if problem is not None:
        raise SearchError(problem, path=path, line=line, field="id")
    if not query.strip():
        raise SearchError("must not be empty", path=path, line=line, field="query")
    return Query(qid, query.strip(), None)


def _is_jsonl(path: Path) -> bool:
    """JSONL when the first non-blank byte is ``{``, else TSV."""
    with open_binary(path) as fh:
        for raw in fh:
            stripped = raw.removeprefix(_BOM).strip()
            if stripped:
                return stripped.startswith(b"{")
    return True


def _merge_qrels(queries: list[Query], qrels_path: Path) -> list[Query]:
    try:
        qrels = read_qrels(qrels_path)
    except InputError as exc:
        raise SearchError(exc.message, path=exc.path, line=exc.line, field=exc.field) from None
    by_qid = qrels.to_dict()
    merged: list[Query] = []
    for q in queries:
        extra = by_qid.get(q.id)
        if extra is None:
            merged.append(q)
            continue
        grades = dict(q.qrels or {})
        for docno, grade in extra.items():
            if docno in grades and grades[docno] != grade:
                raise SearchError(
                    f"query {q.id!r} passage {docno!r}: grade {grade} here, {grades[docno]} in the query set",
                    path=qrels_path,
                    field="grade",
                )
            grades[docno] = grade
        merged.append(Query(q.id, q.query, grades))
    return merged


def read_queries(path: str | Path, qrels_path: str | Path | None = None) -> list[Query]:
    """Read a query set (JSONL or TSV, gzip ok) strictly: the first bad line raises a
    :class:`SearchError` naming file, line and field; duplicate ids and an empty set are
    refused. ``qrels_path``: a TREC qrels file whose grades are merged in."""
    path = Path(path)
    where = str(path)
    try:
        jsonl = _is_jsonl(path)
        fh = open_binary(path)
    except OSError as exc:
        raise SearchError(f"cannot read: {exc.strerror}", path=where) from exc
    parse = _jsonl_query if jsonl else _tsv_query
    queries: list[Query] = []
    seen: dict[str, int] = {}
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1:
                raw = raw.removeprefix(_BOM)  # a UTF-8 byte order mark is not part of the first id
            if not raw.strip():
                continue
            q = parse(raw.rstrip(b"\r\n"), where, lineno)
            if q.id in seen:
                raise SearchError(
                    f"duplicate id {q.id!r} (first on line {seen[q.id]})", path=where, line=lineno, field="id"
                )
            seen[q.id] = lineno
            queries.append(q)
    if not queries:
        raise SearchError("no queries", path=where)
    if qrels_path is not None:
        queries = _merge_qrels(queries, Path(qrels_path))
    return queries


def check_queries(queries: list[Query] | tuple[Query, ...] | Mapping[str, str]) -> list[Query]:
    """Queries given in Python (a list of :class:`Query`, or ``{id: text}``) checked as a
    file would be: non-empty, unique ids without whitespace, non-empty text."""
    items = [Query(str(k), v) for k, v in queries.items()] if isinstance(queries, Mapping) else list(queries)
    if not items:
        raise SearchError("no queries", field="queries")
    seen: set[str] = set()
    for i, q in enumerate(items):
        if not isinstance(q, Query):
            raise SearchError(f"queries[{i}] must be a Query, got {type(q).__name__}", field="queries")
        problem = qid_problem(q.id) if isinstance(q.id, str) else "must be a string"
        if problem is not None:
            raise SearchError(f"queries[{i}]: the id {problem}", field="id")
        if q.id in seen:
            raise SearchError(f"queries[{i}]: duplicate id {q.id!r}", field="id")
        if not isinstance(q.query, str) or not q.query.strip():
            raise SearchError(f"queries[{i}]: the query must be a non-empty string", field="query")
        seen.add(q.id)
    return items
