"""Dataset reading and validation: every bad-input kind names file, line and field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from judge.io._errors import InputError
from judge.io._jsonl import (
    DatasetLimits,
    DatasetRecord,
    count_lines,
    dataset_limits,
    error_record,
    iter_dataset,
    json_problem,
    parse_field_map,
    read_dataset,
    text_docno,
)


def _write(path: Path, lines: list[Any]) -> Path:
    out = bytearray()
    for line in lines:
        if isinstance(line, dict):
            out += json.dumps(line, ensure_ascii=False).encode("utf-8")
        elif isinstance(line, str):
            out += line.encode("utf-8")
        else:
            out += line
        out += b"\n"
    path.write_bytes(bytes(out))
    return path


GOOD: dict[str, Any] = {
    "id": "q1",
    "query": "感冒吃什么药",
    "retrieval_context": ["a", {"id": "d2", "text": "b"}],
}


def test_good_line_parses_strings_and_objects(tmp_path: Path) -> None:
    p = _write(tmp_path / "d.jsonl", [GOOD | {"expected_ids": ["d2"], "qrels": {"d2": 3, "d9": 1}}])
    [rec] = read_dataset(p)
    assert rec.id == "q1" and rec.line == 1 and rec.query == "感冒吃什么药"
    assert [(x.text, x.id) for x in rec.passages] == [("a", None), ("b", "d2")]
    assert rec.passages[0].docno == text_docno("a") and rec.passages[1].docno == "d2"
    assert rec.expected_ids == ("d2",)
    assert rec.qrels == {"d2": 3, "d9": 1}
    assert rec.ground_truth() == {"d2": 3, "d9": 1}  # qrels win over expected_ids


def test_missing_id_uses_line_number_and_int_ids_become_strings(tmp_path: Path) -> None:
    p = _write(
        tmp_path / "d.jsonl",
        [
            "",
            {"query": "x", "retrieval_context": ["a"]},
            {"id": 7, **{"query": "y", "retrieval_context": [{"id": 3, "text": "t"}], "expected_ids": [3]}},
        ],
    )
    recs = read_dataset(p)
    assert [r.id for r in recs] == ["#2", "7"]
    assert recs[1].passages[0].id == "3" and recs[1].ground_truth() == {"3": 1}


@pytest.mark.parametrize(
    ("line", "field", "fragment"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"[1, 2]", None, "expected a JSON object"),
        (json.dumps({"id": "a", "retrieval_context": ["x"]}).encode(), "query", "missing"),
        (
            json.dumps({"id": "a", "query": 3, "retrieval_context": ["x"]}).encode(),
            "query",
            "must be a string",
        ),
        (
            json.dumps({"id": "a", "query": "q", "retrieval_context": "x"}).encode(),
            "retrieval_context",
            "list",
        ),
        (
            json.dumps({"id": "a", "query": "q", "retrieval_context": []}).encode(),
            "retrieval_context",
            "empty",
        ),
        (json.dumps({"id": "a", "query": "q"}).encode(), "retrieval_context", "missing"),
        (
            json.dumps({"id": "a", "query": "q", "retrieval_context": [5]}).encode(),
            "retrieval_context[0]",
            "string",
        ),
        (
            json.dumps({"id": "a", "query": "q", "retrieval_context": [{"id": "d"}]}).encode(),
            "retrieval_context[0].text",
            "needs a string",
        ),
        (
            json.dumps({"id": [1], "query": "q", "retrieval_context": ["x"]}).encode(),
            "id",
            "string or an integer",
        ),
        (
            json.dumps(
                {"id": "a", "query": "q", "retrieval_context": ["x"], "qrels": {"d": "high"}}
            ).encode(),
            "qrels",
            "integer grade",
        ),
        (
            json.dumps({"id": "a", "query": "q", "retrieval_context": ["x"], "expected_ids": "d"}).encode(),
            "expected_ids",
            "list of passage ids",
        ),
        (b'{"id": "a", "query": "caf\xe9", "retrieval_context": ["x"]}', None, "invalid UTF-8"),
    ],
)
def test_each_bad_line_is_reported_with_file_line_and_field(
    tmp_path: Path, line: bytes, field: str | None, fragment: str
) -> None:
    p = _write(tmp_path / "bad.jsonl", [GOOD, line, GOOD | {"id": "q3"}])
    items = list(iter_dataset(p))
    assert isinstance(items[0], DatasetRecord) and isinstance(items[2], DatasetRecord)
    err = items[1]
    assert isinstance(err, InputError)
    assert (err.path, err.line, err.field) == (str(p), 2, field)
    assert fragment in err.message
    assert str(err).startswith(f"{p}:2: ")


def test_duplicate_id_rejects_the_second_occurrence(tmp_path: Path) -> None:
    p = _write(tmp_path / "d.jsonl", [GOOD, GOOD | {"query": "other"}])
    first, second = iter_dataset(p)
    assert isinstance(first, DatasetRecord)
    assert isinstance(second, InputError)
    assert (second.line, second.field) == (2, "id")
    assert "first on line 1" in second.message
    with pytest.raises(InputError, match=r"d\.jsonl:2: field 'id': duplicate id"):
        read_dataset(p)


def test_over_long_passage_is_truncated_flagged_and_warned(tmp_path: Path) -> None:
    p = _write(tmp_path / "d.jsonl", [{"id": "q", "query": "q", "retrieval_context": ["abcdefghij", "abc"]}])
    [rec] = read_dataset(p, max_passage_chars=4)
    assert [x.text for x in rec.passages] == ["abcd", "abc"]
    assert [x.truncated for x in rec.passages] == [True, False]
    assert rec.passages[0].original_chars == 10
    [w] = rec.warnings
    assert (w.line, w.field) == (1, "retrieval_context[0]")
    assert "10 characters truncated to 4" in w.message


def test_gzip_input_is_detected_by_content(tmp_path: Path) -> None:
    plain = _write(tmp_path / "d.jsonl", [GOOD, GOOD | {"id": "q2"}])
    gz = tmp_path / "d.data"  # no .gz suffix on purpose
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert [r.id for r in read_dataset(gz)] == ["q1", "q2"]
    assert count_lines(gz) == 2


def test_field_map_renames_every_field(tmp_path: Path) -> None:
    line = {
        "qid": "x1",
        "question": "q",
        "passages": [{"pid": "p1", "content": "t1"}, "t2"],
        "gold": ["p1"],
    }
    p = _write(tmp_path / "d.jsonl", [line])
    fmap = parse_field_map(
        [
            "id=qid",
            "query=question",
            "retrieval_context=passages",
            "text=content",
            "passage_id=pid",
            "expected_ids=gold",
        ]
    )
    [rec] = read_dataset(p, field_map=fmap)
    assert (rec.id, rec.query) == ("x1", "q")
    assert [(x.id, x.text) for x in rec.passages] == [("p1", "t1"), (None, "t2")]
    assert rec.expected_ids == ("p1",)
    # Unmapped, the same line lacks "query".
    [err] = iter_dataset(p)
    assert isinstance(err, InputError) and err.field == "query"


@pytest.mark.parametrize("item", ["query", "query=", "nope=x", "=x"])
def test_bad_map_arguments_are_input_errors(item: str) -> None:
    with pytest.raises(InputError) as info:
        parse_field_map([item])
    assert info.value.field == "--map"


def test_unreadable_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        list(iter_dataset(tmp_path / "missing.jsonl"))


# --- hostile lines: each is a reject naming file, line and field; the others still parse ----
DEEP = "[" * 3000 + "]" * 3000


def test_hostile_lines_are_rejected_by_themselves(tmp_path: Path) -> None:
    good = '{"id": "ok", "query": "q", "retrieval_context": ["a"]}'
    lines = [
        '{"id": "s1", "query": "q\\ud800", "retrieval_context": ["a"]}',  # lone surrogate
        '{"id": "s2", "query": "q", "retrieval_context": ["a", {"text": "b\\udc00"}]}',
        '{"id": "n1", "query": "q", "retrieval_context": ["a"], "meta": ' + DEEP + "}",  # parser too deep
        '{"id": "n2", "query": "q", "retrieval_context": ["a"], "meta": ' + "[" * 70 + "]" * 70 + "}",
        DEEP,
        '{"\\ud800": 1, "id": "k1", "query": "q", "retrieval_context": ["a"]}',
        '{"id": "t1", "query": ["q"], "retrieval_context": ["a"]}',
        '{"id": "pair", "query": "q \\ud83d\\ude00", "retrieval_context": ["a"]}',  # a valid pair
        good,
    ]
    p = _write(tmp_path / "h.jsonl", lines)
    items = list(iter_dataset(p))
    errors = [(e.line, e.field, e.message) for e in items if isinstance(e, InputError)]
    assert [(line, fld) for line, fld, _ in errors] == [
        (1, "query"),
        (2, "retrieval_context[1].text"),
        (3, "meta"),
        (4, "meta"),
        (5, None),
        (6, "\\ud800"),
        (7, "query"),
    ]
    assert "lone surrogate" in errors[0][2] and "nested deeper than 64 levels" in errors[2][2]
    ok = [r for r in items if isinstance(r, DatasetRecord)]
    assert [(r.id, r.query) for r in ok] == [("pair", "q \U0001f600"), ("ok", "q")]
    # Every reject can be written back as UTF-8 (the rejects file).
    for e in items:
        if isinstance(e, InputError):
            json.dumps(error_record(e), ensure_ascii=False).encode("utf-8")


def test_limits_reject_a_long_query_or_too_many_passages(tmp_path: Path) -> None:
    p = _write(
        tmp_path / "l.jsonl",
        [
            {"id": "a", "query": "x" * 11, "retrieval_context": ["p"]},
            {"id": "b", "query": "q", "retrieval_context": ["p", "p", "p"]},
            {"id": "c", "query": "x" * 10, "retrieval_context": ["p", "p"]},
        ],
    )
    assert all(isinstance(r, DatasetRecord) for r in iter_dataset(p))  # unbounded by default
    with dataset_limits(DatasetLimits(max_query_chars=10, max_passages=2)):
        items = list(iter_dataset(p))
    errors = [(e.line, e.field, e.message) for e in items if isinstance(e, InputError)]
    assert errors == [
        (1, "query", "query of 11 characters; at most 10"),
        (2, "retrieval_context", "3 passages; at most 2 per record"),
    ]
    assert [r.id for r in items if isinstance(r, DatasetRecord)] == ["c"]


def test_json_problem_names_the_path() -> None:
    assert json_problem({"a": [{"b": "ok"}]}) is None
    assert json_problem({"a": [{"b": "x\ud800"}]}) == (
        "a[0].b",
        "invalid Unicode (a lone surrogate escape such as \\ud800)",
    )
    nested: Any = "leaf"
    for _ in range(5):
        nested = [nested]
    assert json_problem({"m": nested}, max_depth=5) == ("m", "nested deeper than 5 levels")
    assert json_problem({"m": nested}, max_depth=6) is None
