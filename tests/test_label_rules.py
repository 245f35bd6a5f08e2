"""The label store's rules, each against the way it was broken: every label input checked
(422 / exit 2 naming line and field, nothing of a bad import stored, views keep working),
time and identity from the server, the audit flag from the queue's recorded draws,
collections that exist, ids kept exactly (percent-escaped in qrels), one id bound for jobs
and labels, paged label listings, indexed queries and a label POST that updates one query.
In process, on the fake judge whose P(yes) is written in each passage (``tests/_review.py``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _review import p_backend, records
from _server import make_config, wait_job
from fastapi.testclient import TestClient

from judge.io import MAX_ID_CHARS
from judge.server import create_app
from judge.server._db import sha256_hex
from judge.store import Label, LabelStore, qrels_escape, qrels_unescape

OPTIONS = {"probability": True, "explain": True, "p_yes_threshold": 0.5, "k": [3]}
KEY_A, KEY_B, KEY_ADMIN = "k-alice-key", "k-bob-key", "k-admin-key"


def label_of(key: str) -> str:
    return "key-" + sha256_hex("key:" + key)[:8]


def app(tmp: Path, keys: tuple[str, ...] = (), admin: tuple[str, ...] = ()) -> Any:
    config = make_config(tmp, backend=p_backend(), keys=keys)
    return create_app(replace(config, admin_keys=frozenset(label_of(k) for k in admin)))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    with TestClient(app(tmp_path)) as c:
        yield c


def run_job(client: Any, recs: list[dict[str, Any]] | None = None, **headers: str) -> str:
    r = client.post("/v1/jobs", json={"records": recs or records()[:2], "options": OPTIONS}, headers=headers)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    assert wait_job(client, job_id, headers=headers or None)["status"] == "done"
    return job_id


def jsonl(*rows: dict[str, Any] | str) -> bytes:
    return "".join(
        (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows
    ).encode()


def views_work(client: Any, job_id: str) -> None:
    for path in (
        f"/v1/jobs/{job_id}",
        f"/v1/jobs/{job_id}/queue",
        f"/v1/jobs/{job_id}/results",
        f"/v1/jobs/{job_id}/agreement",
        "/v1/labels",
        "/v1/labels?format=qrels",
        "/v1/labels?history=true",
    ):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text)


GOOD = {"qid": "q0", "docno": "d0", "label": 1, "reviewer": "r"}


# --- one checked label model --------------------------------------------------------------
def test_created_text_is_refused_and_every_view_keeps_working(client: Any) -> None:
    job_id = run_job(client)
    r = client.post("/v1/labels", content=jsonl({**GOOD, "created": "abc"}))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "created"] and "line 1" in r.json()["detail"][0]["msg"]
    views_work(client, job_id)
    assert client.get("/v1/labels").json()["count"] == 0
    assert (
        client.post(
            f"/v1/jobs/{job_id}/labels", json={"query_id": "q0", "docno": "d0", "label": 1}
        ).status_code
        == 201
    )


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","created":Infinity}', "created"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","created":NaN}', "created"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","created":-Infinity}', "created"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","judge_p_yes":NaN}', "judge_p_yes"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","judge_p_yes":"x"}', "judge_p_yes"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","judge_p_yes":1.5}', "judge_p_yes"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","comment":{"a":1}}', "comment"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","comment":"' + "c" * 4001 + '"}', "comment"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","audit":"maybe"}', "audit"),
        ('{"qid":"q0","docno":"d0","label":true,"reviewer":"r"}', "label"),
        ('{"qid":"q0","docno":"d0","label":2,"reviewer":"r"}', "label"),
        ('{"qid":"q0","docno":"d\\u0000","label":1,"reviewer":"r"}', "docno"),
        ('{"qid":"q0","docno":"d0","label":1,"reviewer":"r","judge_grade":1.5}', "judge_grade"),
        ('{"qid":"' + "q" * (MAX_ID_CHARS + 1) + '","docno":"d0","label":1,"reviewer":"r"}', "qid"),
    ],
)
def test_a_bad_field_is_422_naming_line_and_field_and_nothing_is_stored(
    client: Any, line: str, field: str
) -> None:
    body = jsonl(GOOD, {**GOOD, "docno": "d1"}) + line.encode() + b"\n"
    r = client.post("/v1/labels", content=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", field] and detail["msg"].startswith("line 3:")
    assert client.get("/v1/labels").json()["count"] == 0  # one transaction: lines 1-2 are not kept


def test_qrels_invalid_utf8_and_nul_are_refused(client: Any) -> None:
    r = client.post("/v1/labels?reviewer=r", content=b"q0 0 d0 1\nq0 0 d\xff\xfe 1\n")
    assert r.status_code == 422 and "line 2" in r.text and "UTF-8" in r.text
    r = client.post("/v1/labels?reviewer=r", content=b"q0 0 d0 1\nq0 0 d%00 1\n")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "docno"] and "line 2" in r.text
    assert client.get("/v1/labels").json()["count"] == 0


def test_cli_import_of_a_bad_line_exits_2_and_stores_nothing(tmp_path: Path, capsys: Any) -> None:
    from judge.cli import main

    bad = tmp_path / "labels.jsonl"
    bad.write_bytes(jsonl(GOOD, {**GOOD, "docno": "d1", "judge_p_yes": "x"}))
    store = tmp_path / "l.sqlite"
    assert main(["labels", "import", str(bad), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "labels.jsonl:2" in err and "judge_p_yes" in err
    with LabelStore(store) as s:
        assert s.count() == 0


def test_a_store_with_unchecked_rows_is_quarantined_by_the_migration(tmp_path: Path) -> None:
    from judge.store._label_schema import _m001_labels, _m002_calibrations

    path = tmp_path / "labels.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    _m001_labels(conn)
    _m002_calibrations(conn)
    conn.execute("PRAGMA user_version = 2")
    insert = (
        "INSERT INTO label_history (collection, qid, docno, reviewer, label, scale, created, judge_p_yes) "
        "VALUES ('default', ?, ?, ?, ?, 'binary', ?, ?)"
    )
    rows = [  # (qid, docno, reviewer, label, created, judge_p_yes) as today's code stored them
        ("q0", "d0", "ann", 1, 100.0, 0.5),  # good, then overwritten by a bad one
        ("q0", "d0", "ann", 0, "abc", None),
        ("q0", "d1", "ann", 1, float("inf"), None),
        ("q0", "d2", "ann", 1, 200.0, 7.0),
        ("q0", "d3", "ann", 0, 300.0, None),  # good
    ]
    for qid, docno, reviewer, value, created, p in rows:
        hid = conn.execute(insert, (qid, docno, reviewer, value, created, p)).lastrowid
        conn.execute(
            "INSERT OR REPLACE INTO labels VALUES ('default', ?, ?, ?, ?)", (qid, docno, reviewer, hid)
        )
    conn.close()
    with LabelStore(path) as store:
        latest = {x.docno: x.label for x in store.latest()}
        assert latest == {"d0": 1, "d3": 0}  # d0 falls back to its last good row
        assert [x.history_id for x in store.history()] == [1, 5]
        assert store.page(collection="default").labels[0].created == 100.0
    conn = sqlite3.connect(path)
    quarantined = conn.execute("SELECT id, field FROM label_quarantine ORDER BY id").fetchall()
    assert quarantined == [(2, "created"), (3, "created"), (4, "judge_p_yes")]
    conn.close()


# --- time and identity from the server ------------------------------------------------------
def test_a_forged_future_time_does_not_win(tmp_path: Path) -> None:
    a, b = {"Authorization": f"Bearer {KEY_A}"}, {"Authorization": f"Bearer {KEY_B}"}
    with TestClient(app(tmp_path, keys=(KEY_A, KEY_B))) as c:
        job_id = run_job(c, **a)
        line = {"qid": "q0", "docno": "d0", "label": 1, "created": 4102444800}  # year 2100
        r = c.post("/v1/labels", content=jsonl(line), headers=a)
        assert r.status_code == 200, r.text
        stored = c.get("/v1/labels", headers=a).json()["labels"][0]
        assert stored["source_created"] == 4102444800 and stored["created"] < 4102444800
        r = c.post(
            f"/v1/jobs/{job_id}/labels", json={"query_id": "q0", "docno": "d0", "label": "n"}, headers=b
        )
        assert r.status_code == 201
        qrels = c.get("/v1/labels?format=qrels", headers=a).text
        assert "q0 0 d0 0" in qrels.splitlines()


def _sign_in(c: Any, key: str, name: str) -> None:
    r = c.post("/login?next=/", data={"key": key, "name": name}, follow_redirects=False)
    assert r.status_code == 303


def test_a_sign_in_name_never_takes_another_keys_principal(tmp_path: Path) -> None:
    b = {"Authorization": f"Bearer {KEY_B}"}
    with TestClient(app(tmp_path, keys=(KEY_A, KEY_B))) as c:
        job_id = run_job(c, **b)
        body = {"query_id": "q0", "docno": "d0", "label": 1}
        assert c.post(f"/v1/jobs/{job_id}/labels", json=body, headers=b).json()["label"][
            "reviewer"
        ] == label_of(KEY_B)
        _sign_in(c, KEY_A, label_of(KEY_B))  # key A signs in under key B's principal
        csrf = {"Origin": "http://testserver"}
        r = c.post(f"/v1/jobs/{job_id}/labels", json={**body, "label": 0}, headers=csrf)
        assert r.status_code == 201, r.text
        spoof = r.json()["label"]["reviewer"]
        assert spoof == f"{label_of(KEY_A)}/{label_of(KEY_B)}" != label_of(KEY_B)
        c.cookies.clear()
        latest = {x["reviewer"]: x["label"] for x in c.get("/v1/labels", headers=b).json()["labels"]}
        assert latest == {label_of(KEY_B): 1, spoof: 0}  # B's label is still B's


def test_signed_in_as_anonymous_a_body_reviewer_is_not_used(tmp_path: Path) -> None:
    with TestClient(app(tmp_path, keys=(KEY_A,))) as c:
        job_id = run_job(c, Authorization=f"Bearer {KEY_A}")
        _sign_in(c, KEY_A, "anonymous")
        r = c.post(
            f"/v1/jobs/{job_id}/labels",
            json={"query_id": "q0", "docno": "d0", "label": 1, "reviewer": "carol"},
            headers={"Origin": "http://testserver"},
        )
        assert r.status_code == 201 and r.json()["label"]["reviewer"] == f"{label_of(KEY_A)}/anonymous"


def test_an_import_keeps_other_reviewers_only_for_an_admin_key(tmp_path: Path) -> None:
    a, admin = {"Authorization": f"Bearer {KEY_A}"}, {"Authorization": f"Bearer {KEY_ADMIN}"}
    lines = jsonl({**GOOD, "reviewer": "alice"}, {**GOOD, "reviewer": "bob", "label": 0})
    with TestClient(app(tmp_path, keys=(KEY_A, KEY_ADMIN), admin=(KEY_ADMIN,))) as c:
        r = c.post("/v1/labels", content=lines, headers=a)
        assert r.status_code == 403 and "line 1" in r.text and "--admin-keys" in r.text
        assert c.post("/v1/labels?reviewer=alice", content=b"q0 0 d0 1\n", headers=a).status_code == 403
        assert c.get("/v1/labels", headers=a).json()["count"] == 0
        own = jsonl(
            {"qid": "q0", "docno": "d1", "label": 1}, {**GOOD, "docno": "d2", "reviewer": label_of(KEY_A)}
        )
        assert c.post("/v1/labels", content=own, headers=a).json() == {"imported": 2}
        assert c.post("/v1/labels", content=lines, headers=admin).json() == {"imported": 2}
        reviewers = sorted(x["reviewer"] for x in c.get("/v1/labels", headers=a).json()["labels"])
        assert reviewers == sorted(["alice", "bob", label_of(KEY_A), label_of(KEY_A)])


def test_without_keys_an_import_keeps_distinct_reviewers(client: Any) -> None:
    lines = jsonl({**GOOD, "reviewer": "alice"}, {**GOOD, "reviewer": "bob", "label": 0})
    assert client.post("/v1/labels", content=lines).json() == {"imported": 2}
    page = client.get("/v1/labels").json()
    assert sorted((x["reviewer"], x["label"]) for x in page["labels"]) == [("alice", 1), ("bob", 0)]
    assert page["conflicts"][0]["query_id"] == "q0" and len(page["conflicts"][0]["labels"]) == 2


# --- audit, collections -------------------------------------------------------------------
def test_the_audit_flag_comes_from_the_queue_not_the_body(client: Any) -> None:
    job_id = run_job(client, records())
    items = client.get(f"/v1/jobs/{job_id}/queue?limit=10").json()["items"]
    drawn = [it for it in items if it["audit"]]
    plain = [it for it in items if not it["audit"]]
    assert drawn and plain
    for it, claimed in ((drawn[0], False), (plain[0], True), (plain[1], True)):
        body = {"query_id": it["query_id"], "docno": it["docno"], "label": 1, "audit": claimed}
        r = client.post(f"/v1/jobs/{job_id}/labels", json=body)
        assert r.status_code == 201 and r.json()["label"]["audit"] is (it is drawn[0])
    agreement = client.get(f"/v1/jobs/{job_id}/agreement").json()
    assert agreement["overall"]["n"] == 3 and agreement["audit"]["n"] == 1


@pytest.mark.parametrize("collection", ["other", 7])
def test_an_import_into_an_unknown_collection_is_refused(client: Any, collection: Any) -> None:
    r = client.post("/v1/labels", content=jsonl(GOOD, {**GOOD, "collection": collection}))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "collection"] and "line 2" in r.text
    assert client.get("/v1/labels").json()["count"] == 0
    assert client.get("/v1/labels?collection=other").status_code == 422
    listed = client.get("/v1/labels?collection=default").json()
    assert listed["collections"] == ["default"] and listed["collection"] == "default"


# --- ids kept exactly -----------------------------------------------------------------------
def _ws_records() -> list[dict[str, Any]]:
    recs = records()[:2]
    recs[0]["id"] = "ws q1"
    recs[0]["retrieval_context"][0]["id"] = "doc 1"
    return recs


def test_a_docno_with_a_space_is_kept_and_the_label_applies(client: Any) -> None:
    job_id = run_job(client, _ws_records())
    before = client.get(f"/v1/jobs/{job_id}/queue?limit=100").json()
    assert ("ws q1", "doc 1") in {(it["query_id"], it["docno"]) for it in before["items"]}
    r = client.post(f"/v1/jobs/{job_id}/labels", json={"query_id": "ws q1", "docno": "doc 1", "label": 1})
    assert r.status_code == 201 and r.json()["label"]["docno"] == "doc 1"
    assert client.get(f"/v1/jobs/{job_id}").json()["review"]["human"] == 1
    after = client.get(f"/v1/jobs/{job_id}/queue?limit=100").json()
    assert ("ws q1", "doc 1") not in {(it["query_id"], it["docno"]) for it in after["items"]}
    assert after["total"] == before["total"] - 1
    qrels = client.get("/v1/labels?format=qrels").text
    assert qrels == "ws%20q1 0 doc%201 1\n"


def test_the_qrels_escaping_round_trips_through_an_import(tmp_path: Path) -> None:
    with TestClient(app(tmp_path)) as c:
        body = b"ws%20q1 0 doc%201 1\n50%25 0 a%C2%A0b 0\n"
        assert c.post("/v1/labels?reviewer=r", content=body).json() == {"imported": 2}
        latest = {(x["qid"], x["docno"]) for x in c.get("/v1/labels").json()["labels"]}
        assert latest == {("ws q1", "doc 1"), ("50%", "a\u00a0b")}
        exported = c.get("/v1/labels?format=qrels").content  # as it was imported (sorted by qid)
        assert sorted(exported.splitlines()) == sorted(body.splitlines())
        tab = c.post("/v1/labels?reviewer=r", content=b"q 0 a%09b 1\n")  # a control character
        assert tab.status_code == 422 and tab.json()["detail"][0]["loc"] == ["body", "docno"]
    for value in ["doc 1", "50%", "a\tb", "x\u3000y", "已知 文档", "%20", "plain"]:
        token = qrels_escape(value)
        assert token.split() == [token] and qrels_unescape(token) == value


def test_queue_items_of_a_query_id_with_a_space_show_their_text(client: Any) -> None:
    job_id = run_job(client, _ws_records())
    items = client.get(f"/v1/jobs/{job_id}/queue?limit=100").json()["items"]
    assert {it["query_id"] for it in items} == {"ws q1", "q1"}
    assert all(isinstance(it["text"], str) and it["text"] for it in items)


def test_one_id_bound_for_job_intake_and_labels(client: Any) -> None:
    recs = records()[:1]
    recs[0]["id"] = "q" * 1_000_000
    r = client.post("/v1/jobs", json={"records": recs, "options": OPTIONS})
    assert r.status_code == 422 and f"at most {MAX_ID_CHARS}" in r.text
    recs = records()[:1]
    recs[0]["retrieval_context"][0]["id"] = "d" * (MAX_ID_CHARS + 1)
    assert client.post("/v1/jobs", json={"records": recs, "options": OPTIONS}).status_code == 422
    recs[0]["retrieval_context"][0]["id"] = "d" * MAX_ID_CHARS  # the longest id a job takes can be labelled
    job_id = run_job(client, recs)
    body = {"query_id": recs[0]["id"], "docno": "d" * MAX_ID_CHARS, "label": 1}
    assert client.post(f"/v1/jobs/{job_id}/labels", json=body).status_code == 201


# --- cost bounded by what is asked --------------------------------------------------------
def test_labels_are_listed_in_pages_with_a_cursor(client: Any) -> None:
    lines = [{**GOOD, "docno": f"d{i}"} for i in range(5)]
    assert client.post("/v1/labels", content=jsonl(*lines)).json() == {"imported": 5}
    assert client.post("/v1/labels", content=jsonl({**GOOD, "docno": "d0", "label": 0})).status_code == 200
    seen: list[str] = []
    url = "/v1/labels?limit=2"
    for _ in range(5):
        page = client.get(url).json()
        seen += [x["docno"] for x in page["labels"]]
        if page["next"] is None:
            break
        url = f"/v1/labels?limit=2&cursor={page['next']}"
    assert seen == ["d1", "d2", "d3", "d4", "d0"]  # latest labels in write order
    history = client.get("/v1/labels?history=true&limit=4").json()
    assert history["count"] == 4 and history["next"] is not None
    rest = client.get(f"/v1/labels?history=true&limit=4&cursor={history['next']}").json()
    assert rest["count"] == 2 and rest["next"] is None
    assert client.get("/v1/labels?limit=1001").status_code == 422
    assert client.get("/v1/labels?cursor=zzz").status_code == 422


def test_label_queries_use_indexes(tmp_path: Path) -> None:
    with LabelStore(tmp_path / "l.sqlite") as store:
        conn = store._connection()
        plans = {
            "page": "SELECT id FROM label_history WHERE collection = 'default' AND id > 5 "
            "ORDER BY id LIMIT 10",
            "latest page": "SELECT history_id FROM labels WHERE collection = 'default' AND history_id > 5 "
            "ORDER BY history_id LIMIT 10",
            "one job": "SELECT history_id FROM labels WHERE collection = 'default' AND qid IN ('q1', 'q2')",
            "audit": "SELECT 1 FROM audit_draws WHERE collection = 'c' AND qid = 'q' AND docno = 'd'",
        }
        for name, sql in plans.items():
            plan = " ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
            assert "USING" in plan and "SCAN" not in plan.replace("USING INDEX", ""), (name, plan)


def test_a_label_post_updates_one_query_not_the_whole_job(client: Any, monkeypatch: Any) -> None:
    from judge.server import _review

    job_id = run_job(client, records())
    client.get(f"/v1/jobs/{job_id}")  # the job's figures computed and cached
    calls: list[int] = []
    whole = _review.apply_labels
    monkeypatch.setattr(_review, "apply_labels", lambda *a, **k: calls.append(1) or whole(*a, **k))
    for qid, docno, value in (("q0", "d0", 0), ("q1", "d0", 1), ("q0", "d2", 0)):
        r = client.post(f"/v1/jobs/{job_id}/labels", json={"query_id": qid, "docno": docno, "label": value})
        assert r.status_code == 201
    incremental = client.get(f"/v1/jobs/{job_id}").json()
    assert calls == []  # no whole-job recompute on a label POST or the view after it
    state = client.app.state.judge
    state.review._cache.clear()
    full = client.get(f"/v1/jobs/{job_id}").json()
    assert calls == [1]
    assert incremental["summary"] == full["summary"] and incremental["review"] == full["review"]
    assert full["review"]["human"] == 3 and full["review"]["queue"] == 24 - 3


def test_label_from_dict_keeps_a_carried_time_as_source_created() -> None:
    lab = Label.from_dict({**GOOD, "created": 123.0})
    assert lab.source_created == 123.0 and lab.created == 0.0


def test_serve_refuses_an_admin_key_that_is_not_an_accepted_key(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    from judge.cli import main

    admin = tmp_path / "admin.keys"
    admin.write_text("not-an-accepted-key\n")
    monkeypatch.setenv("JUDGE_API_KEYS", KEY_A)
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    assert main(["serve", "--admin-keys", str(admin), "--db", str(tmp_path / "s.sqlite")]) == 2
    assert "--admin-keys" in capsys.readouterr().err
