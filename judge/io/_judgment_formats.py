"""Judgment lists of other tools, read and written: the ``query,docid,rating`` CSV that
Quepid and OpenSearch's Search Relevance Workbench (SRW) both read and write, SRW's imported
judgment list (JSON), RRE's ratings JSON as Quepid exports it, and TREC qrels.

* **CSV** (``csv``): RFC 4180 (a field with a comma, a quote, a line feed or a carriage
  return is quoted, a quote doubled), read with Python's :mod:`csv`; UTF-8, a byte-order
  mark skipped. The first row is the header ``query,docid,rating`` (Quepid writes it; a
  first row whose rating is a number is read as data). The first column is the query
  *text*. Quepid writes a query without ratings as ``text,,`` (skipped here) and puts a
  space before a query text that begins with ``-``, ``=``, ``+`` or ``@`` (spreadsheet
  formula guard). We write that guard in every cell (query text, docid and rating alike:
  a docid comes from whatever engine answered), for a tab and a carriage return too, and
  take it off the query and the docid when reading (:func:`csv_guard`, :func:`csv_unguard`),
  so ``-x`` travels as `` -x``.
* **SRW** (``srw``): ``{"name", "description", "type": "IMPORT_JUDGMENT", "judgmentRatings":
  [{"query": TEXT, "ratings": [{"docId": ID, "rating": "2"}]}]}`` (SRW takes ratings as
  strings; numbers are read too).
* **RRE** (``rre``): Quepid's RRE export, ``{"id_field", "index", "template", "queries":
  [{"placeholders": {"$query": TEXT}, "relevant_documents": {ID: {"gain": 2}}}]}``; the
  older shape Quepid's importer reads, ``"relevant_documents": {"2": [ID, ...]}``, is read too.
* **TREC** (``trec``): ``qid iter docno grade`` (query *ids*), read by the one qrels reader.

Every field is checked (type, bounds, control characters, a finite number); a bad one is an
:class:`InputError` naming the file, the line and the field (in JSON: the field's path, e.g.
``judgmentRatings[2].ratings[0].rating``, and the line its object starts on).
"""

from __future__ import annotations

import csv
import io
import json
import json.decoder
import json.scanner
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from judge.io._errors import InputError
from judge.io._jsonl import MAX_JSON_DEPTH, id_problem
from judge.io._rated_pairs import RatedPairs
from judge.io._trec import read_qrels_lines

JudgmentFormat = Literal["trec", "csv", "srw", "rre"]
JUDGMENT_FORMATS: tuple[JudgmentFormat, ...] = ("trec", "csv", "srw", "rre")
CSV_HEADER = ("query", "docid", "rating")
MAX_QUERY_TEXT_CHARS = 100_000
MAX_FILE_BYTES = 1 << 30
SRW_TYPE = "IMPORT_JUDGMENT"

__all__ = [
    "CSV_HEADER",
    "JUDGMENT_FORMATS",
    "Judgment",
    "JudgmentFile",
    "JudgmentFormat",
    "csv_guard",
    "csv_unguard",
    "detect_judgment_format",
    "judgments_by_qid",
    "read_judgments",
    "shared_text",
    "write_judgments",
]

_BOM = b"\xef\xbb\xbf"
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_GUARDED = ("-", "=", "+", "@", "\t", "\r")


@dataclass(frozen=True, slots=True)
class Judgment:
    """One rating: ``query`` is the query text (CSV, SRW, RRE) or the query id (TREC);
    ``rating`` exactly as written (a decimal); ``line`` where it is (1-based);
    ``field`` the rating's field (its column, or its path in JSON)."""

    line: int
    query: str
    docid: str
    rating: Decimal
    field: str = "rating"


@dataclass(frozen=True)
class JudgmentFile:
    """A judgment list read: its format, its ratings in file order, and the scale the file
    states (an SRW list or RRE file written by ``judge`` says it; None: not stated)."""

    path: str
    format: JudgmentFormat
    judgments: list[Judgment]
    stated_scale: str | None = None

    @property
    def keyed_by_text(self) -> bool:
        return self.format != "trec"


# ---------------------------------------------------------------------------- detection
def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(65536).removeprefix(_BOM)
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from None


def _rating_text(text: str) -> bool:
    return _NUMBER.fullmatch(text.strip()) is not None


def detect_judgment_format(path: str | os.PathLike[str]) -> JudgmentFormat:
    """The format of a judgment list from its content: JSON with ``judgmentRatings`` is SRW,
    JSON with ``queries`` RRE; else the first data line decides: the CSV header, or four
    whitespace-separated tokens with an integer grade (TREC qrels), or three CSV fields with
    a numeric rating. :class:`InputError` naming line 1 (or the JSON's key) otherwise."""
    p = Path(path)
    head = _head(p)
    if head.lstrip()[:1] in (b"{", b"["):
        data = _load_json(p)
        if isinstance(data, dict) and "judgmentRatings" in data:
            return "srw"
        if isinstance(data, dict) and "queries" in data:
            return "rre"
        raise InputError(
            "JSON that is neither an SRW judgment list ('judgmentRatings') nor RRE ratings ('queries')",
            path=str(p),
            line=1,
        )
    text = head.decode("utf-8", errors="replace")
    lines = text.split("\n")
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = line.split()
        if len(tokens) in (4, 5) and re.fullmatch(r"[+-]?\d+", tokens[3]):
            return "trec"
        if "," not in line and '"' not in line:
            return "trec"  # no CSV record: TREC qrels, whose reader names what is wrong
        rest = io.StringIO("\n".join(lines[number - 1 :]), newline="")
        try:
            fields = next(csv.reader(rest), [])
        except csv.Error:
            fields = []
        if [f.strip().lower() for f in fields] in (list(CSV_HEADER), ["query", "doc_id", "rating"]):
            return "csv"
        if len(fields) == 3 and _rating_text(fields[2]):
            return "csv"
        raise InputError(
            "neither TREC qrels (qid iter docno grade), a query,docid,rating CSV, an SRW judgment "
            "list nor RRE ratings",
            path=str(p),
            line=number,
        )
    raise InputError("empty file: no data lines", path=str(p), line=1)


# ---------------------------------------------------------------------------- checks
def _text(value: object, *, path: str, line: int, field: str, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__}", path=path, line=line, field=field)
    if what == "docid":
        problem = id_problem(value)
        if problem is not None:
            raise InputError(problem, path=path, line=line, field=field)
        return value
    if not value.strip():
        raise InputError("must not be empty", path=path, line=line, field=field)
    if len(value) > MAX_QUERY_TEXT_CHARS:
        raise InputError(
            f"{len(value)} characters; at most {MAX_QUERY_TEXT_CHARS}", path=path, line=line, field=field
        )
    bad = next((ch for ch in value if (ch < " " and ch not in "\t\n\r") or "\x7f" <= ch <= "\x9f"), None)
    if bad is not None:
        raise InputError(f"control character U+{ord(bad):04X}", path=path, line=line, field=field)
    return value


def _rating(value: object, *, path: str, line: int, field: str) -> Decimal:
    """A rating as written: a number, or a string holding one (SRW writes strings)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(
            f"must be a number or a string holding one, got {type(value).__name__}",
            path=path,
            line=line,
            field=field,
        )
    text = value.strip() if isinstance(value, str) else repr(value)
    if len(text) > 40 or _NUMBER.fullmatch(text) is None:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise InputError(f"must be a finite number, got {shown!r}", path=path, line=line, field=field)
    try:
        out = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        raise InputError(f"must be a number, got {text!r}", path=path, line=line, field=field) from None
    if not out.is_finite() or abs(out) > 1_000_000:
        raise InputError(f"must be a finite number, got {text!r}", path=path, line=line, field=field)
    return out


def csv_guard(text: str) -> str:
    """A CSV cell no spreadsheet takes for a formula: one space before a text whose first
    character after its leading spaces (if any) is ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return (Quepid's guard, widened to the characters OWASP lists); other texts as
    they are. A text that already starts with spaces before such a character gets one more,
    so :func:`csv_unguard` gives every text back exactly (`` -x`` is written ``  -x``).
    Every CSV cell ``judge`` writes goes through it."""
    return " " + text if text.lstrip(" ")[:1] in _GUARDED else text


def csv_unguard(text: str) -> str:
    """The text :func:`csv_guard` wrote ``text`` for: one space taken off a text that starts
    with a space and whose first character after its spaces is a guarded one. A Quepid file's
    guarded query (`` -1 star``) reads as Quepid meant it (``-1 star``)."""
    if text.startswith(" ") and text.lstrip(" ")[:1] in _GUARDED:
        return text[1:]
    return text


# ---------------------------------------------------------------------------- CSV
def _csv_rows(p: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each CSV record; strict UTF-8 (the line of a bad byte named)."""
    raw = p.read_bytes().removeprefix(_BOM)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"invalid UTF-8 at byte {exc.start}", path=str(p), line=line) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(f"not CSV: {exc}", path=str(p), line=reader.line_num) from None
        yield start, fields
        start = reader.line_num + 1


def _read_csv(p: Path) -> list[Judgment]:
    where = str(p)
    out: list[Judgment] = []
    first = True
    for line, fields in _csv_rows(p):
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        if first:
            first = False
            names = [f.strip().lower() for f in fields]
            if names in (list(CSV_HEADER), ["query", "doc_id", "rating"]):
                continue
            if len(fields) != 3 or not _rating_text(fields[2]):
                raise InputError(
                    f"the first row must be the header {','.join(CSV_HEADER)} (or a rating), got "
                    f"{','.join(fields)[:80]!r}",
                    path=where,
                    line=line,
                    field="header",
                )
        if len(fields) != 3:
            raise InputError(
                f"expected 3 fields (query,docid,rating), found {len(fields)}", path=where, line=line
            )
        query, docid, rating = fields
        if not docid and not rating.strip():
            continue  # Quepid's row for a query without ratings
        out.append(
            Judgment(
                line,
                _text(csv_unguard(query), path=where, line=line, field="query", what="query"),
                _text(csv_unguard(docid), path=where, line=line, field="docid", what="docid"),
                _rating(rating, path=where, line=line, field="rating"),
            )
        )
    return out


# ---------------------------------------------------------------------------- JSON
class _Object(dict[str, Any]):
    """A JSON object that knows the line it starts on."""

    line = 1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


class _LineDecoder(json.JSONDecoder):
    """A decoder whose objects record their first line (the pure-Python scanner, so that
    objects pass through :meth:`_object`); NaN and Infinity refused."""

    def __init__(self) -> None:
        super().__init__(parse_constant=_reject_constant)
        self.parse_object = self._object
        self.scan_once = json.scanner.py_make_scanner(self)  # type: ignore[attr-defined]

    @staticmethod
    def _object(s_and_end: tuple[str, int], *args: Any, **kwargs: Any) -> tuple[Any, int]:
        text, end = s_and_end
        obj, after = json.decoder.JSONObject(s_and_end, *args, **kwargs)  # type: ignore[attr-defined]
        out = _Object(obj)
        out.line = text.count("\n", 0, end) + 1
        return out, after


def _load_json(p: Path) -> Any:
    where = str(p)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise InputError(f"larger than {MAX_FILE_BYTES} bytes", path=where)
        raw = p.read_bytes().removeprefix(_BOM)
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", path=where) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"invalid UTF-8 at byte {exc.start}", path=where, line=raw.count(b"\n", 0, exc.start) + 1
        ) from None
    depth = 0
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', "", text):
        depth += ch in "[{"
        depth -= ch in "]}"
        if depth > MAX_JSON_DEPTH:
            raise InputError(f"nested deeper than {MAX_JSON_DEPTH} levels", path=where)
    try:
        return _LineDecoder().decode(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg}", path=where, line=exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not JSON: {exc}", path=where) from None


def _line(obj: object, default: int) -> int:
    return obj.line if isinstance(obj, _Object) else default


def _need(obj: object, kind: type, *, path: str, line: int, field: str) -> Any:
    if not isinstance(obj, kind):
        want = "an object" if kind is dict else "a list"
        raise InputError(f"must be {want}, got {type(obj).__name__}", path=path, line=line, field=field)
    return obj


def _stated(description: object) -> str | None:
    if isinstance(description, str):
        found = re.search(r"\bjudge scale: ([a-z0-9-]+)", description)
        if found:
            return found.group(1)
    return None


def _entries(data: Mapping[str, Any], key: str, where: str) -> Iterator[tuple[str, dict[str, Any], int]]:
    """The objects of the JSON list ``data[key]`` (the entries of an SRW or RRE file), each as
    ``(field, entry, line)``: its field name (``key[i]``) and its line (1 when unknown).
    ``data[key]`` not a list, or an entry not an object: an InputError naming that field."""
    entries = _need(data.get(key), list, path=where, line=1, field=key)
    for i, entry in enumerate(entries):
        at = f"{key}[{i}]"
        checked = _need(entry, dict, path=where, line=1, field=at)
        yield at, checked, _line(checked, 1)


def _read_srw(p: Path) -> JudgmentFile:
    where = str(p)
    data = _need(_load_json(p), dict, path=where, line=1, field="$")
    if data.get("type", SRW_TYPE) != SRW_TYPE:
        raise InputError(f"must be {SRW_TYPE!r}, got {data.get('type')!r}", path=where, line=1, field="type")
    out: list[Judgment] = []
    for at, entry, line in _entries(data, "judgmentRatings", where):
        query = _text(entry.get("query"), path=where, line=line, field=f"{at}.query", what="query")
        ratings = _need(entry.get("ratings"), list, path=where, line=line, field=f"{at}.ratings")
        for j, item in enumerate(ratings):
            field = f"{at}.ratings[{j}]"
            item = _need(item, dict, path=where, line=line, field=field)
            row = _line(item, line)
            docid = _text(item.get("docId"), path=where, line=row, field=f"{field}.docId", what="docid")
            value = _rating(item.get("rating"), path=where, line=row, field=f"{field}.rating")
            out.append(Judgment(row, query, docid, value, f"{field}.rating"))
    return JudgmentFile(where, "srw", out, _stated(data.get("description")))


def _read_rre(p: Path) -> JudgmentFile:
    where = str(p)
    data = _need(_load_json(p), dict, path=where, line=1, field="$")
    out: list[Judgment] = []
    for at, entry, line in _entries(data, "queries", where):
        holders = _need(entry.get("placeholders"), dict, path=where, line=line, field=f"{at}.placeholders")
        query = _text(
            holders.get("$query"), path=where, line=line, field=f"{at}.placeholders.$query", what="query"
        )
        docs = entry.get("relevant_documents")
        if docs is None:
            continue  # a query without ratings
        docs = _need(docs, dict, path=where, line=line, field=f"{at}.relevant_documents")
        for key, value in docs.items():
            field = f"{at}.relevant_documents.{key}"
            if isinstance(value, list):  # {"2": [docid, ...]}: the rating is the key
                rating = _rating(key, path=where, line=line, field=field)
                for k, docid in enumerate(value):
                    doc = _text(docid, path=where, line=line, field=f"{field}[{k}]", what="docid")
                    out.append(Judgment(line, query, doc, rating, field))
                continue
            value = _need(value, dict, path=where, line=line, field=field)
            doc = _text(key, path=where, line=line, field=field, what="docid")
            gain = _rating(value.get("gain"), path=where, line=_line(value, line), field=f"{field}.gain")
            out.append(Judgment(_line(value, line), query, doc, gain, f"{field}.gain"))
    stated = data.get("judge_scale")
    return JudgmentFile(where, "rre", out, stated if isinstance(stated, str) else None)


def _read_trec(p: Path) -> list[Judgment]:
    return [
        Judgment(number, qid, docno, Decimal(grade), "grade")
        for number, qid, docno, grade, _ in read_qrels_lines(p).rows()
    ]


def read_judgments(path: str | os.PathLike[str], fmt: JudgmentFormat | None = None) -> JudgmentFile:
    """Read a judgment list (``fmt`` None: detected, :func:`detect_judgment_format`).
    A pair (query text, or id, and docid) given twice is read once when both ratings are
    the same, and an :class:`InputError` naming both lines when they differ
    (:class:`judge.io.RatedPairs`, the rule of every labels reader)."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", path=str(p))
    use = fmt or detect_judgment_format(p)
    if use == "srw":
        out = _read_srw(p)
    elif use == "rre":
        out = _read_rre(p)
    else:
        out = JudgmentFile(str(p), use, _read_csv(p) if use == "csv" else _read_trec(p))
    pairs = RatedPairs(out.path)
    kept = [j for j in out.judgments if pairs.first(j.query, j.docid, j.rating, line=j.line, field=j.field)]
    return out if len(kept) == len(out.judgments) else replace(out, judgments=kept)


# ---------------------------------------------------------------------------- text -> id
def _norm(text: str) -> str:
    return " ".join(text.split())


def judgments_by_qid(
    judgments: JudgmentFile, queries: Mapping[str, str], *, field: str = "--queries"
) -> list[tuple[Judgment, str]]:
    """Each judgment with the id of its query: ``queries`` maps query id -> text. A text
    matches exactly, else after collapsing whitespace; a text no query has, or one that two
    queries share, is an :class:`InputError` naming the line (and ``field``, the flag that
    gave the queries). TREC judgments carry ids already."""
    if not judgments.keyed_by_text:
        return [(j, j.query) for j in judgments.judgments]
    exact: dict[str, list[str]] = {}
    loose: dict[str, list[str]] = {}
    for qid, text in queries.items():
        exact.setdefault(text, []).append(qid)
        loose.setdefault(_norm(text), []).append(qid)
    out: list[tuple[Judgment, str]] = []
    for j in judgments.judgments:
        ids = exact.get(j.query) or loose.get(_norm(j.query)) or []
        if len(ids) != 1:
            shown = j.query if len(j.query) <= 60 else j.query[:60] + "..."
            why = (
                f"query {shown!r} is not in the query set ({field})"
                if not ids
                else f"queries {', '.join(repr(q) for q in ids[:4])} share the text {shown!r}: "
                "a text cannot tell them apart; give one of them another text, or use TREC qrels"
            )
            raise InputError(why, path=judgments.path, line=j.line, field="query")
        out.append((j, ids[0]))
    return out


def shared_text(texts: Mapping[str, str]) -> tuple[str, str, str] | None:
    """The first two query ids of ``texts`` (id -> text, in its order) that have the same
    text, and the text; None when every text is its own. A list keyed by text (CSV, SRW,
    RRE) would merge such queries and :func:`judgments_by_qid` could not read it back, so
    every writer of one refuses them first."""
    owner: dict[str, str] = {}
    for qid, text in texts.items():
        other = owner.setdefault(text, qid)
        if other != qid:
            return other, qid, text
    return None


# ---------------------------------------------------------------------------- writing
Row = tuple[str, str, str]  # (query text or id, docid, rating as written)


def _grouped(rows: Iterable[Row]) -> dict[str, list[tuple[str, str]]]:
    by_query: dict[str, list[tuple[str, str]]] = {}
    for query, docid, rating in rows:
        by_query.setdefault(query, []).append((docid, rating))
    return by_query


def _csv_cell(text: str) -> str:
    """One cell as RFC 4180 has it, guarded (:func:`csv_guard`): quoted, quotes doubled, when
    it holds a comma, a quote, a line feed or a carriage return. (Python's :mod:`csv` writer
    leaves a carriage return unquoted when lines end with ``\\n``, and its reader then ends
    the record there: a query text holding one did not come back.)"""
    cell = csv_guard(text)
    return '"' + cell.replace('"', '""') + '"' if any(ch in cell for ch in ',"\r\n') else cell


def _csv_text(rows: Iterable[Row]) -> str:
    lines = [",".join(CSV_HEADER), *(",".join(_csv_cell(cell) for cell in row) for row in rows)]
    return "\n".join(lines) + "\n"


def _srw_text(rows: Iterable[Row], name: str, description: str) -> str:
    data = {
        "name": name,
        "description": description,
        "type": SRW_TYPE,
        "judgmentRatings": [
            {"query": q, "ratings": [{"docId": d, "rating": r} for d, r in docs]}
            for q, docs in _grouped(rows).items()
        ],
    }
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _gain(rating: str) -> int | float:
    value = Decimal(rating)
    return int(value) if value == value.to_integral_value() else float(value)


def _rre_text(rows: Iterable[Row], extra: Mapping[str, Any]) -> str:
    data: dict[str, Any] = {"id_field": "id", "index": "", "template": "template.json", **extra}
    data["queries"] = [
        {"placeholders": {"$query": q}, "relevant_documents": {d: {"gain": _gain(r)} for d, r in docs}}
        for q, docs in _grouped(rows).items()
    ]
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def write_judgments(
    path: str | os.PathLike[str] | None,
    rows: Sequence[Row],
    fmt: JudgmentFormat,
    *,
    name: str = "judge judgments",
    description: str = "",
    extra: Mapping[str, Any] | None = None,
    escape: Callable[[str], str] = lambda s: s,
) -> str:
    """Write ``rows`` (query text, or id for TREC; docid; rating text) in ``fmt``; returns
    the text (and writes it to ``path`` unless None). SRW: ``name`` and ``description``
    (SRW refuses quotes, backslashes, ``<`` and ``>`` there, so they are dropped);
    RRE: ``extra`` top-level fields; TREC: ids through ``escape`` (one token each) and
    integer grades."""
    if fmt == "csv":
        text = _csv_text(rows)
    elif fmt == "srw":
        clean = {ord(c): None for c in '"\\<>'}
        text = _srw_text(rows, name.translate(clean)[:2000], description.translate(clean)[:2000])
    elif fmt == "rre":
        text = _rre_text(rows, extra or {})
    else:
        fraction = next((r for _, _, r in rows if Decimal(r) != Decimal(r).to_integral_value()), None)
        if fraction is not None:
            raise InputError(
                f"TREC qrels grades are integers, got {fraction}: write it on an integer scale",
                field="--scale",
            )
        text = "".join(f"{escape(q)} 0 {escape(d)} {int(Decimal(r))}\n" for q, d, r in rows)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8", newline="")
    return text
