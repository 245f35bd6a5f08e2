"""Reading the systems' datasets: validation as ``judge score`` does, passage identity,
TREC-safe ids.

A system is ``NAME=PATH``: a dataset in ``judge score``'s input format (gzip ok), read with
:func:`judge.io.iter_dataset`, so every problem names the file, the line and the field. A
passage is identified by its ``id`` when it has one, else by its exact text; its TREC
docno is the id (whitespace replaced by ``_``), else ``h`` + a hash of the text (the docno
``judge score --export-qrels`` writes). A passage repeated in one ranking counts once, at
its first rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from judge.io import (
    DEFAULT_MAX_PASSAGE_CHARS,
    DatasetRecord,
    InputError,
    RejectsReporter,
    iter_dataset,
    text_docno,
)

_FORBIDDEN_NAME_CHARS = set('/\\=:*?"<>|')
# A system name becomes a file name (NAME.jsonl, NAME.run, ...; most file systems stop at
# 255 bytes) and a run tag: at most this many characters, and twice that in UTF-8 bytes.
MAX_SYSTEM_NAME_CHARS = 100


def trec_token(value: str) -> str:
    """``value`` as one token of a TREC file: whitespace runs become ``_``; a leading ``#``
    (trec_eval reads such a line as a comment) becomes ``line``."""
    token = "_".join(value.split()) or "_"
    if token.startswith("#"):
        token = "line" + token[1:]
    return token


@dataclass(frozen=True, slots=True)
class Passage:
    """One distinct passage of a query: its docno, text and original id (None: bare text)."""

    docno: str
    text: str
    id: str | None


@dataclass(frozen=True, slots=True)
class SystemQuery:
    """One query of one system: the docnos in rank order (repeats dropped)."""

    qid: str
    query: str
    docnos: tuple[str, ...]


@dataclass
class SystemInput:
    """One system's valid queries in file order, keyed by query id."""

    name: str
    path: Path
    queries: dict[str, SystemQuery] = field(default_factory=dict)


@dataclass
class Inputs:
    """Every system, the passages by (query id, docno), the TREC qid of each query id,
    the query text of each id (the first system's), and non-fatal findings."""

    systems: list[SystemInput]
    passages: dict[str, dict[str, Passage]]
    tokens: dict[str, str]
    queries: dict[str, str]
    rejected: int = 0
    warnings: list[str] = field(default_factory=list)

    def not_in_all(self) -> list[str]:
        """Query ids some system lacks, in first-seen order."""
        return [q for q in self.queries if any(q not in s.queries for s in self.systems)]


def parse_system_args(items: Sequence[str]) -> dict[str, Path]:
    """``["bm25=runs/bm25.jsonl", ...]`` -> ``{"bm25": Path(...)}`` (order kept)."""
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise InputError(f"expected NAME=PATH, got {item!r}", field="NAME=PATH")
        out_name = check_name(name)
        if out_name in out:
            raise InputError(f"system name {out_name!r} given twice", field="NAME=PATH")
        out[out_name] = Path(path)
    return out


def check_name(name: str) -> str:
    """A system name: used as ``runs/NAME.run`` and as the run tag, so one token of
    printable characters without path separators, at most :data:`MAX_SYSTEM_NAME_CHARS`
    characters (and twice that in UTF-8 bytes)."""
    if (
        len(name) > MAX_SYSTEM_NAME_CHARS
        or len(name.encode("utf-8", "surrogatepass")) > 2 * MAX_SYSTEM_NAME_CHARS
    ):
        raise InputError(
            f"system name {name[:40]!r}... is longer than {MAX_SYSTEM_NAME_CHARS} characters "
            f"({2 * MAX_SYSTEM_NAME_CHARS} UTF-8 bytes)",
            field="NAME",
        )
    if not name or name != name.strip() or any(c.isspace() for c in name):
        raise InputError(f"system name {name!r} must be non-empty and without whitespace", field="NAME")
    if name.startswith(".") or any(c in _FORBIDDEN_NAME_CHARS or not c.isprintable() for c in name):
        raise InputError(
            f"system name {name!r} may not start with '.' "
            f"or contain any of {''.join(sorted(_FORBIDDEN_NAME_CHARS))}",
            field="NAME",
        )
    return name


def check_paths(paths: Mapping[str, Path], *, at_least: int = 2) -> None:
    """At least two systems (``at_least``), every file there (InputError naming the first
    missing one)."""
    if len(paths) < at_least:
        raise InputError("compare-systems needs at least two systems (NAME=PATH ...)", field="NAME=PATH")
    for path in paths.values():
        if not path.exists():
            raise InputError("no such file", path=str(path))
        if path.is_dir():
            raise InputError("is a directory, expected a JSONL dataset", path=str(path))


def _ranking(item: DatasetRecord, known: dict[str, Passage], path: Path) -> tuple[tuple[str, ...], int, int]:
    """One system's ranking of a query as docnos (a passage repeated in it counted once: the
    reader dropped the repeats, ``item.duplicates``), with the number of passages whose text
    differs from the first seen under their docno and the number of repeats. New passages
    are added to ``known`` (the query's passages so far)."""
    docnos: list[str] = []
    conflicts = 0
    for i, p in enumerate(item.passages):
        docno = trec_token(p.id) if p.id is not None else text_docno(p.text)
        seen = known.get(docno)
        if seen is None:
            known[docno] = Passage(docno, p.text, p.id)
        elif seen.id != p.id:
            raise InputError(
                f"passage {p.id or p.text[:30]!r} and {seen.id or seen.text[:30]!r} "
                f"share the docno {docno!r}; give them distinct ids",
                path=str(path),
                line=item.line,
                field=f"retrieval_context[{i}]",
            )
        elif seen.text != p.text:
            conflicts += 1
        docnos.append(docno)
    return tuple(docnos), conflicts, item.duplicates


def read_systems(
    paths: Mapping[str, Path],
    *,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
    strict: bool = False,
    reporter: RejectsReporter | None = None,
    at_least: int = 2,
) -> Inputs:
    """Read and check every system's file.

    Missing files raise :class:`InputError` (exit 2) naming them, before anything else.
    A bad line is rejected (reported, the rest is read), a long passage truncated (a
    warning); with ``strict`` any problem in any file raises after all were reported.
    """
    check_paths(paths, at_least=at_least)
    rep = reporter or RejectsReporter(None, command="judge compare-systems")
    inputs = Inputs(systems=[], passages={}, tokens={}, queries={})
    token_owner: dict[str, str] = {}
    conflicts = 0
    repeats = 0
    query_mismatch = 0
    problems = 0
    for name, path in paths.items():
        system = SystemInput(name=name, path=path)
        for item in iter_dataset(path, field_map=field_map, max_passage_chars=max_passage_chars):
            if isinstance(item, InputError):
                problems += 1
                rep.report(item, "rejected")
                continue
            for w in item.warnings:
                problems += 1
                rep.report(w, "would be truncated" if strict else "truncated")
            qid = item.id
            token = trec_token(qid)
            owner = token_owner.setdefault(token, qid)
            if owner != qid:
                raise InputError(
                    f"query ids {owner!r} and {qid!r} both become {token!r} in TREC files; rename one",
                    path=str(path),
                    line=item.line,
                    field="id",
                )
            inputs.tokens[qid] = token
            if qid not in inputs.queries:
                inputs.queries[qid] = item.query
            elif inputs.queries[qid] != item.query:
                query_mismatch += 1
            known = inputs.passages.setdefault(qid, {})
            docnos, conflicted, repeated = _ranking(item, known, path)
            conflicts += conflicted
            repeats += repeated
            system.queries[qid] = SystemQuery(qid, item.query, docnos)
        inputs.systems.append(system)
    inputs.rejected = rep.rejected
    if strict and problems:
        raise InputError(
            f"{problems} problem(s) found; --strict refuses the input (nothing was judged)",
            path=", ".join(str(p) for p in paths.values()),
        )
    if conflicts:
        inputs.warnings.append(
            f"{conflicts} passage(s) carry an id seen before with a different text; the first text was judged"
        )
    if repeats:
        inputs.warnings.append(f"{repeats} passage(s) repeated within one ranking were counted once")
    if query_mismatch:
        inputs.warnings.append(
            f"{query_mismatch} query id(s) have a different query text in a later system; "
            "the first system's text was judged"
        )
    empty = [s.name for s in inputs.systems if not s.queries]
    if empty:
        raise InputError(f"system {empty[0]!r} has no valid query", path=str(paths[empty[0]]))
    return inputs
