"""Drawn pairs left unlabelled are missing labels, never labels: the counts and the 40-label
minimum are the labelled pairs', and with ``--allow-unlabelled`` the interval is a
conservative bound over every label they could have, so more of them never narrow it. By
hand on a small population, against every completion, as pairs go unlabelled one by one
(uniform and weighted samples), and through ``judge score`` and the service."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import t as student

from judge.batch import SampleLabelOptions, ppi_block
from judge.cli import main
from judge.io import SampleLabel, SampleLabels
from judge.metrics import JudgedList, judge_measure, ppi_figure


def _all_yes(queries: int = 25) -> list[JudgedList]:
    """``queries`` queries of 2 passages, the judge saying yes to every one (P@2 1)."""
    return [JudgedList.of([1, 1], [1, 1]) for _ in range(queries)]


def test_the_bound_by_hand_and_around_every_completion() -> None:
    # N = 50 judged pairs; 40 labelled, 4 of them no (each moves P@2 by -0.5 / 25 = -0.02),
    # and 2 drawn pairs (q24's a and b) left unlabelled: n = 42 drawn
    lists = _all_yes()
    pairs = [(q, i) for q in range(20) for i in range(2)]
    labels = [0 if q < 2 else 1 for q, _ in pairs]
    missing = [(24, 0), (24, 1)]
    p2 = judge_measure("P_2")
    fig = ppi_figure(lists, p2, pairs, labels, labels, population=50, missing=missing)
    assert fig.labels == 40 and fig.coverage_ok and fig.judge == pytest.approx(1.0)
    # the estimate fills each missing yes with the labelled yeses' labels: 4 of 40 are no, so
    # each is -0.02 * 0.1; 1 + 50 * (-0.08 - 0.004) / 42 = 0.9
    assert fig.estimate == pytest.approx(0.9)
    # the bound: the estimate over every labelling, 1 + 50 * [-0.12, -0.08] / 42; the largest
    # standard error: squares 6 * 0.0004, the smallest squared mean (0.08 / 42)^2
    var = (6 * 0.0004 - 42 * (0.08 / 42) ** 2) / 41
    se = 50 * (0.16 * var / 42) ** 0.5
    z = float(student.ppf(0.975, 41))
    assert fig.low == pytest.approx(1 - 50 * 0.12 / 42 - z * se)
    assert fig.high == pytest.approx(1 - 50 * 0.08 / 42 + z * se)
    # every labelling of the two: its own interval (42 labels) lies within the bound
    for a, b in itertools.product((0, 1), repeat=2):
        full = ppi_figure(lists, p2, [*pairs, *missing], [*labels, a, b], [*labels, a, b], population=50)
        assert full.low is not None and full.high is not None and full.labels == 42
        assert fig.low - 1e-12 <= full.low and full.high <= fig.high + 1e-12
        assert fig.low <= full.estimate <= fig.high
    # none missing: the ordinary interval, exactly
    plain = ppi_figure(lists, p2, pairs, labels, labels, population=50)
    same = ppi_figure(lists, p2, pairs, labels, labels, population=50, missing=[])
    assert (same.estimate, same.low, same.high) == (plain.estimate, plain.low, plain.high)


def test_every_drawn_pair_unlabelled_gives_no_interval_and_the_judges_figure() -> None:
    lists = _all_yes()
    fig = ppi_figure(lists, judge_measure("P_2"), [], [], [], population=50, missing=[(0, 0), (1, 1)])
    # no labelled pair shares their verdict: filled in agreeing; 0 labels: no interval
    assert fig.labels == 0 and fig.estimate == pytest.approx(1.0) and fig.low is None and fig.high is None
    with pytest.raises(ValueError, match="inclusion"):  # a weighted sample's missing pairs need theirs
        ppi_figure(lists, judge_measure("P_2"), [], [], [], inclusion=[], missing=[(0, 0)])


def _records(queries: int = 100) -> list[dict[str, Any]]:
    """``queries`` queries of 2 passages; the judge says yes to the first, and to the second
    of every third query (N = 2 * queries judged pairs)."""
    return [
        {
            "id": f"q{i}",
            "docnos": ["a", "b"],
            "verdicts": [{"verdict": "yes"}, {"verdict": "yes" if i % 3 == 0 else "no"}],
        }
        for i in range(queries)
    ]


def _drawn(records: list[dict[str, Any]], n: int) -> list[tuple[str, str, int]]:
    """The first ``n`` pairs with a label each: the judge's verdict, except every fifth (12 of
    60 disagree)."""
    out = []
    for r in records:
        for d, v in zip(r["docnos"], r["verdicts"], strict=True):
            yes = int(v["verdict"] == "yes")
            out.append((r["id"], d, 1 - yes if len(out) % 5 == 0 else yes))
    return out[:n]


@pytest.mark.parametrize("inclusion", [None, 0.3])
@pytest.mark.parametrize("disagreeing_first", [True, False])
def test_the_interval_never_narrows_as_drawn_pairs_go_unlabelled(
    inclusion: float | None, disagreeing_first: bool
) -> None:
    records = _records()
    drawn = _drawn(records, 60)
    verdict = {
        (r["id"], d): int(v["verdict"] == "yes")
        for r in records
        for d, v in zip(r["docnos"], r["verdicts"], strict=True)
    }
    order = sorted(range(60), key=lambda i: (verdict[drawn[i][:2]] == drawn[i][2]) == disagreeing_first)
    widths: dict[str, list[float]] = {"precision": [], "mean_score": []}
    for gone in range(0, 31):
        missing = set(order[:gone])
        labels = tuple(
            SampleLabel(q, d, y, i + 1, inclusion) for i, (q, d, y) in enumerate(drawn) if i not in missing
        )
        unlabelled = tuple(
            SampleLabel(q, d, -1, i + 1, inclusion) for i, (q, d, _) in enumerate(drawn) if i in missing
        )
        options = SampleLabelOptions(SampleLabels("s.qrels", labels, unlabelled), allow_unlabelled=True)
        block = ppi_block(records, options, [2])
        assert block["labels"] == 60 - gone and block["unlabelled"] == gone
        for name, fig in (("precision", block["precision"]["2"]), ("mean_score", block["mean_score"])):
            assert fig["labels"] == 60 - gone  # the labelled pairs only, never the drawn ones
            if 60 - gone < 40:
                assert fig["low"] is None and fig["high"] is None and not fig["coverage_ok"]
                continue
            assert fig["low"] <= fig["estimate"] <= fig["high"]
            widths[name].append(fig["high"] - fig["low"])
    for series in widths.values():
        assert len(series) == 21 and series[0] > 0
        assert all(b >= a - 1e-12 for a, b in itertools.pairwise(series)), series


# ---------------------------------------------------------------------------- end to end
def _sample_text(records: list[dict[str, Any]], labelled: int, drawn: int = 60) -> str:
    rows = _drawn(records, drawn)
    return "".join(f"{q} 0 {d} {y if i < labelled else -1}\n" for i, (q, d, y) in enumerate(rows))


def _score(tmp_path: Path, labelled: int) -> dict[str, Any]:
    records = _records(50)  # 100 judged pairs
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "id": r["id"],
                    "query": f"query {r['id']}",
                    "retrieval_context": [{"id": d, "text": d} for d in "ab"],
                }
            )
            + "\n"
            for r in records
        ),
        encoding="utf-8",
    )
    qrels = tmp_path / "judge.qrels"
    qrels.write_text(
        "".join(
            f"{r['id']} 0 {d} {int(v['verdict'] == 'yes')}\n"
            for r in records
            for d, v in zip(r["docnos"], r["verdicts"], strict=True)
        ),
        encoding="utf-8",
    )
    sample = tmp_path / f"sample{labelled}.qrels"
    sample.write_text(_sample_text(records, labelled), encoding="utf-8")
    out = tmp_path / f"out{labelled}.jsonl"
    args = ["score", str(data), "-o", str(out), "--backend", f"qrels:{qrels}", "--no-cache", "--quiet"]
    assert main([*args, "-k", "2", "--sample-labels", str(sample), "--allow-unlabelled"]) == 0
    return dict(json.loads(out.with_name(f"out{labelled}.summary.json").read_text(encoding="utf-8"))["ppi"])


def _check_45_and_30(by_labels: dict[int, dict[str, Any]]) -> None:
    """45 real labels of 60 drawn: counts of 45 and intervals of positive width; 30: none."""
    for labelled, ppi in by_labels.items():
        assert ppi["labels"] == labelled and ppi["unlabelled"] == 60 - labelled
        for fig in (ppi["precision"]["2"], ppi["mean_score"]):
            assert fig["labels"] == labelled
            if labelled >= 40:
                assert fig["coverage_ok"] and fig["high"] - fig["low"] > 0
            else:
                assert fig["low"] is None and fig["high"] is None and not fig["coverage_ok"]
        assert "conservative bound" in ppi["interval_note"] and ppi["method"]["unlabelled"]


@pytest.mark.usefixtures("monkeypatch")
def test_score_counts_only_real_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    _check_45_and_30({n: _score(tmp_path, n) for n in (45, 30)})


def test_the_service_counts_only_real_labels(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from _review import p_backend
    from _server import app_for, wait_job
    from fastapi.testclient import TestClient

    records = _records(50)
    recs = [
        {
            "id": r["id"],
            "query": f"query {r['id']}",
            "retrieval_context": [
                {"id": d, "text": f"{d} [p={0.9 if v['verdict'] == 'yes' else 0.1}]"}
                for d, v in zip(r["docnos"], r["verdicts"], strict=True)
            ],
        }
        for r in records
    ]
    got: dict[int, dict[str, Any]] = {}
    with TestClient(app_for(tmp_path, backend=p_backend())) as client:
        for labelled in (45, 30):
            options = {
                "probability": True,
                "p_yes_threshold": 0.5,
                "k": [2],
                "sample_labels": _sample_text(records, labelled),
                "allow_unlabelled": True,
            }
            r = client.post("/v1/jobs", json={"records": recs, "options": options})
            assert r.status_code == 202, r.text
            job = wait_job(client, r.json()["id"])
            assert job["status"] == "done", job
            summary = job.get("summary") or client.get(f"/v1/jobs/{job['id']}").json()["summary"]
            got[labelled] = summary["ppi"]
    _check_45_and_30(got)
