"""TREC qrels/run reading with trec_eval semantics: ties, layout tolerance, chunking, joining."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import judge.io._trec as trec_module
from judge.io import (
    InputError,
    Qrels,
    Run,
    join_run_qrels,
    read_qrels,
    read_run,
    write_qrels,
    write_run,
)
from judge.metrics import evaluate, parse_measure_args


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


def _scores(qrels: Qrels, run: Run, measures: list[str], **kwargs: object) -> dict[str, object]:
    evaluation = evaluate(
        parse_measure_args(measures),
        join_run_qrels(qrels, run, **kwargs),  # type: ignore[arg-type]
        run_id=run.run_id,
    )
    return evaluation.all


def test_all_tied_scores_rank_by_docno_descending(tmp_path: Path) -> None:
    run = read_run(_write(tmp_path / "run", "q1 Q0 d1 1 1.0 t\nq1 Q0 d3 2 1.0 t\nq1 Q0 d2 3 1.0 t\n"))
    assert [d for d, _ in run.ranking("q1")] == ["d3", "d2", "d1"]
    qrels = read_qrels(_write(tmp_path / "qrels", "q1 0 d1 1\nq1 0 d2 0\n"))
    assert _scores(qrels, run, ["recip_rank", "map", "P@1"]) == {
        "recip_rank": pytest.approx(1 / 3),
        "map": pytest.approx(1 / 3),
        "P_1": 0.0,
    }


def test_ties_break_bytewise_and_the_rank_column_is_ignored(tmp_path: Path) -> None:
    text = "q 0 d9 1 0.5 t\nq 0 d10 2 0.5 t\nq 0 top 99 0.9 t\nq 0 D1 3 0.5 t\n"
    run = read_run(_write(tmp_path / "run", text))
    # score descending; ties by docno descending in byte order: 'd9' > 'd10' > 'D1'
    assert [d for d, _ in run.ranking("q")] == ["top", "d9", "d10", "D1"]


def test_scores_are_compared_as_doubles(tmp_path: Path) -> None:
    run = read_run(_write(tmp_path / "run", "q 0 a 1 1e-3 t\nq 0 b 2 0.0010 t\nq 0 c 3 .0011 t\n"))
    assert [d for d, _ in run.ranking("q")] == ["c", "b", "a"]  # 1e-3 == 0.0010: tie -> docno desc


def test_layout_tolerance(tmp_path: Path) -> None:
    run_text = "# a comment\r\n\r\nq1\tQ0\td1\t1\t  2.5\tmyrun extra junk\r\n   \nq1 Q0 d2 2 1.5 myrun"
    run = read_run(_write(tmp_path / "run", run_text))
    assert run.run_id == "myrun"
    assert run.ranking("q1") == [("d1", 2.5), ("d2", 1.5)]
    qrels = read_qrels(_write(tmp_path / "qrels", "#c\nq1 0 d1 2\n\nq1 0 d2 -1\n"))
    assert qrels.query("q1") == {"d1": 2, "d2": -1}


def test_run_id_is_the_tag_of_the_last_line(tmp_path: Path) -> None:
    run = read_run(_write(tmp_path / "run", "q2 Q0 a 1 1 first\nq1 Q0 b 1 1 last\n"))
    assert run.run_id == "last"
    assert run.query_ids == ["q1", "q2"]


def test_chunked_reading_matches_single_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    lines = [f"q{q} Q0 doc{d} {d} {rng.random():.6f} r\n" for q in rng.permutation(30) for d in range(40)]
    path = _write(tmp_path / "run", "".join(lines))
    whole = read_run(path)
    monkeypatch.setattr(trec_module, "_CHUNK_BYTES", 37)
    pieces = read_run(path)
    assert pieces.to_dict() == whole.to_dict()
    assert whole.num_lines == 1200 and len(whole) == 30


def test_interleaved_queries_are_grouped(tmp_path: Path) -> None:
    run = read_run(_write(tmp_path / "run", "b Q0 x 1 3 t\na Q0 y 1 2 t\nb Q0 z 2 1 t\na Q0 w 2 5 t\n"))
    assert run.to_dict() == {"a": {"w": 5.0, "y": 2.0}, "b": {"x": 3.0, "z": 1.0}}
    assert [d for d, _ in run.ranking("b")] == ["x", "z"]


def test_join_marks_unjudged_and_respects_complete_and_max_docs() -> None:
    qrels = Qrels.from_mapping({"q1": {"a": 2, "b": 0, "c": -1}, "q2": {"x": 1}})
    run = Run.from_mapping({"q1": {"a": 3.0, "c": 2.0, "zz": 1.0, "b": 0.5}, "q9": {"x": 1.0}})
    joined = list(join_run_qrels(qrels, run))
    assert [j.qid for j in joined] == ["q1"]
    assert joined[0].grades is not None
    assert joined[0].grades.tolist() == [2, -2, -1, 0]  # c judged -1 -> -2; zz not in qrels -> -1
    complete = list(join_run_qrels(qrels, run, complete=True, max_docs=2))
    assert [j.qid for j in complete] == ["q1", "q2"]
    assert complete[0].grades is not None and complete[0].grades.tolist() == [2, -2]
    assert complete[1].grades is None and complete[1].qrels.tolist() == [1]


def test_missing_query_with_complete_scores_zero_but_counts() -> None:
    qrels = Qrels.from_mapping({"q1": {"a": 1}, "q2": {"x": 1, "y": 1}})
    run = Run.from_mapping({"q1": {"a": 1.0}})
    assert _scores(qrels, run, ["map", "num_q", "num_rel", "num_ret"]) == {
        "num_q": 1,
        "num_ret": 1,
        "num_rel": 1,
        "map": 1.0,
    }
    assert _scores(qrels, run, ["map", "num_q", "num_rel", "num_ret"], complete=True) == {
        "num_q": 2,
        "num_ret": 1,
        "num_rel": 3,
        "map": 0.5,
    }


def test_query_with_no_relevant_passage() -> None:
    qrels = Qrels.from_mapping({"q1": {"a": 0, "b": 0}, "q2": {"x": 1}})
    run = Run.from_mapping({"q1": {"a": 2.0, "b": 1.0}, "q2": {"x": 1.0}})
    evaluation = evaluate(
        parse_measure_args(["map", "ndcg", "ndcg_cut_10", "P_5", "recall_5", "recip_rank", "Rprec", "bpref"]),
        join_run_qrels(qrels, run),
    )
    assert set(evaluation.per_query["q1"].values()) == {0.0}
    assert set(evaluation.per_query["q2"].values()) == {1.0, 0.2}  # everything 1 except P_5
    assert evaluation.all["map"] == 0.5


def test_empty_ranking_after_dropping_unjudged() -> None:
    qrels = Qrels.from_mapping({"q1": {"a": 1}})
    run = Run.from_mapping({"q1": {"zz": 1.0}})
    values = _scores(
        qrels, run, ["AP(unjudged=drop)", "P(unjudged=drop)@5", "nDCG(unjudged=drop)@5", "num_ret"]
    )
    assert values == {
        "num_ret": 1,
        "map(unjudged=drop)": 0.0,
        "P_5(unjudged=drop)": 0.0,
        "ndcg_cut_5(unjudged=drop)": 0.0,
    }


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    write_run(tmp_path / "run", {"q1": [("a", 0.9), ("b", 0.5)], "q2": [("c", 1.0)]}, run_id="mine")
    write_qrels(tmp_path / "qrels", {"q1": {"a": 1, "b": 0}, "q2": {"c": 3}})
    run, qrels = read_run(tmp_path / "run"), read_qrels(tmp_path / "qrels")
    assert run.run_id == "mine"
    assert run.to_dict() == {"q1": {"a": 0.9, "b": 0.5}, "q2": {"c": 1.0}}
    assert qrels.to_dict() == {"q1": {"a": 1, "b": 0}, "q2": {"c": 3}}


def test_reader_errors_name_file_line_and_field(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        read_run(_write(tmp_path / "run", "q Q0 a 1 1.0 t\nq Q0 b 2 high t\n"))
    assert (info.value.line, info.value.field) == (2, "score")
    assert str(info.value).startswith(f"{tmp_path / 'run'}:2: field 'score'")
    with pytest.raises(InputError) as info:
        read_qrels(_write(tmp_path / "qrels", "q 0 a 1\nq 0 b\n"))
    assert (info.value.line, info.value.field) == (2, "grade")


@pytest.mark.parametrize("docno_prefix", ["", "a-long-document-prefix-"])  # 8-byte keys / byte strings
@pytest.mark.parametrize("layout", ["shuffled", "score-sorted", "score-sorted-ties-shuffled"])
def test_ranking_matches_brute_force_trec_order(tmp_path: Path, docno_prefix: str, layout: str) -> None:
    rng = np.random.default_rng(len(layout) + len(docno_prefix))
    rows = []
    for q in range(20):
        n = int(rng.integers(1, 60))
        docs = rng.choice(100_000, size=n, replace=False)
        scores = rng.integers(0, 6, size=n) / 2  # many ties
        rows += [(f"q{q}", f"{docno_prefix}{d}", float(s)) for d, s in zip(docs, scores, strict=True)]
    if layout == "shuffled":
        rng.shuffle(rows)  # type: ignore[arg-type]
    else:
        rows.sort(key=lambda r: (r[0], -r[2]))
        if layout == "score-sorted":
            rows.sort(key=lambda r: (r[0], -r[2], tuple(-b for b in r[1].encode())))
    path = _write(tmp_path / "run", "".join(f"{q} Q0 {d} 0 {s} t\n" for q, d, s in rows))
    run = read_run(path)
    for q in {r[0] for r in rows}:
        expected = sorted((r for r in rows if r[0] == q), key=lambda r: (r[2], r[1].encode()), reverse=True)
        assert run.ranking(q) == [(d, s) for _, d, s in expected]


def test_scores_parse_exactly_like_c_atof() -> None:
    rng = np.random.default_rng(3)
    texts = [
        f"{rng.normal(0, 10 ** int(rng.integers(-6, 6))):.{int(rng.integers(0, 17))}f}" for _ in range(2000)
    ]
    texts += ["1e-3", "-0", "+.5", "5.", "1E+2", "inf", "-inf", "0x1p3"]
    matrix = np.array([t.encode() for t in texts])
    wide = np.ascontiguousarray(matrix).view(np.uint8).reshape(len(texts), -1)
    if "0x1p3" in texts:  # hexadecimal floats are C99 strtod but not Python: rejected as bad input
        with pytest.raises(InputError, match="0x1p3"):
            trec_module._parse_floats(wide, np.arange(1, len(texts) + 1), path="run", field="score")
        texts, wide = texts[:-1], wide[:-1]
    parsed = trec_module._parse_floats(wide, np.arange(1, len(texts) + 1), path="run", field="score")
    assert parsed.tolist() == [float(t) for t in texts]
