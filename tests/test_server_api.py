"""``judge serve``'s HTTP API, in process (FastAPI's TestClient runs the app's lifespan, so
the job runner is live), on deterministic fake judges."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import BAD, MARKER, Gate, app_for, ndjson, records, wait_job
from fastapi.testclient import TestClient

from judge.backends import ChatRequest, Completion, RuleBackend
from judge.server._db import SCHEMA_VERSION

NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def client(tmp_path: Path) -> Any:
    with TestClient(app_for(tmp_path)) as c:
        yield c


def submit(client: Any, recs: list[dict[str, Any]], query: str = "", headers: Any = None) -> Any:
    return client.post("/v1/jobs" + query, content=ndjson(recs), headers={**NDJSON, **(headers or {})})


# --- service routes ------------------------------------------------------------------------
def test_healthz_and_info(client: Any) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    info = client.get("/v1/info").json()
    assert info["backend"] == "fake:keyword" and info["model"] == "rule"
    ids = {t["id"]: t["hash"] for t in info["templates"]}
    assert "binary.zh.v2" in ids and len(ids["binary.zh.v2"]) == 64
    assert info["auth"] is False and info["schema_version"] == SCHEMA_VERSION
    assert client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/results"]


def test_evaluate_returns_the_python_api_result(client: Any) -> None:
    body = {
        "query": "小狗贫血的表现",
        "retrieval_context": ["[相关] 牙龈苍白", "狗粮的保质期", {"id": "p3", "text": "[相关] 食欲下降"}],
        "k": [3],
    }
    r = client.post("/v1/evaluate", json=body)
    assert r.status_code == 200
    res = r.json()
    assert [v["verdict"] for v in res["verdicts"]] == ["yes", "no", "yes"]
    assert res["verdicts"][2]["passage_id"] == "p3"
    assert res["score"] == pytest.approx(2 / 3)
    assert res["ap"] == pytest.approx((1 + 2 / 3) / 2)  # relevant at ranks 1 and 3
    assert res["verdicts"][0]["reason"] == "段落包含回答查询所需的信息。"
    assert res["unjudged"] == 0 and res["usage"]["calls"] == 3  # no summary call unless asked


def test_evaluate_malformed_body_is_422_naming_the_field(client: Any) -> None:
    r = client.post("/v1/evaluate", json={"query": "q", "retrieval_context": "not a list"})
    assert r.status_code == 422 and "body.retrieval_context" in r.json()["fields"]
    r = client.post("/v1/evaluate", json={"query": "q", "retrieval_context": [], "mode": "ternary"})
    assert r.status_code == 422 and r.json()["fields"] == ["body.mode"]
    r = client.post(
        "/v1/evaluate", json={"query": "q", "retrieval_context": [], "config": {"p_yes_threshold": 2}}
    )
    assert r.status_code == 422 and r.json()["fields"] == ["body.config.p_yes_threshold"]
    r = client.post(
        "/v1/evaluate", json={"query": "q", "retrieval_context": [], "config": {"template": "/etc/passwd"}}
    )
    assert r.status_code == 422 and r.json()["fields"] == ["body.config.template"]
    r = client.post("/v1/evaluate", json={"retrieval_context": []})
    assert r.status_code == 422 and r.json()["fields"] == ["body.query"]
    r = client.post("/v1/evaluate", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422


def test_evaluate_too_many_passages_is_413(client: Any) -> None:
    r = client.post("/v1/evaluate", json={"query": "q", "retrieval_context": ["x"] * 51})
    assert r.status_code == 413 and r.json()["field"] == "retrieval_context"
    assert (
        client.post("/v1/evaluate", json={"query": "q", "retrieval_context": ["x"] * 50}).status_code == 200
    )


def test_body_size_limit(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, max_body_bytes=2000)) as c:
        big = ndjson(records(20))
        assert len(big) > 2000
        assert c.post("/v1/jobs", content=big, headers=NDJSON).status_code == 413

        def chunks() -> Any:  # no Content-Length: the limit still holds
            yield big[:1000]
            yield big[1000:]

        assert c.post("/v1/jobs", content=chunks(), headers=NDJSON).status_code == 413
        assert c.post("/v1/jobs", content=ndjson(records(1)), headers=NDJSON).status_code == 202


# --- jobs ----------------------------------------------------------------------------------
def test_ndjson_job_runs_like_judge_score_and_reports_bad_lines(client: Any, tmp_path: Path) -> None:
    body = ndjson(records(3)) + b"not json\n" + ndjson([{"id": "x", "retrieval_context": []}])
    r = client.post("/v1/jobs?mode=graded&k=2&k=4", content=body, headers=NDJSON)
    assert r.status_code == 202
    job = r.json()
    assert job["status"] == "queued" and job["queries_total"] == 3 and job["rejected"] == 2
    assert [(x["line"], x["field"]) for x in job["rejects"]] == [(4, None), (5, "query")]
    assert r.headers["Location"] == f"/v1/jobs/{job['id']}"
    done = wait_job(client, job["id"])
    assert done["status"] == "done" and done["queries_done"] == 3 and done["passages_done"] == 12
    assert done["eta_s"] == 0.0 and done["options"]["mode"] == "graded" and done["options"]["k"] == [2, 4]
    summary = done["summary"]
    assert summary["queries"] == 3 and summary["unjudged"] == 0
    assert summary["grades"] == {"0": 6, "3": 6}
    assert summary["judge"]["map"] == pytest.approx((1 + 2 / 3) / 2, abs=1e-6)  # relevant at ranks 1 and 3
    assert set(summary["judge"]["ndcg"]) == {"2", "4"}
    rejects = client.get(f"/v1/jobs/{job['id']}/rejects").json()
    assert rejects["count"] == 2 and rejects["rejects"][1]["line"] == 5
    assert rejects["rejects"][1]["path"] == "input.jsonl"


def test_json_job_and_options_validation(client: Any) -> None:
    r = client.post("/v1/jobs", json={"records": records(2), "options": {"mode": "binary", "k": [3]}})
    assert r.status_code == 202
    done = wait_job(client, r.json()["id"])
    assert done["summary"]["queries"] == 2 and done["summary"]["judge"]["precision"] == {
        "3": pytest.approx(2 / 3)
    }
    r = client.post("/v1/jobs", json={"records": records(1), "options": {"mode": "x"}})
    assert r.status_code == 422 and r.json()["fields"] == ["body.options.mode"]
    r = client.post("/v1/jobs", json={"records": []})
    assert r.status_code == 422 and r.json()["fields"] == ["body.records"]
    r = client.post("/v1/jobs?k=0", content=ndjson(records(1)), headers=NDJSON)
    assert r.status_code == 422 and r.json()["fields"] == ["query.k"]
    r = client.post("/v1/jobs?colour=red", content=ndjson(records(1)), headers=NDJSON)
    assert r.status_code == 422 and r.json()["fields"] == ["query.colour"]
    r = client.post("/v1/jobs", content=b"nope\n", headers=NDJSON)
    assert r.status_code == 422 and r.json()["rejects"][0]["line"] == 1
    assert client.post("/v1/jobs", content=b"x", headers={"Content-Type": "image/png"}).status_code == 415


def test_idempotency_key_returns_the_same_job(client: Any, tmp_path: Path) -> None:
    first = submit(client, records(2), headers={"Idempotency-Key": "run-42"})
    again = submit(client, records(2), headers={"Idempotency-Key": "run-42"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = submit(client, records(3), headers={"Idempotency-Key": "run-42"})
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
    fresh = submit(client, records(2), headers={"Idempotency-Key": "run-43"})
    assert fresh.status_code == 202 and fresh.json()["id"] != first.json()["id"]
    assert len(client.get("/v1/jobs").json()["jobs"]) == 2
    wait_job(client, first.json()["id"])
    # The key itself is nowhere in the database, only its hash.
    raw = (tmp_path / "server.sqlite").read_bytes() + (tmp_path / "server.sqlite-wal").read_bytes()
    assert b"run-42" not in raw


def test_list_and_get(client: Any) -> None:
    ids = [submit(client, records(1, prefix=f"s{i}-")).json()["id"] for i in range(3)]
    for i in ids:
        wait_job(client, i)
    listed = client.get("/v1/jobs").json()["jobs"]
    assert [j["id"] for j in listed] == ids[::-1]  # newest first
    assert all(j["summary"] is None for j in listed)
    assert [j["id"] for j in client.get("/v1/jobs?limit=2&offset=1").json()["jobs"]] == ids[1::-1]
    assert client.get("/v1/jobs?status=done").json()["jobs"][0]["status"] == "done"
    assert client.get("/v1/jobs?status=running").json()["jobs"] == []
    assert client.get("/v1/jobs?status=bogus").status_code == 422
    got = client.get(f"/v1/jobs/{ids[0]}").json()
    assert set(got) >= {
        "id",
        "status",
        "queries_total",
        "queries_done",
        "passages_done",
        "unjudged",
        "rejected",
        "eta_s",
        "summary",
    }
    assert client.get("/v1/jobs/nope").status_code == 404


def test_results_pagination_and_trec_formats(client: Any) -> None:
    job = submit(client, records(5)).json()
    wait_job(client, job["id"])
    url = f"/v1/jobs/{job['id']}/results"
    seen: list[str] = []
    offset: str | None = "0"
    pages = 0
    while offset is not None and pages < 10:
        r = client.get(f"{url}?offset={offset}&limit=2")
        assert (
            r.headers["content-type"].startswith("application/x-ndjson") and r.headers["X-Total-Count"] == "5"
        )
        seen += [json.loads(x)["id"] for x in r.text.splitlines()]
        offset = r.headers.get("X-Next-Offset")
        pages += 1
    assert pages == 3 and sorted(seen) == [f"q{i:03d}" for i in range(5)]
    rec = json.loads(client.get(f"{url}?limit=1").text)
    assert set(rec) >= {"id", "query", "verdicts", "docnos", "ap", "ndcg", "ground_truth"}
    assert client.get(f"{url}?offset=99").text == ""
    qrels = client.get(f"{url}?format=qrels").text.splitlines()
    assert len(qrels) == 20 and "q000 0 d0 1" in qrels and "q000 0 d1 0" in qrels
    run = client.get(f"{url}?format=run&tag=mine").text.splitlines()
    assert "q000 Q0 d0 1 4.0 mine" in run and "q000 Q0 d3 4 1.0 mine" in run and len(run) == 20
    assert client.get(f"{url}?format=xml").status_code == 422


def test_query_detail_has_texts_verdicts_and_ground_truth(client: Any) -> None:
    job = submit(client, records(2)).json()
    wait_job(client, job["id"])
    d = client.get(f"/v1/jobs/{job['id']}/queries/q001").json()
    p = d["passages"]
    assert [x["text"] for x in p][:2] == ["[相关] 查询1的段落0", "查询1的段落1"]
    assert [x["verdict"]["verdict"] for x in p] == ["yes", "no", "yes", "no"]
    assert [x["truth"] for x in p] == [1, 1, 0, 0]
    assert client.get(f"/v1/jobs/{job['id']}/queries/nope").status_code == 404


def test_query_ids_with_any_character_can_be_opened(client: Any) -> None:
    ids = ["msmarco/123", "a b", "50%", "问题/一", "x?y#z", "trailing/"]
    recs = [{**r, "id": qid} for r, qid in zip(records(len(ids)), ids, strict=True)]
    job = submit(client, recs).json()
    assert wait_job(client, job["id"])["queries_done"] == len(ids)
    for qid in ids:
        r = client.get(f"/v1/jobs/{job['id']}/queries/{urllib.parse.quote(qid, safe='')}")
        assert r.status_code == 200, qid
        assert r.json()["record"]["id"] == qid and len(r.json()["passages"]) == 4
    missing = client.get(f"/v1/jobs/{job['id']}/queries/{urllib.parse.quote('msmarco/124', safe='')}")
    assert missing.status_code == 404 and "msmarco/124" in missing.json()["detail"]


def test_events_stream_progress_then_end(client: Any) -> None:
    job = submit(client, records(4)).json()
    with client.stream("GET", f"/v1/jobs/{job['id']}/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    events = [block for block in text.split("\n\n") if block.startswith("event:")]
    assert events[-1].startswith("event: end") and '"status": "done"' in events[-1]
    progress = [json.loads(e.split("data: ", 1)[1]) for e in events if e.startswith("event: progress")]
    assert progress[-1]["status"] == "done" and progress[-1]["queries_done"] == 4
    done_counts = [p["queries_done"] for p in progress]
    assert done_counts == sorted(done_counts)


def test_cancel_queued_and_running(tmp_path: Path) -> None:
    gate = Gate(opened=False)
    with TestClient(app_for(tmp_path, backend=gate.backend)) as c:
        running = submit(c, records(3)).json()
        queued = submit(c, records(3, prefix="b")).json()
        wait_job(c, running["id"], ("running",))
        r = c.post(f"/v1/jobs/{queued['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        r = c.post(f"/v1/jobs/{running['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        assert c.post(f"/v1/jobs/{running['id']}/cancel").status_code == 409
        gate.open()
        after = submit(c, records(1, prefix="c")).json()
        assert wait_job(c, after["id"])["status"] == "done"
        assert c.get(f"/v1/jobs/{running['id']}").json()["status"] == "cancelled"


def test_full_queue_is_429_with_retry_after(tmp_path: Path) -> None:
    gate = Gate(opened=False)
    with TestClient(app_for(tmp_path, backend=gate.backend, queue_size=2)) as c:
        first = submit(c, records(1)).json()
        wait_job(c, first["id"], ("running",))
        b = submit(c, records(1, prefix="b"), headers={"Idempotency-Key": "b"})
        assert b.status_code == 202
        assert submit(c, records(1, prefix="c")).status_code == 202
        r = submit(c, records(1, prefix="d"))
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        replay = submit(c, records(1, prefix="b"), headers={"Idempotency-Key": "b"})
        assert replay.status_code == 200 and replay.json()["id"] == b.json()["id"]
        assert len(c.get("/v1/jobs").json()["jobs"]) == 3  # the refused job left nothing behind
        gate.open()
        wait_job(c, first["id"])
        for j in c.get("/v1/jobs").json()["jobs"]:
            wait_job(c, j["id"])


def test_queue_bound_holds_under_concurrent_submissions(tmp_path: Path) -> None:
    """Check and insert are one transaction: 24 submissions at once into a queue of 2 (one
    job running, blocked) leave exactly 2 waiting; the rest get 429 with Retry-After."""
    gate = Gate(opened=False)
    with TestClient(app_for(tmp_path, backend=gate.backend, queue_size=2)) as c:
        first = submit(c, records(1)).json()
        wait_job(c, first["id"], ("running",))
        start = threading.Barrier(24)

        def one(i: int) -> Any:
            start.wait(timeout=30)
            return submit(c, records(2, prefix=f"c{i}-"))

        with ThreadPoolExecutor(max_workers=24) as pool:
            answers = list(pool.map(one, range(24)))
        codes = sorted(r.status_code for r in answers)
        assert codes == [202] * 2 + [429] * 22, codes
        assert all(int(r.headers["Retry-After"]) >= 1 for r in answers if r.status_code == 429)
        assert len(c.get("/v1/jobs", params={"status": "queued"}).json()["jobs"]) == 2
        assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == sorted(
            [first["id"], *(r.json()["id"] for r in answers if r.status_code == 202)]
        )  # a refused submission leaves no job directory behind
        gate.open()
        for j in c.get("/v1/jobs").json()["jobs"]:
            wait_job(c, j["id"])


def test_retry_unjudged(tmp_path: Path) -> None:
    gate = Gate()
    with TestClient(app_for(tmp_path, backend=gate.backend)) as c:
        job = submit(c, records(3, bad=True)).json()
        done = wait_job(c, job["id"])
        assert done["unjudged"] == 3 and done["summary"]["unjudged"] == 3
        rec = json.loads(c.get(f"/v1/jobs/{job['id']}/results?limit=1").text)
        assert rec["verdicts"][3]["verdict"] == "unjudged" and BAD in rec["unjudged_passages"][0]["text"]
        gate.fix()
        r = c.post(f"/v1/jobs/{job['id']}/retry-unjudged")
        assert r.status_code == 202 and r.json()["status"] == "queued" and r.json()["phase"] == "retry"
        again = wait_job(c, job["id"])
        assert again["status"] == "done" and again["unjudged"] == 0 and again["phase"] == "score"
        assert again["summary"]["unjudged"] == 0 and again["summary"]["this_run"]["kind"] == "retry-unjudged"
        assert again["summary"]["verdicts"] == {"no": 6, "yes": 6}
        assert c.post(f"/v1/jobs/{job['id']}/retry-unjudged").status_code == 409  # nothing left
        assert len(c.get(f"/v1/jobs/{job['id']}/results").text.splitlines()) == 3


def test_metrics_exposition(client: Any) -> None:
    job = submit(client, records(2)).json()
    wait_job(client, job["id"])
    client.post("/v1/evaluate", json={"query": "q", "retrieval_context": ["[相关] a", "b"]})
    text = client.get("/metrics").text
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")
    names = {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }
    assert all(n.startswith("judge_") for n in names)
    assert 'judge_http_requests_total{method="POST",route="/v1/jobs",status="202"} 1.0' in text
    assert 'judge_http_request_duration_seconds_count{method="POST",route="/v1/evaluate"} 1.0' in text
    assert 'judge_jobs{status="done"} 1.0' in text and 'judge_jobs{status="queued"} 0.0' in text
    assert (
        'judge_judgments_total{verdict="yes"} 5.0' in text
        and 'judge_judgments_total{verdict="no"} 5.0' in text
    )
    assert "judge_unjudged_total 0.0" in text
    assert "judge_llm_calls_total 10.0" in text and "judge_llm_retries_total 0.0" in text
    assert "judge_llm_rate_limited_total 0.0" in text
    assert 'judge_llm_tokens_total{kind="prompt"}' in text and "judge_llm_cost_total{currency=" in text


# --- auth ----------------------------------------------------------------------------------
def test_keys_required_on_every_route_but_healthz(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=["k-alpha", "k-beta"])) as c:
        assert c.get("/healthz").status_code == 200
        for method, path in [
            ("GET", "/v1/info"),
            ("GET", "/v1/jobs"),
            ("GET", "/v1/jobs/x"),
            ("GET", "/v1/jobs/x/results"),
            ("GET", "/v1/jobs/x/events"),
            ("POST", "/v1/jobs"),
            ("POST", "/v1/evaluate"),
            ("POST", "/v1/jobs/x/cancel"),
            ("GET", "/metrics"),
            ("GET", "/docs"),
            ("GET", "/static/app.js"),
        ]:
            r = c.request(method, path)
            assert r.status_code == 401, (method, path)
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert c.get("/v1/info", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/v1/info", headers={"Authorization": "Basic k-alpha"}).status_code == 401
        ok = {"Authorization": "Bearer k-beta"}
        assert c.get("/v1/info", headers=ok).json()["auth"] is True
        job = c.post("/v1/jobs", content=ndjson(records(1)), headers={**NDJSON, **ok}).json()
        wait_job(c, job["id"], headers=ok)
        # The viewer: a sign-in page (401), then a cookie that is not the key.
        page = c.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 401 and 'name="key"' in page.text
        bad = c.post("/login?next=/", data={"key": "nope"}, follow_redirects=False)
        assert bad.status_code == 401
        for target in ("//evil.example", "https://evil.example", "/\\evil.example"):
            r = c.post("/login", params={"next": target}, data={"key": "k-alpha"}, follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == "/"
        good = c.post(f"/login?next=/jobs/{job['id']}", data={"key": "k-alpha"}, follow_redirects=False)
        assert good.status_code == 303 and good.headers["location"] == f"/jobs/{job['id']}"
        cookie = good.cookies.get("judge_session")
        assert cookie and "k-alpha" not in cookie
        c.cookies.set("judge_session", cookie)
        assert c.get("/").status_code == 200
        assert c.get("/v1/jobs").status_code == 200
        c.cookies.clear()
        assert c.get("/v1/jobs").status_code == 401
    db = sqlite3.connect(tmp_path / "server.sqlite")
    dump = "\n".join(db.iterdump())
    db.close()
    assert "k-alpha" not in dump and "k-beta" not in dump


def test_viewer_assets_are_local(client: Any) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "charset=utf-8" in page.headers["content-type"]
    html = page.text + client.get("/static/app.js").text + client.get("/static/app.css").text
    assert "http://" not in html and "https://" not in html  # nothing fetched from the network
    assert client.get("/jobs/anything").status_code == 200


class _FirstQueryLast(RuleBackend):
    """Yes iff ``[相关]``; every call of query 0 waits until both calls of query 1 have been
    answered, so query 1 finishes (and is written) first."""

    def __init__(self) -> None:
        keyword = RuleBackend.keyword(MARKER)
        super().__init__(keyword.rule, name="fake:first-query-last")
        self.second_answered = 0
        self.second_done = threading.Event()

    async def complete(self, request: ChatRequest) -> Completion:
        text = "\n".join(m.content for m in request.messages if m.role == "user")
        if "查询0的" in text:
            deadline = time.monotonic() + 30  # bounded: the test fails rather than hangs
            while not self.second_done.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        out = await super().complete(request)
        if "查询1的" in text:
            self.second_answered += 1
            if self.second_answered == 2:
                self.second_done.set()
        return out


def test_results_come_in_input_order_not_finishing_order(tmp_path: Path) -> None:
    backend = _FirstQueryLast()
    with TestClient(app_for(tmp_path, backend=backend)) as client:
        job = submit(client, records(3, n_passages=2)).json()
        assert wait_job(client, job["id"])["status"] == "done"
        assert backend.second_done.is_set()
        written = (tmp_path / "jobs" / job["id"] / "output.jsonl").read_text(encoding="utf-8")
        finished = [json.loads(x)["id"] for x in written.splitlines()]
        assert finished.index("q001") < finished.index("q000")  # the file: as they finished
        url = f"/v1/jobs/{job['id']}/results"
        assert [json.loads(x)["id"] for x in client.get(url).text.splitlines()] == ["q000", "q001", "q002"]
        page = client.get(f"{url}?offset=1&limit=1")
        assert [json.loads(x)["id"] for x in page.text.splitlines()] == ["q001"]


def test_result_lines_sort_by_their_input_line() -> None:
    from judge.server._job_files import in_input_order

    lines = [b'{"id": "b", "line": 7}', b'{"id": "x"}', b'{"id": "a", "line": 2}', b'{"id": "c", "line": 7}']
    assert [json.loads(x)["id"] for x in in_input_order(lines)] == ["a", "b", "c", "x"]
    assert in_input_order([]) == []
