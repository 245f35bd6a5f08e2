"""The service and the label store under hostile input, each against the way it
was broken: integers past SQLite's int64 in a request (a 500 before), an old label store
holding bytes that are not UTF-8 (migration 3 raised: ``judge labels list`` and ``judge
serve`` failed), ``"label": true`` taken as 1 by the review route, a missing
``--admin-keys`` file reported as ``--api-keys-file``, and the 421 of a server with keys
saying it has none. In process, on the fake judge of ``tests/_review.py``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _review import p_backend, records
from _server import app_for, make_config, wait_job
from fastapi.testclient import TestClient

from judge.server import create_app
from judge.store import MAX_SQLITE_INT, LabelStore, decode_cursor, encode_cursor

INT64_PAST = MAX_SQLITE_INT + 1  # 2**63: the first integer SQLite cannot hold
OPTIONS = {"probability": True, "p_yes_threshold": 0.5, "k": [3]}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    with TestClient(create_app(make_config(tmp_path, backend=p_backend()))) as c:
        yield c


def run_job(client: Any) -> str:
    r = client.post("/v1/jobs", json={"records": records()[:2], "options": OPTIONS})
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    assert wait_job(client, job_id)["status"] == "done"
    return job_id


def loc_of(r: Any) -> list[Any]:
    return list(r.json()["detail"][0]["loc"])


# --- integers bounded before SQLite -----------------------------------------------------------
def test_an_offset_past_int64_is_422_and_the_largest_one_is_an_empty_page(client: Any) -> None:
    assert MAX_SQLITE_INT == 9_223_372_036_854_775_807  # SQLite's largest INTEGER
    for offset in (INT64_PAST, 10**30):
        r = client.get(f"/v1/jobs?offset={offset}")
        assert r.status_code == 422 and loc_of(r) == ["query", "offset"], r.text
    r = client.get(f"/v1/jobs?offset={MAX_SQLITE_INT}")
    assert r.status_code == 200 and r.json()["jobs"] == []
    assert client.get("/v1/jobs?offset=-1").status_code == 422


def test_every_offset_of_the_service_has_the_same_bound(client: Any) -> None:
    job_id = run_job(client)
    for path in (f"/v1/jobs/{job_id}/results", f"/v1/jobs/{job_id}/queue"):
        r = client.get(f"{path}?offset={INT64_PAST}")
        assert r.status_code == 422 and loc_of(r) == ["query", "offset"], (path, r.text)
        assert client.get(f"{path}?offset={MAX_SQLITE_INT}").status_code == 200, path


def test_a_label_cursor_past_int64_is_422_naming_the_cursor(client: Any) -> None:
    for history in ("false", "true"):
        for cursor in (encode_cursor(INT64_PAST), encode_cursor(10**19 - 1)):
            r = client.get(f"/v1/labels?history={history}&cursor={cursor}")
            assert r.status_code == 422 and loc_of(r) == ["query", "cursor"], r.text
        r = client.get(f"/v1/labels?history={history}&cursor={encode_cursor(MAX_SQLITE_INT)}")
        assert r.status_code == 200 and r.json()["labels"] == [] and r.json()["next"] is None
    assert decode_cursor(encode_cursor(MAX_SQLITE_INT)) == MAX_SQLITE_INT


def test_the_store_refuses_a_page_after_an_id_sqlite_cannot_hold(tmp_path: Path) -> None:
    from judge.io import InputError

    with LabelStore(tmp_path / "labels.sqlite") as store:
        with pytest.raises(InputError) as err:
            store.page(collection="default", after=INT64_PAST)
        assert err.value.field == "cursor"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"seed": INT64_PAST}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": True}, "seed"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_a_calibration_seed_is_a_bounded_integer(client: Any, body: dict[str, Any], field: str) -> None:
    job_id = run_job(client)
    r = client.post(f"/v1/jobs/{job_id}/calibrate", json=body)
    assert r.status_code == 422 and loc_of(r) == ["body", field], r.text


def test_a_passage_index_is_a_bounded_integer(client: Any) -> None:
    job_id = run_job(client)
    for index in (INT64_PAST, True, 0.0):
        r = client.post(f"/v1/jobs/{job_id}/labels", json={"query_id": "q0", "index": index, "label": 1})
        assert r.status_code == 422 and loc_of(r) == ["body", "index"], (index, r.text)
    r = client.post(f"/v1/jobs/{job_id}/labels", json={"query_id": "q0", "index": 0, "label": 1})
    assert r.status_code == 201, r.text


def test_a_comparison_seed_is_a_bounded_integer(client: Any) -> None:
    systems = {"a": records()[:1], "b": records()[:1]}
    for seed in (INT64_PAST, -1, True):
        r = client.post("/v1/compare", json={"systems": systems, "options": {"seed": seed}})
        assert r.status_code == 422 and loc_of(r)[-1] == "seed", (seed, r.text)
    assert client.get("/v1/jobs").json()["jobs"] == []  # nothing was queued


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/v1/jobs", {"records": records()[:1], "options": {"max_passage_chars": True}}, "max_passage_chars"),
        ("/v1/jobs", {"records": records()[:1], "options": {"k": [True]}}, "0"),
        ("/v1/jobs", {"records": records()[:1], "options": {"p_yes_threshold": True}}, "p_yes_threshold"),
        ("/v1/evaluate", {"query": "q", "retrieval_context": ["p"], "k": [5, False]}, "1"),
        (
            "/v1/compare",
            {"systems": {"a": records()[:1], "b": records()[:1]}, "options": {"depth": True}},
            "depth",
        ),
        (
            "/v1/compare",
            {"systems": {"a": records()[:1], "b": records()[:1]}, "options": {"top_queries": False}},
            "top_queries",
        ),
    ],
)
def test_a_boolean_is_not_a_number_in_any_body(
    client: Any, path: str, body: dict[str, Any], loc: str
) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 422 and str(loc_of(r)[-1]) == loc, r.text
    assert "is not a number" in r.text
    assert client.get("/v1/jobs").json()["jobs"] == []  # nothing was queued


def test_a_boolean_is_not_a_number_in_a_calibration(client: Any) -> None:
    job_id = run_job(client)
    r = client.post(f"/v1/jobs/{job_id}/calibrate", json={"folds": True})
    assert r.status_code == 422 and loc_of(r) == ["body", "folds"] and "is not a number" in r.text


# --- one label model for the review route and the import ------------------------------------
@pytest.mark.parametrize("value", [True, False, 1.0])
def test_a_boolean_or_float_label_is_refused_by_the_review_route_and_the_import(
    client: Any, value: Any
) -> None:
    job_id = run_job(client)
    r = client.post(f"/v1/jobs/{job_id}/labels", json={"query_id": "q0", "docno": "d0", "label": value})
    assert r.status_code == 422 and loc_of(r) == ["body", "label"], r.text
    line = json.dumps({"qid": "q0", "docno": "d0", "label": value, "reviewer": "r"})
    r2 = client.post("/v1/labels", content=(line + "\n").encode())
    assert r2.status_code == 422 and loc_of(r2) == ["body", "label"], r2.text
    if isinstance(value, bool):  # one message, from one rule
        word = json.dumps(value)
        assert f"{word} is not a label" in r.text and f"{word} is not a label" in r2.text
    assert client.get("/v1/labels").json()["count"] == 0
    for good in (1, "y", "1"):  # what the review form sends is still taken
        r = client.post(f"/v1/jobs/{job_id}/labels", json={"query_id": "q0", "docno": "d0", "label": good})
        assert r.status_code == 201 and r.json()["label"]["label"] == 1, r.text


def test_parse_label_is_the_stores_rule() -> None:
    from judge.io import InputError
    from judge.store import parse_label

    assert [parse_label(v, "binary") for v in ("y", "no", 1, "0")] == [1, 0, 1, 0]
    assert [parse_label(v, "graded") for v in (3, "2")] == [3, 2]
    for value, scale in ((True, "binary"), (2, "binary"), ("y", "graded"), (None, "binary"), (1.5, "graded")):
        with pytest.raises(InputError) as err:
            parse_label(value, scale)  # type: ignore[arg-type]
        assert err.value.field == "label"
    with pytest.raises(InputError) as err:
        parse_label("y" * 100_000, "binary")
    assert len(err.value.message) < 100  # the answer does not echo a long body back


# --- an old label store with bytes that are not UTF-8 ----------------------------------------
def _old_store_with_bad_bytes(path: Path) -> None:
    """A version-2 store as an older judge could leave it: TEXT cells whose bytes are not
    UTF-8 (SQLite stores what it is given), beside good rows."""
    from judge.store._label_schema import _m001_labels, _m002_calibrations

    conn = sqlite3.connect(path, isolation_level=None)
    _m001_labels(conn)
    _m002_calibrations(conn)
    conn.execute("PRAGMA user_version = 2")
    insert = (
        "INSERT INTO label_history (collection, qid, docno, reviewer, label, scale, created, comment) "
        "VALUES ('default', CAST(? AS TEXT), CAST(? AS TEXT), 'ann', ?, 'binary', ?, CAST(? AS TEXT))"
    )
    rows = [  # (qid, docno, label, created, comment)
        (b"q0", b"d0", 1, 100.0, b""),  # good
        (b"q\xff", b"d0", 1, 101.0, b""),  # qid not UTF-8
        (b"q0", b"d1", 0, 102.0, b"caf\xe9"),  # Latin-1 comment
        (b"q0", b"d0", 0, 103.0, b"\xc3"),  # a newer label of d0, cut in a character
        (b"q1", b"d2", 1, 104.0, b"ok"),  # good
    ]
    for qid, docno, value, created, comment in rows:
        hid = conn.execute(insert, (qid, docno, value, created, comment)).lastrowid
        conn.execute(
            "INSERT OR REPLACE INTO labels VALUES ('default', CAST(? AS TEXT), CAST(? AS TEXT), 'ann', ?)",
            (qid, docno, hid),
        )
    assert conn.execute("SELECT COUNT(*) FROM label_history WHERE typeof(qid) = 'text'").fetchone() == (5,)
    conn.close()


def test_migration_3_quarantines_rows_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "labels.sqlite"
    _old_store_with_bad_bytes(path)
    with LabelStore(path) as store:
        assert {(x.qid, x.docno): x.label for x in store.latest()} == {("q0", "d0"): 1, ("q1", "d2"): 1}
        assert [x.history_id for x in store.history(collection=None)] == [1, 5]
        assert store.conflicts() == []
    conn = sqlite3.connect(path)
    quarantined = conn.execute("SELECT id, field, problem FROM label_quarantine ORDER BY id").fetchall()
    conn.close()
    assert [(i, f) for i, f, _ in quarantined] == [(2, "qid"), (3, "comment"), (4, "comment")]
    assert quarantined[0][2] == "text that is not UTF-8 (byte 0xff at 1)"
    assert quarantined[1][2] == "text that is not UTF-8 (byte 0xe9 at 3)"


def test_an_old_store_with_bad_bytes_lists_and_serves(tmp_path: Path, capsys: Any) -> None:
    from judge.cli import main

    path = tmp_path / "labels.sqlite"
    _old_store_with_bad_bytes(path)
    assert main(["labels", "list", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "q0" in out and "q1" in out
    served = tmp_path / "served"
    served.mkdir()
    _old_store_with_bad_bytes(served / "labels.sqlite")  # beside the server's database
    with TestClient(create_app(make_config(served, backend=p_backend()))) as c:
        r = c.get("/v1/labels")
        assert r.status_code == 200 and r.json()["count"] == 2


# --- flags named right ------------------------------------------------------------------------
def test_a_missing_admin_keys_file_is_reported_as_admin_keys(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    from judge.cli import main

    monkeypatch.setenv("JUDGE_API_KEYS", "k-alice-key")
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    missing = tmp_path / "no-such.keys"
    assert main(["serve", "--admin-keys", str(missing), "--db", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "--admin-keys" in err and "--api-keys-file" not in err and "no-such.keys" in err


def test_the_421_of_a_server_with_keys_does_not_say_it_has_none(tmp_path: Path) -> None:
    config = make_config(tmp_path / "keys", keys=["k1"])
    config.allowed_hosts = ("judge.internal",)
    with TestClient(create_app(config)) as c:
        r = c.get("/v1/jobs", headers={"Authorization": "Bearer k1", "Host": "rebind.example"})
        assert r.status_code == 421
        assert "without keys" not in r.json()["detail"] and "--allowed-hosts" in r.json()["detail"]
    with TestClient(app_for(tmp_path / "open")) as c:
        r = c.get("/v1/jobs", headers={"Host": "rebind.example"})
        assert r.status_code == 421 and "a server without keys" in r.json()["detail"]


# --- a path that cannot be a database ---------------------------------------------------------
def test_a_folder_or_a_file_that_is_not_sqlite_is_bad_input_naming_it(tmp_path: Path, capsys: Any) -> None:
    from judge.cli import main
    from judge.io import InputError
    from judge.store import SQLiteVerdictStore

    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    for path, problem in ((tmp_path, "a folder"), (text, "file is not a database")):
        with pytest.raises(InputError) as err:
            LabelStore(path)
        assert problem in err.value.message and str(err.value.path) == str(path)
        with pytest.raises(InputError):
            SQLiteVerdictStore(path)
        assert main(["labels", "list", "--store", str(path)]) == 2
        assert problem in capsys.readouterr().err
    assert text.read_text() == "not a database\n" * 100  # left as it was


def test_serve_with_a_jobs_dir_that_is_a_file_exits_2_naming_the_flag(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    from judge.cli import main

    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JUDGE_API_KEYS", raising=False)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    taken = tmp_path / "taken"
    taken.write_text("")
    argv = ["serve", "--port", "0", "--backend-factory", "_server:fake_backend", "--no-cache"]
    assert main([*argv, "--db", str(tmp_path / "s.sqlite"), "--jobs-dir", str(taken)]) == 2
    err = capsys.readouterr().err
    assert "--jobs-dir" in err and "taken" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--port", "70000"),  # the OS took it modulo 65536: the server listened on 4464
        ("--port", "-1"),
        ("--max-body-mb", "nan"),  # a traceback before
        ("--max-body-mb", "inf"),
        ("--header-timeout", "nan"),
        ("--max-body-mb", "0"),
    ],
)
def test_serve_refuses_a_port_or_size_out_of_range_naming_the_flag(
    flag: str, value: str, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    from judge.cli import main

    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JUDGE_API_KEYS", raising=False)
    db = tmp_path / "s.sqlite"
    assert main(["serve", "--no-cache", "--db", str(db), flag, value]) == 2
    err = capsys.readouterr().err
    assert f"field '{flag}'" in err and "Traceback" not in err
    assert not db.exists()  # refused before the database was opened


# --- numbers too large to convert -------------------------------------------------------------
HUGE_DIGITS = "9" * 5000  # past Python's 4300-digit limit: json.loads raises ValueError


def test_a_label_line_with_a_5000_digit_number_is_422_naming_the_line(client: Any, tmp_path: Path) -> None:
    from judge.io import InputError
    from judge.store import Label, read_label_file

    line = '{"qid":"q0","docno":"d0","label":1,"reviewer":"r","created":%s}\n'
    r = client.post("/v1/labels", content=(line % HUGE_DIGITS).encode())
    assert r.status_code == 422 and "line 1" in r.text and "4300 digits" in r.text, r.text
    path = tmp_path / "labels.jsonl"
    path.write_text(line % HUGE_DIGITS)
    with pytest.raises(InputError) as err:
        read_label_file(path)
    assert err.value.line == 1
    for name in ("created", "source_created", "judge_p_yes"):  # 400 digits: converted, then refused
        with pytest.raises(InputError) as err:
            Label.from_dict({"qid": "q", "docno": "d", "label": 1, "reviewer": "r", name: 10**400})
        assert err.value.field == name and len(err.value.message) < 120


def test_a_dataset_line_with_a_5000_digit_number_is_a_reject(tmp_path: Path) -> None:
    from judge.io import InputError, iter_dataset

    path = tmp_path / "data.jsonl"
    good = json.dumps({"id": "q1", "query": "x", "retrieval_context": ["a"]})
    path.write_text(f'{{"id":"q0","query":"x","retrieval_context":["a"],"k":{HUGE_DIGITS}}}\n{good}\n')
    out = list(iter_dataset(path))
    assert isinstance(out[0], InputError) and out[0].line == 1 and "4300 digits" in out[0].message
    assert not isinstance(out[1], InputError) and out[1].id == "q1"


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--seed", "-1"), ("--seed", str(INT64_PAST)), ("--folds", "1"), ("--folds", "0"), ("--name", "a/b")],
)
def test_judge_calibrate_bounds_its_flags_as_the_route_does(
    flag: str, value: str, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    from judge.cli import main

    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    argv = ["calibrate", "--labels", str(tmp_path / "no-such.qrels"), "--template", "binary.zh.v2"]
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err
    assert f"field '{flag}'" in err and "Traceback" not in err


def test_labels_export_to_a_folder_exits_2_naming_o(tmp_path: Path, capsys: Any) -> None:
    from judge.cli import main

    store = tmp_path / "labels.sqlite"
    qrels = tmp_path / "a.qrels"
    qrels.write_text("q1 0 d1 1\n")
    assert main(["labels", "import", str(qrels), "--reviewer", "ann", "--store", str(store)]) == 0
    capsys.readouterr()
    for fmt in ("qrels", "jsonl"):
        assert main(["labels", "export", "--store", str(store), "--format", fmt, "-o", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "field '-o'" in err and "Traceback" not in err
