"""``qrels:FILE[:level]``: a judge that answers from known labels. Spec resolution, binary at
a level, graded, probabilities, unlabelled and ambiguous pairs, ids travelling in the
request, and whole commands (score, compare-systems) run with it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import judge
from judge.backends import ChatRequest, ConfigurationError, Message, QrelsBackend, make_backend
from judge.cli import main
from judge.judging import JudgeConfig, Passage, judge_query

QRELS = "q1 0 d1 0\nq1 0 d2 1\nq1 0 d3 2\nq1 0 d4 3\nq2 0 d1 3\nq2 0 d9 1\nq 3 0 d5 2\n"


@pytest.fixture
def qrels(tmp_path: Path) -> Path:
    path = tmp_path / "labels.qrels"
    path.write_text(QRELS.replace("q 3", "q3"), encoding="utf-8")
    return path


def _verdicts(backend: Any, qid: str, ids: list[str], config: JudgeConfig) -> list[Any]:
    passages = [Passage(f"text of {d}", d, query_id=qid) for d in ids]
    result = asyncio.run(judge_query(backend, "a query", passages, config))
    return result.verdicts


def test_spec_resolves_through_the_one_factory_with_level(qrels: Path) -> None:
    backend = make_backend(f"qrels:{qrels}:2")
    inner = backend.inner
    assert isinstance(inner, QrelsBackend)
    assert (inner.level, inner.path) == (2, qrels)
    assert backend.name == "qrels:labels.qrels:2"
    assert "level=2" in backend.fingerprint and "sha256=" in backend.fingerprint
    assert make_backend(f"qrels:{qrels}").inner.level == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [("qrels:", "needs a file"), ("qrels:/no/such/file", "does not exist")],
)
def test_bad_specs_name_the_backend_field(spec: str, needle: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        make_backend(spec)
    assert info.value.field == "backend"
    assert needle in str(info.value)


def test_binary_at_level_one_and_two(qrels: Path) -> None:
    ids = ["d1", "d2", "d3", "d4"]  # grades 0 1 2 3 under q1
    one = _verdicts(QrelsBackend(qrels, 1), "q1", ids, JudgeConfig(mode="binary"))
    two = _verdicts(QrelsBackend(qrels, 2), "q1", ids, JudgeConfig(mode="binary"))
    assert [v.verdict for v in one] == ["no", "yes", "yes", "yes"]
    assert [v.verdict for v in two] == ["no", "no", "yes", "yes"]
    assert all(v.attempts == 1 and v.backend == "qrels:labels.qrels" for v in one)


def test_the_same_docno_answers_per_query(qrels: Path) -> None:
    backend = QrelsBackend(qrels)
    assert [v.verdict for v in _verdicts(backend, "q1", ["d1"], JudgeConfig(mode="binary"))] == ["no"]
    assert [v.verdict for v in _verdicts(backend, "q2", ["d1"], JudgeConfig(mode="binary"))] == ["yes"]
    # Without a query id: a docno labelled under one query is answered, one under two is not.
    assert backend.label(None, "d9") == 1
    assert backend.label(None, "d1") is None
    # Ids are TREC tokens: whitespace in a query id becomes "_" as in pools and runs.
    assert backend.label("q 3", "d5") is None and backend.label("q3", "d5") == 2


def test_graded_mode_answers_the_grade(qrels: Path) -> None:
    vs = _verdicts(QrelsBackend(qrels, 3), "q1", ["d1", "d2", "d3", "d4"], JudgeConfig(mode="graded"))
    assert [v.grade for v in vs] == [0, 1, 2, 3]
    # Graded: the judge's grade threshold (default 2) decides yes, not the spec's level.
    assert [v.verdict for v in vs] == ["no", "no", "yes", "yes"]


def test_probability_mode_gives_p_yes_one_or_zero(qrels: Path) -> None:
    vs = _verdicts(QrelsBackend(qrels, 2), "q1", ["d2", "d3"], JudgeConfig(mode="binary", probability=True))
    assert [(v.verdict, v.p_yes) for v in vs] == [("no", 0.0), ("yes", 1.0)]
    graded = _verdicts(QrelsBackend(qrels), "q1", ["d3"], JudgeConfig(mode="graded", probability=True))
    assert graded[0].grade == 2 and graded[0].expected_grade == 2.0


def test_unlabelled_pair_is_unjudged_with_the_reason_in_raw(qrels: Path) -> None:
    backend = QrelsBackend(qrels)
    prob = _verdicts(backend, "q1", ["d9"], JudgeConfig(mode="binary", probability=True))[0]
    assert prob.verdict == "unjudged" and prob.attempts == 1
    assert "no label for query 'q1' passage 'd9'" in (prob.raw or "")
    gen = _verdicts(backend, "q1", ["zz"], JudgeConfig(mode="binary"))[0]
    assert gen.verdict == "unjudged" and "no label" in (gen.raw or "")


def test_a_request_without_ids_is_unjudged_not_guessed(qrels: Path) -> None:
    request = ChatRequest(messages=(Message("user", "judge d2"),), candidates=("yes", "no"))
    completion = asyncio.run(QrelsBackend(qrels).complete(request))
    assert completion.token_probs == {"yes": 0.0, "no": 0.0}
    assert "names no passage" in completion.text


def test_ids_travel_in_meta_and_stay_out_of_the_cache_key(qrels: Path) -> None:
    request = ChatRequest(messages=(Message("user", "x"),), meta={"query_id": "q1", "passage_id": "d4"})
    assert "meta" not in request.cache_params()
    reply = asyncio.run(QrelsBackend(qrels).complete(request))
    assert json.loads(reply.text)["verdict"] == "yes"


def test_cache_keys_depend_on_the_labels_and_level(qrels: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.qrels"
    other.write_text("q1 0 d1 1\n", encoding="utf-8")
    params = [QrelsBackend(qrels).params(), QrelsBackend(qrels, 2).params(), QrelsBackend(other).params()]
    assert len({json.dumps(p, sort_keys=True) for p in params}) == 3


def test_score_command_with_the_qrels_judge(qrels: Path, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    rows = [
        {
            "id": "q1",
            "query": "first",
            "retrieval_context": [{"id": d, "text": f"t{d}"} for d in ("d4", "d1")],
        },
        {"id": "q2", "query": "second", "retrieval_context": [{"id": "d1", "text": "td1"}]},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code = main(
        ["score", str(data), "-o", str(out), "--backend", f"qrels:{qrels}", "--mode", "binary", "--no-cache"]
    )
    assert code == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [[v["verdict"] for v in r["verdicts"]] for r in records] == [["yes", "no"], ["yes"]]


def test_compare_systems_with_the_qrels_judge_matches_the_labels(qrels: Path, tmp_path: Path) -> None:
    def system(order: list[str]) -> Path:
        path = tmp_path / f"{'-'.join(order)}.jsonl"
        row = {"id": "q1", "query": "first", "retrieval_context": [{"id": d, "text": f"t{d}"} for d in order]}
        path.write_text(json.dumps(row) + "\n", encoding="utf-8")
        return path

    report = judge.compare_systems(
        {"a": system(["d1", "d2"]), "b": system(["d4", "d1"])},
        tmp_path / "report",
        backend=f"qrels:{qrels}:2",
        mode="binary",
        cache=False,
        resamples=200,
        stability_resamples=0,
        measures=["P_1"],
    )
    assert report.systems["a"].measures["P_1"] == 0.0  # d1 grade 0
    assert report.systems["b"].measures["P_1"] == 1.0  # d4 grade 3 >= 2
    assert report.pool.judged == 3 and report.pool.unjudged == 0
