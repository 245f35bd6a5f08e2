"""A comparison's or an experiment's judged pool as rows of a judgment list (``judge export``):
one row per line of its ``pool.qrels``, in file order, with the query's text, the passage's
own id, the grade and who gave it.

* **Texts and ids.** ``pool.qrels`` holds TREC tokens (whitespace in an id became ``_``).
  The systems' datasets the report names (an experiment's runs) give each token's query
  text and each docno's original passage id, the id the engine knows (a passage without an
  id keeps its ``h`` + hash docno). ``queries`` (a query set, id -> text) overrides the texts.
* **Who.** A pair the LLM judged (a verdict with ``source: judge`` in ``pool.judged.jsonl``)
  is ``judge``; every other line of ``pool.qrels`` is a human label (``--qrels`` or
  ``--labels``), ``human``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.io import (
    InputError,
    JudgmentFormat,
    RejectsReporter,
    read_qrels_lines,
    scale_rule,
    shared_text,
    write_judgments,
)
from judge.store import recover_output
from judge.systems._comparison import ReportFolder
from judge.systems._inputs import read_systems, trec_token
from judge.systems._model import SystemsReport

__all__ = ["PoolExport", "PoolListing", "pool_exchange_rows", "pool_judgment_list"]


@dataclass(frozen=True)
class PoolExport:
    """``rows``: (query text, or the TREC qid without texts; docid; grade; ``judge`` or
    ``human``) per line of ``pool.qrels``. ``scale``: the pool's (``binary``/``graded``);
    ``kind``: ``experiment`` or ``comparison``; ``judge``: backend and template."""

    kind: str
    scale: str
    judge: str
    rows: list[tuple[str, str, int, str]]


def _judged_by_llm(path: Path) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    if not path.exists():
        return out
    for record in recover_output(path):
        token = trec_token(str(record["id"]))
        for docno, verdict in zip(record["docnos"], record["verdicts"], strict=True):
            if verdict.get("source", "judge") == "judge" and verdict.get("verdict") != "unjudged":
                out.add((token, str(docno)))
    return out


def pool_exchange_rows(
    report_dir: Path, *, queries: Mapping[str, str] | None = None, need_texts: bool = True
) -> PoolExport:
    """The rows of ``report_dir``'s judged pool (see the module). :class:`InputError` when
    the folder holds no report, a query has no text (``--queries``), or two queries share a
    text (a text-keyed format could not tell them apart)."""
    folder = ReportFolder(report_dir)
    if not folder.report_json.is_file() or not folder.pool_qrels.is_file():
        raise InputError(
            "not a compare-systems or experiment report folder (no report.json)", path=report_dir
        )
    report = SystemsReport.model_validate(json.loads(folder.report_json.read_text(encoding="utf-8")))
    texts: dict[str, str] = {}
    docids: dict[tuple[str, str], str] = {}
    paths = {n: Path(s.path) for n, s in report.systems.items()}
    if need_texts and all(p.exists() for p in paths.values()):
        quiet = RejectsReporter(None, io.StringIO(), command="judge export")
        inputs = read_systems(paths, reporter=quiet, at_least=1)
        for qid, text in inputs.queries.items():
            token = inputs.tokens[qid]
            texts[token] = text
            for docno, passage in inputs.passages.get(qid, {}).items():
                if passage.id is not None:
                    docids[(token, docno)] = passage.id
    for qid, text in (queries or {}).items():
        texts[trec_token(qid)] = text
    shared = shared_text(texts) if need_texts else None
    if shared is not None:
        raise InputError(
            f"queries {shared[0]!r} and {shared[1]!r} share the text {shared[2][:60]!r}: a judgment "
            "list names queries by text; export as --format trec",
            path=report_dir,
        )
    by_llm = _judged_by_llm(folder.pool_judged)
    rows: list[tuple[str, str, int, str]] = []
    qrels = read_qrels_lines(folder.pool_qrels)
    for line, qid, docno, grade, _ in qrels.rows():
        if grade < 0:
            continue
        who = "judge" if (qid, docno) in by_llm else "human"
        if not need_texts:
            rows.append((qid, docno, grade, who))
            continue
        found = texts.get(qid)
        if found is None:
            raise InputError(
                f"query {qid!r} has no text (its systems' datasets are gone): give its query set",
                path=str(folder.pool_qrels),
                line=line,
                field="--queries",
            )
        rows.append((found, docids.get((qid, docno), docno), grade, who))
    conventions = report.conventions
    kind = "experiment" if report.experiment is not None else "comparison"
    templates = conventions.get("template_id") or ", ".join(
        str(t) for t in sorted((conventions.get("template_ids") or {}).values())
    )
    judge = f"{conventions.get('backend')}, {'template ' + templates if templates else 'no template'}"
    return PoolExport(kind, str(conventions.get("scale") or "binary"), judge, rows)


@dataclass(frozen=True)
class PoolListing:
    """A judged pool written as a judgment list: ``text`` in the format asked for, ``pairs``
    rows, ``people`` of them human labels (the rest the LLM judge's)."""

    text: str
    pairs: int
    people: int


def pool_judgment_list(
    report_dir: Path,
    fmt: JudgmentFormat,
    *,
    scale: str | None = None,
    queries: Mapping[str, str] | None = None,
    name: str | None = None,
) -> PoolListing:
    """``report_dir``'s judged pool (:func:`pool_exchange_rows`) as a judgment list in ``fmt``
    (``trec``, ``csv``, ``srw``, ``rre``), its grades on ``scale`` (a stated mapping of the
    pool's own scale; default the pool's binary 0/1 or graded 0-3). Who rated each pair goes
    where the format has room: SRW's ratings carry ``"source"`` and its description counts
    them, RRE gets ``judge_sources``; CSV and TREC have none. ``name`` names the list (default
    the folder's name). :class:`InputError` naming ``--scale`` for a scale of the other kind."""
    pool = pool_exchange_rows(report_dir, queries=queries, need_texts=fmt != "trec")
    rule = scale_rule(scale) if scale is not None else None
    if rule is not None and rule.store_scale != pool.scale:
        raise InputError(
            f"the pool is {pool.scale}; --scale {scale} is on the {rule.store_scale} scale", field="--scale"
        )
    rows = [(q, d, rule.from_store(g) if rule is not None else str(g)) for q, d, g, _ in pool.rows]
    people = sum(1 for *_, by in pool.rows if by == "human")
    stated = rule.name if rule is not None else ("binary" if pool.scale == "binary" else "graded-0-3")
    name = name or Path(report_dir).name
    description = (
        f"judge {pool.kind} {name}: {len(rows) - people} rating(s) by the LLM judge "
        f"({pool.judge}), {people} by people; judge scale: {stated}"
    )
    if fmt == "srw":
        data = json.loads(write_judgments(None, rows, "srw", name=f"judge {name}", description=description))
        by = iter(pool.rows)
        for entry in data["judgmentRatings"]:
            for item in entry["ratings"]:
                item["source"] = next(by)[3]  # a field SRW keeps and does not use
        text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    else:
        sources: dict[str, dict[str, str]] = {}
        for q, d, _, by_whom in pool.rows:
            sources.setdefault(q, {})[d] = by_whom
        extra: Mapping[str, Any] = {"judge_scale": stated, "judge_sources": sources}
        text = write_judgments(None, rows, fmt, name=f"judge {name}", description=description, extra=extra)
    return PoolListing(text, len(rows), people)
