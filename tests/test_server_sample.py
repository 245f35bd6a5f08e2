"""The review queue's sample mode over HTTP: ``POST /v1/jobs/{id}/sample`` draws
a finished job's pairs with known inclusion probabilities (the draw of ``judge labels
sample``), records them in the label store, ``GET`` lists them for the review screen; a label
given on a drawn pair carries its probability into ``GET /v1/labels?format=sample`` and a
prediction-powered estimate, a label on a pair never drawn never does. Bodies are checked
(422 naming the field); on the fake judge whose P(yes) is written in each passage."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _review import TABLE, p_backend, records
from _server import app_for, wait_job
from fastapi.testclient import TestClient

from judge.batch import sample_queue

OPTIONS = {"probability": True, "p_yes_threshold": 0.5, "k": [3]}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    with TestClient(app_for(tmp_path, backend=p_backend())) as c:
        yield c


def _job(client: Any) -> str:
    r = client.post("/v1/jobs", json={"records": records(), "options": OPTIONS})
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    assert wait_job(client, job_id)["status"] == "done"
    return job_id


def test_a_uniform_draw_is_recorded_listed_and_its_labels_carry_the_probability(client: Any) -> None:
    job_id = _job(client)
    assert client.get(f"/v1/jobs/{job_id}/sample").json() == {
        "job": job_id,
        "items": [],
        "count": 0,
        "unlabelled": 0,
    }
    r = client.post(f"/v1/jobs/{job_id}/sample", json={"n": 6, "design": "uniform", "seed": 3})
    assert r.status_code == 200, r.text
    drew = r.json()
    # 24 judged pairs, 6 expected: each drawn independently with probability 6/24
    assert drew["drawn"] == drew["new"] == drew["count"] == drew["unlabelled"] > 0
    assert all(it["inclusion"] == pytest.approx(0.25) and it["design"] == "uniform" for it in drew["items"])
    assert all(it["text"] and it["label"] is None for it in drew["items"])
    listed = client.get(f"/v1/jobs/{job_id}/sample").json()
    assert listed["items"] == drew["items"]
    # a second draw (same seed) is another, independent draw (draw 2 uses its own random
    # stream): every pair drawn by either has the union probability 1 - (1 - 0.25)(1 - 0.5)
    again = client.post(f"/v1/jobs/{job_id}/sample", json={"n": 12, "seed": 3}).json()
    assert again["draw"] == 2 and again["count"] >= drew["count"]
    assert {it["key"] for it in drew["items"]} <= {it["key"] for it in again["items"]}
    assert all(it["inclusion"] == pytest.approx(0.625) for it in again["items"])

    drawn = drew["items"][0]
    keys = {it["key"] for it in again["items"]}
    other = next((r["id"], f"d{j}") for r in records() for j in range(4) if f"{r['id']}\td{j}" not in keys)
    ok = client.post(
        f"/v1/jobs/{job_id}/labels", json={"query_id": drawn["query_id"], "docno": drawn["docno"], "label": 1}
    )
    assert ok.status_code == 201
    chosen = client.post(
        f"/v1/jobs/{job_id}/labels", json={"query_id": other[0], "docno": other[1], "label": 0}
    )
    assert chosen.status_code == 201
    # the job's sample file: every drawn pair at its union probability, the labelled one with its
    # label, the others named as unlabelled (-1); the queue-chosen label never enters an estimate
    r = client.get(f"/v1/labels?format=sample&job={job_id}")
    assert r.status_code == 200 and r.headers["x-unlabelled"] == str(again["count"] - 1)
    sample = r.text
    lines = sample.splitlines()
    assert lines[0].startswith(f"# judge sample of {job_id}: {again['count']} drawn pair(s)")
    assert f"{drawn['query_id']} 0 {drawn['docno']} 1 0.625" in lines[1:]
    assert sum(line.split()[3] == "-1" for line in lines[1:]) == again["count"] - 1
    assert not any(line.startswith(f"{other[0]} 0 {other[1]} ") for line in lines)
    shown = {it["key"]: it["label"] for it in client.get(f"/v1/jobs/{job_id}/sample").json()["items"]}
    assert shown[drawn["key"]] == 1 and f"{other[0]}\t{other[1]}" not in shown

    r = client.post("/v1/jobs", json={"records": records(), "options": {**OPTIONS, "sample_labels": sample}})
    assert r.status_code == 202, r.text
    job = wait_job(client, r.json()["id"])
    summary = job.get("summary") or client.get(f"/v1/jobs/{job['id']}").json()["summary"]
    ppi = summary["ppi"]
    assert ppi["labels"] == 1 and ppi["unlabelled"] == again["count"] - 1 and ppi["method"]["sampling"]


def test_the_uncertainty_design_is_the_cli_draw(client: Any) -> None:
    job_id = _job(client)
    r = client.post(f"/v1/jobs/{job_id}/sample", json={"n": 8, "design": "uncertainty", "seed": 7})
    assert r.status_code == 200, r.text
    got = {it["key"]: it["inclusion"] for it in r.json()["items"]}
    rows = [json.loads(x) for x in client.get(f"/v1/jobs/{job_id}/results").text.splitlines() if x.strip()]
    want = sample_queue(rows, expected=8, design="uncertainty", seed=7)
    assert got == {f"{i.qid}\t{i.docno}": pytest.approx(i.inclusion) for i in want}
    # proportional to sqrt(p (1 - p)) (floored at 0.1), scaled to 8 expected over the 24 pairs
    weights = [max(math.sqrt(p * (1 - p)), 0.1) for _, ps, _ in TABLE for p in ps]
    for it in r.json()["items"]:
        p = it["p_yes"]
        assert it["inclusion"] == pytest.approx(min(1.0, 8 * max(math.sqrt(p * (1 - p)), 0.1) / sum(weights)))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"n": 0}', "body.n"),
        ('{"n": -1}', "body.n"),
        ('{"n": "6"}', "body.n"),
        ('{"n": true}', "body.n"),
        ('{"n": 1e9}', "body.n"),
        ('{"n": NaN}', "body.n"),
        ('{"n": Infinity}', "body.n"),
        ("{}", "body.n"),
        ('{"n": 4, "design": "nope"}', "body.design"),
        ('{"n": 4, "seed": -1}', "body.seed"),
        ('{"n": 4, "seed": 1.5}', "body.seed"),
        ('{"n": 4, "seed": 9223372036854775808}', "body.seed"),
        ('{"n": 4, "drawn": 1.0}', "body.drawn"),
    ],
)
def test_bad_sample_bodies_are_422_naming_the_field(client: Any, body: str, field: str) -> None:
    job_id = _job(client)
    r = client.post(
        f"/v1/jobs/{job_id}/sample", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert r.json()["fields"] == [field]
    assert client.get(f"/v1/jobs/{job_id}/sample").json()["count"] == 0  # nothing drawn


def test_sample_routes_need_the_key_and_a_known_job(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, backend=p_backend(), keys=["k-1"])) as c:
        assert c.post("/v1/jobs/nope/sample", json={"n": 2}).status_code == 401
        assert c.get("/v1/jobs/nope/sample").status_code == 401
        auth = {"Authorization": "Bearer k-1"}
        assert c.post("/v1/jobs/nope/sample", json={"n": 2}, headers=auth).status_code == 404


def test_a_comparison_draws_from_its_pooled_pairs(tmp_path: Path) -> None:
    from test_server_compare import OPTIONS as COMPARE
    from test_server_compare import Counting, systems

    given = systems()
    with TestClient(app_for(tmp_path / "srv", backend=Counting().backend)) as c:
        r = c.post("/v1/compare", json={"systems": given, "options": COMPARE})
        assert r.status_code == 202, r.text
        assert wait_job(c, r.json()["id"])["status"] == "done"
        job_id = r.json()["id"]
        pool = {
            (rec["id"], str(p["id"]))
            for sys in given.values()
            for rec in sys
            for p in rec["retrieval_context"]
        }
        drew = c.post(f"/v1/jobs/{job_id}/sample", json={"n": 5, "seed": 1})
        assert drew.status_code == 200, drew.text
        items = drew.json()["items"]
        assert items and all((it["query_id"], it["docno"]) in pool for it in items)
        # every pooled pair judged once: the same probability for each, 5 over the pool's size
        assert all(it["inclusion"] == pytest.approx(5 / len(pool)) for it in items)
        # the comparison's own sample file: every drawn pair unlabelled (-1), taken by a comparison
        # of the same systems, each system naming the drawn pairs it ranks
        r = c.get(f"/v1/labels?format=sample&job={job_id}")
        assert r.status_code == 200 and r.headers["x-unlabelled"] == str(len(items))
        options = {**COMPARE, "sample_labels": r.text, "allow_unlabelled": True}
        again = c.post("/v1/compare", json={"systems": given, "options": options})
        assert again.status_code == 202, again.text
        assert wait_job(c, again.json()["id"])["status"] == "done"
        report = c.get(f"/v1/jobs/{again.json()['id']}/report").json()
        named = {tuple(p) for s in report["systems"].values() for p in s["ppi"]["unlabelled_pairs"]}
        assert named == {(it["query_id"], it["docno"]) for it in items}
        assert all(s["ppi"]["allow_unlabelled"] for s in report["systems"].values())
