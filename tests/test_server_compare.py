"""``POST /v1/compare``: a pooled comparison of systems as a durable job, in process, on
deterministic fake judges. The report must be what ``judge.compare_systems`` writes for the
same inputs, with one judge call per unique (query, passage) pair."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _helpers import passage_of
from _server import MARKER, app_for, ndjson, wait_job
from fastapi.testclient import TestClient

import judge
from judge.backends import ChatRequest, RuleBackend

OPTIONS = {"seed": 7, "resamples": 400, "stability_resamples": 50}


class Counting:
    """The keyword judge of the server tests (yes iff ``[相关]``), recording every passage asked."""

    def __init__(self, **kwargs: Any) -> None:
        self.asked: list[str] = []
        keyword = RuleBackend.keyword(MARKER, text_of=passage_of)

        def rule(request: ChatRequest) -> Any:
            self.asked.append(passage_of(request))
            return keyword.rule(request)

        self.backend = RuleBackend(rule, name="fake:keyword", **kwargs)


def systems() -> dict[str, list[dict[str, Any]]]:
    """The issue's case: per query four relevant passages exist; ``A`` finds one (at rank 1)
    and fills with junk, ``B`` finds all four. Two passages per query are in both lists."""
    a, b = [], []
    for i in range(12):
        rel = [{"id": f"r{j}", "text": f"{MARKER} 问题{i}的相关段落{j}"} for j in range(4)]
        junk = [{"id": f"n{j}", "text": f"问题{i}的无关段落{j}，今天天气晴朗"} for j in range(3)]
        a.append({"id": f"q{i:02d}", "query": f"问题 {i}", "retrieval_context": [rel[0], *junk]})
        b.append({"id": f"q{i:02d}", "query": f"问题 {i}", "retrieval_context": [*rel[:3], junk[0], rel[3]]})
    return {"A": a, "B": b}


def unique_pairs(given: dict[str, list[dict[str, Any]]]) -> int:
    return len({(r["id"], p["id"]) for recs in given.values() for r in recs for p in r["retrieval_context"]})


def _strip(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what names a place on disk."""
    out = json.loads(json.dumps(report))
    for s in out["systems"].values():
        s.pop("path")
    out["conventions"].pop("human_labels")
    return out


def test_compare_job_end_to_end_equals_compare_systems(tmp_path: Path) -> None:
    given = systems()
    fake = Counting()
    with TestClient(app_for(tmp_path / "srv", backend=fake.backend)) as client:
        body = {"systems": {"A": given["A"], "B": ndjson(given["B"]).decode()}, "options": OPTIONS}
        r = client.post("/v1/compare", json=body)
        assert r.status_code == 202, r.text
        created = r.json()
        assert created["status"] == "queued" and created["kind"] == "compare"
        assert created["rejects"] == [] and r.headers["Location"] == f"/v1/jobs/{created['id']}"
        job_id = created["id"]
        job = wait_job(client, job_id)
        assert job["status"] == "done", job["error"]
        n = unique_pairs(given)
        assert n == 12 * 7
        # progress counts come from the pool: every query, every unique pair once
        assert (job["queries_total"], job["queries_done"]) == (12, 12)
        assert (job["passages_total"], job["passages_done"], job["unjudged"]) == (n, n, 0)
        s = job["summary"]
        assert s["best"] == "B" and s["baseline"] == "A" and s["primary"] == "map"
        assert s["pool"]["calls"] == n and s["pool"]["calls_saved"] == 12 * 2
        assert s["verdicts"] == {"yes": 48, "no": 36}
        # one call per unique pair
        assert len(fake.asked) == n and len(set(fake.asked)) == n

        report = client.get(f"/v1/jobs/{job_id}/report").json()
        assert report["schema"] == "judge.systems/1"
        md = client.get(f"/v1/jobs/{job_id}/report?format=md")
        assert md.headers["content-type"].startswith("text/markdown") and "| A |" in md.text
        html = client.get(f"/v1/jobs/{job_id}/report?format=html")
        csp = html.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src" not in csp and "script-src" not in csp
        assert csp.endswith("sandbox") and html.headers["x-content-type-options"] == "nosniff"
        assert "Queries where the systems differ most" in html.text

        pooled = [json.loads(x) for x in client.get(f"/v1/jobs/{job_id}/results").text.splitlines()]
        assert len(pooled) == 12 and sum(r["n_passages"] for r in pooled) == n
        page = client.get(f"/v1/jobs/{job_id}/results?offset=10&limit=5")
        assert page.headers["X-Total-Count"] == "12" and len(page.text.splitlines()) == 2
        qrels = client.get(f"/v1/jobs/{job_id}/results?format=qrels").text
        run_b = client.get(f"/v1/jobs/{job_id}/results?format=run&system=B").text
        r = client.get(f"/v1/jobs/{job_id}/results?format=run")
        assert r.status_code == 422 and r.json()["fields"] == ["query.system"]

        diff = client.get(f"/v1/jobs/{job_id}/differences").json()
        assert diff["measure"] == "map" and len(diff["queries"]) == 10  # top_queries default
        first = diff["queries"][0]
        assert [s["name"] for s in first["systems"]] == ["A", "B"]
        b_top = first["systems"][1]["passages"]
        assert [p["verdict"] for p in b_top] == ["yes", "yes", "yes", "no", "yes"]
        assert b_top[0]["reason"] == "段落包含回答查询所需的信息。" and MARKER in b_top[0]["text"]
        assert first["systems"][0]["value"] == pytest.approx(0.25)  # A: 1 of 4 relevant, at rank 1

        metrics = client.get("/metrics").text
        assert 'judge_jobs_by_kind{kind="compare",status="done"} 1.0' in metrics
        assert 'judge_jobs_submitted_total{kind="compare"} 1.0' in metrics
        assert 'judge_jobs_finished_by_kind_total{kind="compare",status="done"} 1.0' in metrics

    # The same inputs through the Python API: the same report, the same number of calls.
    paths = {}
    for name, recs in given.items():
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_bytes(ndjson(recs))
    ref_fake = Counting()
    zh = judge.JudgeConfig(language="zh")  # the test server's default language
    ref = judge.compare_systems(
        paths, tmp_path / "ref", backend=ref_fake.backend, config=zh, cache=False, **OPTIONS
    )
    assert _strip(report) == _strip(ref.to_json())
    assert len(ref_fake.asked) == n
    mapc = next(c for c in report["comparisons"] if c["measure"] == "map")
    assert mapc["system"] == "B" and mapc["p_value"] < 0.01 and mapc["wins"] == 12
    assert qrels == (tmp_path / "ref" / "pool.qrels").read_text(encoding="utf-8")
    assert run_b == (tmp_path / "ref" / "runs" / "B.run").read_text(encoding="utf-8")


def test_bad_lines_are_named_by_system_line_and_field(tmp_path: Path) -> None:
    given = systems()
    text = ndjson(given["B"]).decode().splitlines()
    text[2] = json.dumps({"id": "q02", "retrieval_context": ["x"]})  # no query
    with TestClient(app_for(tmp_path)) as client:
        body = {"systems": {"A": given["A"], "B": "\n".join(text) + "\n"}, "options": OPTIONS}
        r = client.post("/v1/compare", json=body)
        assert r.status_code == 202, r.text
        (rej,) = r.json()["rejects"]
        assert (rej["system"], rej["line"], rej["field"]) == ("B", 3, "query")
        assert rej["path"] == "systems/B.jsonl" and str(tmp_path) not in json.dumps(rej)
        job = wait_job(client, r.json()["id"])
        assert job["status"] == "done" and job["rejected"] == 1
        assert client.get(f"/v1/jobs/{job['id']}/rejects").json()["rejects"] == [rej]
        report = client.get(f"/v1/jobs/{job['id']}/report").json()
        assert report["not_in_all_systems"] == ["q02"]

        # strict refuses before any judging, naming the system, line and field
        body["options"] = {**OPTIONS, "strict": True}
        r = client.post("/v1/compare", json=body)
        assert r.status_code == 422
        err = r.json()
        assert err["rejects"][0]["system"] == "B" and err["rejects"][0]["line"] == 3
        assert "strict" in err["detail"] and str(tmp_path) not in err["detail"]

        # malformed requests: 422 naming the field
        def fields(b: dict[str, Any]) -> list[str]:
            r = client.post("/v1/compare", json=b)
            assert r.status_code == 422, r.text
            return list(r.json().get("fields") or [r.json().get("field")])

        two = {"A": given["A"], "B": given["B"]}
        assert fields({"systems": {"A": given["A"]}}) == ["body.systems"]
        assert fields({"systems": {"A": given["A"], "a/b": given["B"]}}) == ["body.systems"]
        assert fields({"systems": two, "options": {"measures": ["runid"]}}) == ["body.options.measures"]
        assert fields({"systems": two, "options": {"mode": "ternary"}}) == ["body.options.mode"]
        assert fields({"systems": two, "options": {"depth": 0}}) == ["body.options.depth"]
        bad_qrels = {"systems": two, "options": {"qrels": "q00 0 r0 x\n"}}
        assert fields(bad_qrels)[0].startswith("options.qrels")
        empty = {"systems": {"A": given["A"], "B": "not json\n"}}
        r = client.post("/v1/compare", json=empty)
        assert r.status_code == 422 and r.json()["system"] == "B"
        assert (
            client.post("/v1/compare", content=b"x", headers={"Content-Type": "text/csv"}).status_code == 422
        )
        schema = client.get("/openapi.json").json()
        ref = schema["paths"]["/v1/compare"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert ref["$ref"].endswith("/CompareRequest")
        assert "qrels" in schema["components"]["schemas"]["CompareOptions"]["properties"]
        assert [j["kind"] for j in client.get("/v1/jobs").json()["jobs"]] == ["compare"]


def test_human_qrels_fill_the_pool_and_depth(tmp_path: Path) -> None:
    given = systems()
    fake = Counting()
    labels = "".join(f"q{i:02d} 0 r0 1\n" for i in range(12))
    with TestClient(app_for(tmp_path, backend=fake.backend)) as client:
        body = {"systems": given, "options": {**OPTIONS, "qrels": labels, "depth": 2}}
        r = client.post("/v1/compare", json=body)
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
        pool = job["summary"]["pool"]
        # depth 2: A's {r0, n0}, B's {r0, r1}: 3 unique pairs per query, r0 labelled by people
        assert (pool["unique_pairs"], pool["human_labels"], pool["judged"]) == (36, 12, 24)
        assert len(fake.asked) == 24 and job["passages_total"] == 24


def test_auth_and_idempotency(tmp_path: Path) -> None:
    given = systems()
    key = {"Authorization": "Bearer compare-key"}
    with TestClient(app_for(tmp_path, keys=["compare-key"])) as client:
        body = {"systems": given, "options": OPTIONS}
        r = client.post("/v1/compare", json=body)
        assert r.status_code == 401 and "Bearer" in r.headers["WWW-Authenticate"]
        assert not list((tmp_path / "jobs").iterdir())
        idem = {**key, "Idempotency-Key": "cmp-1"}
        first = client.post("/v1/compare", json=body, headers=idem)
        assert first.status_code == 202
        again = client.post("/v1/compare", json=body, headers=idem)
        assert again.status_code == 200 and again.headers["Idempotency-Replayed"] == "true"
        assert again.json()["id"] == first.json()["id"]
        other = client.post("/v1/compare", json={**body, "options": {**OPTIONS, "seed": 8}}, headers=idem)
        assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
        job = wait_job(client, first.json()["id"], headers=key)
        assert job["status"] == "done"
        for path in ("report", "differences", "results", "rejects"):
            assert client.get(f"/v1/jobs/{job['id']}/{path}").status_code == 401
            assert client.get(f"/v1/jobs/{job['id']}/{path}", headers=key).status_code == 200
        assert len(client.get("/v1/jobs", headers=key).json()["jobs"]) == 1


def test_score_jobs_have_no_report_and_reports_wait_for_done(tmp_path: Path) -> None:
    from _server import Gate, records

    gate = Gate(opened=False)
    with TestClient(app_for(tmp_path, backend=gate.backend)) as client:
        r = client.post("/v1/compare", json={"systems": systems(), "options": OPTIONS})
        job_id = r.json()["id"]
        wait_job(client, job_id, statuses=("running",))
        assert client.get(f"/v1/jobs/{job_id}/report").status_code == 409
        assert client.get(f"/v1/jobs/{job_id}/differences").status_code == 409
        assert client.get(f"/v1/jobs/{job_id}/results?format=qrels").status_code == 409
        gate.open()
        assert wait_job(client, job_id)["status"] == "done"
        score = client.post(
            "/v1/jobs", content=ndjson(records(1)), headers={"Content-Type": "application/x-ndjson"}
        )
        sid = score.json()["id"]
        wait_job(client, sid)
        assert client.get(f"/v1/jobs/{sid}/report").status_code == 409


def test_a_restart_resumes_the_comparison(tmp_path: Path) -> None:
    """Stopped mid-pool (the process's jobs stay ``running`` in the database), the next start
    resumes the job: what was judged comes from the pool's output and the verdict cache, so
    at most the calls in flight (concurrency 4) are repeated."""
    given = systems()
    n = unique_pairs(given)
    answered = 30

    async def stall_after(_: float) -> None:
        # the first ``answered`` calls return at once, later ones hang (bounded) until the stop
        stall_after.calls += 1  # type: ignore[attr-defined]
        if stall_after.calls > answered:  # type: ignore[attr-defined]
            await asyncio.sleep(30)

    stall_after.calls = 0  # type: ignore[attr-defined]
    first = Counting(sleep=stall_after, latency_s=0.001)
    with TestClient(app_for(tmp_path, backend=first.backend)) as client:
        job_id = client.post("/v1/compare", json={"systems": given, "options": OPTIONS}).json()["id"]
        deadline = time.monotonic() + 30
        while len(first.asked) < answered and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
    assert len(first.asked) == answered
    second = Counting()
    with TestClient(app_for(tmp_path, backend=second.backend)) as client:
        job = wait_job(client, job_id)
        assert job["status"] == "done" and job["attempts"] == 2
        assert job["summary"]["pool"]["judged"] == n and job["queries_done"] == 12
    assert n <= answered + len(second.asked) <= n + 4
    assert set(first.asked) | set(second.asked) == {
        p["text"] for recs in given.values() for r in recs for p in r["retrieval_context"]
    }
    with TestClient(app_for(tmp_path, backend=second.backend)) as client:
        report = client.get(f"/v1/jobs/{job_id}/report").json()
        assert report["systems"]["B"]["measures"]["map"] == pytest.approx(0.95)  # (1+1+1+4/5)/4
        assert report["systems"]["A"]["measures"]["map"] == pytest.approx(0.25)


def test_full_queue_and_body_limit(tmp_path: Path) -> None:
    from _server import Gate

    gate = Gate(opened=False)
    body = {"systems": systems(), "options": OPTIONS}
    with TestClient(app_for(tmp_path / "a", backend=gate.backend, queue_size=1)) as client:
        first = client.post("/v1/compare", json=body).json()["id"]
        wait_job(client, first, statuses=("running",))
        assert client.post("/v1/compare", json=body).status_code == 202  # waits in the queue
        full = client.post("/v1/compare", json=body)
        assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1
        gate.open()
        wait_job(client, first)
    with TestClient(app_for(tmp_path / "b", max_body_bytes=2000)) as client:
        r = client.post("/v1/compare", json=body)
        assert r.status_code == 413 and not list((tmp_path / "b" / "jobs").iterdir())


def test_retry_unjudged_asks_the_pool_again_and_rewrites_the_report(tmp_path: Path) -> None:
    from _server import BAD, Gate

    given = systems()
    for rec in given["B"]:
        rec["retrieval_context"][2]["text"] += " " + BAD  # r2: garbage replies until fixed
    gate = Gate()
    with TestClient(app_for(tmp_path, backend=gate.backend)) as client:
        job_id = client.post("/v1/compare", json={"systems": given, "options": OPTIONS}).json()["id"]
        job = wait_job(client, job_id)
        assert job["status"] == "done" and job["unjudged"] == 12
        before = client.get(f"/v1/jobs/{job_id}/report").json()
        assert before["pool"]["unjudged"] == 12
        assert before["systems"]["B"]["measures"]["map"] == pytest.approx(
            (1 + 1 + 3 / 5) / 3
        )  # r2 left out of the pool
        gate.fix()
        r = client.post(f"/v1/jobs/{job_id}/retry-unjudged")
        assert r.status_code == 202 and r.json()["phase"] == "retry"
        job = wait_job(client, job_id)
        assert job["status"] == "done" and job["unjudged"] == 0 and job["summary"]["pool"]["unjudged"] == 0
        after = client.get(f"/v1/jobs/{job_id}/report").json()
        assert after["systems"]["B"]["measures"]["map"] == pytest.approx(0.95)
        diff = client.get(f"/v1/jobs/{job_id}/differences").json()
        assert all(
            p["verdict"] != "unjudged" for q in diff["queries"] for s in q["systems"] for p in s["passages"]
        )


def test_compare_job_until_decided_judges_part_of_the_pool_and_reports_the_decisions(tmp_path: Path) -> None:
    given = systems()
    fake = Counting()
    with TestClient(app_for(tmp_path / "srv", backend=fake.backend)) as client:
        options = {
            **OPTIONS,
            "stability_resamples": 0,
            "measures": ["P_5"],
            "until_decided": True,
            "batch": 8,
        }
        r = client.post("/v1/compare", json={"systems": given, "options": options})
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
        assert job["status"] == "done", job["error"]
        report = client.get(f"/v1/jobs/{job['id']}/report").json()
        adaptive = report["adaptive"]
        assert adaptive["stop"] == "decided" and adaptive["pool_pairs"] == unique_pairs(given)
        assert len(fake.asked) == adaptive["judged_pairs"] < unique_pairs(given)
        (c,) = report["comparisons"]
        assert c["adaptive"]["decided"] and c["adaptive"]["decision"] == "better, significant"
        pooled = [json.loads(x) for x in client.get(f"/v1/jobs/{job['id']}/results").text.splitlines()]
        assert sum(r["n_passages"] for r in pooled) == adaptive["judged_pairs"]
        r = client.post("/v1/compare", json={"systems": given, "options": {"budget": 5}})
        assert r.status_code == 422 and "until_decided" in r.text
