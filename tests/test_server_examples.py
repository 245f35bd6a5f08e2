"""A service scoring job with ``examples``: like ``judge score --labels store
--examples N``, a passage the label store labels when the job starts takes its label without
a call, so it is never its own example; the job page shows it as decided by people, and
agreement and calibration leave it out. A job without ``examples`` is unchanged. In process,
on a prompt-recording fake whose P(yes) is written in each passage (``tests/_review.py``)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _review import TABLE, records
from _server import app_for, wait_job
from fastapi.testclient import TestClient

from judge.backends import ChatRequest, RuleBackend
from judge.batch import run_spec
from judge.server import _job_examples, _job_files
from judge.store import Label, LabelSet, LabelStore

OPTIONS = {"probability": True, "p_yes_threshold": 0.5, "k": [3]}
_PASSAGE = re.compile(r"<passage>\n(.*?)\n</passage>", re.S)
_P = re.compile(r"\[p=([01]\.\d+)\]")
_EXAMPLE = re.compile(r"<example>\n.*?段落[:：] ?(.*?)\n", re.S)
# two of q0's four passages labelled by people before the job: d0 relevant, d2 not
LABELLED = {("q0", "d0"): 1, ("q0", "d2"): 0}


def _text(qid: str, docno: str) -> str:
    query, ps, _ = TABLE[int(qid[1:])]
    j = int(docno[1:])
    return f"关于「{query}」的第{j + 1}段说明。[p={ps[j]:.2f}]"


class Recorder:
    """The fake judge of ``tests/_review.py`` (P(yes) written in the passage slot's text) that
    records the passage in each prompt's passage slot and the examples shown with it. Its
    calls wait while ``opened`` is clear (at most 30 s)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []
        self.opened = threading.Event()
        self.opened.set()

        async def sleep(_: float) -> None:
            deadline = time.monotonic() + 30
            while not self.opened.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

        def rule(request: ChatRequest) -> Any:
            user = next(m.content for m in request.messages if m.role == "user")
            passage = _PASSAGE.findall(user)[-1]
            self.seen.append((passage, _EXAMPLE.findall(user)))
            p = float(_P.findall(passage)[-1])  # the passage's own, never an example's
            if request.candidates is not None:
                return {"yes": p, "no": 1.0 - p}
            return json.dumps({"verdict": "yes" if p >= 0.5 else "no", "reason": "x"})

        self.backend = RuleBackend(
            rule,
            name="fake:p",
            model="p",
            supports_probabilities=True,
            prefers_probabilities=True,
            latency_s=0.001,
            sleep=sleep,
        )


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def client(tmp_path: Path, recorder: Recorder) -> Iterator[Any]:
    with LabelStore(tmp_path / "labels.sqlite") as store:  # the server's label store (beside its db)
        for (qid, docno), value in LABELLED.items():
            store.put(Label(qid=qid, docno=docno, label=value, reviewer="alice", comment="by hand"))
    with TestClient(app_for(tmp_path, backend=recorder.backend)) as c:
        yield c


def run_job(client: Any, **options: Any) -> str:
    r = client.post("/v1/jobs", json={"records": records(), "options": {**OPTIONS, **options}})
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    assert wait_job(client, job_id)["status"] == "done"
    return job_id


def results(client: Any, job_id: str) -> dict[str, dict[str, Any]]:
    text = client.get(f"/v1/jobs/{job_id}/results").text
    return {r["id"]: r for r in (json.loads(x) for x in text.splitlines() if x.strip())}


def label(client: Any, job_id: str, qid: str, docno: str, value: Any) -> None:
    body = {"query_id": qid, "docno": docno, "label": value, "reviewer": "bob"}
    assert client.post(f"/v1/jobs/{job_id}/labels", json=body).status_code == 201


def test_a_job_with_examples_decides_labelled_passages_without_a_call(
    client: Any, recorder: Recorder, tmp_path: Path
) -> None:
    job_id = run_job(client, examples=2)
    labelled = {_text(q, d) for q, d in LABELLED}
    judged = [p for p, _ in recorder.seen]
    # 6 queries x 4 passages, less the 2 labelled ones: one call each, none in a passage slot
    assert len(judged) == 22 and not labelled & set(judged)
    assert set(judged) == {_text(f"q{i}", f"d{j}") for i in range(6) for j in range(4)} - labelled
    # q0's other passages see both labelled passages as examples; other queries have none
    shown = {p: ex for p, ex in recorder.seen}
    for j in (1, 3):
        assert set(shown[_text("q0", f"d{j}")]) == labelled
    assert all(not ex for p, ex in recorder.seen if "小狗贫血" not in p)
    # the records carry the labels, decided by people over a judge side never asked
    q0 = results(client, job_id)["q0"]["verdicts"]
    for j, value in ((0, 1), (2, 0)):
        v = q0[j]
        assert v["source"] == "human" and v["reviewer"] == "alice" and v["reason"] == "by hand"
        assert v["verdict"] == ("yes" if value else "no") and v["attempts"] == 0
        assert v["replaced"]["verdict"] == "unjudged" and v["replaced"]["p_yes"] is None
    assert q0[1]["source"] == "judge" and q0[1]["p_yes"] == pytest.approx(0.10)
    # the job page: 2 passages decided by people, none of them changed a judge's verdict
    page = client.get(f"/v1/jobs/{job_id}").json()
    assert page["review"]["human"] == 2 and page["review"]["changed"] == 0
    assert page["review"]["queue"] == 22
    human = page["summary"]["human_labels"]
    assert (human["passages"], human["changed"], human["reviewers"]) == (2, 0, ["alice"])
    assert page["summary"]["examples"]["labelled_passages"] == 2
    assert page["summary"]["this_run"]["passages_asked"] == 22
    # the job's snapshot of the labels it decided by
    snap = (tmp_path / "jobs" / job_id / _job_examples.EXAMPLE_LABELS).read_text(encoding="utf-8")
    assert sorted((x["qid"], x["docno"], x["label"]) for x in map(json.loads, snap.splitlines())) == [
        ("q0", "d0", 1),
        ("q0", "d2", 0),
    ]
    # later labels show on the page: bob's newer label of d2 is shown; alice's d0 retracted
    # leaves d0 unjudged (never asked) and back in the review queue
    label(client, job_id, "q0", "d2", 1)
    review = client.app.state.judge.review
    review.store.retract("q0", "d0", "alice")
    review.bump()
    q0 = results(client, job_id)["q0"]["verdicts"]
    assert (q0[2]["verdict"], q0[2]["reviewer"]) == ("yes", "bob")
    assert q0[0]["source"] == "judge" and q0[0]["verdict"] == "unjudged" and q0[0]["attempts"] == 0
    queue = client.get(f"/v1/jobs/{job_id}/queue?limit=24").json()
    assert queue["total"] == 23 and ("q0", "d0") in {(it["query_id"], it["docno"]) for it in queue["items"]}


def test_agreement_and_calibration_leave_the_decided_passages_out(client: Any) -> None:
    job_id = run_job(client, examples=2)
    data = client.get(f"/v1/jobs/{job_id}/agreement").json()
    assert data["overall"]["n"] == 0 and data["human"] == 2  # never judged: nothing to agree on
    # a label on a judged passage counts: q1/d0, judge no at P(yes) 0.49, people yes
    label(client, job_id, "q1", "d0", 1)
    overall = client.get(f"/v1/jobs/{job_id}/agreement").json()["overall"]
    assert overall["n"] == 1 and overall["confusion"]["matrix"] == [[0, 0], [1, 0]]
    cal = client.post(f"/v1/jobs/{job_id}/calibrate", json={"dry_run": True, "folds": 2})
    # calibration counts only the judged passage's P(yes) (too few to refit: 422 saying so)
    assert cal.status_code == 422 and "got 1" in cal.text


def test_a_job_without_examples_is_unchanged(client: Any, recorder: Recorder, tmp_path: Path) -> None:
    job_id = run_job(client)
    judged = [p for p, ex in recorder.seen]
    assert len(judged) == 24 and {_text(q, d) for q, d in LABELLED} <= set(judged)
    assert all(not ex for _, ex in recorder.seen)
    assert not (tmp_path / "jobs" / job_id / "examples.labels.jsonl").exists()  # no snapshot
    # the labels override the judge's verdicts on the page, and agreement counts both
    q0 = results(client, job_id)["q0"]["verdicts"]
    assert q0[0]["source"] == "human" and q0[0]["replaced"]["p_yes"] == pytest.approx(0.52)
    data = client.get(f"/v1/jobs/{job_id}/agreement").json()
    # q0/d0: judge yes (0.52), people yes; q0/d2: judge yes (0.95), people no
    assert data["overall"]["n"] == 2 and data["overall"]["confusion"]["matrix"] == [[0, 1], [0, 1]]
    assert "examples" not in client.get(f"/v1/jobs/{job_id}").json()["summary"]


def test_a_label_given_while_the_job_runs_leaves_its_passage_to_the_judge(
    client: Any, recorder: Recorder, tmp_path: Path
) -> None:
    recorder.opened.clear()  # the job starts, then its calls wait
    r = client.post("/v1/jobs", json={"records": records(), "options": {**OPTIONS, "examples": 2}})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    deadline = time.monotonic() + 30
    while not recorder.backend.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.backend.requests, "the job never asked the judge"
    # while it runs, bob labels q1/d0 (P(yes) 0.49: the judge says no) as relevant
    review = client.app.state.judge.review
    review.store.put(Label(qid="q1", docno="d0", label=1, reviewer="bob"))
    review.bump()
    recorder.opened.set()
    assert wait_job(client, job_id)["status"] == "done"
    # the job decided by the labels of its start: q1/d0 was judged, and only the 2 were not
    judged = [p for p, _ in recorder.seen]
    assert _text("q1", "d0") in judged and len(judged) == 22
    snap = (tmp_path / "jobs" / job_id / _job_examples.EXAMPLE_LABELS).read_text(encoding="utf-8")
    assert len(snap.splitlines()) == 2
    v = results(client, job_id)["q1"]["verdicts"][0]  # bob's label laid over the judge's verdict
    assert v["source"] == "human" and v["replaced"]["verdict"] == "no"
    assert v["replaced"]["p_yes"] == pytest.approx(0.49)
    page = client.get(f"/v1/jobs/{job_id}").json()
    assert (page["review"]["human"], page["review"]["changed"]) == (3, 1)
    overall = client.get(f"/v1/jobs/{job_id}/agreement").json()["overall"]
    assert overall["n"] == 1 and overall["confusion"]["matrix"] == [[0, 0], [1, 0]]


def test_a_label_given_after_the_job_started_changes_nothing_it_decided(tmp_path: Path) -> None:
    """The job's labels are taken once, when it first starts, and saved in its directory:
    a resumed (or retried) job decides by and shows the examples of the same labels."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / _job_files.INPUT_NAME).write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records()), encoding="utf-8"
    )
    store: list[Label] = [
        Label(qid=q, docno=d, label=v, reviewer="alice", history_id=i + 1)
        for i, ((q, d), v) in enumerate(LABELLED.items())
    ]

    def reader(ids: set[str]) -> tuple[LabelSet, int | None, int | None]:
        return LabelSet([x for x in store if x.qid in ids], source="the label store"), None, None

    spec = run_spec(None, examples=2)
    first = asyncio.run(_job_examples.job_example_bank(job_dir, spec, {}, reader))
    assert first is not None and len(first.labels) == 2 and first.bank.labelled_passages == 2
    # later: bob labels another passage and changes alice's d2 (his label is the newest)
    store += [
        Label(qid="q1", docno="d0", label=1, reviewer="bob", history_id=3),
        Label(qid="q0", docno="d2", label=1, reviewer="bob", history_id=4),
    ]
    assert len(reader({"q0", "q1"})[0]) == 3
    again = asyncio.run(_job_examples.job_example_bank(job_dir, spec, {}, reader))
    assert again is not None and len(again.labels) == 2 and again.bank.labelled_passages == 2
    assert again.labels.lookup("q1", "d0") is None
    hit = again.labels.lookup("q0", "d2")
    assert hit is not None and (hit.value, hit.label.reviewer) == (0, "alice")
    # without examples no snapshot is taken
    other = tmp_path / "other"
    other.mkdir()
    assert asyncio.run(_job_examples.job_example_bank(other, run_spec(None), {}, reader)) is None
    assert not (other / _job_examples.EXAMPLE_LABELS).exists()


def test_a_job_balances_long_yes_labels_and_never_shows_a_twin(tmp_path: Path) -> None:
    """Worked examples balanced under the token budget, through the service: three long
    relevant and three short non-relevant labels, ``examples: 4``. Each side spends its share
    of the 1,200-token budget first: one long yes (2,200 characters, 572 tokens with its query
    and wrapping) and the two shortest no (200 characters, 72 each), where the old rule showed
    2 yes and 0 no. A passage equal to a labelled one up to a trailing space is not shown it
    (the next yes instead)."""
    yes = [f"Y{i} " + "w" * 2197 for i in range(3)]
    no = [f"N{i} " + "n" * 197 for i in range(3)]
    texts = [*yes, *no, "U0 unlabelled", yes[0] + " "]
    seen: list[tuple[str, list[str]]] = []
    example = re.compile(r"<example>\n.*?Passage: (.*?)\nAnswer", re.S)

    def rule(request: ChatRequest) -> Any:
        user = next(m.content for m in request.messages if m.role == "user")
        passage = _PASSAGE.findall(user)[-1]
        seen.append((passage, example.findall(user)))
        return json.dumps({"verdict": "yes" if passage.startswith("Y") else "no", "reason": "x"})

    with LabelStore(tmp_path / "labels.sqlite") as store:
        for i in range(6):
            store.put(Label(qid="q", docno=f"d{i}", label=int(i < 3), reviewer="alice"))
    backend = RuleBackend(rule, name="fake:balance", supports_probabilities=False)
    ctx = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    body = {
        "records": [{"id": "q", "query": "which", "retrieval_context": ctx}],
        "options": {"examples": 4, "language": "en", "k": [3]},
    }
    with TestClient(app_for(tmp_path, backend=backend)) as c:
        r = c.post("/v1/jobs", json=body)
        assert r.status_code == 202, r.text
        assert wait_job(c, r.json()["id"])["status"] == "done"
    shown = dict(seen)
    assert sorted(shown) == sorted(texts[6:])
    assert shown[texts[6]] == [yes[0], no[0], no[1]]
    assert shown[texts[7]] == [yes[1], no[0], no[1]]
