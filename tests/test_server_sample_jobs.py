"""The sample mode with several jobs over HTTP: each job's sample file is its own
(``GET /v1/labels?format=sample&job=ID``) and is accepted by that job; an inclusion
probability below the floor is a 422 naming line and field; integer options given as JSON
strings, and ``sample_level`` without ``sample_labels``, are refused naming the field; and no
response carries the server's absolute paths."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _review import p_backend, records
from _server import app_for, wait_job
from fastapi.testclient import TestClient

OPTIONS = {"probability": True, "p_yes_threshold": 0.5, "k": [3]}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    with TestClient(app_for(tmp_path, backend=p_backend())) as c:
        yield c


def _records(prefix: str) -> list[dict[str, Any]]:
    return [{**r, "id": f"{prefix}{r['id']}"} for r in records()]


def _job(client: Any, recs: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    r = client.post("/v1/jobs", json={"records": recs, "options": {**OPTIONS, **options}})
    assert r.status_code == 202, r.text
    job = wait_job(client, r.json()["id"])
    assert job["status"] == "done", job
    return job


def test_two_sampled_jobs_each_take_their_own_sample_file(client: Any) -> None:
    """The service guide's steps with two jobs: draw over each, label a drawn pair of each,
    fetch each job's sample file and pass it to a job over the same records."""
    recs = {"a": _records("a"), "b": _records("b")}
    jobs = {name: _job(client, rs)["id"] for name, rs in recs.items()}
    files: dict[str, str] = {}
    for name, job_id in jobs.items():
        drew = client.post(f"/v1/jobs/{job_id}/sample", json={"n": 24, "seed": 1}).json()
        assert drew["count"] == 24 and all(it["inclusion"] == 1.0 for it in drew["items"])  # all 24 pairs
        first = drew["items"][0]
        r = client.post(
            f"/v1/jobs/{job_id}/labels",
            json={"query_id": first["query_id"], "docno": first["docno"], "label": 1},
        )
        assert r.status_code == 201, r.text
        r = client.get(f"/v1/labels?format=sample&job={job_id}")
        assert r.status_code == 200, r.text
        files[name] = r.text
        lines = [x.split() for x in r.text.splitlines() if not x.startswith("#")]
        assert len(lines) == 24 and {x[0][0] for x in lines} == {name}  # only this job's pairs
        assert r.headers["x-unlabelled"] == "23"
    for name, text in files.items():
        job = _job(client, recs[name], sample_labels=text)
        ppi = (job.get("summary") or client.get(f"/v1/jobs/{job['id']}").json()["summary"])["ppi"]
        assert ppi["labels"] == 1 and ppi["unlabelled"] == 23 and ppi["population"] == 24
        assert ppi["precision"]["3"]["low"] is None and "no interval" in ppi["interval_note"]
    # allow_unlabelled gives the conservative bound over their missing labels (the job's options say so)
    job = _job(client, recs["a"], sample_labels=files["a"], allow_unlabelled=True)
    ppi = (job.get("summary") or client.get(f"/v1/jobs/{job['id']}").json()["summary"])["ppi"]
    assert ppi["allow_unlabelled"] is True and "intervals are given" in ppi["interval_note"]
    # job a's file names pairs job b does not hold: refused, naming the file's line
    crossed = {**OPTIONS, "sample_labels": files["a"]}
    r = client.post("/v1/jobs", json={"records": recs["b"], "options": crossed})
    assert r.status_code == 422 and r.json()["line"] == 2
    # the sample file is one job's: no job is a 422 naming it, an unknown job a 404
    r = client.get("/v1/labels?format=sample")
    assert r.status_code == 422 and r.json()["fields"] == ["query.job"]
    assert client.get("/v1/labels?format=sample&job=j0000nope").status_code == 404
    assert client.get(f"/v1/labels?format=qrels&job={jobs['a']}").status_code == 422


def test_an_inclusion_probability_below_the_floor_is_422_naming_line_and_field(client: Any) -> None:
    sample = "q0 0 d0 1 0.5\nq0 0 d1 0 1e-320\n"  # 1e-320 passes (0, 1] and 1 / p overflows
    r = client.post("/v1/jobs", json={"records": records(), "options": {**OPTIONS, "sample_labels": sample}})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["line"] == 2 and body["field"] == "options.sample_labels.inclusion"
    assert "1e-06" in body["detail"] and "1e-320" in body["detail"]
    assert client.get("/v1/jobs").json()["jobs"] == []  # no job was made


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"examples": "2"}, "examples"),
        ({"max_passage_chars": "100"}, "max_passage_chars"),
        ({"k": ["3"]}, "k.0"),
        ({"sample_labels": "q0 0 d0 1\n", "sample_level": "1"}, "sample_level"),
        ({"sample_labels": "q0 0 d0 1\n", "confidence": "0.9"}, "confidence"),
        ({"sample_level": 1}, "sample_level"),
        ({"allow_unlabelled": True}, "allow_unlabelled"),
    ],
)
def test_job_options_given_as_strings_or_without_sample_labels_are_422(
    client: Any, options: dict[str, Any], field: str
) -> None:
    r = client.post("/v1/jobs", json={"records": records(), "options": options})
    assert r.status_code == 422, r.text
    assert r.json()["fields"] == [f"body.options.{field}"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"depth": "3"}, "depth"),
        ({"resamples": "10"}, "resamples"),
        ({"examples": "2", "qrels": "q0 0 d0 1\n"}, "examples"),
        ({"top_queries": "1"}, "top_queries"),
        ({"confidence": "0.9"}, "confidence"),
        ({"sample_level": 2}, "sample_level"),
    ],
)
def test_compare_options_given_as_strings_or_without_sample_labels_are_422(
    client: Any, options: dict[str, Any], field: str
) -> None:
    systems = {"A": records(), "B": records()[:3]}
    r = client.post("/v1/compare", json={"systems": systems, "options": options})
    assert r.status_code == 422, r.text
    assert r.json()["fields"] == [f"body.options.{field}"]


def test_query_string_options_are_still_read_as_numbers(client: Any) -> None:
    """A query string holds text: ``?k=3&max_passage_chars=500`` is read as numbers there."""
    body = "\n".join(__import__("json").dumps(r, ensure_ascii=False) for r in records()) + "\n"
    r = client.post(
        "/v1/jobs?k=3&max_passage_chars=500&probability=true",
        content=body.encode(),
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 202, r.text
    assert r.json()["options"]["k"] == [3] and r.json()["options"]["max_passage_chars"] == 500


def _no_server_path(text: str, root: Path) -> list[str]:
    return [text[max(0, m.start() - 60) : m.start() + 80] for m in re.finditer(re.escape(str(root)), text)]


def test_no_response_carries_a_server_path(tmp_path: Path) -> None:
    from test_server_compare import OPTIONS as COMPARE
    from test_server_compare import Counting, systems

    qrels = "".join(f"q{i:02d} 0 r0 1\n" for i in range(12))
    sample = "".join(f"q{i:02d} 0 r1 1\n" for i in range(12))
    root = tmp_path / "srv"
    with TestClient(app_for(root, backend=Counting().backend)) as c:
        options = {**COMPARE, "qrels": qrels, "sample_labels": sample}
        r = c.post("/v1/compare", json={"systems": systems(), "options": options})
        assert r.status_code == 202, r.text
        compare = r.json()["id"]
        assert wait_job(c, compare)["status"] == "done"
        mine = "".join(f"q{i:02d} 0 r0 1\n" for i in range(12))  # A's pairs
        r = c.post("/v1/jobs", json={"records": systems()["A"], "options": {"sample_labels": mine}})
        assert r.status_code == 202, r.text
        score = r.json()["id"]
        assert wait_job(c, score)["status"] == "done"
        urls = [
            f"/v1/jobs/{compare}",
            f"/v1/jobs/{compare}/report",
            f"/v1/jobs/{compare}/report?format=md",
            f"/v1/jobs/{compare}/report?format=html",
            f"/v1/jobs/{compare}/differences",
            f"/v1/jobs/{score}",
            f"/v1/jobs/{score}/results",
            f"/v1/jobs/{score}/queue",
            "/v1/jobs",
        ]
        for url in urls:
            r = c.get(url)
            assert r.status_code == 200, (url, r.text)
            assert _no_server_path(r.text, root) == [], url
        report = c.get(f"/v1/jobs/{compare}/report").json()
        # the files are named relative to the job's folder
        assert report["systems"]["A"]["path"] == "systems/A.jsonl"
        assert report["conventions"]["human_labels"] == "human.qrels"
        assert report["conventions"]["sample_labels"]["source"] == "sample.qrels"
        summary = c.get(f"/v1/jobs/{score}").json()["summary"]
        assert summary["output"] == "output.jsonl" and summary["ppi"]["source"] == "sample.qrels"
