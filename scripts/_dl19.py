"""TREC DL 2019 (query, passage) pairs for the embedded judge's benchmarks, read in place
from the shared data folder (never copied into the repository)."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _shared_data() -> Path:
    """$JUDGE_SHARED_DATA, else the nearest ``shared/data`` beside the repository or above it."""
    env = os.environ.get("JUDGE_SHARED_DATA")
    if env:
        return Path(env)
    for parent in REPO.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return REPO.parent / "shared" / "data"


DL19 = _shared_data() / "trec_dl19"


def dl19_pairs(n_pairs: int, per_query: int, folder: Path = DL19) -> list[tuple[str, str, str, int]]:
    """``(qid, query, passage, grade)``: the first ``per_query`` judged passages of each
    query in qrels order, until ``n_pairs``."""
    lines = (folder / "msmarco-test2019-queries.tsv").read_text(encoding="utf-8").splitlines()
    queries = dict(line.split("\t", 1) for line in lines)
    wanted: list[tuple[str, str, int]] = []
    taken: dict[str, int] = {}
    for line in (folder / "2019qrels-pass.txt").read_text().splitlines():
        qid, _, docid, grade = line.split()
        if taken.get(qid, 0) < per_query and len(wanted) < n_pairs:
            taken[qid] = taken.get(qid, 0) + 1
            wanted.append((qid, docid, int(grade)))
    texts = dl19_texts({docid for _, docid, _ in wanted}, folder)
    return [
        (qid, queries[qid].strip(), texts[docid], grade) for qid, docid, grade in wanted if docid in texts
    ]


def dl19_texts(ids: set[str], folder: Path = DL19) -> dict[str, str]:
    """The text of each passage id of ``ids`` found in the collection."""
    texts: dict[str, str] = {}
    with (folder / "dl2019_document.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["docid"] in ids:
                texts[row["docid"]] = row["doc"]
    return texts
