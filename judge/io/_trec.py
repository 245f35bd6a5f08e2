"""TREC qrels and run files, read the way trec_eval reads them, fast.

* qrels: ``qid iter docno grade`` (4 whitespace-separated columns, grade an integer; a
  negative grade means "in the pool but unjudged", as trec_eval).
* run: ``qid Q0 docno rank score tag`` (6 columns; later columns are ignored, as
  trec_eval does). The rank column is ignored: documents are ranked by score descending,
  ties broken by docno descending (byte order) — trec_eval's ``comp_sim_docno``. Scores
  are compared as doubles. The run id is the tag of the last line. A docno twice in one
  query is an error (trec_eval refuses it too).
* Blank lines and lines whose first character is ``#`` are skipped.

Parsing works on bytes with numpy (no Python object per line): the file is read in chunks,
tokenised with vectorised whitespace masks, and the columns land in fixed-width byte-string
and numeric arrays. Any bad line raises :class:`~judge.io.InputError` naming the file, the
line and the column, before any evaluation work.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from judge.io._errors import InputError

__all__ = [
    "MIN_INCLUSION",
    "JudgedRanking",
    "Qrels",
    "QrelsLines",
    "Run",
    "join_run_qrels",
    "qrels_escape",
    "qrels_unescape",
    "read_qrels",
    "read_qrels_lines",
    "read_run",
    "write_qrels",
    "write_run",
]

_CHUNK_BYTES = 1 << 20  # small enough for the byte masks to stay in cache
_NOT_IN_POOL = -1
_UNJUDGED_IN_POOL = -2
_QRELS_COLUMNS = ("qid", "iter", "docno", "grade")
_RUN_COLUMNS = ("qid", "Q0", "docno", "rank", "score", "tag")

Bytes = npt.NDArray[np.bytes_]

MIN_INCLUSION = 1e-6
"""The smallest inclusion probability a sample may record or a sample file give: a pair drawn
with a smaller one would weigh more than a million labels (``1 / p``), and ``1e-320`` is not
even a normal double (its inverse overflows). Below it: :class:`InputError` naming the line
and ``inclusion`` (exit 2, 422 on the service)."""


def qrels_escape(value: str) -> str:
    """An id as one TREC qrels token that :func:`qrels_unescape` reads back exactly: every
    whitespace, control character and ``%`` percent-encoded (its UTF-8 bytes as ``%XX``),
    everything else kept (``doc 1`` -> ``doc%201``, ``50%`` -> ``50%25``). Every qrels file
    ``judge`` writes from ids it holds (label exports, sample files) writes them with this,
    and every reader of such a file reads them with :meth:`QrelsLines.rows` ``(escaped=True)``."""
    return "".join(
        urllib.parse.quote(ch, safe="")
        if ch == "%" or ch.isspace() or ch < " " or "\x7f" <= ch <= "\x9f"
        else ch
        for ch in value
    )


def qrels_unescape(token: str) -> str:
    """The id a :func:`qrels_escape` token stands for (``%XX`` sequences decoded; a sequence
    that is not UTF-8 raises :class:`UnicodeDecodeError`)."""
    return urllib.parse.unquote(token, errors="strict") if "%" in token else token


_V = TypeVar("_V")
_T = TypeVar("_T")
_S = TypeVar("_S", bound=np.generic)
_Keys = npt.NDArray[np.uint64] | Bytes


def _decode(value: bytes | np.bytes_) -> str:
    return bytes(value).decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------- tokenising
@dataclass
class _Columns:
    """Wanted columns of every data line, the 1-based line number of each row, and the
    last token of the ``last`` column (the run tag). ``width``: with an optional last
    column, the number of columns every line of the file has (that of the first line)."""

    columns: dict[int, list[npt.NDArray[np.uint8]]]
    lines: list[npt.NDArray[np.int64]]
    last: bytes = b""
    width: int | None = None


def _gather(
    buf: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint8]:
    """Tokens as a zero-padded (n, width) uint8 matrix (view it as ``S{width}``)."""
    lengths = ends - starts
    width = int(lengths.max()) if lengths.shape[0] else 1
    shortest = int(lengths.min()) if lengths.shape[0] else 0
    out = np.zeros((starts.shape[0], width), dtype=np.uint8)
    for j in range(width):
        if j < shortest:
            out[:, j] = buf[starts + j]
        else:
            more = np.flatnonzero(lengths > j)
            out[more, j] = buf[starts[more] + j]
    return out


def _tokenise_chunk(
    data: bytes,
    *,
    ncols: int,
    wanted: Sequence[int],
    last: int | None,
    line_base: int,
    path: str,
    names: Sequence[str],
    extra_ok: bool,
    out: _Columns,
    optional: bool = False,
) -> int:
    """Tokenise the complete lines in ``data`` (which ends with a newline); returns how
    many lines it held. Works on whole-chunk byte masks (C ``isspace`` whitespace): no
    Python object per line. ``optional``: the last of ``names`` may be left out, by every
    line of the file alike."""
    buf = np.frombuffer(data, dtype=np.uint8)
    space = np.less_equal(buf - np.uint8(9), 4)  # \t \n \v \f \r (uint8 wraps below 9)
    space |= buf == 32
    edge = np.empty(buf.shape[0], dtype=np.bool_)
    edge[0] = not space[0]
    np.greater(space[:-1], space[1:], out=edge[1:])  # space then non-space
    starts = np.flatnonzero(edge)
    np.less(space[:-1], space[1:], out=edge[1:])  # non-space then space
    edge[0] = False
    ends = np.flatnonzero(edge)
    del edge, space
    newlines = np.flatnonzero(buf == 10)
    n_lines = int(newlines.shape[0])
    before = np.searchsorted(starts, newlines)  # tokens that start before each newline
    counts = np.diff(before, prepend=0)
    rows = np.flatnonzero(counts)  # non-blank lines
    first = before[rows] - counts[rows]  # index of each row's first token
    if rows.shape[0]:
        comment = buf[starts[first]] == 35  # '#'
        if np.any(comment):
            rows, first = rows[~comment], first[~comment]
    if rows.shape[0] == 0:
        return n_lines
    found = counts[rows]
    least = ncols - 1 if optional else ncols
    wrong = (found < ncols) if extra_ok else (found < least) | (found > ncols)
    if np.any(wrong):
        i = int(np.flatnonzero(wrong)[0])
        got = int(found[i])
        expected = f"at least {ncols}" if extra_ok else f"{least} or {ncols}" if optional else f"{ncols}"
        shown = " ".join(names[:-1]) + f" [{names[-1]}]" if optional else " ".join(names)
        raise InputError(
            f"expected {expected} whitespace-separated columns ({shown}), found {got}",
            path=path,
            line=line_base + int(rows[i]) + 1,
            field=names[got] if got < least else None,
        )
    if optional:
        if out.width is None:
            out.width = int(found[0])
        other = np.flatnonzero(found != out.width)
        if other.shape[0]:
            i = int(other[0])
            raise InputError(
                f"{int(found[i])} columns where earlier lines have {out.width}: give every line "
                f"a {names[-1]} or none",
                path=path,
                line=line_base + int(rows[i]) + 1,
                field=names[-1],
            )
    for col in wanted:
        if optional and col >= (out.width or ncols):
            continue
        out.columns[col].append(_gather(buf, starts[first + col], ends[first + col]))
    if last is not None:
        t = int(first[-1]) + last
        out.last = bytes(data[int(starts[t]) : int(ends[t])])
    out.lines.append(rows.astype(np.int64) + (line_base + 1))
    return n_lines


def _read_columns(
    path: str | os.PathLike[str],
    *,
    names: Sequence[str],
    wanted: Sequence[int],
    last: int | None = None,
    extra_ok: bool = False,
    optional: bool = False,
) -> tuple[dict[int, npt.NDArray[np.uint8]], npt.NDArray[np.int64], bytes]:
    """Read a whitespace-separated file in chunks: wanted columns as (n, width) uint8
    matrices, the line number of each row, and the last row's ``last`` column.
    ``optional``: the last column may be absent from every line (then it is not returned)."""
    where = str(path)
    out = _Columns(columns={c: [] for c in wanted}, lines=[])
    options = {
        "ncols": len(names),
        "wanted": wanted,
        "last": last,
        "path": where,
        "names": names,
        "optional": optional,
    }
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with-block below
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", path=where) from None
    with handle:
        line_base = 0
        carry = b""
        while True:
            block = handle.read(_CHUNK_BYTES)
            if not block:
                break
            data = carry + block if carry else block
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry = data[cut + 1 :]
            line_base += _tokenise_chunk(
                data[: cut + 1] if cut + 1 < len(data) else data,
                line_base=line_base,
                extra_ok=extra_ok,
                out=out,
                **options,  # type: ignore[arg-type]
            )
        if carry.strip():
            _tokenise_chunk(carry + b"\n", line_base=line_base, extra_ok=extra_ok, out=out, **options)  # type: ignore[arg-type]
    if not out.lines:
        raise InputError("empty file: no data lines", path=where, line=1)
    columns: dict[int, npt.NDArray[np.uint8]] = {}
    for col, parts in out.columns.items():
        if not parts:  # an optional column no line has
            continue
        width = max(p.shape[1] for p in parts)
        padded = [p if p.shape[1] == width else np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in parts]
        columns[col] = padded[0] if len(padded) == 1 else np.concatenate(padded)
        out.columns[col] = []
    lines = out.lines[0] if len(out.lines) == 1 else np.concatenate(out.lines)
    return columns, lines, out.last


def _as_strings(matrix: npt.NDArray[np.uint8]) -> Bytes:
    return np.ascontiguousarray(matrix).view(f"S{matrix.shape[1]}").reshape(-1)


def _parse_error(
    text: Bytes, lines: npt.NDArray[np.int64], index: int, *, path: str, field: str, what: str
) -> InputError:
    return InputError(f"{what}, got {_decode(text[index])!r}", path=path, line=int(lines[index]), field=field)


def _parse_floats(
    matrix: npt.NDArray[np.uint8],
    lines: npt.NDArray[np.int64],
    *,
    path: str,
    field: str,
    what: str = "score must be a number",
) -> npt.NDArray[np.float64]:
    """Scores as doubles, the value C's ``atof`` gives (numpy parses correctly rounded);
    NaN, Python-only forms like ``1_0`` and junk raise InputError naming the line."""
    text = _as_strings(matrix)
    try:
        if np.any(matrix == 95):  # Python accepts '1_0', C does not
            raise ValueError
        values = np.asarray(text.astype(np.float64), dtype=np.float64)
    except (ValueError, OverflowError):
        i = _first_unparsable(text, np.float64)
        raise _parse_error(text, lines, i, path=path, field=field, what=what) from None
    nan = np.flatnonzero(np.isnan(values))
    if nan.shape[0]:
        raise _parse_error(text, lines, int(nan[0]), path=path, field=field, what=what)
    return values


def _parse_ints(
    matrix: npt.NDArray[np.uint8], lines: npt.NDArray[np.int64], *, path: str, field: str
) -> npt.NDArray[np.int64]:
    """Relevance grades as integers; InputError names the line."""
    text = _as_strings(matrix)
    try:
        if np.any(matrix == 95):
            raise ValueError
        return np.asarray(text.astype(np.int64), dtype=np.int64)
    except (ValueError, OverflowError):
        i = _first_unparsable(text, np.int64)
        raise _parse_error(
            text, lines, i, path=path, field=field, what="relevance grade must be an integer"
        ) from None


def _first_unparsable(text: Bytes, dtype: type[np.float64] | type[np.int64]) -> int:
    """Index of the first entry numpy cannot convert (blockwise, then one by one)."""
    block = 4096
    for start in range(0, text.shape[0], block):
        part = text[start : start + block]
        try:
            if any(b"_" in bytes(x) for x in part):
                raise ValueError
            part.astype(dtype)
            continue
        except (ValueError, OverflowError):
            pass
        for offset in range(part.shape[0]):
            try:
                if b"_" in bytes(part[offset]):
                    raise ValueError
                part[offset : offset + 1].astype(dtype)
            except (ValueError, OverflowError):
                return start + offset
    return 0


def _group(qids: Bytes) -> tuple[Bytes, npt.NDArray[np.int64] | None, npt.NDArray[np.int64]]:
    """Unique qids (sorted bytewise), a stable order grouping rows by qid (None if already
    grouped and sorted), and group offsets."""
    n = qids.shape[0]
    change = np.empty(n, dtype=np.bool_)
    change[0] = True
    np.not_equal(qids[1:], qids[:-1], out=change[1:])
    block_starts = np.flatnonzero(change)
    heads = qids[block_starts]
    unique, inverse = np.unique(heads, return_inverse=True)
    block_lengths = np.diff(np.append(block_starts, n))
    counts = np.bincount(inverse, weights=block_lengths, minlength=unique.shape[0]).astype(np.int64)
    offsets = np.zeros(unique.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if heads.shape[0] == unique.shape[0] and np.all(inverse[1:] > inverse[:-1]):
        return unique, None, offsets
    codes = np.repeat(inverse.astype(np.int64), block_lengths)
    return unique, np.argsort(codes, kind="stable"), offsets


def _docno_keys(docnos: Bytes) -> npt.NDArray[np.uint64] | Bytes:
    """Keys that sort and compare exactly like the docnos (bytewise, as strcmp).

    Docnos of at most 8 bytes become big-endian unsigned integers (zero padding sorts
    first, like the end of a C string): integer sorts and searches are several times
    faster than byte-string ones. Longer docnos are used as they are.
    """
    if docnos.dtype.itemsize > 8:
        return docnos
    padded = docnos.astype("S8") if docnos.dtype.itemsize < 8 else docnos
    return np.ascontiguousarray(padded).view(">u8").astype(np.uint64)


def _same_keys(a: npt.NDArray[np.uint64] | Bytes, b: npt.NDArray[np.uint64] | Bytes) -> bool:
    return a.dtype == np.uint64 and b.dtype == np.uint64


# ---------------------------------------------------------------------------- grouped rows
class _ByQuery:
    """What :class:`Qrels` and :class:`Run` share: rows grouped by query, ``qids`` sorted
    bytewise, ``offsets[i]:offsets[i+1]`` the rows of query i."""

    qids: Bytes
    offsets: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.qids.shape[0])

    @property
    def query_ids(self) -> list[str]:
        return [_decode(q) for q in self.qids]

    def index(self, qid: str) -> int | None:
        key = qid.encode()
        i = int(np.searchsorted(self.qids, key))
        return i if i < self.qids.shape[0] and self.qids[i] == key else None

    def _rows(self, qid: str) -> slice | None:
        """The rows of one query (None if the query is absent)."""
        i = self.index(qid)
        if i is None:
            return None
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))


def _flatten(
    by_query: Mapping[str, Mapping[str, _V]], convert: Callable[[_V], _T]
) -> tuple[list[bytes], list[bytes], list[_T]]:
    """``{qid: {docno: value}}`` as three aligned lists: qids, docnos, converted values."""
    qids = [q.encode() for q, docs in by_query.items() for _ in docs]
    docnos = [d.encode() for docs in by_query.values() for d in docs]
    values = [convert(x) for docs in by_query.values() for x in docs.values()]
    return qids, docnos, values


def _grouped(
    qids: Bytes, docnos: Bytes, values: npt.NDArray[_S], lines: npt.NDArray[np.int64] | None
) -> tuple[Bytes, npt.NDArray[np.int64], Bytes, npt.NDArray[_S], npt.NDArray[np.int64] | None, _Keys]:
    """Rows grouped by query: ``(unique qids, offsets, docnos, values, lines, keys)``."""
    unique, order, offsets = _group(qids)
    if order is not None:
        docnos, values = docnos[order], values[order]
        lines = lines[order] if lines is not None else None
    return unique, offsets, docnos, values, lines, _docno_keys(docnos)


# ---------------------------------------------------------------------------- qrels
@dataclass(frozen=True, eq=False)
class Qrels(_ByQuery):
    """Judgements grouped by query. ``qids`` sorted bytewise; within a query ``docnos`` are
    sorted bytewise and ``grades`` aligned with them; ``offsets[i]:offsets[i+1]`` is query i.
    ``keys`` are the docnos as order-preserving integers when they fit in 8 bytes."""

    qids: Bytes
    offsets: npt.NDArray[np.int64]
    docnos: Bytes
    grades: npt.NDArray[np.int64]
    keys: npt.NDArray[np.uint64] | Bytes = field(repr=False)
    path: str = "<memory>"

    def query(self, qid: str) -> dict[str, int]:
        """``{docno: grade}`` of one query (empty if the query has no judgements)."""
        rows = self._rows(qid)
        if rows is None:
            return {}
        return {_decode(d): int(g) for d, g in zip(self.docnos[rows], self.grades[rows], strict=True)}

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {qid: self.query(qid) for qid in self.query_ids}

    @classmethod
    def from_mapping(cls, judgements: Mapping[str, Mapping[str, int]]) -> Qrels:
        """Build from ``{qid: {docno: grade}}`` (no file)."""
        qids, docnos, grades = _flatten(judgements, int)
        if not qids:
            raise ValueError("no judgements")
        return _build_qrels(
            np.array(qids), np.array(docnos), np.array(grades, dtype=np.int64), None, "<memory>"
        )


def _build_qrels(
    qids: Bytes, docnos: Bytes, grades: npt.NDArray[np.int64], lines: npt.NDArray[np.int64] | None, path: str
) -> Qrels:
    unique, offsets, docnos, grades, lines, keys = _grouped(qids, docnos, grades, lines)
    bounds = offsets.tolist()
    for i in range(unique.shape[0]):
        s, e = bounds[i], bounds[i + 1]
        by_doc = np.argsort(keys[s:e], kind="stable")
        if keys is not docnos:
            keys[s:e] = keys[s:e][by_doc]
        docnos[s:e] = docnos[s:e][by_doc]
        grades[s:e] = grades[s:e][by_doc]
        if lines is not None:
            lines[s:e] = lines[s:e][by_doc]
        dup = np.flatnonzero(keys[s + 1 : e] == keys[s : e - 1])
        if dup.shape[0]:
            j = s + int(dup[0]) + 1
            first = f" (first at line {int(lines[j - 1])})" if lines is not None else ""
            raise InputError(
                f"duplicate judgement of docno {_decode(docnos[j])!r} "
                f"for query {_decode(unique[i])!r}{first}",
                path=path,
                line=int(lines[j]) if lines is not None else None,
                field="docno",
            )
    return Qrels(qids=unique, offsets=offsets, docnos=docnos, grades=grades, keys=keys, path=path)


def read_qrels(path: str | os.PathLike[str]) -> Qrels:
    """Read a TREC qrels file (``qid iter docno grade``)."""
    rows = read_qrels_lines(path)
    return _build_qrels(rows.qids, rows.docnos, rows.grades, rows.lines, rows.path)


@dataclass(frozen=True, eq=False)
class QrelsLines:
    """The data lines of a qrels file as written, in file order: ``lines`` (1-based line
    numbers), ``qids``, ``docnos`` (bytes), ``grades`` and, for a sample file whose lines
    carry it, ``inclusion`` (each pair's inclusion probability, in [:data:`MIN_INCLUSION`, 1];
    None without)."""

    path: str
    lines: npt.NDArray[np.int64]
    qids: Bytes
    docnos: Bytes
    grades: npt.NDArray[np.int64]
    inclusion: npt.NDArray[np.float64] | None = None

    def __len__(self) -> int:
        return int(self.lines.shape[0])

    def rows(self, *, escaped: bool = False) -> Iterator[tuple[int, str, str, int, float | None]]:
        """``(line, qid, docno, grade, inclusion)`` of every line, ids decoded as strict
        UTF-8 (:class:`InputError` naming the line and the field otherwise); ``escaped``:
        the ids are :func:`qrels_escape` tokens (a file ``judge`` wrote: a label export, a
        sample file) and are read back with :func:`qrels_unescape`, the one place that does."""
        inclusion = self.inclusion.tolist() if self.inclusion is not None else None
        columns = (self.lines.tolist(), self.qids.tolist(), self.docnos.tolist(), self.grades.tolist())
        for i, (number, qid, docno, grade) in enumerate(zip(*columns, strict=True)):
            ids: list[str] = []
            for name, raw in (("qid", qid), ("docno", docno)):
                try:
                    text = bytes(raw).decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        f"invalid UTF-8 at byte {exc.start}", path=self.path, line=number, field=name
                    ) from None
                if escaped:
                    try:
                        text = qrels_unescape(text)
                    except UnicodeDecodeError:
                        raise InputError(
                            "a %XX escape that is not UTF-8", path=self.path, line=number, field=name
                        ) from None
                ids.append(text)
            yield number, ids[0], ids[1], grade, None if inclusion is None else float(inclusion[i])


def read_qrels_lines(path: str | os.PathLike[str], *, inclusion: bool = False) -> QrelsLines:
    """The one reader of TREC qrels lines (``qid iter docno grade``; with ``inclusion``
    an optional fifth column, the probability the pair was drawn with, in (0, 1], given by
    every line of the file or by none). Bad input (no data line, a wrong number of columns,
    a grade that is not an integer, an inclusion probability that is not a finite number
    in [:data:`MIN_INCLUSION`, 1]) raises :class:`InputError` naming the file, the line and the field."""
    where = str(path)
    names = (*_QRELS_COLUMNS, "inclusion") if inclusion else _QRELS_COLUMNS
    wanted = (0, 2, 3, 4) if inclusion else (0, 2, 3)
    columns, lines, _ = _read_columns(path, names=names, wanted=wanted, optional=inclusion)
    grades = _parse_ints(columns.pop(3), lines, path=where, field="grade")
    probabilities = None
    if 4 in columns:
        matrix = columns.pop(4)
        probabilities = _parse_floats(
            matrix, lines, path=where, field="inclusion", what="inclusion probability must be a number"
        )
        ok = np.isfinite(probabilities) & (probabilities >= MIN_INCLUSION) & (probabilities <= 1.0)
        bad = np.flatnonzero(~ok)
        if bad.shape[0]:
            i, text = int(bad[0]), _as_strings(matrix)
            raise _parse_error(
                text, lines, i, path=where, field="inclusion", what=f"must be in [{MIN_INCLUSION:g}, 1]"
            )
    return QrelsLines(where, lines, _as_strings(columns[0]), _as_strings(columns[2]), grades, probabilities)


# ---------------------------------------------------------------------------- runs
@dataclass(frozen=True, eq=False)
class Run(_ByQuery):
    """A run grouped by query, each query's documents in trec_eval rank order (score
    descending, docno descending on ties). ``qids`` sorted bytewise; ``keys`` are the
    docnos as order-preserving integers when they fit in 8 bytes."""

    qids: Bytes
    offsets: npt.NDArray[np.int64]
    docnos: Bytes
    scores: npt.NDArray[np.float64]
    run_id: str
    keys: npt.NDArray[np.uint64] | Bytes = field(repr=False)
    path: str = "<memory>"

    @property
    def num_lines(self) -> int:
        return int(self.docnos.shape[0])

    def ranking(self, qid: str) -> list[tuple[str, float]]:
        """``[(docno, score), ...]`` of one query in rank order (empty if absent)."""
        rows = self._rows(qid)
        if rows is None:
            return []
        return [(_decode(d), float(x)) for d, x in zip(self.docnos[rows], self.scores[rows], strict=True)]

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {qid: dict(self.ranking(qid)) for qid in self.query_ids}

    @classmethod
    def from_mapping(cls, scores: Mapping[str, Mapping[str, float]], *, run_id: str = "run") -> Run:
        """Build from ``{qid: {docno: score}}`` (no file)."""
        qids, docnos, values = _flatten(scores, float)
        if not qids:
            raise ValueError("empty run")
        return _build_run(
            np.array(qids), np.array(docnos), np.array(values, dtype=np.float64), None, run_id, "<memory>"
        )


def _build_run(
    qids: Bytes,
    docnos: Bytes,
    scores: npt.NDArray[np.float64],
    lines: npt.NDArray[np.int64] | None,
    run_id: str,
    path: str,
) -> Run:
    unique, offsets, docnos, scores, lines, keys = _grouped(qids, docnos, scores, lines)
    bounds = offsets.tolist()
    for i in range(unique.shape[0]):  # duplicate docnos within a query (trec_eval refuses them)
        s, e = bounds[i], bounds[i + 1]
        sorted_keys = np.sort(keys[s:e])
        if e - s > 1 and np.any(sorted_keys[1:] == sorted_keys[:-1]):
            _duplicate_in_run(docnos[s:e], keys[s:e], lines, s, unique[i], path)
    _rank(keys, docnos, scores, offsets)
    return Run(
        qids=unique, offsets=offsets, docnos=docnos, scores=scores, run_id=run_id, keys=keys, path=path
    )


def _rank(
    keys: npt.NDArray[np.uint64] | Bytes,
    docnos: Bytes,
    scores: npt.NDArray[np.float64],
    offsets: npt.NDArray[np.int64],
) -> None:
    """Put every query's documents in trec_eval order, in place: score descending, then
    docno descending. Runs are usually written in score order already, so only queries out
    of score order are sorted whole; in the others only groups of tied scores are reordered."""
    n = scores.shape[0]
    if n < 2:
        return
    counts = np.diff(offsets)
    pair_query = np.repeat(np.arange(counts.shape[0]), counts)[:-1]  # query of pair (i, i+1)
    inside = np.ones(n - 1, dtype=np.bool_)
    inside[offsets[1:-1] - 1] = False
    unsorted = np.unique(pair_query[inside & (scores[1:] > scores[:-1])])
    for i in unsorted.tolist():
        s, e = int(offsets[i]), int(offsets[i + 1])
        by_key = np.argsort(keys[s:e], kind="stable")
        # ascending (score, docno) then reversed: score descending, docno descending on ties
        ranked = by_key[np.argsort(scores[s:e][by_key], kind="stable")[::-1]]
        _permute(keys, docnos, scores, s, ranked + s)
    tie = inside & (scores[1:] == scores[:-1])
    if unsorted.shape[0]:
        tie &= ~np.isin(pair_query, unsorted)
    pairs = np.flatnonzero(tie)
    if pairs.shape[0] == 0:
        return
    rows = np.union1d(pairs, pairs + 1)  # rows in a group of tied scores
    starts_group = ~np.isin(rows - 1, pairs)
    group = np.cumsum(starts_group)
    tied = keys[rows]
    descending: npt.NDArray[np.generic]
    if tied.dtype == np.uint64:
        descending = np.bitwise_not(np.asarray(tied, dtype=np.uint64))
    else:
        descending = -np.unique(tied, return_inverse=True)[1]
    _permute(keys, docnos, scores, rows, rows[np.lexsort((descending, group))])


def _permute(
    keys: npt.NDArray[np.uint64] | Bytes,
    docnos: Bytes,
    scores: npt.NDArray[np.float64],
    target: int | npt.NDArray[np.intp],
    source: npt.NDArray[np.intp],
) -> None:
    """Rows ``target`` (a start offset or row indices) receive the rows ``source``."""
    where: slice | npt.NDArray[np.intp] = (
        slice(target, target + source.shape[0]) if isinstance(target, int) else target
    )
    if keys is not docnos:
        keys[where] = keys[source]
    docnos[where] = docnos[source]
    scores[where] = scores[source]


def _duplicate_in_run(
    docs: Bytes,
    keys: npt.NDArray[np.uint64] | Bytes,
    lines: npt.NDArray[np.int64] | None,
    offset: int,
    qid: bytes,
    path: str,
) -> None:
    sorted_keys = np.sort(keys)
    key = sorted_keys[1:][sorted_keys[1:] == sorted_keys[:-1]][0]
    where = np.flatnonzero(keys == key)
    docno = docs[where[0]]
    line: int | None = None
    first = ""
    if lines is not None:
        at = np.sort(lines[offset + where])
        line, first = int(at[1]), f" (first at line {int(at[0])})"
    raise InputError(
        f"duplicate docno {_decode(docno)!r} for query {_decode(qid)!r}{first}",
        path=path,
        line=line,
        field="docno",
    )


def read_run(path: str | os.PathLike[str]) -> Run:
    """Read a TREC run file (``qid Q0 docno rank score tag``; extra columns are ignored,
    as trec_eval does)."""
    where = str(path)
    columns, lines, tag = _read_columns(path, names=_RUN_COLUMNS, wanted=(0, 2, 4), last=5, extra_ok=True)
    scores = _parse_floats(columns.pop(4), lines, path=where, field="score")
    return _build_run(_as_strings(columns[0]), _as_strings(columns[2]), scores, lines, _decode(tag), where)


# ---------------------------------------------------------------------------- joining
@dataclass(frozen=True)
class JudgedRanking:
    """One query of a run joined with its qrels (see :class:`judge.metrics.JudgedQuery`).

    ``grades``: grade of each retrieved document in rank order (-1 not in the qrels, -2 in
    the qrels with a negative grade), ``None`` for a query missing from the run;
    ``qrels``: every judged grade of the query.
    """

    qid: str
    grades: npt.NDArray[np.int64] | None
    qrels: npt.NDArray[np.int64]


def join_run_qrels(
    qrels: Qrels, run: Run, *, complete: bool = False, max_docs: int | None = None
) -> Iterator[JudgedRanking]:
    """Yield the queries trec_eval evaluates, in its order (qrels qids, bytewise).

    Queries of the run without judgements are ignored. A judged query missing from the run
    is skipped, or with ``complete=True`` (trec_eval ``-c``) yielded with ``grades=None``.
    ``max_docs`` (trec_eval ``-M``) keeps the top documents of each ranking.
    """
    if max_docs is not None and max_docs < 1:
        raise ValueError(f"max_docs must be a positive integer, got {max_docs}")
    fast = _same_keys(qrels.keys, run.keys)
    judged_keys = qrels.keys if fast else qrels.docnos
    ranked_keys = run.keys if fast else run.docnos
    positions = np.searchsorted(run.qids, qrels.qids).tolist()
    q_offsets = qrels.offsets.tolist()
    r_offsets = run.offsets.tolist()
    n_run = run.qids.shape[0]
    for i, qid_bytes in enumerate(qrels.qids.tolist()):
        qs, qe = q_offsets[i], q_offsets[i + 1]
        judged = qrels.grades[qs:qe]
        qid = _decode(qid_bytes)
        j = positions[i]
        if j >= n_run or run.qids[j] != qid_bytes:
            if complete:
                yield JudgedRanking(qid=qid, grades=None, qrels=judged)
            continue
        rs, re_ = r_offsets[j], r_offsets[j + 1]
        if max_docs is not None:
            re_ = min(re_, rs + max_docs)
        docs = ranked_keys[rs:re_]
        pool = judged_keys[qs:qe]
        grades = np.full(re_ - rs, _NOT_IN_POOL, dtype=np.int64)
        if qe > qs:
            # sorted needles make the binary searches predictable: ~4x faster than unsorted
            by_doc = np.argsort(docs)
            where = np.empty(docs.shape[0], dtype=np.intp)
            where[by_doc] = np.searchsorted(pool, docs[by_doc])
            np.minimum(where, qe - qs - 1, out=where)
            found = pool[where] == docs
            hits = judged[where[found]]
            hits[hits < 0] = _UNJUDGED_IN_POOL
            grades[found] = hits
        yield JudgedRanking(qid=qid, grades=grades, qrels=judged)


# ---------------------------------------------------------------------------- writing
def write_run(
    path: str | os.PathLike[str],
    rankings: Mapping[str, Sequence[tuple[str, float]]],
    *,
    run_id: str = "judge",
) -> None:
    """Write ``{qid: [(docno, score), ...]}`` as a TREC run (6 columns; ranks from 1 in the
    given order, which should be by score descending)."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for qid, ranking in rankings.items():
            for rank, (docno, score) in enumerate(ranking, start=1):
                handle.write(f"{qid} Q0 {docno} {rank} {score!r} {run_id}\n")


def write_qrels(path: str | os.PathLike[str], judgements: Mapping[str, Mapping[str, int]]) -> None:
    """Write ``{qid: {docno: grade}}`` as a TREC qrels file (4 columns, iter 0)."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for qid, docs in judgements.items():
            for docno, grade in docs.items():
                handle.write(f"{qid} 0 {docno} {int(grade)}\n")
