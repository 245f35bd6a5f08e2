"""``sample_labels`` in a scoring job's and a comparison's options: the prediction-powered
figures in the summary/report, and a pair outside the run refused with 422 naming the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import app_for, wait_job
from fastapi.testclient import TestClient
from test_server_compare import OPTIONS, Counting, systems


def _sample(pairs: list[tuple[str, str, int]]) -> str:
    return "".join(f"{q} 0 {d} {g}\n" for q, d, g in pairs)


def test_compare_job_with_sample_labels(tmp_path: Path) -> None:
    given = systems()
    with TestClient(app_for(tmp_path / "srv", backend=Counting().backend)) as client:
        options: dict[str, Any] = {**OPTIONS, "sample_labels": _sample([("q00", "r0", 1), ("q01", "n0", 1)])}
        r = client.post("/v1/compare", json={"systems": given, "options": options})
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
        assert job["status"] == "done", job["error"]
        report = client.get(f"/v1/jobs/{job['id']}/report").json()
        a = report["systems"]["A"]["ppi"]
        assert a["labels"] == 2 and a["population"] == 48  # both pairs are A's; A pools 12 x 4
        # By hand: A's lists are r0 (yes) and three junk (no), P@5 = 1/5 in each of 12 queries.
        # q00's r0 labelled 1 agrees (effect 0); q01's n0 labelled 1 moves q01's P@5 by +1/5,
        # the mean by 1/60. Uniform sample of 2 of 48: 0.2 + 48 * mean(0, 1/60) = 0.6.
        p5 = a["precision"]["5"]
        assert p5["judge"] == pytest.approx(0.2) and p5["estimate"] == pytest.approx(0.6)
        assert p5["low"] is None  # 2 labels: no interval
        assert a["map"]["estimate"] is None and a["map"]["judge"] == pytest.approx(1.0)  # withheld
        # B (r0 r1 r2 n0 r3: P@5 0.8, N = 60) holds both pairs: r0 agrees, n0 moves q01 to 1.0:
        # 0.8 + 60 * mean(0, 0.2 / 12) = 1.3, clipped to P@5's range
        b = report["systems"]["B"]["ppi"]
        assert b["labels"] == 2 and b["population"] == 60
        assert b["precision"]["5"]["judge"] == pytest.approx(0.8) and b["precision"]["5"]["estimate"] == 1.0
        bad = {**OPTIONS, "sample_labels": _sample([("q00", "r0", 1), ("q00", "zzz", 0)])}
        r = client.post("/v1/compare", json={"systems": given, "options": bad})
        assert r.status_code == 422, r.text
        assert r.json()["line"] == 2 and r.json()["field"].startswith("options.sample_labels")


def test_score_job_with_sample_labels(tmp_path: Path) -> None:
    recs = systems()["B"]
    with TestClient(app_for(tmp_path / "srv", backend=Counting().backend)) as client:
        body = {"records": recs, "options": {"sample_labels": _sample([("q00", "r0", 0), ("q03", "r1", 1)])}}
        r = client.post("/v1/jobs", json=body)
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
        assert job["status"] == "done", job["error"]
        summary = job.get("summary") or client.get(f"/v1/jobs/{job['id']}").json()["summary"]
        ppi = summary["ppi"]
        # By hand: B's lists are yes yes yes no yes, P@5 = 0.8 in each of 12 queries (N = 60).
        # q00's r0 labelled 0 moves q00's P@5 to 0.6, the mean by -0.2 / 12 = -1/60; q03's r1
        # labelled 1 agrees. 0.8 + 60 * mean(-1/60, 0) = 0.3; the share judged relevant moves
        # alike (5 passages a list). se = 60 sqrt((1 - 2/60) var / 2), var = (1/60)^2 / 2.
        assert ppi["labels"] == 2 and ppi["population"] == 60
        for fig in (ppi["precision"]["5"], ppi["mean_score"]):
            assert fig["judge"] == pytest.approx(0.8) and fig["estimate"] == pytest.approx(0.3)
            assert fig["low"] is None and fig["coverage_ok"] is False  # fewer than 40 labels
        from judge.metrics import JudgedList, judge_measure, ppi_figure

        lists = [JudgedList.of([1, 1, 1, 0, 1], [1, 1, 1, 0, 1]) for _ in range(12)]
        pure = ppi_figure(lists, judge_measure("P_5"), [(0, 0), (3, 1)], [0, 1], [0, 1], population=60)
        assert pure.estimate == pytest.approx(ppi["precision"]["5"]["estimate"])
        r = client.post("/v1/jobs", json={"records": recs, "options": {"sample_labels": "q00 0 nope 1\n"}})
        assert r.status_code == 422 and r.json()["line"] == 1 and r.json()["field"] == "options.sample_labels"
