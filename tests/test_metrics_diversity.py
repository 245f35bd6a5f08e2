"""Intent-aware diversity measures (judge.metrics._diversity): hand-computed values, agreement
with ndeval through ir_measures + pyndeval on random subtopic qrels and runs, diversity qrels
I/O, the measure registry, and `judge trec` with a diversity qrels file."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import ir_measures
import numpy as np
import pytest
from ir_measures import Qrel, ScoredDoc

from judge.cli import main
from judge.io import InputError
from judge.io._trec import Run as TrecRun
from judge.io._trec_subtopic import (
    SubtopicJudgements,
    SubtopicQrels,
    join_run_subtopic_qrels,
    read_subtopic_qrels,
)
from judge.metrics import evaluate, parse_measure, parse_measure_args
from judge.metrics._diversity import diversity_value

# q1: a covers subtopic 1, b subtopic 2, c both; the run ranks a, b, c.
LINES = [("q1", "1", "a", 1), ("q1", "2", "b", 1), ("q1", "1", "c", 1), ("q1", "2", "c", 1)]
RUN = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}}
LOG3 = math.log2(3)


def _values(
    measures: list[str],
    lines: list[tuple[str, str, str, int]],
    run: dict[str, dict[str, float]],
    *,
    complete: bool = False,
) -> dict[str, dict[str, float]]:
    parsed = [parse_measure(m) for m in measures]
    joined = join_run_subtopic_qrels(
        SubtopicQrels.from_lines(lines), TrecRun.from_mapping(run), complete=complete
    )
    ev = evaluate(parsed, joined)
    return {
        qid: {m: float(ev.per_query[qid][p.trec_name]) for m, p in zip(measures, parsed, strict=True)}
        for qid in ev.qids
    }


# ---------------------------------------------------------------------- by hand
def test_hand_computed_alpha_half() -> None:
    v = _values(
        ["alpha_nDCG@3", "alpha_DCG@3", "ERR_IA@3", "nERR_IA@3", "P_IA@3", "StRecall@1", "StRecall@2"],
        LINES,
        RUN,
    )["q1"]
    # gains (alpha 0.5): a 1, b 1, c 0.5 + 0.5 = 1; ideal (greedy): c 2, then b 0.5 (tie with a:
    # larger docno), then a 0.5
    dcg = 1 + 1 / LOG3 + 1 / 2
    ideal = 2 + 0.5 / LOG3 + 0.5 / 2
    ideal_ideal = 2 + 1 / LOG3 + 0.5 / 2  # every document covering both subtopics
    assert v["alpha_nDCG@3"] == pytest.approx(dcg / ideal, abs=1e-12)
    assert v["alpha_DCG@3"] == pytest.approx(dcg / ideal_ideal, abs=1e-12)
    err = 1 + 1 / 2 + 1 / 3
    assert v["ERR_IA@3"] == pytest.approx(err / (2 + 1 / 2 + 0.5 / 3), abs=1e-12)  # = 0.6875
    assert v["ERR_IA@3"] == pytest.approx(0.6875, abs=1e-12)
    assert v["nERR_IA@3"] == pytest.approx(err / (2 + 0.5 / 2 + 0.5 / 3), abs=1e-12)
    assert v["P_IA@3"] == pytest.approx(4 / (3 * 2), abs=1e-12)  # 4 relevant pairs
    assert v["StRecall@1"] == 0.5
    assert v["StRecall@2"] == 1.0


def test_hand_computed_other_alpha_and_at_one() -> None:
    v = _values(["alpha_nDCG(alpha=0.3)@3", "ERR_IA@1", "alpha_DCG@1"], LINES, {"q1": {"c": 2.0, "a": 1.0}})[
        "q1"
    ]
    # run c, a: gains 2, 0.7; ideal c 2, then b 0.7 (tie with a), a 0.7
    expected = (2 + 0.7 / LOG3) / (2 + 0.7 / LOG3 + 0.7 / 2)
    assert v["alpha_nDCG(alpha=0.3)@3"] == pytest.approx(expected, abs=1e-12)
    # ndeval leaves rank 1 undivided: two subtopics covered at rank 1 give 2
    assert v["ERR_IA@1"] == 2.0 and v["alpha_DCG@1"] == 2.0


def test_short_run_p_ia_divides_by_k() -> None:
    v = _values(["P_IA@10", "StRecall@10"], LINES, {"q1": {"c": 1.0}})["q1"]
    assert v["P_IA@10"] == pytest.approx(2 / (10 * 2))
    assert v["StRecall@10"] == 1.0


def test_no_relevant_subtopic_scores_zero() -> None:
    lines = [("q1", "1", "a", 0), ("q1", "2", "b", 0)]
    v = _values(["alpha_nDCG@5", "ERR_IA@5", "P_IA@5", "StRecall@5"], lines, {"q1": {"a": 1.0}})
    assert v["q1"] == {"alpha_nDCG@5": 0.0, "ERR_IA@5": 0.0, "P_IA@5": 0.0, "StRecall@5": 0.0}


def test_relevance_level_and_unjudged_subtopics() -> None:
    lines = [("q1", "1", "a", 1), ("q1", "2", "b", 2), ("q1", "3", "z", 0)]
    run = {"q1": {"a": 2.0, "b": 1.0}}
    # subtopic 3 has no relevant document: ignored (S = 2 at level 1, S = 1 at level 2)
    assert _values(["StRecall@1"], lines, run)["q1"]["StRecall@1"] == 0.5
    assert _values(["StRecall(rel=2)@1"], lines, run)["q1"]["StRecall(rel=2)@1"] == 0.0
    assert _values(["StRecall(rel=2)@2"], lines, run)["q1"]["StRecall(rel=2)@2"] == 1.0


def test_ties_in_run_scores_follow_trec_eval() -> None:
    # equal scores: docno descending (trec_eval, ndeval -traditional), so c comes first
    v = _values(["StRecall@1", "alpha_nDCG@1"], LINES, {"q1": {"a": 1.0, "c": 1.0}})
    assert v["q1"]["StRecall@1"] == 1.0
    assert v["q1"]["alpha_nDCG@1"] == 1.0


def test_unjudged_drop() -> None:
    run = {"q1": {"x": 3.0, "a": 2.0, "b": 1.0}}  # x is not in the qrels
    v = _values(["StRecall@1", "StRecall(unjudged=drop)@1"], LINES, run)["q1"]
    assert v["StRecall@1"] == 0.0
    assert v["StRecall(unjudged=drop)@1"] == 0.5


def test_pure_function_without_qrels_files() -> None:
    pool = np.array([[1, -1], [-1, 1], [1, 1]])  # a, b, c in docno order
    ranked = pool[[0, 1, 2]]
    judgements = SubtopicJudgements(ranked, pool, np.ones(3, dtype=bool), ("1", "2"))
    assert diversity_value("ERR_IA", judgements, cutoff=3) == pytest.approx(0.6875)
    with pytest.raises(ValueError, match="unknown diversity measure"):
        diversity_value("nope", judgements, cutoff=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="diversity qrels"):
        parse_measure("alpha_nDCG@5").compute([1, 0])


# ---------------------------------------------------------------------- registry
def test_parse_and_names() -> None:
    assert parse_measure("alpha_nDCG@10").trec_name == "alpha_nDCG_10"
    assert parse_measure("alpha_nDCG(alpha=0.5)@10") == parse_measure("alpha-nDCG@10")
    assert parse_measure("alpha_nDCG(alpha=0.3)@10").trec_name == "alpha_nDCG_10(alpha=0.3)"
    assert parse_measure("alpha_nDCG_10").cutoff == 10
    assert parse_measure("ERR-IA@20").trec_name == "ERR_IA_20"
    assert parse_measure("p_ia@5").trec_name == "P_IA_5"
    assert parse_measure("strec@10").trec_name == "StRecall_10"
    assert parse_measure("StRecall@10").is_diversity and not parse_measure("P@10").is_diversity
    assert parse_measure("alpha_nDCG(alpha=0.3)@10").params["alpha"] == 0.3
    assert [m.trec_name for m in parse_measure_args(["alpha_nDCG", "ERR_IA", "P_IA", "StRecall"])] == [
        f"{name}_{k}" for name in ("alpha_nDCG", "ERR_IA", "P_IA", "StRecall") for k in (5, 10, 20)
    ]
    with pytest.raises(ValueError, match="alpha"):
        parse_measure("nDCG(alpha=0.3)@10")
    with pytest.raises(ValueError, match="alpha"):
        parse_measure("alpha_nDCG(alpha=2)@10")
    with pytest.raises(ValueError, match="alpha"):
        parse_measure("P_IA(alpha=0.3)@10")  # P_IA and StRecall do not depend on alpha
    assert parse_measure("ERR_IA(alpha=0.3)@10").trec_name == "ERR_IA_10(alpha=0.3)"
    assert "alpha" not in parse_measure("StRecall@10").params
    with pytest.raises(ValueError, match="cutoff"):
        parse_measure("ERR_IA")


# ---------------------------------------------------------------------- I/O
def test_read_subtopic_qrels_and_collapse(tmp_path: Path) -> None:
    path = tmp_path / "div.qrels"
    path.write_text("q1 1 a 1\nq1 2 a 2\nq1 2 b 0\n# comment\nq2 1 x 1\n")
    qrels = read_subtopic_qrels(path)
    assert qrels.query_ids == ["q1", "q2"]
    assert qrels.query("q1") == {"a": {"1": 1, "2": 2}, "b": {"2": 0}}
    assert qrels.collapsed().to_dict() == {"q1": {"a": 2, "b": 0}, "q2": {"x": 1}}
    bad = tmp_path / "dup.qrels"
    bad.write_text("q1 1 a 1\nq1 1 a 0\n")
    with pytest.raises(InputError) as err:
        read_subtopic_qrels(bad)
    assert err.value.line == 2 and err.value.field == "docno"
    short = tmp_path / "short.qrels"
    short.write_text("q1 1 a\n")
    with pytest.raises(InputError, match="columns"):
        read_subtopic_qrels(short)


# ---------------------------------------------------------------------- ndeval agreement
_REFERENCE = ["alpha_nDCG", "alpha_DCG", "ERR_IA", "nERR_IA", "P_IA", "StRecall"]


def _random_case(rng: random.Random) -> tuple[list[tuple[str, str, str, int]], dict[str, dict[str, float]]]:
    lines: list[tuple[str, str, str, int]] = []
    run: dict[str, dict[str, float]] = {}
    for q in range(rng.randint(1, 6)):
        qid = f"q{q}"
        n_docs, n_sub = rng.randint(1, 30), rng.randint(1, 6)
        for d in range(n_docs):
            for s in rng.sample(range(1, n_sub + 1), rng.randint(0, n_sub)):
                lines.append((qid, str(s), f"d{d:02d}", rng.choice([0, 0, 1, 1, 2, 3])))
        if rng.random() < 0.9:
            docs = rng.sample(range(n_docs + 10), rng.randint(1, min(25, n_docs + 10)))
            scores = rng.sample(range(1000), len(docs))  # distinct: pyndeval breaks ties differently
            run[qid] = {f"d{d:02d}": float(sc) / 7 for d, sc in zip(docs, scores, strict=True)}
    if not lines:
        lines.append(("q0", "1", "d00", 1))
    if not run:
        run["q0"] = {"d00": 1.0}
    run["qx"] = {"d00": 1.0}  # a query without judgements: ignored by both
    return lines, run


@pytest.mark.parametrize("seed", range(30))
def test_equal_to_ndeval_on_random_subtopic_qrels(seed: int) -> None:
    rng = random.Random(seed)
    lines, run = _random_case(rng)
    alpha = rng.choice([0.5, 0.5, 0.3, 0.8])
    rel = rng.choice([1, 1, 2])
    judged_only = rng.random() < 0.3
    cutoffs = sorted(rng.sample(range(1, 21), 4))
    ours_names, theirs = [], []
    for name in _REFERENCE:
        for k in cutoffs:
            params = [f"rel={rel}"]
            ref_params = [f"rel={rel}"]
            if name in ("alpha_nDCG", "alpha_DCG") and alpha != 0.5:
                params.append(f"alpha={alpha}")
                ref_params.append(f"alpha={alpha}")
            if judged_only:
                params.append("unjudged=drop")  # the reference gets a run filtered to judged documents
            ours_names.append(f"{name}({','.join(params)})@{k}")
            theirs.append(ir_measures.parse_measure(f"{name}({','.join(ref_params)})@{k}"))
    # ir_measures scores a judged query missing from the run 0, as -c does
    ours = _values(ours_names, lines, run, complete=True)
    qrels = [Qrel(q, d, g, s) for q, s, d, g in lines]
    judged = {(q, d) for q, _, d, _ in lines}
    # ir_measures' judged_only=True fails with pyndeval (it indexes a generator): filter here
    scored = [
        ScoredDoc(q, d, sc)
        for q, docs in run.items()
        for d, sc in docs.items()
        if not judged_only or (q, d) in judged or q not in {x[0] for x in judged}
    ]
    compared = 0
    for mine, ref in zip(ours_names, theirs, strict=True):
        # one measure per call: pyndeval keeps alpha in global state, mixing alphas in one call breaks it
        values = {m.query_id: m.value for m in ir_measures.iter_calc([ref], qrels, scored)}
        assert set(values) == set(ours), mine
        for qid, value in values.items():
            assert ours[qid][mine] == pytest.approx(value, abs=1e-9), (mine, qid)
            compared += 1
    assert compared >= len(ours_names)


# ---------------------------------------------------------------------- judge trec
def test_judge_trec_with_diversity_qrels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels = tmp_path / "div.qrels"
    qrels.write_text("".join(f"{q} {s} {d} {g}\n" for q, s, d, g in LINES))
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 a 1 3.0 sys\nq1 Q0 b 2 2.0 sys\nq1 Q0 c 3 1.0 sys\n")
    args = ["trec", "--json", "-m", "alpha_nDCG@3", "-m", "ERR_IA@3", "-m", "P_IA@3", "-m", "StRecall@1"]
    assert main([*args, "-m", "map", str(qrels), str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["all"]["alpha_nDCG_3"] == pytest.approx(
        (1 + 1 / LOG3 + 0.5) / (2 + 0.5 / LOG3 + 0.25), abs=1e-12
    )
    assert out["all"]["ERR_IA_3"] == pytest.approx(0.6875)
    assert out["all"]["P_IA_3"] == pytest.approx(2 / 3)
    assert out["all"]["StRecall_1"] == 0.5
    assert out["all"]["map"] == pytest.approx((1 + 1 + 1) / 3)  # every document relevant to some subtopic
    assert "greedy" in out["conventions"]["diversity"]["ideal"]
    assert main(["trec", "-m", "alpha_nDCG", "-m", "P_IA", str(qrels), str(run)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in text][:3] == ["alpha_nDCG_5", "alpha_nDCG_10", "alpha_nDCG_20"]
    # the same file without a diversity measure is refused with a hint
    assert main(["trec", "-m", "map", str(qrels), str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{qrels}:4" in err and "diversity measure" in err


def test_judge_compare_with_diversity_measures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels = tmp_path / "div.qrels"
    qrels.write_text("".join(f"{q} {s} {d} {g}\n" for q, s, d, g in LINES))
    a = tmp_path / "a.txt"
    a.write_text("q1 Q0 a 1 3.0 A\nq1 Q0 b 2 2.0 A\n")
    b = tmp_path / "b.txt"
    b.write_text("q1 Q0 c 1 3.0 B\nq1 Q0 a 2 2.0 B\n")
    assert (
        main(["compare", "--json", "--resamples", "50", "-m", "StRecall@1", str(qrels), str(a), str(b)]) == 0
    )
    comparison = json.loads(capsys.readouterr().out)["comparisons"][0]
    assert comparison["mean_baseline"] == 0.5 and comparison["mean_system"] == 1.0


def test_judge_trec_equals_ndeval_on_a_larger_pool_from_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(5)
    qrels_path, run_path = tmp_path / "div.qrels", tmp_path / "run.txt"
    with qrels_path.open("w") as fh:
        for q in range(8):
            for d in range(150):
                for s in rng.sample(range(1, 7), rng.randint(1, 3)):
                    fh.write(f"{q} {s} d{d} {rng.choice([0, 0, 1, 2])}\n")
    with run_path.open("w") as fh:
        for q in range(8):
            for r, d in enumerate(rng.sample(range(300), 100)):
                fh.write(f"{q} Q0 d{d} {r + 1} {1000 - r} sys\n")
    names = ["alpha_nDCG@5", "alpha_nDCG@20", "ERR_IA@10", "nERR_IA@20", "P_IA@10", "StRecall@20"]
    args = ["trec", "--json", "-q"] + [x for name in names for x in ("-m", name)]
    assert main([*args, str(qrels_path), str(run_path)]) == 0
    ours = json.loads(capsys.readouterr().out)["per_query"]
    qrels = list(ir_measures.read_trec_qrels(str(qrels_path)))  # iteration column = subtopic
    run = list(ir_measures.read_trec_run(str(run_path)))
    reference = ir_measures.iter_calc([ir_measures.parse_measure(n) for n in names], qrels, run)
    checked = 0
    for metric in reference:
        key = parse_measure(str(metric.measure)).trec_name
        assert ours[metric.query_id][key] == pytest.approx(metric.value, abs=1e-9), (key, metric.query_id)
        checked += 1
    assert checked == 8 * len(names)


@pytest.mark.parametrize("seed", range(5))
def test_err_ia_with_other_alpha_equals_pyndeval(seed: int) -> None:
    # ir_measures' ERR_IA has no alpha parameter; ndeval's -alpha (pyndeval's alpha=) changes it
    import pyndeval

    rng = random.Random(100 + seed)
    lines, run = _random_case(rng)
    alpha = rng.choice([0.2, 0.7])
    names = [f"{name}(alpha={alpha})@{k}" for name in ("ERR_IA", "nERR_IA") for k in (3, 10, 20)]
    ours = _values(names, lines, run)
    scored = [(q, d, sc) for q, docs in run.items() for d, sc in docs.items()]
    theirs = pyndeval.ndeval(
        lines, scored, [f"{n}@{k}" for n in ("ERR-IA", "nERR-IA") for k in (3, 10, 20)], alpha=alpha
    )
    for qid, values in ours.items():
        for mine, ref in zip(names, theirs[qid].values(), strict=True):
            assert values[mine] == pytest.approx(ref, abs=1e-9), (mine, qid)
