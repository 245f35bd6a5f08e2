"""Query sets: JSONL and TSV, qrels inline and beside, and every bad field named."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from judge.io import InputError
from judge.search import Query, SearchError, check_queries, read_queries


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_with_qrels_and_tsv(tmp_path: Path) -> None:
    p = write(
        tmp_path / "q.jsonl",
        '{"id": "q1", "query": "小狗贫血", "qrels": {"d1": 2, "d2": 0}}\n\n{"id": 7, "query": "cats"}\n',
    )
    assert read_queries(p) == [Query("q1", "小狗贫血", {"d1": 2, "d2": 0}), Query("7", "cats", None)]
    t = write(tmp_path / "q.tsv", "1\tanemia in dogs\n2\tgreen tea\n")
    assert read_queries(t) == [Query("1", "anemia in dogs"), Query("2", "green tea")]
    gz = tmp_path / "q.tsv.gz"
    gz.write_bytes(gzip.compress(b"3\tsolar\n"))
    assert read_queries(gz) == [Query("3", "solar")]


def test_qrels_file_beside_merges_and_must_agree(tmp_path: Path) -> None:
    p = write(
        tmp_path / "q.jsonl", '{"id": "q1", "query": "a", "qrels": {"d1": 2}}\n{"id": "q2", "query": "b"}\n'
    )
    qrels = write(tmp_path / "q.qrels", "q1 0 d3 1\nq2 0 d9 2\n")
    got = read_queries(p, qrels)
    assert got[0].qrels == {"d1": 2, "d3": 1}
    assert got[1].qrels == {"d9": 2}
    clash = write(tmp_path / "clash.qrels", "q1 0 d1 0\n")
    with pytest.raises(SearchError, match="grade 0 here, 2 in the query set") as err:
        read_queries(p, clash)
    assert err.value.path == str(clash)


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (
            '{"id": "q1", "query": "a"}\n{"id": "q1", "query": "b"}\n',
            2,
            "id",
            "duplicate id 'q1' (first on line 1)",
        ),
        ('{"id": "q1", "query": "  "}\n', 1, "query", "must not be empty"),
        ('{"id": "q1"}\n', 1, "query", "missing"),
        ('{"query": "a"}\n', 1, "id", "missing"),
        ('{"id": true, "query": "a"}\n', 1, "id", "must be a string or an integer"),
        ('{"id": ["x"], "query": "a"}\n', 1, "id", "must be a string or an integer"),
        ('{"id": "q 1", "query": "a"}\n', 1, "id", "without whitespace"),
        ('{"id": "q1", "query": 3}\n', 1, "query", "must be a string"),
        ('{"id": "q1", "query": "a", "qrels": [1]}\n', 1, "qrels", "must be an object"),
        ('{"id": "q1", "query": "a", "qrels": {"d1": "2"}}\n', 1, "qrels.d1", "must be an integer"),
        ('{"id": "q1", "query": "a", "qrels": {"d1": 1.5}}\n', 1, "qrels.d1", "must be an integer"),
        ('{"id": "q1", "query": "a", "qrels": {"d1": NaN}}\n', 1, "qrels.d1", "must be an integer"),
        ('{"id": "q1", "query": "a", "qrels": {"d1": true}}\n', 1, "qrels.d1", "must be an integer"),
        ('{"id": "q1", "query": "a"}\n{"id": "q2", "query": "b"\n', 2, None, "not valid JSON"),
        ('{"id": "q1", "query": "a"}\n[1]\n', 2, None, "expected a JSON object"),
        ('{"id": "q1", "query": "\\ud800"}\n', 1, "query", "lone surrogate"),
    ],
)
def test_bad_jsonl_lines_name_file_line_field(
    tmp_path: Path, text: str, line: int, field: str | None, message: str
) -> None:
    p = write(tmp_path / "q.jsonl", text)
    with pytest.raises(SearchError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        read_queries(p)
    assert isinstance(err.value, InputError)
    assert (err.value.path, err.value.line, err.value.field) == (str(p), line, field)


def test_bad_tsv_lines_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(SearchError, match="expected qid<TAB>query") as err:
        read_queries(write(tmp_path / "a.tsv", "1\tok\n2 no tab\n"))
    assert (err.value.line, err.value.field) == (2, "query")
    with pytest.raises(SearchError, match="must not be empty") as err:
        read_queries(write(tmp_path / "b.tsv", "1\t \n"))
    assert err.value.field == "query"
    with pytest.raises(SearchError, match="duplicate id") as err:
        read_queries(write(tmp_path / "c.tsv", "1\ta\n1\tb\n"))
    assert err.value.line == 2
    with pytest.raises(SearchError, match="no queries"):
        read_queries(write(tmp_path / "d.jsonl", "\n\n"))
    with pytest.raises(SearchError, match="invalid UTF-8") as err:
        p = tmp_path / "e.tsv"
        p.write_bytes(b"1\t\xff\n")
        read_queries(p)
    assert err.value.line == 1
    with pytest.raises(SearchError, match="cannot read"):
        read_queries(tmp_path / "missing.jsonl")


def test_queries_given_in_python_are_checked() -> None:
    assert check_queries({"a": "x", "b": "y"}) == [Query("a", "x"), Query("b", "y")]
    with pytest.raises(SearchError, match="duplicate id"):
        check_queries([Query("a", "x"), Query("a", "y")])
    with pytest.raises(SearchError, match="non-empty string"):
        check_queries([Query("a", " ")])
    with pytest.raises(SearchError, match="no queries"):
        check_queries([])
