"""A service scoring job with ``"adapt": true``: like ``judge score --labels store
--adapt``, the label store's labels of the job's queries (snapshotted when it starts) teach
the decision rule; the summary carries the ``adaptation`` block; refused options are a 422.
In process, on the fake of ``tests/_review.py`` whose P(yes) is written in each passage."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _review import TABLE, records
from _server import app_for, wait_job
from fastapi.testclient import TestClient

from judge.backends import ChatRequest, RuleBackend
from judge.store import Label, LabelStore

OPTIONS = {"probability": True, "p_yes_threshold": 0.5, "k": [3]}
_P = re.compile(r"\[p=([01]\.\d+)\]")


def _rule(request: ChatRequest) -> Any:
    user = next(m.content for m in request.messages if m.role == "user")
    p = float(_P.findall(user)[-1])
    if request.candidates is not None:
        return {"yes": p, "no": 1.0 - p}
    return json.dumps({"verdict": "yes" if p >= 0.5 else "no", "reason": "x"})


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # no encoder unless a test gives the fake one (the rule then reads the judge's log-odds only)
    monkeypatch.setattr("judge.systems._adapt_features.default_encoder", lambda: None)
    backend = RuleBackend(
        _rule, name="fake:p", model="p", supports_probabilities=True, prefers_probabilities=True
    )
    with LabelStore(tmp_path / "labels.sqlite") as store:
        # d0 and d1 of the first four queries: 8 labels, both kinds, on 4 queries
        for i in range(4):
            for j in range(2):
                store.put(Label(qid=f"q{i}", docno=f"d{j}", label=TABLE[i][2][j], reviewer="alice"))
    with TestClient(app_for(tmp_path, backend=backend)) as c:
        yield c


def test_a_job_with_adapt_learns_from_the_label_store(client: Any) -> None:
    r = client.post("/v1/jobs", json={"records": records(), "options": {**OPTIONS, "adapt": True}})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert wait_job(client, job_id)["status"] == "done"
    block = client.get(f"/v1/jobs/{job_id}").json()["summary"]["adaptation"]
    assert block["labels"] == 8 and block["queries"] == 4 and block["positives"] == 5
    assert block["method"] == "logistic.v2" and len(block["labels_sha256"]) == 64
    assert isinstance(block["applied"], bool) and block["reason"]
    assert block["leave_one_query_out"]["alone"]["kappa"] is not None
    text = client.get(f"/v1/jobs/{job_id}/results").text
    verdicts = [v for x in text.splitlines() if x.strip() for v in json.loads(x)["verdicts"]]
    assert all(v["p_yes"] is not None for v in verdicts)
    if block["applied"]:
        assert all(v["p_adapted"] is not None for v in verdicts)
    else:
        assert all("p_adapted" not in v for v in verdicts)


def test_a_job_with_adapt_reads_the_encoders_features_as_judge_score_does(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _fake_encoder import FakeEncoder

    r = client.post("/v1/jobs", json={"records": records(), "options": {**OPTIONS, "adapt": True}})
    assert wait_job(client, r.json()["id"])["status"] == "done"
    plain = client.get(f"/v1/jobs/{r.json()['id']}").json()["summary"]["adaptation"]
    assert plain["features"] == ["logit", "centred"]
    monkeypatch.setattr("judge.systems._adapt_features.default_encoder", FakeEncoder)
    r = client.post("/v1/jobs", json={"records": records(), "options": {**OPTIONS, "adapt": True}})
    assert wait_job(client, r.json()["id"])["status"] == "done"
    block = client.get(f"/v1/jobs/{r.json()['id']}").json()["summary"]["adaptation"]
    assert block["features"] == ["logit", "centred", "similarity", "feedback"]
    assert block["labels_sha256"] == plain["labels_sha256"]  # the same labels, one hash


def test_a_job_without_adapt_has_no_adaptation(client: Any) -> None:
    r = client.post("/v1/jobs", json={"records": records(), "options": OPTIONS})
    job_id = r.json()["id"]
    assert wait_job(client, job_id)["status"] == "done"
    assert "adaptation" not in client.get(f"/v1/jobs/{job_id}").json()["summary"]


@pytest.mark.parametrize(
    "extra",
    [{"examples": 2}, {"listwise": True, "probability": None}, {"probability": False}, {"mode": "graded"}],
)
def test_adapt_refuses_what_it_cannot_learn_from(client: Any, extra: dict[str, Any]) -> None:
    options = {**OPTIONS, "adapt": True, **extra}
    r = client.post("/v1/jobs", json={"records": records(), "options": options})
    assert r.status_code == 422 and "adapt" in r.text
