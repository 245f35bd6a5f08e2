"""TREC DL 2019 for the benchmarks, read in place from the shared data folder (never copied
into the repository): (query, passage) pairs for the embedded judge's, the judged queries
and the passages as a ``{"id", "text"}`` corpus for the search engine's."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    """$JUDGE_SHARED_DATA, else the nearest ``shared/data`` beside the repository or above it."""
    env = os.environ.get("JUDGE_SHARED_DATA")
    if env:
        return Path(env)
    for parent in REPO.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return REPO.parent / "shared" / "data"


DL19 = shared_data() / "trec_dl19"
QRELS = "2019qrels-pass.txt"
"""NIST's graded qrels, a file of :data:`DL19` (``DL19 / QRELS``)."""


def dl19_queries(folder: Path = DL19) -> dict[str, str]:
    """Every query of the test set: id -> text, in the file's order."""
    lines = (folder / "msmarco-test2019-queries.tsv").read_text(encoding="utf-8").splitlines()
    return {qid: text.strip() for qid, _, text in (line.partition("\t") for line in lines)}


def dl19_judged_queries(folder: Path = DL19) -> list[tuple[str, str]]:
    """``(qid, query)`` of the 43 queries NIST judged, in the queries file's order."""
    judged = {
        line.split()[0] for line in (folder / QRELS).read_text(encoding="utf-8").splitlines() if line.strip()
    }
    return [(qid, text) for qid, text in dl19_queries(folder).items() if qid in judged]


def dl19_corpus(out: Path, folder: Path = DL19) -> Path:
    """The 10,818 passages written to ``out`` as ``{"id", "text"}`` JSONL (``judge index
    build``'s input); ``out``."""
    with (
        (folder / "dl2019_document.jsonl").open(encoding="utf-8") as src,
        out.open("w", encoding="utf-8") as dst,
    ):
        for line in src:
            obj = json.loads(line)
            dst.write(json.dumps({"id": obj["docid"], "text": obj["doc"]}) + "\n")
    return out


def dl19_pairs(n_pairs: int, per_query: int, folder: Path = DL19) -> list[tuple[str, str, str, int]]:
    """``(qid, query, passage, grade)``: the first ``per_query`` judged passages of each
    query in qrels order, until ``n_pairs``."""
    queries = dl19_queries(folder)
    wanted: list[tuple[str, str, int]] = []
    taken: dict[str, int] = {}
    for line in (folder / QRELS).read_text().splitlines():
        qid, _, docid, grade = line.split()
        if taken.get(qid, 0) < per_query and len(wanted) < n_pairs:
            taken[qid] = taken.get(qid, 0) + 1
            wanted.append((qid, docid, int(grade)))
    texts = dl19_texts({docid for _, docid, _ in wanted}, folder)
    return [(qid, queries[qid], texts[docid], grade) for qid, docid, grade in wanted if docid in texts]


def dl19_texts(ids: set[str], folder: Path = DL19) -> dict[str, str]:
    """The text of each passage id of ``ids`` found in the collection."""
    texts: dict[str, str] = {}
    with (folder / "dl2019_document.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["docid"] in ids:
                texts[row["docid"]] = row["doc"]
    return texts
