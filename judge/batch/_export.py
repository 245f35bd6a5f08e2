"""TREC exports of a batch output: the verdicts as qrels, the input ranking as a run.

Both use the docnos of the output records (a passage's id, else ``h`` + a hash of its
text), so ``judge trec``, trec_eval and ranx can evaluate the run against the qrels. The
files are written by :func:`judge.io.write_qrels` / :func:`judge.io.write_run`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from judge.io import write_qrels as _write_qrels
from judge.io import write_run as _write_run


def _qid(record: Mapping[str, Any]) -> str:
    """The query id as one TREC token (whitespace replaced by ``_``)."""
    return "_".join(str(record["id"]).split()) or "_"


def qrels_of(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{qid: {docno: rel}}``: the grade in graded mode, 1/0 in binary; unjudged omitted.

    A docno retrieved twice for one query keeps its first judged verdict.
    """
    out: dict[str, dict[str, int]] = {}
    for r in records:
        docs = out.setdefault(_qid(r), {})
        for v, docno in zip(r["verdicts"], r["docnos"], strict=True):
            if v["verdict"] == "unjudged" or docno in docs:
                continue
            if r.get("mode") == "graded" and v.get("grade") is not None:
                docs[docno] = int(v["grade"])
            else:
                docs[docno] = 1 if v["verdict"] == "yes" else 0
    return {q: d for q, d in out.items() if d}


def run_of(records: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[str, float]]]:
    """``{qid: [(docno, score), ...]}`` in input order; score = n - rank + 1 (descending).

    A docno may appear once per query in a run: repeats after the first are dropped.
    """
    out: dict[str, list[tuple[str, float]]] = {}
    for r in records:
        docnos = list(dict.fromkeys(str(d) for d in r["docnos"]))
        n = len(docnos)
        out[_qid(r)] = [(d, float(n - i)) for i, d in enumerate(docnos)]
    return out


def write_qrels(records: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write the verdicts as TREC qrels; return the number of lines."""
    qrels = qrels_of(records)
    _write_qrels(path, qrels)
    return sum(len(d) for d in qrels.values())


def write_run(records: Iterable[Mapping[str, Any]], path: str | Path, tag: str = "judge") -> int:
    """Write the input ranking as a TREC run; return the number of lines."""
    run = run_of(records)
    _write_run(path, run, run_id=tag)
    return sum(len(d) for d in run.values())
