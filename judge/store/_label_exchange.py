"""Labels in and out of the judgment lists of Quepid and OpenSearch's Search Relevance
Workbench (SRW): the ``query,docid,rating`` CSV, SRW's judgment list JSON and RRE ratings
(the formats: :mod:`judge.io._judgment_formats`; the scales and their stated mappings onto
the store's: :mod:`judge.io._judgment_scales`).

Those formats name a query by its *text*: a query set (id -> text) turns a text into the
id the store keys by, and back. Each imported label records where it came from and the
mapping applied in its ``comment`` (``imported from FILE (csv, srw-0-1 0.7 -> graded 2: ...)``)
and keeps the query text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NamedTuple

from judge.io import (
    InputError,
    JudgmentFile,
    JudgmentFormat,
    ScaleRule,
    detect_judgment_format,
    detect_scale,
    judgments_by_qid,
    read_judgments,
    scale_rule,
    shared_text,
    write_judgments,
)
from judge.store._label_model import (
    DEFAULT_COLLECTION,
    Label,
    LabelSet,
    check_label_fields,
    qrels_escape,
    qrels_unescape,
)

LabelFileFormat = Literal["jsonl", "trec", "csv", "srw", "rre"]

__all__ = [
    "ExchangeLabels",
    "LabelFileFormat",
    "label_file_format",
    "labels_to_exchange",
    "read_exchange_labels",
]


class ExchangeLabels(NamedTuple):
    """The labels of a judgment list with their lines, its format and the scale read on."""

    lines: list[tuple[int, Label]]
    format: str
    scale: str

    @property
    def labels(self) -> list[Label]:
        return [lab for _, lab in self.lines]


def label_file_format(path: str | Path) -> LabelFileFormat:
    """What a labels file is: a JSONL labels export (``.jsonl``, or a first line that is a
    JSON object on its own), else what :func:`judge.io.detect_judgment_format` finds."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such labels file", path=p)
    if p.suffix == ".jsonl":
        return "jsonl"
    with p.open("rb") as fh:
        first = fh.readline().removeprefix(b"\xef\xbb\xbf").strip()
    if first.startswith(b"{") and first.endswith(b"}"):
        try:
            data = json.loads(first)
        except ValueError:
            data = None
        if isinstance(data, dict) and "judgmentRatings" not in data and "queries" not in data:
            return "jsonl"
    return detect_judgment_format(p)


def _rule(found: JudgmentFile, scale: str | None, field: str) -> ScaleRule:
    if scale is not None:
        return scale_rule(scale, field=field)
    if found.stated_scale is not None:
        return scale_rule(found.stated_scale, field=field)
    return detect_scale([(j.line, j.rating) for j in found.judgments], path=found.path, field=field)


def read_exchange_labels(
    path: str | Path,
    *,
    queries: Mapping[str, str] | None,
    reviewer: str | None = None,
    scale: str | None = None,
    collection: str = DEFAULT_COLLECTION,
    fmt: JudgmentFormat | None = None,
    queries_field: str = "--queries",
    scale_field: str = "--scale",
) -> ExchangeLabels:
    """The labels of a CSV, SRW or RRE judgment list (or TREC qrels read on an exchange
    scale), with their lines: query texts turned into ids through ``queries`` (id -> text;
    required for the text formats), ratings put on the store's scale by the stated mapping
    of ``scale`` (None: the scale the file states, else detected; ambiguous ratings are an
    :class:`InputError` naming ``scale_field``). Every label is checked; nothing is returned
    when one is bad."""
    found = read_judgments(path, fmt)
    if found.keyed_by_text and queries is None:
        raise InputError(
            f"a {found.format} judgment list names queries by their text: give the query set",
            path=found.path,
            field=queries_field,
        )
    rule = _rule(found, scale, scale_field)
    who = reviewer or f"{found.format}-import"
    name = Path(found.path).name
    out: list[tuple[int, Label]] = []
    for j, qid in judgments_by_qid(found, queries or {}, field=queries_field):
        problem = rule.problem(j.rating)
        if problem is not None:
            raise InputError(problem, path=found.path, line=j.line, field=j.field)
        grade = rule.to_store(j.rating)
        text: str | None = None
        if found.format == "trec":
            qid, docid = _unescaped(qid, j.docid, found.path, j.line)
        else:
            docid, text = j.docid, (queries or {}).get(qid)
        fields = check_label_fields(
            {
                "qid": qid,
                "docno": docid,
                "label": grade,
                "reviewer": who,
                "scale": rule.store_scale,
                "collection": collection,
                "query": text,
                "comment": f"imported from {name[:200]} ({found.format}, {rule.name} {j.rating} -> "
                f"{rule.store_scale} {grade}: {rule.rule})",
            },
            where=found.path,
            line=j.line,
        )
        out.append((j.line, Label(**fields)))
    return ExchangeLabels(out, found.format, rule.name)


def _unescaped(qid: str, docno: str, path: str, line: int) -> tuple[str, str]:
    ids: list[str] = []
    for name, token in (("qid", qid), ("docno", docno)):
        try:
            ids.append(qrels_unescape(token))
        except UnicodeDecodeError:
            raise InputError("a %XX escape that is not UTF-8", path=path, line=line, field=name) from None
    return ids[0], ids[1]


def labels_to_exchange(
    labels: LabelSet,
    path: str | Path | None,
    fmt: JudgmentFormat,
    *,
    queries: Mapping[str, str] | None = None,
    scale: str | None = None,
    level: int | None = None,
    name: str = "judge labels",
    queries_field: str = "--queries",
) -> tuple[int, str]:
    """Write the resolved labels as a CSV, SRW or RRE judgment list (or TREC qrels, ids by
    :func:`qrels_escape`); returns the number of rows and the text. A label's query text is
    the one it keeps, else ``queries``' (id -> text); a query with neither is an
    :class:`InputError` naming ``queries_field``, and two queries with one text (which a
    list keyed by text would merge) one naming ``--format`` (TREC keeps ids). ``scale``:
    write on this exchange scale (the stated inverse mapping; graded labels to ``binary``
    need ``level``); None: each label's own value."""
    rule = scale_rule(scale) if scale is not None else None
    values = labels.qrels(rule.store_scale if rule is not None else None, level=level)
    texts: dict[str, str] = {}
    for item in labels:
        if item.label.query is not None:
            texts.setdefault(item.label.qid, item.label.query)
    keys: dict[str, str] = {}
    for qid in values:
        found = qid if fmt == "trec" else texts.get(qid) or (queries or {}).get(qid)
        if found is None:
            raise InputError(
                f"query {qid!r} has no text in the label store: give the query set that holds it",
                field=queries_field,
            )
        keys[qid] = found
    shared = None if fmt == "trec" else shared_text(keys)
    if shared is not None:
        raise InputError(
            f"queries {shared[0]!r} and {shared[1]!r} share the text {shared[2][:60]!r}: a {fmt} list "
            "names queries by text and would merge them, so it could not be imported back; export "
            "as --format trec (query ids), or give one of them another text",
            field="--format",
        )
    rows = [
        (keys[qid], docno, rule.from_store(value) if rule is not None else str(value))
        for qid, docs in values.items()
        for docno, value in docs.items()
    ]
    stated = rule.name if rule is not None else _own_scale(labels)
    text = write_judgments(
        path,
        rows,
        fmt,
        name=name,
        description="human labels exported by judge" + (f"; judge scale: {stated}" if stated else ""),
        extra={"judge_scale": stated} if stated else {},
        escape=qrels_escape,
    )
    return len(rows), text


def _own_scale(labels: LabelSet) -> str | None:
    """The scale every label is on (None: binary and graded mixed, or no labels)."""
    scales = labels.scales()
    return {"binary": "binary", "graded": "graded-0-3"}.get(scales.pop()) if len(scales) == 1 else None
