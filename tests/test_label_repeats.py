"""A pair rated twice in one labels file: read once when both ratings agree, refused naming
both lines when they differ, by every reader of labels (TREC qrels, CSV, SRW, RRE; ``judge
labels import``, ``judge score --labels``, the service's ``POST /v1/labels``) through one
rule, :class:`judge.io.RatedPairs`. Before, a TREC labels file rating a pair 1 and then 0
was imported and applied with exit 0 (the last line won) while the CSV reader refused even
an identical repeat."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from judge.cli import main
from judge.io import InputError, RatedPairs, read_judgments
from judge.store import LabelStore, read_label_lines

CONFLICT = "q1 0 d1 1\nq1 0 d1 0\n"  # line 2 contradicts line 1


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- the rule
def test_the_rule_reads_a_repeat_once_and_refuses_a_contradiction() -> None:
    pairs = RatedPairs("f")
    assert pairs.first("q", "d", Decimal("1"), line=2, field="rating") is True
    assert pairs.first("q", "e", Decimal("0"), line=3, field="rating") is True
    assert pairs.first("q", "d", Decimal("1.0"), line=4, field="rating") is False  # the same value
    assert pairs.first("q2", "d", Decimal("0"), line=5, field="rating") is True  # another query
    with pytest.raises(InputError) as err:
        pairs.first("q", "d", Decimal("2"), line=6, field="rating")
    assert (err.value.path, err.value.line, err.value.field) == ("f", 6, "rating")
    assert "rated 2 here and 1 at line 2" in err.value.message


# ---------------------------------------------------------------------------- every format
SRW_CONFLICT = {
    "name": "l",
    "type": "IMPORT_JUDGMENT",
    "judgmentRatings": [
        {"query": "red dress", "ratings": [{"docId": "d1", "rating": "1"}]},
        {"query": "red dress", "ratings": [{"docId": "d1", "rating": "0"}]},
    ],
}
RRE_CONFLICT = {
    "id_field": "id",
    "index": "",
    "template": "t.json",
    "queries": [
        {"placeholders": {"$query": "red dress"}, "relevant_documents": {"d1": {"gain": 1}}},
        {"placeholders": {"$query": "red dress"}, "relevant_documents": {"d1": {"gain": 3}}},
    ],
}


@pytest.mark.parametrize(
    ("name", "text", "line", "first", "field"),
    [
        ("l.qrels", CONFLICT, 2, 1, "grade"),
        ("l.csv", "query,docid,rating\nred dress,d1,1\nother,d1,0\nred dress,d1,0\n", 4, 2, "rating"),
        ("srw.json", json.dumps(SRW_CONFLICT, indent=1), 17, 8, "judgmentRatings[1].ratings[0].rating"),
        ("rre.json", json.dumps(RRE_CONFLICT, indent=1), 21, 11, "queries[1].relevant_documents.d1.gain"),
    ],
)
def test_every_format_refuses_a_pair_rated_twice_differently(
    tmp_path: Path, name: str, text: str, line: int, first: int, field: str
) -> None:
    path = _write(tmp_path / name, text)
    with pytest.raises(InputError) as err:
        read_judgments(path)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), line, field)
    assert f"at line {first}" in err.value.message


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("l.qrels", "q1 0 d1 1\nq1 0 d2 0\nq1 0 d1 1\n"),
        ("l.csv", "query,docid,rating\nred dress,d1,1\nred dress,d2,0\nred dress,d1,1.0\n"),
    ],
)
def test_an_identical_repeat_is_read_once(tmp_path: Path, name: str, text: str) -> None:
    found = read_judgments(_write(tmp_path / name, text))
    assert [(j.line, j.docid, j.rating) for j in found.judgments] == [
        (2 if name.endswith(".csv") else 1, "d1", Decimal(1)),
        (3 if name.endswith(".csv") else 2, "d2", Decimal(0)),
    ]


def test_the_label_files_reader_has_the_same_rule(tmp_path: Path) -> None:
    path = _write(tmp_path / "l.qrels", CONFLICT)
    with pytest.raises(InputError) as err:
        read_label_lines(path, reviewer="r")
    assert (err.value.line, err.value.field) == (2, "grade") and "at line 1" in err.value.message
    # ids compare unescaped: 'd%201' is 'd 1'
    same = _write(tmp_path / "s.qrels", "q1 0 d%201 1\nq1 0 d2 0\nq1 0 d%201 1\n")
    got = read_label_lines(same, reviewer="r")
    assert [(n, lab.docno, lab.label) for n, lab in got] == [(1, "d 1", 1), (2, "d2", 0)]
    # an unjudged -1 against a grade is a contradiction too
    with pytest.raises(InputError) as err:
        read_label_lines(_write(tmp_path / "u.qrels", "q1 0 d1 -1\nq1 0 d1 2\n"), reviewer="r")
    assert err.value.line == 2


# ---------------------------------------------------------------------------- entry points
def test_labels_import_refuses_a_conflicting_qrels_file_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "l.qrels", CONFLICT)
    store = tmp_path / "s.sqlite"
    assert main(["labels", "import", str(path), "--reviewer", "r", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: field 'grade'" in err and "rated 0 here and 1 at line 1" in err
    with LabelStore(store) as s:
        assert s.latest(collection="default") == []
    # a repeat of the same grade imports one label
    _write(path, "q1 0 d1 1\nq1 0 d1 1\n")
    assert main(["labels", "import", str(path), "--reviewer", "r", "--store", str(store)]) == 0
    assert json.loads(capsys.readouterr().out)["imported"] == 1


def test_labels_import_refuses_a_conflicting_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queries = _write(tmp_path / "qs.jsonl", json.dumps({"id": "q1", "query": "red dress"}) + "\n")
    path = _write(tmp_path / "l.csv", "query,docid,rating\nred dress,d1,3\nred dress,d1,0\n")
    assert main(["labels", "import", str(path), "--queries", str(queries)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: field 'rating'" in err and "at line 2" in err


def test_score_labels_refuses_a_conflicting_qrels_file_before_judging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps({"id": "q1", "query": "red dress", "retrieval_context": [{"id": "d1", "text": "a dress"}]})
        + "\n",
        encoding="utf-8",
    )
    judge_qrels = _write(tmp_path / "judge.qrels", "q1 0 d1 1\n")
    labels = _write(tmp_path / "l.qrels", CONFLICT)
    out = tmp_path / "o.jsonl"
    args = ["score", str(data), "-o", str(out), "--backend", f"qrels:{judge_qrels}", "--quiet"]
    assert main([*args, "--labels", str(labels)]) == 2
    err = capsys.readouterr().err
    assert f"{labels}:2: field 'grade'" in err and "at line 1" in err
    assert not out.exists()
    _write(labels, "q1 0 d1 0\nq1 0 d1 0\n")  # the same grade twice: applied once
    assert main([*args, "--labels", str(labels)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["labels"]["applied"] == 1 and summary["human_labels"]["changed"] == 1


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    pytest.importorskip("fastapi")
    from _review import p_backend
    from _server import make_config
    from fastapi.testclient import TestClient

    from judge.server import create_app

    with TestClient(create_app(make_config(tmp_path, backend=p_backend()))) as c:
        yield c


def test_the_service_import_is_422_naming_both_lines(client: Any) -> None:
    r = client.post("/v1/labels?reviewer=r", content=CONFLICT.encode())
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "grade"] and detail["msg"].startswith("line 2:")
    assert "at line 1" in detail["msg"]
    assert client.get("/v1/labels").json()["count"] == 0
    r = client.post("/v1/labels?reviewer=r", content=b"q1 0 d1 1\nq1 0 d1 1\n")
    assert r.status_code == 200 and r.json() == {"imported": 1}
