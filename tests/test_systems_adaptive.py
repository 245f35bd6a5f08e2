"""``compare-systems --until-decided``: the pure parts on arrays (the report's own tests
reproduced, Holm per draw, the prior, the decision), a clear synthetic case (decided with at
most 40% of the full pool's calls), an unclear one (reported undecided), budget, resume
without calls, and the done-when check on TREC DL 2019 with the qrels-backed judge."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import passage_of

import judge
from judge.backends import RuleBackend
from judge.cli import main
from judge.io import InputError
from judge.metrics import holm, parse_measure_args, permutation_test
from judge.systems._adaptive import (
    ABSENT,
    UNKNOWN,
    Problem,
    ProblemQuery,
    SignFlips,
    decide,
    draw_states,
    holm_columns,
    rank_prior,
    score_states,
)

REL = "[相关]"
DL19 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "trec_dl19"


# ---------------------------------------------------------------------------- pure parts
def test_sign_flips_give_the_reports_permutation_p_values() -> None:
    rng = np.random.default_rng(3)
    d = rng.normal(0.05, 0.2, size=(17, 6))
    d[:, 5] = 0.0  # all ties: p = 1
    flips = SignFlips(17, 2000, seed=7)
    got = flips.p_values(d)
    want = [permutation_test(np.zeros(17), d[:, k], resamples=2000, seed=7).p_value for k in range(6)]
    assert got.tolist() == pytest.approx(want, abs=0)
    # 33 queries: a column with 33 non-zero differences is Monte Carlo (the test's random
    # flips), one with 3 is exact; both as the report's test gives them
    wide = rng.normal(0.05, 0.2, size=(33, 2))
    wide[3:, 1] = 0.0
    got = SignFlips(33, 700, seed=4).p_values(wide)
    tests = [permutation_test(np.zeros(33), wide[:, k], resamples=700, seed=4) for k in range(2)]
    assert [t.method for t in tests] == ["monte carlo", "exact"]
    assert got.tolist() == [t.p_value for t in tests]


def test_holm_columns_adjust_each_draw_like_holm() -> None:
    p = np.array([[0.01, 0.04, 0.5], [0.03, 0.04, 0.01], [0.02, 0.001, 0.2]])
    got = holm_columns(p)
    for k in range(3):
        assert got[:, k].tolist() == pytest.approx(holm(p[:, k]).tolist())


def _query(token: str, labels: list[int], ranks: list[list[int]], prior: float = 0.5) -> ProblemQuery:
    n = len(labels)
    best = np.zeros(n, dtype=np.int64)
    for r in ranks:
        for pos, i in enumerate(r):
            if best[i] == 0 or pos + 1 < best[i]:
                best[i] = pos + 1
    return ProblemQuery(
        token,
        [f"d{i}" for i in range(n)],
        np.array(labels, dtype=np.int64),
        np.full(n, prior),
        [np.array(r, dtype=np.intp) for r in ranks],
        best,
        np.zeros(n, dtype=np.bool_),
        np.zeros(n, dtype=np.intp),
    )


def _problem(queries: list[ProblemQuery], measures: tuple[str, ...] = ("P_1",)) -> Problem:
    return Problem(queries, ["a", "b"], parse_measure_args(list(measures)), resamples=500)


def test_everything_known_gives_one_certain_decision_by_hand() -> None:
    # b puts the relevant passage first on 8 queries, a never: P_1 diff = +1 on each query.
    qs = [_query(f"q{i}", [1, 0], [[1, 0], [0, 1]]) for i in range(8)]
    problem = _problem(qs)
    states = draw_states(problem, np.random.default_rng(0), 20)
    assert all(s.shape[0] == 1 for s in states)  # nothing unknown: one row per query
    values = score_states(problem, states, 20)
    (d,) = decide(problem, values, SignFlips(8, 500, 0))
    # Every flip of 8 equal differences reaches |mean| = 1 only when all signs agree: p = (b+1)/(R+1)
    assert (d.sign, d.significant, d.confidence, d.expected_diff) == (1, True, 1.0, 1.0)
    assert d.label == "better, significant"


def test_unknown_pairs_make_the_decision_uncertain_and_absent_counts_as_not_relevant() -> None:
    qs = [_query(f"q{i}", [UNKNOWN, UNKNOWN], [[1, 0], [0, 1]]) for i in range(6)]
    problem = _problem(qs)
    rank_prior(problem)  # nothing known: the overall share (0 + 1) / (0 + 2) = 0.5 everywhere
    assert all(q.prior.tolist() == [0.5, 0.5] for q in qs)
    values = score_states(problem, draw_states(problem, np.random.default_rng(1), 400), 400)
    (d,) = decide(problem, values, SignFlips(6, 500, 0))
    assert d.confidence < 0.95 and abs(d.expected_diff) < 0.2
    # ABSENT: out of the qrels, like an unjudged verdict: a ranks it first, P_1 = 0; b ranks d0 first.
    for q in qs:
        q.labels[:] = [1, ABSENT]
    values = score_states(problem, draw_states(problem, np.random.default_rng(1), 10), 10)
    assert values[0, 0].max() == 0.0 and values[1, 0].min() == 1.0


def test_rank_prior_by_hand() -> None:
    # Known: rank-1 passages relevant 3 of 3, rank-2 passages 0 of 3 -> overall (3+1)/(6+2) = 0.5;
    # bucket 1: (3 + 2*0.5)/(3 + 2) = 0.8, bucket 2: (0 + 1)/(3 + 2) = 0.2.
    qs = [_query(f"q{i}", [1, 0], [[0, 1], [0, 1]]) for i in range(3)]
    qs.append(_query("q9", [UNKNOWN, UNKNOWN], [[0, 1], [0, 1]]))
    problem = _problem(qs)
    overall, buckets = rank_prior(problem)
    assert overall == pytest.approx(0.5)
    assert buckets[0] == pytest.approx(0.8) and buckets[1] == pytest.approx(0.2)
    # One group (both systems pooled both passages): observed 3 of 6 where the buckets
    # expect 0.8*3 + 0.2*3 = 3 -> no shift; sd = 1 / sqrt(1 + 6 * 0.5 * 0.5).
    assert qs[3].prior.tolist() == pytest.approx([0.8, 0.2])
    assert problem.group_sd.tolist() == pytest.approx([1 / np.sqrt(2.5)])


# ---------------------------------------------------------------------------- whole runs
def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _system(tmp_path: Path, name: str, queries: int, relevant: Any, per_query: int = 10) -> Path:
    rows = []
    for q in range(queries):
        ctx = []
        for r in range(per_query):
            rel = relevant(q, r)
            ctx.append({"id": f"{name}-{q}-{r}", "text": f"{name} q{q} r{r}" + (f" {REL}" if rel else "")})
        rows.append({"id": f"q{q}", "query": f"查询 {q}", "retrieval_context": ctx})
    return _write(tmp_path / f"{name}.jsonl", rows)


def _keyword() -> RuleBackend:
    return RuleBackend.keyword(REL, text_of=passage_of)


def test_clear_case_decides_with_at_most_40_percent_of_the_full_pools_calls(tmp_path: Path) -> None:
    a = _system(tmp_path, "a", 30, lambda q, r: r == 9 and q % 3 == 0)  # a: rarely anything
    b = _system(tmp_path, "b", 30, lambda q, r: r < 6)  # b: six relevant on top
    full_backend, adaptive_backend = _keyword(), _keyword()
    kw: dict[str, Any] = {
        "cache": False,
        "resamples": 1000,
        "stability_resamples": 0,
        "measures": ["map", "P_5"],
    }
    full = judge.compare_systems({"a": a, "b": b}, tmp_path / "full", backend=full_backend, **kw)
    adaptive = judge.compare_systems(
        {"a": a, "b": b}, tmp_path / "adaptive", backend=adaptive_backend, until_decided=True, **kw
    )
    assert full_backend.calls == 600
    assert adaptive.adaptive is not None and adaptive.adaptive.stop == "decided"
    assert adaptive_backend.calls == adaptive.adaptive.judged_pairs <= 0.4 * full_backend.calls
    for f, c in zip(full.comparisons, adaptive.comparisons, strict=True):
        assert c.adaptive is not None and c.adaptive.decided
        assert (c.adaptive.sign, c.adaptive.significant) == (1, True) == (np.sign(f.diff), f.p_holm < 0.05)
    md = (tmp_path / "adaptive" / "report.md").read_text(encoding="utf-8")
    assert "## Adaptive judging (--until-decided)" in md and "of the full pool's 600 pairs" in md
    assert 'id="adaptive"' in (tmp_path / "adaptive" / "report.html").read_text(encoding="utf-8")
    # A re-run chooses the same pairs and finds every one judged: no call.
    again = _keyword()
    rerun = judge.compare_systems(
        {"a": a, "b": b}, tmp_path / "adaptive", backend=again, until_decided=True, **kw
    )
    assert again.calls == 0 and rerun.adaptive is not None
    assert rerun.adaptive.judged_pairs == adaptive.adaptive.judged_pairs and rerun.adaptive.calls == 0


def test_unclear_case_within_a_budget_says_undecided_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both systems retrieve passages of the same relevance pattern, b swaps one on a few queries:
    # no budget of 40 of 240 pairs can tell them apart. The CLI with the qrels-backed judge.
    def same(q: int, r: int) -> bool:
        return (q + r) % 2 == 0

    a = _system(tmp_path, "a", 12, same)
    b = _system(tmp_path, "b", 12, lambda q, r: same(q, r) != (r == 9 and q % 4 == 0))
    labels = []
    for path in (a, b):
        for row in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
            for p in row["retrieval_context"]:
                labels.append(f"{row['id']} 0 {p['id']} {int(REL in p['text'])}\n")
    qrels = tmp_path / "labels.qrels"
    qrels.write_text("".join(labels), encoding="utf-8")
    out = tmp_path / "report"
    args = ["compare-systems", f"a={a}", f"b={b}", "-o", str(out), "--backend", f"qrels:{qrels}"]
    args += ["--mode", "binary", "--until-decided", "--budget", "40", "--batch", "20", "-m", "map"]
    args += ["--resamples", "500", "--stability-resamples", "0", "--no-cache"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "--until-decided judged 40 of 240 pooled pairs" in err and "1 undecided (budget)" in err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["adaptive"]["stop"] == "budget" and report["adaptive"]["undecided"] == 1
    (c,) = report["comparisons"]
    assert c["adaptive"]["decided"] is False and c["adaptive"]["judged_pairs"] is None
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "| undecided |" in md and "stopped: budget" in md


def test_budget_without_until_decided_is_refused_before_any_call(tmp_path: Path) -> None:
    a = _system(tmp_path, "a", 2, lambda q, r: True, per_query=2)
    backend = _keyword()
    with pytest.raises(InputError) as info:
        judge.compare_systems({"a": a, "b": a}, tmp_path / "r", backend=backend, cache=False, budget=5)
    assert info.value.field == "--budget" and backend.calls == 0


# ---------------------------------------------------------------------------- DL 2019
def _dl19_systems(tmp_path: Path) -> dict[str, Path]:
    qrels: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for line in (DL19 / "2019qrels-pass.txt").read_text(encoding="utf-8").splitlines():
        qid, _, docno, grade = line.split()
        qrels[qid][docno] = int(grade)
    queries = dict(
        line.split("\t", 1)
        for line in (DL19 / "msmarco-test2019-queries.tsv").read_text(encoding="utf-8").splitlines()
    )
    texts: dict[str, str] = {}
    with (DL19 / "dl2019_document.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            texts[record["docid"]] = record["doc"]
    systems: dict[str, Path] = {}
    for name in ("ICT-BERT2", "ICT-CKNRM_B", "ICT-CKNRM_B50"):
        ranked: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
        for line in (DL19 / f"{name}.run").read_text(encoding="utf-8").splitlines():
            qid, _, docno, rank, *_ = line.split()
            ranked[qid].append((int(rank), docno))
        rows = [
            {
                "id": qid,
                "query": queries[qid],
                "retrieval_context": [{"id": d, "text": texts[d]} for _, d in sorted(ranked[qid])[:10]],
            }
            for qid in sorted(qrels)
        ]
        systems[name] = _write(tmp_path / f"{name}.jsonl", rows)
    return systems


@pytest.mark.skipif(not DL19.is_dir(), reason=f"TREC DL 2019 data not found at {DL19} (../shared/data)")
@pytest.mark.timeout(1800)  # four pools of 43 queries; minutes on a loaded 2-core machine
def test_dl19_until_decided_reaches_the_full_pools_decisions_with_the_qrels_judge(tmp_path: Path) -> None:
    systems = _dl19_systems(tmp_path)
    spec = f"qrels:{DL19 / '2019qrels-pass.txt'}"
    kw: dict[str, Any] = {
        "backend": spec,
        "mode": "binary",
        "cache": False,
        "depth": 10,
        "stability_resamples": 0,
    }
    # Every pair of systems: each system as the baseline once covers all three pairs.
    for order in (list(systems), list(systems)[1:]):
        chosen = {name: systems[name] for name in order}
        full = judge.compare_systems(chosen, tmp_path / f"full-{len(order)}", **kw)
        adaptive = judge.compare_systems(
            chosen, tmp_path / f"adaptive-{len(order)}", until_decided=True, **kw
        )
        assert full.pool.unjudged == 0 and full.pool.calls == full.pool.unique_pairs
        summary = adaptive.adaptive
        assert summary is not None and summary.pool_pairs == full.pool.unique_pairs
        assert adaptive.pool.calls == summary.judged_pairs <= summary.pool_pairs
        print(
            f"DL19 {order[0]} baseline: --until-decided judged {summary.judged_pairs} of "
            f"{summary.pool_pairs} pairs ({summary.fraction:.0%}), {summary.rounds} rounds"
        )
        assert len(full.comparisons) == len(adaptive.comparisons) == 5 * (len(order) - 1)
        for f, a in zip(full.comparisons, adaptive.comparisons, strict=True):
            assert a.adaptive is not None and a.adaptive.decided, (a.system, a.measure)
            full_sign = 0 if abs(f.diff) <= 1e-12 else int(np.sign(f.diff))
            assert (a.adaptive.sign, a.adaptive.significant) == (
                full_sign,
                f.p_holm is not None and f.p_holm < 0.05,
            )
