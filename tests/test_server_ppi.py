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
        assert a["labels"] == 2  # both pairs are A's
        assert a["precision"]["5"]["estimate"] is not None
        bad = {**OPTIONS, "sample_labels": _sample([("q00", "r0", 1), ("q00", "zzz", 0)])}
        r = client.post("/v1/compare", json={"systems": given, "options": bad})
        assert r.status_code == 422, r.text
        assert r.json()["line"] == 2 and r.json()["field"].startswith("options.sample_labels")


def test_score_job_with_sample_labels(tmp_path: Path) -> None:
    recs = systems()["B"]
    with TestClient(app_for(tmp_path / "srv", backend=Counting().backend)) as client:
        body = {"records": recs, "options": {"sample_labels": _sample([("q00", "r0", 0), ("q03", "n0", 1)])}}
        r = client.post("/v1/jobs", json=body)
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
        assert job["status"] == "done", job["error"]
        summary = job.get("summary") or client.get(f"/v1/jobs/{job['id']}").json()["summary"]
        assert summary["ppi"]["labels"] == 2 and summary["ppi"]["precision"]["5"]["estimate"] is not None
        r = client.post("/v1/jobs", json={"records": recs, "options": {"sample_labels": "q00 0 nope 1\n"}})
        assert r.status_code == 422 and r.json()["line"] == 1 and r.json()["field"] == "options.sample_labels"
