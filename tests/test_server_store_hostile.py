"""The service and the label store under hostile input (issue 37), each against the way it
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
        ({"folds": True}, "folds"),
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
