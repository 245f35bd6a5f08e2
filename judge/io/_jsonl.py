"""Reading and validating JSONL datasets for batch scoring.

One line is one query::

    {"id": "q1", "query": "...", "retrieval_context": ["text", {"id": "d7", "text": "..."}],
     "expected_ids": ["d7"], "qrels": {"d7": 2}}

``id`` is optional (the line number, as ``"#<line>"``, stands in); ``expected_ids`` (binary
ground truth) and ``qrels`` (graded ground truth, passage id -> grade) are optional, and so
are ``expected_output`` (a reference answer, for contextual recall) and a passage object's
``url`` (or ``site``/``source``, for source quality). Field
names can be mapped (``{"query": "question"}`` reads the query from ``question``); the
mappable names are the keys of :data:`MAPPABLE_FIELDS`. Input may be gzip-compressed
(detected from its first bytes, whatever the file name).

Every problem is an :class:`~judge.io._errors.InputError` naming the file, the 1-based line
and the field. A line with a problem that makes it unusable is *rejected* (yielded as an
``InputError``); a passage over the length limit is truncated, flagged on the passage and
reported as a *warning* on its record, and the record is still scored.

Hostile lines are rejects too, never a crash: invalid UTF-8, a string with an escaped lone
surrogate (``"\\ud800"``, which cannot be written back as UTF-8), JSON nested deeper than
:data:`MAX_JSON_DEPTH` levels, and, under :class:`DatasetLimits` (``judge serve`` sets them
for its jobs), a query longer than ``max_query_chars`` or more than ``max_passages``
passages in one record.
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import hashlib
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from judge.io._errors import InputError

DEFAULT_MAX_PASSAGE_CHARS = 8000
"""Passages longer than this many characters are truncated and flagged."""

MAPPABLE_FIELDS: dict[str, str] = {
    "id": "the query's id (optional; '#<line>' when absent)",
    "query": "the query text (required)",
    "retrieval_context": "the ranked passages (required, non-empty list)",
    "expected_ids": "ids of the relevant passages (optional binary ground truth)",
    "qrels": "passage id -> graded relevance (optional graded ground truth)",
    "expected_output": "a reference answer (optional; enables contextual recall)",
    "text": "a passage object's text key",
    "passage_id": "a passage object's id key (named 'id' in the file by default)",
    "url": "a passage object's URL key (optional; 'site' or 'source' are read when it is absent)",
}

SITE_KEYS = ("site", "source")
"""Passage keys read for the source (a site name or host) when the URL key is absent."""

_DEFAULT_KEYS: dict[str, str] = {name: name for name in MAPPABLE_FIELDS} | {"passage_id": "id"}

MAX_JSON_DEPTH = 64
"""A line whose JSON nests arrays/objects deeper than this (the line's object is level 1)
is rejected."""

MAX_ID_CHARS = 1000
"""The longest query id or passage id (docno) accepted anywhere: a job's or a comparison's
lines, a human label, a label import. One number, so every id a job takes can be labelled."""


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a query id or docno (None: it can): empty or blank, longer
    than :data:`MAX_ID_CHARS`, or holding a control character (NUL, newline, ...).
    Whitespace inside an id is kept as given."""
    if not value.strip():
        return "must not be empty"
    if len(value) > MAX_ID_CHARS:
        return f"id of {len(value)} characters; at most {MAX_ID_CHARS}"
    bad = next((ch for ch in value if ch < " " or "\x7f" <= ch <= "\x9f"), None)
    if bad is not None:
        return f"control character U+{ord(bad):04X} in an id"
    return None


# A \uD800-\uDFFF escape: the only way a lone surrogate gets into a line that is valid UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
# The tokens that matter for nesting: strings (skipped whole), brackets and colons.
_NESTING_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


@dataclass(frozen=True, slots=True)
class DatasetLimits:
    """Bounds on one record (None: unbounded). A record over one is rejected naming the field."""

    max_query_chars: int | None = None
    max_passages: int | None = None


_LIMITS: contextvars.ContextVar[DatasetLimits | None] = contextvars.ContextVar(
    "judge_dataset_limits", default=None
)


@contextlib.contextmanager
def dataset_limits(limits: DatasetLimits) -> Iterator[None]:
    """Apply ``limits`` to every dataset read in this context (a server job's run: its
    reads of the input go through the batch layer, which need not know the service's bounds)."""
    token = _LIMITS.set(limits)
    try:
        yield
    finally:
        _LIMITS.reset(token)


def _printable(name: str) -> str:
    """A key as it can be written back (lone surrogates as ``\\udXXX``)."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _bad_unicode(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def json_problem(
    obj: Any, raw: str | None = None, *, max_depth: int = MAX_JSON_DEPTH
) -> tuple[str, str] | None:
    """The first hostile spot of a parsed JSON value: ``(path, problem)`` for a string (or
    key) with a lone surrogate, or ``(top-level key, problem)`` for a container nested deeper
    than ``max_depth``; else None.
    ``raw`` (the text it was parsed from) lets the common case skip the walk: no surrogate
    escape and too few brackets to nest that deep."""
    check_unicode = raw is None or _SURROGATE_ESCAPE.search(raw) is not None
    check_depth = raw is None or raw.count("[") + raw.count("{") > max_depth
    if not (check_unicode or check_depth):
        return None
    stack: list[tuple[Any, str, int, str]] = [(obj, "", 1, "")]
    while stack:
        value, path, depth, top = stack.pop()
        if isinstance(value, str):
            if check_unicode and _bad_unicode(value):
                return path, "invalid Unicode (a lone surrogate escape such as \\ud800)"
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > max_depth:
            return top, f"nested deeper than {max_depth} levels"
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{_printable(key)}" if path else _printable(key)
                if check_unicode and _bad_unicode(key):
                    return where, "invalid Unicode in a key (a lone surrogate escape such as \\ud800)"
                stack.append((item, where, depth + 1, top or where))
        else:
            stack.extend((item, f"{path}[{i}]", depth + 1, top) for i, item in enumerate(value))
    return None


def deep_field(raw: str, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """The top-level key whose value nests deeper than ``max_depth`` (found without parsing:
    for text too deep for the JSON parser); None when the nesting is not under a key."""
    depth = 0
    key: str | None = None
    last: str | None = None
    for match in _NESTING_TOKENS.finditer(raw):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                return key
        elif token in "]}":
            depth -= 1
        elif token == ":":
            if depth == 1:
                key = last
        else:
            try:
                last = _printable(json.loads(token))
            except ValueError:
                last = None
    return None


@dataclass(frozen=True, slots=True)
class DatasetPassage:
    """One passage of a dataset line. ``id`` is None when the file gave a bare string."""

    text: str
    id: str | None = None
    truncated: bool = False
    original_chars: int = 0
    url: str | None = None
    site: str | None = None

    @property
    def docno(self) -> str:
        """A stable document id for TREC files: the passage id, else a hash of the text."""
        if self.id is not None:
            return self.id
        return text_docno(self.text)


@dataclass(frozen=True, slots=True)
class DatasetRecord:
    """One valid dataset line. ``warnings`` holds non-fatal problems (truncated passages).
    ``duplicates`` passages were left out because their docno repeats an earlier passage's
    (the first is kept, as ``judge search`` keeps the first of a repeated id); ``dropped``
    says which, in one problem naming the first of them (None when there were none).
    ``retrieved``: the list as the retriever returned it, repeats included, as indexes into
    ``passages`` (a repeat points at the passage kept for its docno); empty when nothing was
    dropped (then it is ``passages`` itself). What measures the retrieved list rather than
    the judged one, ``redundancy@k``, reads it (:meth:`retrieved_texts`)."""

    id: str
    query: str
    passages: tuple[DatasetPassage, ...]
    line: int
    expected_ids: tuple[str, ...] | None = None
    qrels: dict[str, int] | None = None
    warnings: tuple[InputError, ...] = field(default=())
    expected_output: str | None = None
    dropped: InputError | None = None
    duplicates: int = 0
    retrieved: tuple[int, ...] = ()

    def retrieved_texts(self, limit: int | None = None) -> list[str]:
        """The passages' texts in the order retrieved, a repeat at each of its ranks (the
        first ``limit`` of them; all by default)."""
        if not self.retrieved:
            return [p.text for p in self.passages[:limit]]
        return [self.passages[i].text for i in self.retrieved[:limit]]

    def ground_truth(self) -> dict[str, int] | None:
        """Graded ground truth: ``qrels`` if given, else ``expected_ids`` as grade 1."""
        if self.qrels is not None:
            return dict(self.qrels)
        if self.expected_ids is not None:
            return dict.fromkeys(self.expected_ids, 1)
        return None


def text_docno(text: str) -> str:
    """``h`` + the first 16 hex digits of the text's SHA-256: a docno without spaces."""
    return "h" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def parse_field_map(items: list[str] | None) -> dict[str, str]:
    """Parse ``["query=question", "retrieval_context=passages"]`` into a field map."""
    mapping: dict[str, str] = {}
    for item in items or []:
        ours, sep, theirs = item.partition("=")
        ours, theirs = ours.strip(), theirs.strip()
        if not sep or not ours or not theirs:
            raise InputError(f"--map expects NAME=FIELD, got {item!r}", field="--map")
        if ours not in MAPPABLE_FIELDS:
            known = ", ".join(sorted(MAPPABLE_FIELDS))
            raise InputError(f"--map: unknown field {ours!r} (known: {known})", field="--map")
        mapping[ours] = theirs
    return mapping


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a file for binary reading, transparently decompressing gzip."""
    raw = open(path, "rb")  # noqa: SIM115 - returned to the caller
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def count_lines(path: str | Path) -> int:
    """Number of non-blank lines (a cheap pre-pass for progress totals)."""
    n = 0
    with open_binary(path) as fh:
        for raw in fh:
            if raw.strip():
                n += 1
    return n


class _LineReader:
    """Validates one line at a time; keeps the set of ids seen to flag duplicates."""

    def __init__(self, path: str | Path, field_map: Mapping[str, str] | None, max_passage_chars: int) -> None:
        if max_passage_chars < 1:
            raise InputError("the passage length limit must be at least 1", field="--max-passage-chars")
        self.path = str(path)
        self.keys = dict(_DEFAULT_KEYS)
        self.keys.update(field_map or {})
        self.max_chars = max_passage_chars
        self.limits = _LIMITS.get() or DatasetLimits()
        self.seen: dict[str, int] = {}

    def error(self, message: str, line: int, fld: str | None = None) -> InputError:
        return InputError(message, path=self.path, line=line, field=fld)

    def parse(self, raw: bytes, line: int) -> DatasetRecord | InputError:
        """One line as a record, or the error rejecting it (the first problem found, in the
        order: encoding, JSON, id, query, passages, expected ids, qrels, reference, duplicate)."""
        try:
            obj = self._object(raw, line)
            qid = self._qid(obj, line)
            query = self._query(obj, line)
            passages, warnings, dropped = self._passages(obj, line)
            expected = self._expected_ids(obj, line)
            qrels = self._qrels(obj, line)
            expected_output = self._expected_output(obj, line)
        except InputError as exc:
            return exc.with_traceback(None)
        if qid in self.seen:
            return self.error(f"duplicate id {qid!r} (first on line {self.seen[qid]})", line, self.keys["id"])
        self.seen[qid] = line
        return DatasetRecord(qid, query, passages, line, expected, qrels, warnings, expected_output, *dropped)

    def _object(self, raw: bytes, line: int) -> dict[str, Any]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"invalid UTF-8 at byte {exc.start}", line) from None
        try:
            obj: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.error(f"not valid JSON ({exc.msg} at column {exc.colno})", line) from None
        except ValueError:  # an integer of more digits than Python converts (4300)
            raise self.error("not valid JSON (a number of more than 4300 digits)", line) from None
        except RecursionError:
            raise self.error(f"nested deeper than {MAX_JSON_DEPTH} levels", line, deep_field(text)) from None
        if not isinstance(obj, dict):
            raise self.error(f"expected a JSON object, got {type(obj).__name__}", line)
        problem = json_problem(obj, text)
        if problem is not None:
            raise self.error(problem[1], line, problem[0] or None)
        return obj

    def _qid(self, obj: dict[str, Any], line: int) -> str:
        key = self.keys["id"]
        qid_raw = obj.get(key)
        if qid_raw is None:
            return f"#{line}"
        if isinstance(qid_raw, bool) or not isinstance(qid_raw, str | int):
            raise self.error("must be a string or an integer", line, key)
        qid = str(qid_raw)
        problem = id_problem(qid)
        if problem is not None:
            raise self.error(problem, line, key)
        return qid

    def _query(self, obj: dict[str, Any], line: int) -> str:
        key = self.keys["query"]
        if key not in obj:
            raise self.error("missing", line, key)
        query = obj[key]
        if not isinstance(query, str):
            raise self.error(f"must be a string, got {type(query).__name__}", line, key)
        if not query.strip():
            raise self.error("must not be empty", line, key)
        max_query = self.limits.max_query_chars
        if max_query is not None and len(query) > max_query:
            raise self.error(f"query of {len(query)} characters; at most {max_query}", line, key)
        return query

    def _passages(
        self, obj: dict[str, Any], line: int
    ) -> tuple[
        tuple[DatasetPassage, ...], tuple[InputError, ...], tuple[InputError | None, int, tuple[int, ...]]
    ]:
        """The passages, the truncation warnings, and (the problem naming them, their number,
        the list as retrieved: see :class:`DatasetRecord`'s ``retrieved``) for the passages
        dropped because their docno (the id, else the text's hash) repeats an earlier one's
        (the first kept)."""
        ctx_key = self.keys["retrieval_context"]
        if ctx_key not in obj:
            raise self.error("missing", line, ctx_key)
        ctx = obj[ctx_key]
        if not isinstance(ctx, list):
            raise self.error(f"must be a list, got {type(ctx).__name__}", line, ctx_key)
        if not ctx:
            raise self.error("is an empty list", line, ctx_key)
        max_passages = self.limits.max_passages
        if max_passages is not None and len(ctx) > max_passages:
            raise self.error(f"{len(ctx)} passages; at most {max_passages} per record", line, ctx_key)
        passages: list[DatasetPassage] = []
        warnings: list[InputError] = []
        repeats: list[tuple[int, str, int]] = []  # (index, docno, index of the one kept)
        first: dict[str, int] = {}  # docno -> the index of the passage kept for it
        slot: dict[str, int] = {}  # docno -> its place in ``passages``
        retrieved: list[int] = []  # each index's place in ``passages`` (a repeat: its first's)
        for i, item in enumerate(ctx):
            where = f"{ctx_key}[{i}]"
            if isinstance(item, str):
                ptext, pid, url, site = item, None, None, None
            elif isinstance(item, dict):
                ptext, pid, url, site = self._passage_object(item, line, where)
            else:
                raise self.error(
                    f"a passage must be a string or an object, got {type(item).__name__}", line, where
                )
            if not ptext.strip():
                raise self.error("empty passage", line, where)
            truncated = len(ptext) > self.max_chars
            original = len(ptext)
            passage = DatasetPassage(ptext[: self.max_chars], pid, truncated, original, url, site)
            kept = first.setdefault(passage.docno, i)
            if kept != i:
                repeats.append((i, passage.docno, kept))
                retrieved.append(slot[passage.docno])
                continue
            slot[passage.docno] = len(passages)
            retrieved.append(len(passages))
            if truncated:
                warnings.append(
                    self.error(f"passage of {original} characters truncated to {self.max_chars}", line, where)
                )
            passages.append(passage)
        problem = self._repeats(repeats, ctx_key, line)
        return tuple(passages), tuple(warnings), (problem, len(repeats), tuple(retrieved) if repeats else ())

    def _repeats(self, repeats: list[tuple[int, str, int]], ctx_key: str, line: int) -> InputError | None:
        """One problem for every passage of a line dropped as a repeat, naming the first
        three (a hostile line may repeat one passage a million times)."""
        if not repeats:
            return None
        shown = ", ".join(f"[{i}] repeats [{kept}] (docno {docno!r})" for i, docno, kept in repeats[:3])
        more = f" and {len(repeats) - 3} more" if len(repeats) > 3 else ""
        return self.error(
            f"{len(repeats)} passage(s) repeat an earlier docno, dropped (the first kept): {shown}{more}",
            line,
            f"{ctx_key}[{repeats[0][0]}]",
        )

    def _passage_object(
        self, item: dict[str, Any], line: int, where: str
    ) -> tuple[str, str | None, str | None, str | None]:
        """A passage given as an object: its text, id, URL and site."""
        k = self.keys
        text_val = item.get(k["text"])
        if not isinstance(text_val, str):
            raise self.error(f"a passage object needs a string '{k['text']}'", line, f"{where}.{k['text']}")
        pid: str | None = None
        pid_raw = item.get(k["passage_id"])
        if pid_raw is not None:
            if isinstance(pid_raw, bool) or not isinstance(pid_raw, str | int):
                raise self.error("must be a string or an integer", line, f"{where}.{k['passage_id']}")
            pid = str(pid_raw)
            problem = id_problem(pid)
            if problem is not None:
                raise self.error(problem, line, f"{where}.{k['passage_id']}")
        url: str | None = None
        site: str | None = None
        for name in (k["url"], *SITE_KEYS):
            value = item.get(name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise self.error("must be a string", line, f"{where}.{name}")
            if name == k["url"]:
                url = value
            elif site is None:
                site = value
        return text_val, pid, url, site

    def _expected_ids(self, obj: dict[str, Any], line: int) -> tuple[str, ...] | None:
        key = self.keys["expected_ids"]
        exp = obj.get(key)
        if exp is None:
            return None
        if not isinstance(exp, list) or any(isinstance(x, bool) or not isinstance(x, str | int) for x in exp):
            raise self.error("must be a list of passage ids", line, key)
        return tuple(str(x) for x in exp)

    def _qrels(self, obj: dict[str, Any], line: int) -> dict[str, int] | None:
        key = self.keys["qrels"]
        q = obj.get(key)
        if q is None:
            return None
        if not isinstance(q, dict) or any(isinstance(v, bool) or not isinstance(v, int) for v in q.values()):
            raise self.error("must be an object mapping passage id to an integer grade", line, key)
        return {str(name): int(v) for name, v in q.items()}

    def _expected_output(self, obj: dict[str, Any], line: int) -> str | None:
        key = self.keys["expected_output"]
        reference = obj.get(key)
        if reference is None:
            return None
        if not isinstance(reference, str):
            raise self.error(f"must be a string, got {type(reference).__name__}", line, key)
        return reference if reference.strip() else None


def iter_dataset(
    path: str | Path,
    *,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
) -> Iterator[DatasetRecord | InputError]:
    """Yield each non-blank line of a JSONL dataset as a record or as the error rejecting it.

    Never raises for a bad line: the caller decides whether to go on (batch) or refuse the
    file (``--strict``). Raises :class:`InputError` only when the file cannot be read at all.
    """
    reader = _LineReader(path, field_map, max_passage_chars)
    try:
        fh = open_binary(path)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from exc
    with fh:
        try:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                yield reader.parse(raw.rstrip(b"\r\n"), lineno)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"cannot read: {exc}", path=str(path)) from exc


def read_dataset(
    path: str | Path,
    *,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
) -> list[DatasetRecord]:
    """Read a whole dataset strictly: the first bad line raises its :class:`InputError`."""
    records: list[DatasetRecord] = []
    for item in iter_dataset(path, field_map=field_map, max_passage_chars=max_passage_chars):
        if isinstance(item, InputError):
            raise item
        records.append(item)
    return records


def error_record(err: InputError, *, action: str = "rejected") -> dict[str, Any]:
    """The JSON object written to ``OUTPUT.rejects.jsonl`` for one problem."""
    return {
        "path": err.path,
        "line": err.line,
        "field": err.field,
        "error": err.message,
        "action": action,
    }


class RejectsReporter:
    """Bad-input reporting for a command that reads datasets: one stderr line per problem
    (``<command>: rejected: file:line: field: ...``) and every problem as a JSON line in
    ``rejects_path`` (opened on the first one; an earlier file is removed at start, so it
    reflects this run's validation)."""

    def __init__(
        self, rejects_path: Path | None, stream: IO[str] | None = None, *, command: str = "judge score"
    ) -> None:
        self.path = rejects_path
        self.stream = stream if stream is not None else sys.stderr
        self.command = command
        self.rejected = 0
        self.warned = 0
        self.dropped = 0  # passages left out as repeats of an earlier docno (action "dropped")
        self._fh: IO[str] | None = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def report(self, err: InputError, action: str, *, count: int = 1) -> None:
        """One problem: printed, written to the rejects file, counted (``count``: the
        passages a ``dropped`` problem stands for)."""
        if action == "rejected":
            self.rejected += 1
            print(f"{self.command}: rejected: {err}", file=self.stream)
        else:
            if action == "dropped":
                self.dropped += count
            else:
                self.warned += 1
            print(f"{self.command}: warning: {err} ({action})", file=self.stream)
        if self.path is not None:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
            self._fh.write(json.dumps(error_record(err, action=action), ensure_ascii=False) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
