"""Reasons on request in the service: a comparison job judges verdicts and P(yes) first, asks
reasons only for the pairs its report shows and its review queue's first items, and any other
pair's reason when the review page opens it (one call, kept, never twice); the verdicts are
those of a job that asked every reason. Fakes and in-process ASGI only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from _helpers import passage_of  # noqa: E402
from _server import MARKER, make_config, records  # noqa: E402

from judge.backends import ChatRequest, PermanentError, RuleBackend, TransientError  # noqa: E402
from judge.server import _asked_reasons, create_app  # noqa: E402

# one query; every passage relevant (so every P(yes) is the same 0.9 and the review queue's
# order is the passages' rank weight: a rank-1 passage of one system only comes first)
A = ["x1", "x2", "x3", "x4", "c1", "c2", "c3", "c4", "c5"]
B = ["y1", "y2", "y3", "c1", "c2", "c3", "c4", "c5"]
POOL = 12  # x1-x4, y1-y3, c1-c5
OPTIONS = {"top_queries": 1, "top_passages": 1, "seed": 7, "resamples": 200, "stability_resamples": 50}


def systems() -> dict[str, list[dict[str, Any]]]:
    def ranking(docnos: list[str]) -> list[dict[str, Any]]:
        context = [{"id": d, "text": f"{MARKER} 问题的相关段落 {d}"} for d in docnos]
        return [{"id": "q0", "query": "问题 0", "retrieval_context": context}]

    return {"A": ranking(A), "B": ranking(B)}


class Explaining:
    """The keyword judge as the embedded one looks to a comparison: it prefers probabilities
    (so reasons are asked after the verdicts). Counts the probability passes and the
    explaining generations (by passage); ``fail`` makes the explaining generation raise."""

    def __init__(self) -> None:
        self.passes = 0
        self.explained: list[str] = []
        self.fail: type[Exception] | None = None
        keyword = RuleBackend.keyword(MARKER, text_of=passage_of)

        def rule(request: ChatRequest) -> Any:
            if request.candidates is not None:
                self.passes += 1
            else:
                self.explained.append(passage_of(request).rsplit(" ", 1)[-1])
                if self.fail is not None:
                    raise self.fail("the reason's generation failed")
            return keyword.rule(request)

        async def yields(_: float) -> None:  # no time: lets other requests run in between
            for _ in range(3):
                await asyncio.sleep(0)

        self.backend = RuleBackend(
            rule, name="fake:explaining", prefers_probabilities=True, latency_s=0.001, sleep=yields
        )


async def _done(client: Any, job_id: str) -> dict[str, Any]:
    for _ in range(3000):  # bounded: each turn a request and a 10 ms pause
        job: dict[str, Any] = (await client.get(f"/v1/jobs/{job_id}")).json()
        if job["status"] in ("done", "failed", "cancelled"):
            return job
        await asyncio.sleep(0.01)
    raise AssertionError(f"job {job_id} did not finish")


def _serve(tmp: Path, fake: Explaining, scenario: Any, key: str | None = None) -> Any:
    app = create_app(make_config(tmp, backend=fake.backend, keys=[key] if key else []))
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def main() -> Any:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:8000", headers=headers
            ) as client:
                return await asyncio.wait_for(scenario(client), 120)

    return asyncio.run(main())


async def _compare(client: Any, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    r = await client.post(
        "/v1/compare", json={"systems": systems(), "options": {**OPTIONS, **(options or {})}}
    )
    assert r.status_code == 202, r.text
    job = await _done(client, r.json()["id"])
    assert job["status"] == "done", job.get("error")
    return job["id"], job


async def _pooled(client: Any, job_id: str) -> dict[tuple[str, str], tuple[str, float, str]]:
    text = (await client.get(f"/v1/jobs/{job_id}/results")).text
    out = {}
    for line in text.splitlines():
        rec = json.loads(line)
        for d, v in zip(rec["docnos"], rec["verdicts"], strict=True):
            out[(rec["id"], d)] = (v["verdict"], v["p_yes"], v["reason"])
    return out


async def _queue(client: Any, job_id: str) -> dict[str, Any]:
    r = await client.get(f"/v1/jobs/{job_id}/queue?limit=100")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def test_a_comparison_asks_reasons_only_for_the_report_and_the_queue_head(tmp_path: Path) -> None:
    fake = Explaining()

    async def scenario(client: Any) -> None:
        job_id, job = await _compare(client)
        # The report shows each system's top passage of the differing query: x1 (A), y1 (B).
        # The queue's first two are those same two (rank 1 in one list only: weight 2, the
        # most of any), so its first 10 add 8: 10 reasons, not one per pooled pair (12).
        assert _asked_reasons.QUEUE_REASONS == 10
        assert len(fake.explained) == 10 and len(set(fake.explained)) == 10
        assert {"x1", "y1"} <= set(fake.explained)
        # each reason costs its probability pass again (the explaining config's cache key)
        assert fake.passes == POOL + 10
        assert job["summary"]["reasons"] == {"queue": 8, "calls": 16}
        assert job["summary"]["pool"]["calls"] == POOL + 2 * 2
        diff = (await client.get(f"/v1/jobs/{job_id}/differences")).json()
        shown = [p for q in diff["queries"] for s in q["systems"] for p in s["passages"]]
        assert [p["docno"] for p in shown] == ["x1", "y1"] and all(p["reason"] for p in shown)
        # The pool's verdicts carry no reason; the queue shows the 10 asked beside their verdicts.
        assert all(reason == "" for _, _, reason in (await _pooled(client, job_id)).values())
        queue = await _queue(client, job_id)
        assert queue["reasons_on_request"] is True and len(queue["items"]) == POOL
        with_reason = [it["docno"] for it in queue["items"] if it["reason"]]
        assert sorted(with_reason) == sorted(fake.explained)
        assert [it["docno"] for it in queue["items"][:2]] == ["x1", "y1"]

    _serve(tmp_path, fake, scenario)


def test_opening_a_pair_asks_its_reason_once_and_keeps_it(tmp_path: Path) -> None:
    fake = Explaining()

    async def scenario(client: Any) -> None:
        job_id, _ = await _compare(client)
        before = await _pooled(client, job_id)
        asked = len(fake.explained)
        missing = [it for it in (await _queue(client, job_id))["items"] if not it["reason"]]
        assert len(missing) == POOL - 10
        it = missing[0]
        body = {"query_id": it["query_id"], "docno": it["docno"]}
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json=body)
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["reason"] == "段落包含回答查询所需的信息。" and got["calls"] == 2  # its pass + reason
        assert got["verdict"] == "yes" and got["p_yes"] == pytest.approx(0.9)
        assert got["asked"]["asked_by"] == "anonymous" and got["asked"]["asked_at"]  # the server's
        assert fake.explained[asked:] == [it["docno"]]
        # Reopening costs nothing; the queue now shows the reason; the verdicts did not move.
        again = (await client.post(f"/v1/jobs/{job_id}/reasons", json=body)).json()
        assert again["reason"] == got["reason"] and again["calls"] == 0 and again["asked"] == got["asked"]
        assert len(fake.explained) == asked + 1
        shown = {x["docno"]: x["reason"] for x in (await _queue(client, job_id))["items"]}
        assert shown[it["docno"]] == got["reason"]
        assert await _pooled(client, job_id) == before
        # Two opens of another pair at once make one call.
        other = {"query_id": missing[1]["query_id"], "docno": missing[1]["docno"]}
        both = await asyncio.gather(
            *(client.post(f"/v1/jobs/{job_id}/reasons", json=other) for _ in range(2))
        )
        assert [x.status_code for x in both] == [200, 200]
        assert sorted(x.json()["calls"] for x in both) == [0, 2]
        assert fake.explained[asked + 1 :] == [other["docno"]]
        # A pair the job does not hold is named.
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json={"query_id": "q0", "docno": "zz"})
        assert r.status_code == 422 and r.json()["fields"] == ["body.docno"]

    _serve(tmp_path, fake, scenario)


def test_verdicts_are_the_same_with_reasons_on_request_and_with_every_reason(tmp_path: Path) -> None:
    on_request, every = Explaining(), Explaining()

    async def ask_all(client: Any) -> dict[tuple[str, str], tuple[str, float, str]]:
        job_id, _ = await _compare(client)
        for it in (await _queue(client, job_id))["items"]:
            body = {"query_id": it["query_id"], "docno": it["docno"]}
            assert (await client.post(f"/v1/jobs/{job_id}/reasons", json=body)).status_code == 200
        return await _pooled(client, job_id)

    async def all_reasons(client: Any) -> dict[tuple[str, str], tuple[str, float, str]]:
        job_id, _ = await _compare(client, {"explain": True})
        queue = await _queue(client, job_id)
        assert queue["reasons_on_request"] is False and all(it["reason"] for it in queue["items"])
        return await _pooled(client, job_id)

    asked = _serve(tmp_path / "a", on_request, ask_all)
    full = _serve(tmp_path / "b", every, all_reasons)
    assert len(asked) == len(full) == POOL
    assert {k: v[:2] for k, v in asked.items()} == {k: v[:2] for k, v in full.items()}
    assert len(on_request.explained) == len(every.explained) == POOL  # every pair asked, once


def test_a_failed_reason_is_a_503_or_502_naming_the_pair_and_asking_again_asks_again(tmp_path: Path) -> None:
    fake = Explaining()

    async def scenario(client: Any) -> None:
        job_id, _ = await _compare(client)
        it = next(x for x in (await _queue(client, job_id))["items"] if not x["reason"])
        body = {"query_id": it["query_id"], "docno": it["docno"]}
        fake.fail = TransientError  # no reason this time
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json=body)
        assert r.status_code == 503 and r.headers["retry-after"] == "30", r.text
        err = r.json()
        assert (err["query_id"], err["docno"]) == ("q0", it["docno"]) and it["docno"] in err["detail"]
        fake.fail = PermanentError  # the upstream refuses for good
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json=body)
        assert r.status_code == 502, r.text
        err = r.json()
        assert err["docno"] == it["docno"] and "PermanentError" in err["detail"]
        assert err["backend"] == "fake:explaining" and err["upstream_status"] is None
        fake.fail = None  # the backend is back: nothing failed was kept, so it is asked again
        tried = len(fake.explained)
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json=body)
        assert r.status_code == 200 and r.json()["calls"] == 2 and r.json()["reason"]
        assert len(fake.explained) == tried + 1

    _serve(tmp_path, fake, scenario)


def test_no_reasons_on_request_when_the_job_set_probability(tmp_path: Path) -> None:
    fake = Explaining()

    async def scenario(client: Any) -> None:
        job_id, job = await _compare(client, {"probability": True})
        assert fake.explained == [] and "reasons" not in job["summary"]
        queue = await _queue(client, job_id)
        assert queue["reasons_on_request"] is False
        it = queue["items"][0]
        r = await client.post(
            f"/v1/jobs/{job_id}/reasons", json={"query_id": it["query_id"], "docno": it["docno"]}
        )
        assert r.status_code == 409 and "explain" in r.json()["detail"] and fake.explained == []

    _serve(tmp_path, fake, scenario)


def test_a_pair_missing_from_the_pool_input_is_explained_from_the_systems_records(tmp_path: Path) -> None:
    """An adaptive comparison judges in rounds and writes no ``pool.input.jsonl``: the pair's
    text then comes from the systems' saved records (the same text, so the same reason)."""
    fake = Explaining()

    async def scenario(client: Any) -> None:
        job_id, _ = await _compare(client)
        (tmp_path / "jobs" / job_id / "pool.input.jsonl").unlink()
        it = next(x for x in (await _queue(client, job_id))["items"] if not x["reason"])
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json={"query_id": "q0", "docno": it["docno"]})
        assert r.status_code == 200 and r.json()["calls"] == 2, r.text
        assert r.json()["reason"] == "段落包含回答查询所需的信息。" and fake.explained[-1] == it["docno"]

    _serve(tmp_path, fake, scenario)


def test_who_asked_is_the_callers_principal_never_the_body(tmp_path: Path) -> None:
    fake = Explaining()

    async def scenario(client: Any) -> None:
        job_id, _ = await _compare(client)
        queue = await _queue(client, job_id)
        it = next(x for x in queue["items"] if not x["reason"])
        body = {"query_id": it["query_id"], "docno": it["docno"]}
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json={**body, "asked_by": "mallory"})
        assert r.status_code == 422 and r.json()["fields"] == ["body.asked_by"]
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["asked"]["asked_by"] == queue["signed_in"] and queue["signed_in"].startswith("key-")

    _serve(tmp_path, fake, scenario, key="reasons-test-key")


def test_a_scoring_job_has_no_reasons_on_request(tmp_path: Path) -> None:
    """A scoring job writes every reason with its verdict (the route is for comparisons)."""
    fake = Explaining()

    async def scenario(client: Any) -> None:
        r = await client.post("/v1/jobs", json={"records": records(1, 2)})
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        assert (await _done(client, job_id))["status"] == "done"
        queue = await _queue(client, job_id)
        assert queue["reasons_on_request"] is False and all(it["reason"] for it in queue["items"])
        r = await client.post(f"/v1/jobs/{job_id}/reasons", json={"query_id": "q0", "docno": "d0"})
        assert r.status_code == 409 and "not a comparison" in r.json()["detail"]

    _serve(tmp_path, fake, scenario)
