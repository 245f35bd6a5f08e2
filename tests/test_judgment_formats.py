"""The judgment lists of Quepid and SRW (``judge.io``): the CSV, SRW's judgment list JSON and
RRE ratings read and written, checked field by field, and the stated scale mappings; cases
worked by hand, and the files as Quepid's exporter and importer and SRW's docs write them."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest

from judge.io import (
    InputError,
    csv_guard,
    csv_unguard,
    detect_judgment_format,
    detect_scale,
    judgments_by_qid,
    read_judgments,
    scale_rule,
    shared_text,
    write_judgments,
)

# Hostile texts and ids: commas, quotes, tabs, newlines (texts only: ids refuse control
# characters), %, Chinese, Quepid's formula guard. From row 5 (FORMULAS): cells a spreadsheet
# would take for a formula, in every column (a docid comes from whatever engine answered);
# a leading tab or carriage return (some spreadsheets strip them, then see a formula); a text
# that already starts with spaces before such a character; an apostrophe.
HOSTILE = [
    ('red, "dress"\tsize\n中文 100%', 'doc,"1" %20', "2"),
    ("-minus first", "d 2", "0"),
    (" -spaced minus", "文档三", "3"),
    ("=1+1", "@at", "1"),
    ("plain", "%", "3"),
    ("q", '=HYPERLINK("http://x","y")', "1"),
    ("+q", "+d2", "0"),
    ("\tq", "-d3", "2"),
    ("\rq", "@d4", "3"),
    (" -q", " -d5", "1"),
    ("'q", "'d6", "1"),
    ("q7", "d7", "-1"),
    ("mid\rtext", "d8", "0"),  # a carriage return is quoted wherever it is
]
FORMULAS = HOSTILE[5:]


def _pairs(path: Path) -> list[tuple[str, str, str]]:
    return [(j.query, j.docid, str(j.rating)) for j in read_judgments(path).judgments]


@pytest.mark.parametrize("fmt", ["csv", "srw", "rre"])
def test_every_format_round_trips_hostile_texts_and_ids(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"list.{fmt}"
    write_judgments(path, HOSTILE, fmt)  # type: ignore[arg-type]
    assert detect_judgment_format(path) == fmt
    assert _pairs(path) == HOSTILE


def test_csv_is_rfc4180_with_quepids_header_and_formula_guard(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    text = write_judgments(path, HOSTILE[:3], "csv")
    assert text.splitlines()[0] == "query,docid,rating"
    # a field with a comma, quote or newline is quoted, quotes doubled; '-x' travels as ' -x'
    assert text.startswith('query,docid,rating\n"red, ""dress""\tsize\n中文 100%","doc,""1"" %20",2\n')
    assert "\n -minus first,d 2,0\n" in text
    assert "\n  -spaced minus,文档三,3\n" in text


def test_csv_guards_every_cell_and_reads_every_one_back(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    text = write_judgments(path, FORMULAS, "csv")
    assert text == (
        "query,docid,rating\n"
        'q," =HYPERLINK(""http://x"",""y"")",1\n'
        " +q, +d2,0\n"
        " \tq, -d3,2\n"
        '" \rq", @d4,3\n'
        "  -q,  -d5,1\n"
        "'q,'d6,1\n"
        "q7,d7, -1\n"
        '"mid\rtext",d8,0\n'
    )
    cells = [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert [(j.query, j.docid, j.rating) for j in read_judgments(path).judgments] == [
        (q, d, Decimal(r)) for q, d, r in FORMULAS
    ]


@pytest.mark.parametrize(
    "text",
    ["-x", " -x", "  -x", " x", "x", " ", "'", "'=x", "=", " =", "\t", " \t=x", "\r\n", "@", "a-b", ""],
)
def test_the_guard_is_undone_exactly(text: str) -> None:
    guarded = csv_guard(text)
    assert guarded[:1] not in ("=", "+", "-", "@", "\t", "\r")
    assert csv_unguard(guarded) == text
    assert guarded == text or guarded == " " + text  # at most one space, only when needed


def test_shared_text_names_the_first_two_ids_of_one_text() -> None:
    # what every writer of a list keyed by text refuses: the first repeat, in the map's order
    assert shared_text({"a": "x", "b": "y", "c": "y", "d": "x"}) == ("b", "c", "y")
    assert shared_text({"a": "x", "b": " x", "c": "X"}) is None  # texts are matched exactly on reading
    assert shared_text({}) is None


def test_a_csv_as_quepids_ratings_export_writes_it(tmp_path: Path) -> None:
    # Quepid's Export/RatingsController: header query,docid,rating; a query without ratings
    # padded to 'text,,'; a text starting with '-' guarded by a space; no newline at the end.
    path = tmp_path / "case_1_judgements.csv"
    path.write_text(
        "query,docid,rating\nstar trek,193,1\nstar trek,157,2\nstar wars,,\n -1 star,12180,3",
        encoding="utf-8",
    )
    assert detect_judgment_format(path) == "csv"
    got = read_judgments(path).judgments
    assert [(j.line, j.query, j.docid, j.rating) for j in got] == [
        (2, "star trek", "193", Decimal(1)),
        (3, "star trek", "157", Decimal(2)),
        (5, "-1 star", "12180", Decimal(3)),
    ]


def test_a_csv_without_header_and_with_a_bom_and_multiline_records(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_bytes('\ufeff"two\nlines",d1,0.5\nq2,d2,1\n'.encode())
    got = read_judgments(path).judgments
    assert [(j.line, j.query) for j in got] == [(1, "two\nlines"), (3, "q2")]  # line where a record starts


def test_a_csv_with_windows_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(b'\xef\xbb\xbfquery,docid,rating\r\n"a\r\nb",d1,2\r\nq2,d2,0\r\n')
    assert detect_judgment_format(path) == "csv"
    assert _pairs(path) == [("a\r\nb", "d1", "2"), ("q2", "d2", "0")]


def test_srw_as_its_docs_write_it(tmp_path: Path) -> None:
    # PUT _plugins/_search_relevance/judgments, type IMPORT_JUDGMENT; ratings are strings
    body = {
        "name": "Imported Judgments",
        "description": "Judgments generated outside SRW",
        "type": "IMPORT_JUDGMENT",
        "judgmentRatings": [
            {"query": "red dress", "ratings": [{"docId": "B077ZJXCTS", "rating": "3.000"}]},
            {
                "query": "metal frame",
                "ratings": [{"rating": "0.9", "docId": "B097Q69V1B"}, {"docId": "x", "rating": 1}],
            },
        ],
    }
    path = tmp_path / "srw.json"
    path.write_text(json.dumps(body, indent=2), encoding="utf-8")
    found = read_judgments(path)
    assert found.format == "srw" and found.stated_scale is None
    assert [(j.query, j.docid, j.rating) for j in found.judgments] == [
        ("red dress", "B077ZJXCTS", Decimal("3.000")),
        ("metal frame", "B097Q69V1B", Decimal("0.9")),
        ("metal frame", "x", Decimal(1)),
    ]
    assert found.judgments[1].field == "judgmentRatings[1].ratings[0].rating"
    assert found.judgments[1].line == 18  # the line its object opens on (counted in the file)


def test_rre_as_quepid_exports_and_imports_it(tmp_path: Path) -> None:
    exported = {  # Quepid's show_rre.json.jbuilder: relevant_documents {docid: {gain}}
        "id_field": "id",
        "index": "tmdb",
        "template": "template.json",
        "queries": [
            {
                "placeholders": {"$query": "star trek"},
                "relevant_documents": {"193": {"gain": 1}, "157": {"gain": 2}},
            },
            {"placeholders": {"$query": "no ratings"}},
        ],
    }
    imported = {  # Quepid's importer (mock_rre_json.json): {"rating": [docid, ...]}
        "id_field": "id",
        "index": "Movies Search",
        "template": "template.json",
        "queries": [
            {
                "placeholders": {"$query": "star wars"},
                "relevant_documents": {"1": ["12180"], "2": ["13532", "1895"]},
            }
        ],
    }
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(exported), encoding="utf-8")
    b.write_text(json.dumps(imported), encoding="utf-8")
    assert detect_judgment_format(a) == detect_judgment_format(b) == "rre"
    assert _pairs(a) == [("star trek", "193", "1"), ("star trek", "157", "2")]
    assert _pairs(b) == [("star wars", "12180", "1"), ("star wars", "13532", "2"), ("star wars", "1895", "2")]


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("body", "line", "field"),
    [
        ("query,docid,rating\nq,d,abc\n", 2, "rating"),
        ("query,docid,rating\nq,d,nan\n", 2, "rating"),
        ("query,docid,rating\nq,d,inf\n", 2, "rating"),
        ("query,docid,rating\nq,d,1,extra\n", 2, None),
        ("query,docid,rating\nq,,1\n", 2, "docid"),
        ("query,docid,rating\n,d,1\n", 2, "query"),
        ("query,docid,rating\nq,d\x01,1\n", 2, "docid"),
        ("query,docid,rating\nq,d,1\nq,d,2\n", 3, "rating"),  # rated twice, differently
        ("name,id,grade\nq,d,1\n", 1, "header"),
    ],
)
def test_a_bad_csv_line_is_named(tmp_path: Path, body: str, line: int, field: str | None) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_judgments(path, "csv")
    assert (err.value.path, err.value.line, err.value.field) == (str(path), line, field)


def test_invalid_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(b"query,docid,rating\nq,d,1\nq\xff,d,1\n")
    with pytest.raises(InputError) as err:
        read_judgments(path, "csv")
    assert err.value.line == 3


@pytest.mark.parametrize(
    ("rating", "field"),
    [
        ("true", "judgmentRatings[0].ratings[1].rating"),
        ("NaN", None),
        ('"1e999"', "judgmentRatings[0].ratings[1].rating"),
        ("[]", "judgmentRatings[0].ratings[1].rating"),
    ],
)
def test_a_bad_srw_rating_is_named(tmp_path: Path, rating: str, field: str | None) -> None:
    path = tmp_path / "srw.json"
    path.write_text(
        '{"type": "IMPORT_JUDGMENT", "judgmentRatings": [{"query": "q", "ratings": [\n'
        '{"docId": "a", "rating": "1"},\n{"docId": "b", "rating": ' + rating + "}]}]}",
        encoding="utf-8",
    )
    with pytest.raises(InputError) as err:
        read_judgments(path)
    assert err.value.field == field
    if field is not None:
        assert err.value.line == 3


def test_srw_needs_its_keys_and_types(tmp_path: Path) -> None:
    path = tmp_path / "srw.json"
    path.write_text('{"type": "IMPORT_JUDGMENT", "judgmentRatings": [{"query": "q", "ratings": {}}]}')
    with pytest.raises(InputError) as err:
        read_judgments(path)
    assert err.value.field == "judgmentRatings[0].ratings"
    path.write_text('{"type": "LLM_JUDGMENT", "judgmentRatings": []}')
    with pytest.raises(InputError) as err:
        read_judgments(path)
    assert err.value.field == "type"


def test_neither_format_names_line_one(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("# a comment\nhello, world\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        detect_judgment_format(path)
    assert err.value.line == 2 and "neither" in err.value.message
    path.write_text("q1 0 d1 2\n", encoding="utf-8")
    assert detect_judgment_format(path) == "trec"
    path.write_text('{"qid": "q1"}\n', encoding="utf-8")
    with pytest.raises(InputError):
        detect_judgment_format(path)


# ---------------------------------------------------------------------------- text -> id
def test_texts_become_ids_through_the_query_set(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    write_judgments(path, [("小狗  贫血", "d1", "2"), ("shared", "d2", "1")], "csv")
    found = read_judgments(path)
    with pytest.raises(InputError) as err:
        judgments_by_qid(found, {"q1": "小狗 贫血", "q2": "shared", "q3": "shared"})
    assert (err.value.line, err.value.field) == (3, "query") and "'q2', 'q3' share" in err.value.message
    with pytest.raises(InputError) as err:
        judgments_by_qid(found, {"q1": "小狗 贫血"}, field="--queries")
    assert err.value.line == 3 and "not in the query set (--queries)" in err.value.message
    # whitespace collapsed when no text matches exactly
    assert [q for _, q in judgments_by_qid(found, {"q1": "小狗 贫血", "q2": "shared"})] == ["q1", "q2"]


# ---------------------------------------------------------------------------- scales
@pytest.mark.parametrize(
    ("scale", "rating", "grade"),
    [
        # quepid-1-10: round((r - 1) / 3): 1-2 -> 0, 3-5 -> 1, 6-8 -> 2, 9-10 -> 3
        ("quepid-1-10", "1", 0),
        ("quepid-1-10", "2", 0),
        ("quepid-1-10", "3", 1),
        ("quepid-1-10", "5", 1),
        ("quepid-1-10", "6", 2),
        ("quepid-1-10", "8", 2),
        ("quepid-1-10", "9", 3),
        ("quepid-1-10", "10", 3),
        # srw-0-1: floor(3r + 1/2): [0, 1/6) -> 0, [1/6, 1/2) -> 1, [1/2, 5/6) -> 2, [5/6, 1] -> 3
        ("srw-0-1", "0", 0),
        ("srw-0-1", "0.1666", 0),
        ("srw-0-1", "0.1667", 1),
        ("srw-0-1", "0.4999", 1),
        ("srw-0-1", "0.5", 2),
        ("srw-0-1", "0.8333", 2),
        ("srw-0-1", "0.8334", 3),
        ("srw-0-1", "1.0", 3),
        ("quepid-0-3", "2", 2),
        ("graded-0-3", "3.000", 3),
        ("binary", "1", 1),
    ],
)
def test_each_scale_maps_by_its_stated_rule(scale: str, rating: str, grade: int) -> None:
    rule = scale_rule(scale)
    assert rule.problem(Decimal(rating)) is None
    assert rule.to_store(Decimal(rating)) == grade


@pytest.mark.parametrize(
    ("scale", "written"),
    [
        ("srw-0-1", ["0.000", "0.333", "0.667", "1.000"]),
        ("quepid-1-10", ["1", "4", "7", "10"]),
        ("quepid-0-3", ["0", "1", "2", "3"]),
    ],
)
def test_grades_go_out_at_the_inverse_point_of_their_bin(scale: str, written: list[str]) -> None:
    rule = scale_rule(scale)
    assert [rule.from_store(g) for g in range(4)] == written
    assert [rule.to_store(Decimal(w)) for w in written] == [0, 1, 2, 3]
    assert rule.store_scale == "graded"


@pytest.mark.parametrize(
    ("scale", "rating"),
    [("srw-0-1", "1.2"), ("quepid-1-10", "0"), ("quepid-1-10", "2.5"), ("binary", "2"), ("graded-0-3", "4")],
)
def test_a_rating_off_its_scale_is_refused(scale: str, rating: str) -> None:
    assert scale_rule(scale).problem(Decimal(rating)) is not None


def test_trec_qrels_take_integer_grades_only(tmp_path: Path) -> None:
    text = write_judgments(None, [("q 1", "d%", "2")], "trec", escape=lambda s: s.replace(" ", "%20"))
    assert text == "q%201 0 d% 2\n"
    with pytest.raises(InputError) as err:
        write_judgments(tmp_path / "x.qrels", [("q1", "d", "0.667")], "trec")
    assert err.value.field == "--scale" and not (tmp_path / "x.qrels").exists()


def _detect(*ratings: str) -> str:
    return detect_scale([(i + 1, Decimal(r)) for i, r in enumerate(ratings)], path="f").name


def test_the_scale_is_detected_only_where_one_reading_is_left() -> None:
    assert _detect("0", "1", "2") == "graded-0-3"
    assert _detect("1", "7", "10") == "quepid-1-10"
    assert _detect("0.5", "1", "0") == "srw-0-1"
    for ambiguous in (("0", "1"), ("1", "2", "3"), ("1",)):
        with pytest.raises(InputError) as err:
            _detect(*ambiguous)
        assert err.value.field == "--scale" and "ambiguous" in err.value.message
    with pytest.raises(InputError) as err:
        _detect("0", "3", "7")
    assert err.value.line == 3
    with pytest.raises(InputError) as err:
        _detect("0.5", "2")
    assert err.value.line == 2
    with pytest.raises(InputError) as err:
        _detect("11")
    assert err.value.line == 1
    with pytest.raises(InputError) as err:
        scale_rule("likert-5")
    assert err.value.field == "--scale"
