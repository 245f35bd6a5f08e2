"""scripts/_dl19.py, the one DL 2019 reader of the benchmarks (bench_search, bench_dense,
the embedded judge's), on a three-query stand-in folder."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from _helpers import load_script


def _load() -> ModuleType:
    return load_script("_dl19")


def _folder(tmp_path: Path) -> Path:
    # CRLF lines as the real queries file has; q2 is never judged.
    (tmp_path / "msmarco-test2019-queries.tsv").write_bytes(
        b"q1\tfirst query\r\nq2\tsecond\r\nq3\tthird \r\n"
    )
    (tmp_path / "2019qrels-pass.txt").write_text("q3 0 d2 3\nq1 0 d1 0\nq1 0 d2 2\n", encoding="utf-8")
    rows = [{"docid": "d1", "doc": "one"}, {"docid": "d2", "doc": "two"}, {"docid": "d3", "doc": "three"}]
    (tmp_path / "dl2019_document.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    return tmp_path


def test_judged_queries_in_file_order_stripped(tmp_path: Path) -> None:
    dl19 = _load()
    folder = _folder(tmp_path)
    assert dl19.dl19_queries(folder) == {"q1": "first query", "q2": "second", "q3": "third"}
    assert dl19.dl19_judged_queries(folder) == [("q1", "first query"), ("q3", "third")]


def test_corpus_is_index_build_input(tmp_path: Path) -> None:
    dl19 = _load()
    folder = _folder(tmp_path)
    out = dl19.dl19_corpus(tmp_path / "corpus.jsonl", folder)
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert lines == [{"id": "d1", "text": "one"}, {"id": "d2", "text": "two"}, {"id": "d3", "text": "three"}]


def test_pairs_take_qrels_order_and_the_shared_query_text(tmp_path: Path) -> None:
    dl19 = _load()
    folder = _folder(tmp_path)
    assert dl19.dl19_pairs(10, 1, folder) == [("q3", "third", "two", 3), ("q1", "first query", "one", 0)]
    assert dl19.dl19_pairs(2, 2, folder) == [("q3", "third", "two", 3), ("q1", "first query", "one", 0)]
