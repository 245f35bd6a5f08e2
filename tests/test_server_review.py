"""People correct the judge over HTTP: the review queue's order, labels overriding verdicts in
a job's records, summary, query detail and qrels, agreement and calibration figures derived
by hand, label export/import round trips, and the scale checks; in process, on the fake judge
whose P(yes) is written in each passage (``tests/_review.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _review import TABLE, p_backend, records
from _server import app_for, make_config, wait_job
from fastapi.testclient import TestClient

from judge.server import create_app
from judge.store import LabelStore

OPTIONS = {"probability": True, "explain": True, "p_yes_threshold": 0.5, "k": [3]}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    with TestClient(app_for(tmp_path, backend=p_backend())) as c:
        yield c


def run_job(client: Any, recs: list[dict[str, Any]] | None = None, **options: Any) -> str:
    r = client.post("/v1/jobs", json={"records": recs or records(), "options": {**OPTIONS, **options}})
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    assert wait_job(client, job_id)["status"] == "done"
    return job_id


def label(client: Any, job_id: str, qid: str, docno: str, value: Any, **extra: Any) -> Any:
    return client.post(
        f"/v1/jobs/{job_id}/labels", json={"query_id": qid, "docno": docno, "label": value, **extra}
    )


def results(client: Any, job_id: str) -> dict[str, dict[str, Any]]:
    text = client.get(f"/v1/jobs/{job_id}/results").text
    return {r["id"]: r for r in (json.loads(x) for x in text.splitlines() if x.strip())}


# --- the queue ----------------------------------------------------------------------------
def test_queue_order_is_the_expected_change_of_the_job_map(client: Any) -> None:
    job_id = run_job(client)
    q = client.get(f"/v1/jobs/{job_id}/queue?limit=7").json()
    assert q["scale"] == "binary" and q["threshold"] == 0.5 and q["total"] == 24
    # priority = P(the label flips the verdict) x the change of the job's mAP if it flips. At
    # threshold 0.5 a "no" flips with P(yes), a "yes" with 1 - P(yes). Judge APs (judged
    # relevant): q0 y n y n 5/6, q1 n y n y 1/2, q3 n y n y 1/2, q4 n y y n 7/12, q5 y n n y 3/4.
    # q0/d0 (0.52 yes): flipped q0 is n n y n, AP 1/3: 0.48 x (5/6 - 1/3) / 6 = 0.04
    # q1/d0 (0.49 no): flipped y y n y, AP 11/12: 0.49 x (11/12 - 1/2) / 6 = 0.034028
    # q3/d0 (0.48 no): likewise 0.48 x (5/12) / 6 = 0.033333
    # q4/d1 (0.53 yes): flipped n n y n, AP 1/3: 0.47 x (7/12 - 1/3) / 6 = 0.019583
    # q5/d0 (0.80 yes): flipped n n n y, AP 1/4: 0.20 x (3/4 - 1/4) / 6 = 0.016667
    # q4/d0 (0.12 no): flipped y y y n, AP 1: 0.12 x (1 - 7/12) / 6 = 0.008333
    # (q2/d1, 0.51 yes, is borderline but moves nothing: q2 y n n n still has AP 1.)
    # The 5th item is an audit draw.
    order = [(it["query_id"], it["docno"]) for it in q["items"]]
    picked = [o for o, it in zip(order, q["items"], strict=True) if not it["audit"]]
    assert picked == [("q0", "d0"), ("q1", "d0"), ("q3", "d0"), ("q4", "d1"), ("q5", "d0"), ("q4", "d0")]
    assert [it["audit"] for it in q["items"]] == [False, False, False, False, True, False, False]
    priorities = [it["priority"] for it in q["items"] if not it["audit"]]
    assert priorities == pytest.approx(
        [
            0.48 * 0.5 / 6,
            0.49 * 5 / 12 / 6,
            0.48 * 5 / 12 / 6,
            0.47 * 0.25 / 6,
            0.2 * 0.5 / 6,
            0.12 * 5 / 12 / 6,
        ],
        abs=1e-6,
    )
    everything = client.get(f"/v1/jobs/{job_id}/queue?limit=24").json()["items"]
    assert [it["priority"] for it in everything if (it["query_id"], it["docno"]) == ("q2", "d1")] == [0.0]
    first = next(it for it in q["items"] if (it["query_id"], it["docno"]) == ("q1", "d0"))
    assert first["query"] == "感冒吃什么药" and first["rank"] == 1 and first["index"] == 0
    assert first["text"] == "关于「感冒吃什么药」的第1段说明。[p=0.49]"
    assert first["verdict"] == "no" and first["p_yes"] == 0.49 and first["threshold"] == 0.5
    assert first["reason"] == "模型估计的相关概率为 0.49。" and first["template_id"] == "binary.zh.v2"
    page2 = client.get(f"/v1/jobs/{job_id}/queue?offset=2&limit=2").json()  # a later page
    assert [(it["query_id"], it["docno"]) for it in page2["items"]] == order[2:4]
    # A labelled verdict leaves the queue.
    assert label(client, job_id, "q1", "d0", "y").status_code == 201
    q2 = client.get(f"/v1/jobs/{job_id}/queue?limit=3").json()
    assert q2["total"] == 23 and ("q1", "d0") not in [(it["query_id"], it["docno"]) for it in q2["items"]]
    assert client.get("/v1/jobs/nope/queue").status_code == 404


def test_empty_queue_when_everything_is_labelled(client: Any) -> None:
    recs = records()[:1]
    job_id = run_job(client, recs)
    for j in range(4):
        assert label(client, job_id, "q0", f"d{j}", 0).status_code == 201
    q = client.get(f"/v1/jobs/{job_id}/queue").json()
    assert q["total"] == 0 and q["items"] == []


# --- labels win ---------------------------------------------------------------------------
def test_labels_override_verdicts_in_records_summary_detail_and_qrels(client: Any) -> None:
    job_id = run_job(client)
    before = client.get(f"/v1/jobs/{job_id}").json()
    # Judge verdicts (yes iff P(yes) >= 0.5), AP over the judged-relevant:
    # q0 y n y n 5/6 · q1 n y n y 1/2 · q2 y y n n 1 · q3 n y n y 1/2 · q4 n y y n 7/12 · q5 y n n y 3/4
    assert before["summary"]["judge"]["map"] == pytest.approx(
        (5 / 6 + 0.5 + 1 + 0.5 + 7 / 12 + 0.75) / 6, abs=1e-6
    )
    assert before["review"]["borderline"] == 4 and before["review"]["human"] == 0
    assert "human_labels" not in before["summary"]
    assert label(client, job_id, "q0", "d0", "n", reviewer="alice", comment="无关").status_code == 201
    assert label(client, job_id, "q1", "d0", 1, reviewer="alice").status_code == 201
    assert label(client, job_id, "q3", "d0", "yes", reviewer="bob").status_code == 201
    after = client.get(f"/v1/jobs/{job_id}").json()
    # q0 n n y n: 1/3 · q1 y y n y: (1 + 1 + 3/4)/3 · q3 likewise; the rest unchanged.
    expected = (1 / 3 + 11 / 12 + 1 + 11 / 12 + 7 / 12 + 0.75) / 6
    assert after["summary"]["judge"]["map"] == pytest.approx(expected, abs=1e-6)
    assert after["summary"]["judge_only"]["map"] == before["summary"]["judge"]["map"]
    human = after["summary"]["human_labels"]
    assert human["passages"] == 3 and human["changed"] == 3 and human["queries"] == 3
    assert human["reviewers"] == ["alice", "bob"]
    # The borderline verdicts q0/d0 (0.52), q1/d0 (0.49), q3/d0 (0.48) were decided by people.
    assert after["review"]["borderline"] == 1 and after["summary"]["borderline"] == 1
    assert after["review"]["human"] == 3 and after["review"]["map"] == pytest.approx(expected, abs=1e-6)
    recs = results(client, job_id)
    v = recs["q0"]["verdicts"][0]
    assert v["verdict"] == "no" and v["source"] == "human" and v["reviewer"] == "alice"
    assert v["p_yes"] == 0.0 and v["replaced"]["p_yes"] == 0.52 and v["replaced"]["verdict"] == "yes"
    assert recs["q0"]["ap"] == pytest.approx(1 / 3, abs=1e-6)
    assert recs["q2"]["verdicts"][0]["source"] == "judge"
    detail = client.get(f"/v1/jobs/{job_id}/queries/q1").json()
    assert detail["passages"][0]["verdict"]["verdict"] == "yes"
    assert detail["passages"][0]["verdict"]["source"] == "human"
    assert detail["record"]["ap"] == pytest.approx(11 / 12, abs=1e-6)
    qrels = client.get(f"/v1/jobs/{job_id}/results?format=qrels").text.splitlines()
    assert "q0 0 d0 0" in qrels and "q1 0 d0 1" in qrels and "q3 0 d0 1" in qrels
    # The latest label of a reviewer counts: alice changes her mind on q0/d0.
    assert label(client, job_id, "q0", "d0", "y", reviewer="alice").status_code == 201
    again = client.get(f"/v1/jobs/{job_id}").json()
    assert again["summary"]["human_labels"]["changed"] == 2
    assert results(client, job_id)["q0"]["ap"] == pytest.approx(5 / 6, abs=1e-6)


def test_labels_on_a_graded_job(client: Any) -> None:
    job_id = run_job(client, records()[:2], mode="graded")
    q = client.get(f"/v1/jobs/{job_id}/queue").json()
    assert q["scale"] == "graded"
    r = label(client, job_id, "q0", "d1", 3)
    assert r.status_code == 201 and r.json()["label"]["scale"] == "graded"
    v = results(client, job_id)["q0"]["verdicts"][1]
    assert v["grade"] == 3 and v["verdict"] == "yes" and v["source"] == "human"


def test_scale_mismatch_and_bad_labels_are_422_naming_the_field(client: Any) -> None:
    job_id = run_job(client, records()[:1])
    r = label(client, job_id, "q0", "d0", 2)
    assert r.status_code == 422 and r.json()["fields"] == ["body.label"]
    msg = r.json()["detail"][0]["msg"]
    assert "graded" in msg and "binary" in msg
    assert label(client, job_id, "q0", "d0", "maybe").status_code == 422
    r = label(client, job_id, "zz", "d0", 1)
    assert r.status_code == 422 and r.json()["fields"] == ["body.query_id"]
    r = label(client, job_id, "q0", "d9", 1)
    assert r.status_code == 422 and r.json()["fields"] == ["body.docno"]
    r = client.post(f"/v1/jobs/{job_id}/labels", json={"query_id": "q0", "docno": "d0", "label": 1, "x": 1})
    assert r.status_code == 422
    graded = run_job(client, records()[:1], mode="graded")
    r = label(client, graded, "q0", "d0", "y")
    assert r.status_code == 422 and "binary" in r.json()["detail"][0]["msg"]
    assert label(client, "nope", "q0", "d0", 1).status_code == 404


def test_reviewer_is_the_principal_then_the_body_then_anonymous(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path / "open", backend=p_backend())) as c:  # auth off: nobody is named
        job_id = run_job(c, records()[:1])
        assert label(c, job_id, "q0", "d0", 1).json()["label"]["reviewer"] == "anonymous"
        assert label(c, job_id, "q0", "d1", 1, reviewer="bob").json()["label"]["reviewer"] == "bob"
        assert c.get(f"/v1/jobs/{job_id}/queue").json()["signed_in"] is None
    # With keys the server names the caller (request.state.principal: the name given at sign-in
    # or the key's label; this app's outermost layer names the caller "carol" where the server
    # itself does not): that name wins over the body's.
    app = app_for(tmp_path / "keys", backend=p_backend(), keys=["k-carol"])
    inner = app.build_middleware_stack

    def with_principal() -> Any:
        stack = inner()

        async def asgi(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                scope.setdefault("state", {})["principal"] = "carol"
            await stack(scope, receive, send)

        return asgi

    app.build_middleware_stack = with_principal  # type: ignore[method-assign]
    auth = {"Authorization": "Bearer k-carol"}
    with TestClient(app, headers=auth) as c:
        job_id = run_job(c, records()[:1])
        name = c.get(f"/v1/jobs/{job_id}/queue").json()["signed_in"]
        assert name not in (None, "anonymous", "bob")
        r = label(c, job_id, "q0", "d2", 1, reviewer="bob")
        assert r.status_code == 201 and r.json()["label"]["reviewer"] == name


# --- agreement ----------------------------------------------------------------------------
def test_agreement_figures_equal_a_hand_computation(client: Any) -> None:
    job_id = run_job(client)
    empty = client.get(f"/v1/jobs/{job_id}/agreement").json()
    assert empty["overall"]["n"] == 0 and empty["overall"]["kappa"] is None
    given = [  # (qid, docno, human label, audit); the judge's verdict and P(yes) in comments
        ("q0", "d0", 0, False),  # yes 0.52
        ("q1", "d0", 1, False),  # no 0.49
        ("q3", "d0", 1, False),  # no 0.48
        ("q2", "d0", 1, True),  # yes 0.97
        ("q4", "d0", 0, False),  # no 0.12
        ("q5", "d3", 1, False),  # yes 0.99
        ("q4", "d3", 0, True),  # no 0.02
    ]
    # The audit items are those the queue drew (recorded as the queue route records them).
    client.app.state.judge.review.store.record_audit_draws(
        job_id, [(q, d) for q, d, _, a in given if a], collection="default"
    )
    for qid, docno, value, audit in given:
        assert label(client, job_id, qid, docno, value, reviewer="alice", audit=audit).status_code == 201
    data = client.get(f"/v1/jobs/{job_id}/agreement").json()
    overall = data["overall"]
    # rows people, columns judge: people no -> judge no 2, yes 1; people yes -> judge no 2, yes 2
    assert overall["n"] == 7 and overall["confusion"]["matrix"] == [[2, 1], [2, 2]]
    assert overall["accuracy"] == pytest.approx(4 / 7, abs=1e-6)
    # po = 4/7, pe = 3/7 * 4/7 + 4/7 * 3/7 = 24/49, kappa = (28/49 - 24/49) / (25/49) = 4/25
    assert overall["kappa"] == pytest.approx(0.16, abs=1e-6)
    low, high = overall["kappa_ci"]
    assert low <= 0.16 <= high
    # AUC: of the 4 x 3 (relevant, not relevant) pairs, P(yes) orders 10 correctly.
    assert overall["auc"] == pytest.approx(10 / 12, abs=1e-6)
    assert data["per_template"]["binary.zh.v2"]["kappa"] == overall["kappa"]
    audit = data["audit"]
    assert audit["n"] == 2 and audit["accuracy"] == 1.0 and audit["kappa"] == pytest.approx(1.0)
    assert "biased" in data["note"] or "understates" in data["note"]
    assert data["reviewers"] == [] and data["conflicts"] == []
    # A second reviewer: bob agrees on q1/d0 and not on q4/d0.
    assert label(client, job_id, "q1", "d0", 1, reviewer="bob").status_code == 201
    assert label(client, job_id, "q4", "d0", 1, reviewer="bob").status_code == 201
    data = client.get(f"/v1/jobs/{job_id}/agreement").json()
    (pair,) = data["reviewers"]
    assert (pair["a"], pair["b"], pair["n"], pair["agreement"]) == ("alice", "bob", 2, 0.5)
    # alice 1 0, bob 1 1: po 1/2, pe 1/2 * 1 + 1/2 * 0 = 1/2 -> kappa 0
    assert pair["kappa"] == pytest.approx(0.0)
    assert data["conflicts"] == [
        {
            "query_id": "q4",
            "docno": "d0",
            "labels": [
                {"reviewer": "alice", "label": 0, "scale": "binary"},
                {"reviewer": "bob", "label": 1, "scale": "binary"},
            ],
        }
    ]


# --- export / import ----------------------------------------------------------------------
def test_labels_export_qrels_round_trips_through_the_api(client: Any, tmp_path: Path) -> None:
    job_id = run_job(client)
    for i, (_query, _ps, truth) in enumerate(TABLE[:3]):
        for j, g in enumerate(truth):
            assert label(client, job_id, f"q{i}", f"d{j}", g, reviewer="alice").status_code == 201
    assert label(client, job_id, "q0", "d1", 1, reviewer="bob").status_code == 201  # a conflict
    qrels = client.get("/v1/labels?format=qrels")
    assert qrels.status_code == 200 and qrels.headers["content-type"].startswith("text/plain")
    lines = qrels.text.splitlines()
    assert len(lines) == 12 and "q0 0 d1 1" in lines and "q2 0 d0 1" in lines  # bob's is the latest
    listed = client.get("/v1/labels?format=json").json()
    assert listed["count"] == 13 and len(listed["conflicts"]) == 1
    assert len(client.get("/v1/labels?format=json&history=true").json()["labels"]) == 13
    # Into a fresh server, and out again: the same qrels.
    with TestClient(app_for(tmp_path / "other", backend=p_backend())) as other:
        r = other.post("/v1/labels?reviewer=import", content=qrels.text.encode())
        assert r.status_code == 200 and r.json() == {"imported": 12}
        assert other.get("/v1/labels?format=qrels").text == qrels.text
        again = other.post("/v1/labels?reviewer=import", content=b"q0 0 d0 x\n")
        assert again.status_code == 422
        # The labels apply to a job on the same data submitted there.
        other_job = run_job(other)
        assert other.get(f"/v1/jobs/{other_job}").json()["summary"]["human_labels"]["passages"] == 12
    assert client.get("/v1/labels?format=xml").status_code == 422


# --- calibration --------------------------------------------------------------------------
def test_calibrate_finds_the_known_threshold_and_refuses_too_few_labels(client: Any, tmp_path: Path) -> None:
    # 40 passages, P(yes) 0.025 .. 0.999; people call a passage relevant iff P(yes) >= 0.7:
    # the best threshold is between 0.675 and 0.725 (midpoint 0.7), not the job's 0.5.
    ps = [round(0.025 * (i + 1) - 0.001, 3) for i in range(40)]
    recs = [
        {
            "id": f"c{i}",
            "query": f"校准问题{i}",
            "retrieval_context": [
                {"id": f"d{j}", "text": f"段落{i}-{j} [p={ps[4 * i + j]:.3f}]"} for j in range(4)
            ],
        }
        for i in range(10)
    ]
    job_id = run_job(client, recs)
    for n, p in enumerate(ps[:29]):
        assert label(client, job_id, f"c{n // 4}", f"d{n % 4}", int(p >= 0.7)).status_code == 201
    r = client.post(f"/v1/jobs/{job_id}/calibrate", json={"name": "too-few"})
    assert r.status_code == 422 and r.json()["fields"] == ["body.labels"]
    assert "30" in r.json()["detail"][0]["msg"]
    for n, p in enumerate(ps[29:], start=29):
        assert label(client, job_id, f"c{n // 4}", f"d{n % 4}", int(p >= 0.7)).status_code == 201
    r = client.post(f"/v1/jobs/{job_id}/calibrate", json={"name": "reviews-1", "seed": 3})
    assert r.status_code == 201, r.text
    cal = r.json()
    assert cal["name"] == "reviews-1" and cal["template_id"] == "binary.zh.v2"
    assert cal["previous_threshold"] == 0.5 and cal["threshold"] == pytest.approx(0.7, abs=0.0251)
    report = cal["report"]
    # Held out, the refitted thresholds beat the job's 0.5 (which calls 0.5-0.7 relevant).
    assert report["n"] == 40 and report["kappa_after"] > 0.9 > report["kappa_before"]
    with LabelStore(tmp_path / "labels.sqlite") as store:
        stored = store.calibration("reviews-1")
        assert stored is not None and stored.threshold == cal["threshold"]
    # A job selects it by name; the name must exist and fit the job's template.
    r = client.post(
        "/v1/jobs", json={"records": recs[:1], "options": {"probability": True, "calibration": "reviews-1"}}
    )
    assert r.status_code == 202 and r.json()["options"]["p_yes_threshold"] == cal["threshold"]
    r = client.post(
        "/v1/jobs?probability=true&calibration=nope",
        content=b'{"id": "x", "query": "q", "retrieval_context": ["a"]}',
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 422 and r.json()["fields"] == ["query.calibration"]
    r = client.post(
        "/v1/jobs", json={"records": recs[:1], "options": {"mode": "graded", "calibration": "reviews-1"}}
    )
    assert r.status_code == 422 and r.json()["fields"] == ["body.options.calibration"]
    assert "binary.zh.v2" in r.json()["detail"][0]["msg"]


def test_one_class_is_refused(client: Any) -> None:
    recs = [
        {
            "id": f"o{i}",
            "query": f"单类{i}",
            "retrieval_context": [{"id": f"d{j}", "text": f"段{i}{j} [p=0.{j + 2}0]"} for j in range(4)],
        }
        for i in range(8)
    ]
    job_id = run_job(client, recs)
    for i in range(8):
        for j in range(4):
            assert label(client, job_id, f"o{i}", f"d{j}", 0).status_code == 201
    r = client.post(f"/v1/jobs/{job_id}/calibrate")
    assert r.status_code == 422 and "both classes" in r.json()["detail"][0]["msg"]


# --- comparisons --------------------------------------------------------------------------
def test_comparison_queue_weighs_passages_in_one_list_only(client: Any) -> None:
    def rec(qid: str, ctx: list[tuple[str, float]]) -> dict[str, Any]:
        return {
            "id": qid,
            "query": f"问题{qid}",
            "retrieval_context": [{"id": d, "text": f"{qid}的段落{d} [p={p:.2f}]"} for d, p in ctx],
        }

    # s (P 0.52) is at rank 1 in both lists: priority 0.02 / 1. x (0.52) is at rank 2 in A
    # only: 0.02 / (2 / log2 3) = 0.0158, so it comes first.
    systems = {
        "A": [rec("q1", [("s", 0.52), ("x", 0.52)])],
        "B": [rec("q1", [("s", 0.52), ("w", 0.9)])],
    }
    body = {
        "systems": systems,
        "options": {
            **{k: v for k, v in OPTIONS.items() if k != "k"},
            "resamples": 50,
            "stability_resamples": 0,
        },
    }
    r = client.post("/v1/compare", json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert wait_job(client, job_id)["status"] == "done"
    q = client.get(f"/v1/jobs/{job_id}/queue").json()
    assert q["kind"] == "compare"
    assert [it["docno"] for it in q["items"]][:2] == ["x", "s"]
    assert q["items"][0]["ranks"] == {"A": 2} and q["items"][1]["ranks"] == {"A": 1, "B": 1}
    assert q["items"][0]["text"] == "q1的段落x [p=0.52]"
    assert label(client, job_id, "q1", "x", 0).status_code == 201
    pooled = results(client, job_id)["q1"]
    x = next(v for v, d in zip(pooled["verdicts"], pooled["docnos"], strict=True) if d == "x")
    assert x["source"] == "human" and x["verdict"] == "no"


# --- scales -------------------------------------------------------------------------------
def test_graded_labels_on_a_binary_job_need_the_stated_level(tmp_path: Path) -> None:
    graded_qrels = b"q0 0 d0 1\nq0 0 d1 3\nq0 0 d2 0\n"  # grade 3 present: a graded file
    with TestClient(app_for(tmp_path / "a", backend=p_backend())) as c:
        job_id = run_job(c, records()[:1])
        assert c.post("/v1/labels?reviewer=nist", content=graded_qrels).json() == {"imported": 3}
        job = c.get(f"/v1/jobs/{job_id}").json()  # shown without the labels, saying why
        err = job["review"]["error"]
        assert "graded" in err and "binary" in err and "--labels-level" in err
        assert job["review"]["human"] == 0 and "human_labels" not in job["summary"]
        r = c.get(f"/v1/jobs/{job_id}/agreement")
        assert r.status_code == 409 and "graded" in r.json()["detail"] and "binary" in r.json()["detail"]
        r = label(c, job_id, "q0", "d3", 2, scale="graded")
        assert r.status_code == 422 and r.json()["fields"] == ["body.scale"]
        assert "--labels-level" in r.json()["detail"][0]["msg"]
        r = label(c, job_id, "q0", "d3", 2)
        assert r.status_code == 422 and '"scale": "graded"' in r.json()["detail"][0]["msg"]
    config = replace(make_config(tmp_path / "b", backend=p_backend()), labels_level=2)
    with TestClient(create_app(config)) as c:
        job_id = run_job(c, records()[:1])
        c.post("/v1/labels?reviewer=nist", content=graded_qrels)
        assert label(c, job_id, "q0", "d3", 2, scale="graded").status_code == 201
        job = c.get(f"/v1/jobs/{job_id}").json()
        assert job["review"]["error"] is None and job["review"]["human"] == 4
        # grade >= 2 is relevant: d0 (1) no, d1 (3) yes, d2 (0) no, d3 (2) yes -> AP (1/2 + 2/4) / 2
        assert results(c, job_id)["q0"]["ap"] == pytest.approx(0.5)
        assert job["review"]["mapping"]["graded"]["level"] == 2
        assert c.get(f"/v1/jobs/{job_id}/agreement").json()["overall"]["n"] == 4


def test_serve_refuses_a_stated_level_off_the_scale(tmp_path: Path) -> None:
    import subprocess
    import sys

    from _server import ROOT, serve_env

    for flag in ("--labels-level", "--labels-yes-grade"):
        proc = subprocess.run(
            [sys.executable, "-m", "judge", "serve", "--port", "0", flag, "5"],
            env=serve_env(tmp_path),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and flag in proc.stderr and "1..3" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_review_page_and_script_are_local(client: Any) -> None:
    page = client.get("/jobs/anything/review")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/static/review.js"' in page.text
    script = client.get("/static/review.js").text
    assert "http://" not in script and "https://" not in script  # nothing from the network
    assert "innerHTML" not in script and 'setAttribute("style"' not in script


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (b'{"qid": "q1", "docno": "d1", "label": 1}\n{"qid": "\xff"}\n', ["body"]),
        (b'{"qid": "q\\ud800", "docno": "d1", "label": 1}\n', ["body", "qid"]),
        (
            b'{"qid": "q1", "docno": "d1", "label": 1, "x": ' + b"[" * 3000 + b"]" * 3000 + b"}\n",
            ["body", "x"],
        ),
    ],
)
def test_hostile_label_imports_are_422_naming_the_line(client: Any, body: bytes, loc: list[str]) -> None:
    r = client.post("/v1/labels?reviewer=x", content=body)
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == loc and detail["msg"].startswith("line ")
    assert client.get("/v1/labels?format=json").json()["count"] == 0  # nothing half-imported


@pytest.mark.parametrize("path", ["/v1/jobs/x/labels", "/v1/jobs/x/calibrate"])
def test_review_json_bodies_nested_too_deep_are_422_like_every_route(client: Any, path: str) -> None:
    deep = b'{"query_id": "q1", "label": 1, "comment": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    r = client.post(path, content=deep, headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert "nested deeper" in r.json()["detail"][0]["msg"]
