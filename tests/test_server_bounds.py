"""``judge serve`` under hostile or oversized input: a bad line is a reject by itself (the job
runs the rest), a bad JSON body is a 4xx naming the problem, the bounds are configurable
and reported, and a large body is parsed off the event loop."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import app_for, make_config, ndjson, records, wait_job
from fastapi.testclient import TestClient

from judge.server import create_app
from judge.server._bounds import JobBounds
from judge.server._schemas import JobRequest

NDJSON = {"Content-Type": "application/x-ndjson"}
DEEP = "[" * 3000 + "]" * 3000


def bounded_app(tmp: Path, **bounds: int) -> Any:
    config = make_config(tmp)
    config.runtime.bounds = JobBounds(**bounds)
    return create_app(config)


def test_hostile_ndjson_lines_are_rejects_and_the_rest_of_the_job_runs(tmp_path: Path) -> None:
    good = ndjson(records(2))
    hostile = [
        b'{"id": "s", "query": "q\\ud800", "retrieval_context": ["a"]}',
        b'{"id": "n", "query": "q", "retrieval_context": ["a"], "meta": ' + DEEP.encode() + b"}",
        DEEP.encode(),
        b'{"id": "t", "query": "q", "retrieval_context": [1]}',
        b'{"id": "long", "query": "' + b"x" * 101 + b'", "retrieval_context": ["a"]}',
        b'{"id": "many", "query": "q", "retrieval_context": ["a", "b", "c", "d", "e", "f"]}',
        b'{"id": "p", "query": "q", "retrieval_context": [{"text": "\\udfff"}]}',
    ]
    body = good + b"\n".join(hostile) + b"\n"
    with TestClient(bounded_app(tmp_path, max_query_chars=100, max_record_passages=5)) as client:
        r = client.post("/v1/jobs", content=body, headers=NDJSON)
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["queries_total"] == 2 and job["rejected"] == 7
        assert [(x["line"], x["field"]) for x in job["rejects"]] == [
            (3, "query"),
            (4, "meta"),
            (5, None),
            (6, "retrieval_context[0]"),
            (7, "query"),
            (8, "retrieval_context"),
            (9, "retrieval_context[0].text"),
        ]
        messages = [x["error"] for x in job["rejects"]]
        assert "lone surrogate" in messages[0] and "nested deeper than 64 levels" in messages[1]
        assert messages[4] == "query of 101 characters; at most 100"
        assert messages[5] == "6 passages; at most 5 per record"
        done = wait_job(client, job["id"])
        assert done["status"] == "done" and done["queries_done"] == 2 and done["error"] is None
        listed = client.get(f"/v1/jobs/{job['id']}/rejects").json()
        assert [x["line"] for x in listed["rejects"]] == [3, 4, 5, 6, 7, 8, 9]


def test_a_json_job_with_a_deep_or_surrogate_record_is_a_reject_or_a_422(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path)) as client:
        nested: Any = "x"
        for _ in range(100):
            nested = [nested]
        recs = [*records(1), {"id": "deep", "query": "q", "retrieval_context": ["a"], "m": nested}]
        r = client.post("/v1/jobs", json={"records": recs})
        assert r.status_code == 202, r.text
        assert [(x["line"], x["field"]) for x in r.json()["rejects"]] == [(2, "m")]
        raw = '{"records": [{"query": "q\\ud800", "retrieval_context": ["a"]}]}'
        r = client.post("/v1/jobs", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "hex escape" in json.dumps(r.json())


def test_evaluate_and_compare_refuse_hostile_json_naming_it(tmp_path: Path) -> None:
    json_headers = {"Content-Type": "application/json"}
    with TestClient(app_for(tmp_path)) as client:
        deep = '{"query": "q", "retrieval_context": ["a"], "k": ' + DEEP + "}"
        r = client.post("/v1/evaluate", content=deep, headers=json_headers)
        assert r.status_code == 422 and r.json()["fields"] == ["body"]
        assert "nested deeper" in r.json()["detail"][0]["msg"]
        r = client.post(
            "/v1/evaluate", content='{"query": "q\\ud800", "retrieval_context": ["a"]}', headers=json_headers
        )
        assert r.status_code == 422 and r.json()["fields"] == ["body.query"]
        r = client.post(
            "/v1/evaluate",
            content='{"query": "q", "retrieval_context": ["a", {"text": "\\ud800"}]}',
            headers=json_headers,
        )
        assert r.status_code == 422 and r.json()["fields"] == ["body.retrieval_context[1].text"]
        base = '{"systems": {"a": [{"id": "q", "query": "q", "retrieval_context": ["x"]}], "b": '
        r = client.post("/v1/compare", content=base + DEEP + "}}", headers=json_headers)
        assert r.status_code == 422 and r.json()["fields"] == ["body"]
        r = client.post(
            "/v1/compare",
            content=base + '[{"id": "q", "query": "\\udc00", "retrieval_context": ["x"]}]}}',
            headers=json_headers,
        )
        assert r.status_code == 422 and r.json()["fields"] == ["body.systems.b[0].query"]


def test_evaluate_refuses_a_query_over_the_bound(tmp_path: Path) -> None:
    with TestClient(bounded_app(tmp_path, max_query_chars=10)) as client:
        r = client.post("/v1/evaluate", json={"query": "x" * 11, "retrieval_context": ["a"]})
        assert r.status_code == 422 and r.json()["fields"] == ["body.query"]
        assert "at most 10" in r.json()["detail"][0]["msg"]
        assert (
            client.post("/v1/evaluate", json={"query": "x" * 10, "retrieval_context": ["a"]}).status_code
            == 200
        )
        limits = client.get("/v1/info").json()["limits"]
        assert limits["max_query_chars"] == 10
        assert limits["max_record_passages"] == 1000 and limits["max_records"] == 100_000


def test_a_job_over_the_records_bound_is_413(tmp_path: Path) -> None:
    with TestClient(bounded_app(tmp_path, max_records=3)) as client:
        r = client.post("/v1/jobs", content=ndjson(records(4)), headers=NDJSON)
        assert r.status_code == 413 and r.json()["field"] == "records"
        assert client.get("/v1/jobs").json()["jobs"] == []
        r = client.post("/v1/jobs", content=ndjson(records(3)), headers=NDJSON)
        assert r.status_code == 202


def test_a_comparison_with_a_system_over_the_records_bound_is_422_naming_it(tmp_path: Path) -> None:
    three, four = records(3), records(4)
    with TestClient(bounded_app(tmp_path, max_records=3)) as client:
        for b_given in (four, ndjson(four).decode(), ndjson(four).decode().replace("\n", "\n\n")):
            r = client.post("/v1/compare", json={"systems": {"A": three, "B.v2": b_given}})
            assert r.status_code == 422, r.text
            assert r.json()["fields"] == ["body.systems.B.v2"]
            assert r.json()["detail"][0]["loc"] == ["body", "systems", "B.v2"]
            assert "more than 3 records" in r.json()["detail"][0]["msg"]
        assert client.get("/v1/jobs").json()["jobs"] == []
        assert list((tmp_path / "jobs").iterdir()) == []
        # blank lines are not records: three records and blank lines are within the bound
        r = client.post(
            "/v1/compare", json={"systems": {"A": three, "B.v2": ndjson(three).decode() + "\n\n"}}
        )
        assert r.status_code == 202, r.text


def test_healthz_answers_while_a_large_json_body_is_parsed(tmp_path: Path, monkeypatch: Any) -> None:
    """Ordered, not timed: the parse of a ~10 MB job body waits (bounded) for /healthz to be
    answered; if the parse held the event loop, /healthz could not be answered meanwhile."""
    parsing = threading.Event()
    answered = threading.Event()
    seen: list[bool] = []
    original = JobRequest.model_validate_json

    def slow_parse(raw: Any, *args: Any, **kwargs: Any) -> Any:
        if len(raw) > 1_000_000:
            parsing.set()
            seen.append(answered.wait(20))
        return original(raw, *args, **kwargs)

    monkeypatch.setattr(JobRequest, "model_validate_json", slow_parse)
    recs = records(1, 1000)
    for rec in recs:
        for p in rec["retrieval_context"]:
            p["text"] += " " + "文" * 3000
    body = json.dumps({"records": recs}, ensure_ascii=False).encode("utf-8")
    assert len(body) > 9_000_000
    with TestClient(app_for(tmp_path, max_body_bytes=32 * 1024 * 1024)) as client:
        result: list[Any] = []
        poster = threading.Thread(
            target=lambda: result.append(
                client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
            )
        )
        poster.start()
        assert parsing.wait(60)
        assert client.get("/healthz").status_code == 200
        answered.set()
        poster.join(120)
        assert seen == [True]
        assert result and result[0].status_code == 202
