"""The one reader of TREC qrels lines (``judge.io.read_qrels_lines``): ``read_qrels``,
the sample labels (``--sample-labels``, an optional fifth column: the inclusion probability)
and the label store's qrels files all read through it, with the same errors (file, line,
field)."""

from __future__ import annotations

from pathlib import Path

import pytest

from judge.io import InputError, read_qrels, read_qrels_lines, read_sample_labels
from judge.store import read_label_lines


def _file(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "x.qrels"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_five_columns_carry_the_inclusion_probability_in_file_order(tmp_path: Path) -> None:
    path = _file(tmp_path, "# drawn by the sample mode\nq2 0 b 1 0.25\n\nq1 0 a 0 1\nq1 0 c 3 1e-3\n")
    rows = read_qrels_lines(path, inclusion=True)
    assert list(rows.rows()) == [(2, "q2", "b", 1, 0.25), (4, "q1", "a", 0, 1.0), (5, "q1", "c", 3, 0.001)]
    sample = read_sample_labels(path)
    assert sample.weighted and [(x.qid, x.line, x.inclusion) for x in sample.labels] == [
        ("q2", 2, 0.25),
        ("q1", 4, 1.0),
        ("q1", 5, 0.001),
    ]
    four = read_qrels_lines(_file(tmp_path, "q1 0 a 1\n"), inclusion=True)
    assert four.inclusion is None and list(four.rows()) == [(1, "q1", "a", 1, None)]


@pytest.mark.parametrize(
    ("fifth", "message"),
    [
        ("nan", "must be a number"),
        ("text", "must be a number"),
        ("0", r"must be in \[1e-06, 1\]"),
        ("0.0", r"must be in \[1e-06, 1\]"),
        ("1.5", r"must be in \[1e-06, 1\]"),
        ("-0.5", r"must be in \[1e-06, 1\]"),
        ("inf", r"must be in \[1e-06, 1\]"),
        # below the floor MIN_INCLUSION = 1e-6: 1 / p would overflow (1e-320) or weigh one label
        # more than a million
        ("1e-320", r"must be in \[1e-06, 1\], got '1e-320'"),
        ("9.99e-7", r"must be in \[1e-06, 1\]"),
    ],
)
def test_a_bad_inclusion_probability_names_its_line_and_field(
    tmp_path: Path, fifth: str, message: str
) -> None:
    path = _file(tmp_path, f"q1 0 a 1 0.5\nq1 0 b 0 {fifth}\n")
    for read in (lambda: read_qrels_lines(path, inclusion=True), lambda: read_sample_labels(path)):
        with pytest.raises(InputError, match=message) as err:
            read()
        assert (err.value.path, err.value.line, err.value.field) == (str(path), 2, "inclusion")


def test_every_line_gives_the_probability_or_none(tmp_path: Path) -> None:
    path = _file(tmp_path, "q1 0 a 1\nq1 0 b 0\nq1 0 c 0 0.5\n")
    with pytest.raises(InputError, match="5 columns where earlier lines have 4") as err:
        read_sample_labels(path)
    assert (err.value.line, err.value.field) == (3, "inclusion")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_file_is_refused_by_every_reader(tmp_path: Path, text: str) -> None:
    path = _file(tmp_path, text)
    readers = (
        lambda: read_qrels(path),
        lambda: read_qrels_lines(path, inclusion=True),
        lambda: read_sample_labels(path),
        lambda: read_label_lines(path, reviewer="ann"),
    )
    for read in readers:
        with pytest.raises(InputError, match="empty file") as err:
            read()
        assert (err.value.path, err.value.line) == (str(path), 1)


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("q1 0 a 1\nq1 0 b x\n", 2, "grade", "must be an integer"),
        ("q1 0 a 1\nq1 0 b\n", 2, "grade", "expected 4"),
        ("q1 0 a 1\nq1 0 b 1 0.5\n", 2, None, "expected 4"),
        (b"q1 0 a 1\nq1 0 \xff 1\n", 2, "docno", "invalid UTF-8"),
    ],
)
def test_the_label_store_and_read_qrels_name_the_same_place(
    tmp_path: Path, text: str | bytes, line: int, field: str | None, message: str
) -> None:
    path = _file(tmp_path, text)
    readers = [lambda: read_label_lines(path, reviewer="ann"), lambda: list(read_qrels_lines(path).rows())]
    if field != "docno":  # read_qrels keeps trec_eval's bytes: an id is never decoded strictly
        readers.append(lambda: read_qrels(path))
    for read in readers:
        with pytest.raises(InputError, match=message) as err:
            read()
        assert (err.value.path, err.value.line, err.value.field) == (str(path), line, field)


def test_a_sample_file_with_too_few_or_many_columns(tmp_path: Path) -> None:
    for text, field in (("q1 0 a\n", "grade"), ("q1 0 a 1 0.5 x\n", None)):
        with pytest.raises(InputError, match=r"expected 4 or 5 .*\[inclusion\]") as err:
            read_sample_labels(_file(tmp_path, text))
        assert (err.value.line, err.value.field) == (1, field)


def test_label_files_still_unescape_their_ids(tmp_path: Path) -> None:
    path = _file(tmp_path, "q%201 0 d%25 1\n")
    assert [(n, lab.qid, lab.docno) for n, lab in read_label_lines(path, reviewer="ann")] == [
        (1, "q 1", "d%")
    ]
