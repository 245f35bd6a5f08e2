"""scripts/eval_review_queue.py on the simulated judge (no LLM): the README's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script() -> Any:
    return load_script("eval_review_queue")


def test_queue_labels_beat_random_labels_on_the_simulated_judge(tmp_path: Path) -> None:
    from judge.store import recover_output

    mod = _script()
    out = tmp_path / "sim.judged.jsonl"
    mod.simulate_judged(ROOT / "datasets" / "sample.jsonl", out, seed=0)
    records = recover_output(out)
    assert len(records) == 14 and sum(len(r["verdicts"]) for r in records) == 84
    report = mod.evaluate(records, n=10, draws=20, seed=0)
    # the README's simulated-judge table, row "seed 0"
    assert report["ground_truth_map"] == pytest.approx(0.6367, abs=1e-4)
    assert report["none"]["abs_error"] == pytest.approx(0.0194, abs=1e-4)
    assert report["queue"]["abs_error"] == pytest.approx(0.0103, abs=1e-4)
    assert report["random"]["abs_error"] == pytest.approx(0.0178, abs=1e-4)
    assert report["queue"]["abs_error"] < report["random"]["abs_error"] < report["none"]["abs_error"]
    assert [i["audit"] for i in report["queue_items"]] == [False] * 4 + [True] + [False] * 4 + [True]


def _tiny_judged(tmp_path: Path) -> list[dict[str, Any]]:
    """Two queries of two passages, judged by a scripted P(yes): query A's judge has a false
    yes at rank 1 and a false no at rank 2 (AP 1.0, truth 0.5), query B the reverse (AP
    0.5, truth 1.0). The errors cancel in the mean: mAP 0.75 both ways."""
    import asyncio
    import json

    from judge.backends import ChatRequest, ScriptedBackend
    from judge.batch import BatchOptions, score_dataset
    from judge.judging import JudgeConfig
    from judge.store import recover_output

    p_yes = {"alpha one": 0.9, "alpha two": 0.1, "beta one": 0.1, "beta two": 0.9}
    rows = [
        {
            "id": "A",
            "query": "qa",
            "retrieval_context": [{"id": "a1", "text": "alpha one"}, {"id": "a2", "text": "alpha two"}],
            "qrels": {"a1": 0, "a2": 1},
        },
        {
            "id": "B",
            "query": "qb",
            "retrieval_context": [{"id": "b1", "text": "beta one"}, {"id": "b2", "text": "beta two"}],
            "qrels": {"b1": 1, "b2": 0},
        },
    ]
    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def reply(request: ChatRequest, _index: int) -> Any:
        prompt = next(m.content for m in request.messages if m.role == "user")
        p = p_yes[next(t for t in p_yes if t in prompt)]
        return {"yes": p, "no": 1.0 - p}

    backend = ScriptedBackend(reply, name="fake:tiny", supports_probabilities=True)
    out = tmp_path / "tiny.judged.jsonl"
    asyncio.run(
        score_dataset(
            dataset,
            out,
            backend,
            JudgeConfig(probability=True, explain=False),
            store=None,
            options=BatchOptions(progress="quiet"),
        )
    )
    return list(recover_output(out))


def test_fixing_errors_can_move_map_away_while_per_query_error_falls(tmp_path: Path) -> None:
    mod = _script()
    records = _tiny_judged(tmp_path)
    assert mod.per_query_ap(records) == {"A": (1.0, 0.5), "B": (0.5, 1.0)}
    # Judge alone: mAP 0.75 = truth's 0.75 (distance 0), per-query |AP error| (0.5 + 0.5) / 2.
    assert mod._map_with(records, [], 1) == (0.75, 0.5)
    # Label both of A's passages: A's AP becomes its truth 0.5 (error 0), B keeps 0.5 error.
    # mAP (0.5 + 0.5) / 2 = 0.5: the distance grows 0 -> 0.25 while per-query error falls 0.5 -> 0.25.
    assert mod._map_with(records, [("A", "a1"), ("A", "a2")], 1) == (0.5, 0.25)
    # Fixing one of A's errors alone: a1 -> no leaves A with no relevant passage (AP 0, error
    # 0.5; mAP (0 + 0.5) / 2); a2 -> yes makes both relevant (AP (1/1 + 2/2) / 2 = 1.0, error
    # 0.5; mAP 0.75). Neither moves the per-query error.
    assert mod._map_with(records, [("A", "a1")], 1) == (0.25, 0.5)
    assert mod._map_with(records, [("A", "a2")], 1) == (0.75, 0.5)
    report = mod.evaluate(records, n=2, draws=3, seed=0)
    assert report["ground_truth_map"] == 0.75
    assert report["none"] == {
        "map": 0.75,
        "abs_error": 0.0,
        "abs_error_sd": 0.0,
        "ap_error": 0.5,
        "ap_error_sd": 0.0,
        "runs": 1,
    }
    assert set(report["random"]) >= {"ap_error", "ap_error_sd", "abs_error", "map"}


def test_empty_and_unscored_queries_have_no_ap_error() -> None:
    mod = _script()
    assert mod.ap_error([]) == 0.0
    assert (
        mod.per_query_ap([{"id": "x", "ap": None, "ground_truth": {"ap": 1.0}}, {"id": "y", "ap": 0.5}]) == {}
    )


def _rec(qid: str, ap: float, truth: float) -> dict[str, Any]:
    return {"id": qid, "ap": ap, "ground_truth": {"ap": truth}}


def test_decision_by_judge_and_by_truth() -> None:
    mod = _script()
    a = [_rec("q1", 0.5, 0.4), _rec("q2", 0.5, 0.5), _rec("q3", 0.5, 0.6)]
    b = [_rec("q1", 0.6, 0.3), _rec("q2", 0.7, 0.3), _rec("q3", 0.8, 0.3), _rec("q4", 1.0, 1.0)]
    d = mod.decision(a, b)
    assert d["queries"] == 3  # q4 is in one system only
    # judged: differences 0.1, 0.2, 0.3: mean 0.2, sd 0.1, t = 0.2 / (0.1 / sqrt 3) = 3.4641 on 2
    # degrees; two-sided p = 1 - t / sqrt(t^2 + 2) = 1 - 3.4641 / 3.7417 = 0.07418
    assert d["judged"]["diff"] == pytest.approx(0.2) and d["judged"]["winner"] == "b"
    assert d["judged"]["p_value"] == pytest.approx(0.07418, abs=1e-5) and not d["judged"]["significant"]
    # truth: differences -0.1, -0.2, -0.3: the same t with the sign flipped, system a wins
    assert d["truth"]["diff"] == pytest.approx(-0.2) and d["truth"]["winner"] == "a"
    assert d["truth"]["p_value"] == pytest.approx(0.07418, abs=1e-5)
    assert d["same_winner_as_truth"] is False and d["same_decision_as_truth"] is False
    tie = mod.decision(a, a)
    assert tie["judged"]["winner"] == "tie" and tie["judged"]["p_value"] == 1.0
    assert tie["same_decision_as_truth"] is True


def test_a_dl19_dataset_keeps_the_runs_order_and_nists_grades(tmp_path: Path) -> None:
    data = ROOT.parent / "shared" / "data" / "trec_dl19"
    if not data.is_dir():
        data = Path("/work/shared/data/trec_dl19")
    if not (data / "ICT-BERT2.run").is_file():
        pytest.skip("TREC DL 2019 data is not at ../shared/data")
    import json

    mod = _script()
    out = tmp_path / "dl19.jsonl"
    assert mod.dl19_dataset(data, "ICT-BERT2", out, depth=3, queries=2) == 2
    recs = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in recs] == ["1037798", "104861"]  # the first two judged qids, as strings
    for r in recs:
        assert len(r["retrieval_context"]) == 3 and set(r["qrels"]) <= {
            p["id"] for p in r["retrieval_context"]
        }
