"""compare-systems: human qrels and the judge's verdicts meet on one stated scale."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _helpers import passage_of

import judge
from judge.backends import RuleBackend
from judge.cli import main
from judge.io import InputError, read_qrels
from judge.systems._label_scale import resolve_pool_scale

# Three queries; each passage's text carries its (hidden) NIST-style grade as a marker, so the
# rule judge below answers from the labels: a qrels-backed judge at level 2.
GRADES = {
    "q1": {"a": 3, "b": 1, "c": 0, "d": 2, "e": 1, "u": 2},
    "q2": {"f": 1, "g": 2, "h": 0, "i": 3},
    "q3": {"j": 0, "k": 1, "l": 2, "m": 0},
}
RUNS = {
    "A": {"q1": ["a", "b", "c", "d"], "q2": ["f", "g", "h"], "q3": ["j", "k", "l"]},
    "B": {"q1": ["b", "e", "a", "c"], "q2": ["i", "f", "g"], "q3": ["m", "l", "j"]},
}
# People labelled only part of the pool (u: relevant, retrieved by nobody); the rest is judged.
PARTIAL = {"q1": ["a", "b", "u"], "q2": ["f", "i"], "q3": ["j"]}
MEASURES = ("map", "P_3", "recall_10", "recip_rank")


def _text(qid: str, docno: str) -> str:
    return f"{qid} 的段落 {docno} [G{GRADES[qid][docno]}]"


def _qrels_judge() -> RuleBackend:
    """Yes iff the passage's grade is >= 2."""
    return RuleBackend.keyword(["[G2]", "[G3]"], text_of=passage_of)


def _write(tmp_path: Path) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for name, run in RUNS.items():
        rows = [
            {
                "id": q,
                "query": f"问题 {q}",
                "retrieval_context": [{"id": d, "text": _text(q, d)} for d in docs],
            }
            for q, docs in run.items()
        ]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        paths[name] = path
    return paths


def _qrels_file(path: Path, labels: dict[str, dict[str, int]]) -> Path:
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in labels.items() for d, g in docs.items()))
    return path


def _partial(tmp_path: Path) -> Path:
    return _qrels_file(
        tmp_path / "partial.qrels", {q: {d: GRADES[q][d] for d in ds} for q, ds in PARTIAL.items()}
    )


def test_graded_qrels_with_a_binary_judge_and_no_level_is_refused_before_any_call(tmp_path: Path) -> None:
    fake = _qrels_judge()
    with pytest.raises(InputError) as err:
        judge.compare_systems(
            _write(tmp_path), tmp_path / "r", backend=fake, qrels=_partial(tmp_path), cache=False
        )
    assert err.value.field == "--qrels-level"
    assert "graded (0-3)" in str(err.value) and "--mode binary" in str(err.value)
    assert fake.requests == []


def test_cli_exit_2_naming_both_scales(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _write(tmp_path)
    args = ["compare-systems", *(f"{n}={p}" for n, p in paths.items()), "-o", str(tmp_path / "r")]
    # No backend is opened: the embedded model would be the default.
    assert main([*args, "--qrels", str(_partial(tmp_path)), "--backend", "openai:none", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--qrels-level" in err and "graded" in err and "binary" in err
    assert not (tmp_path / "r" / "pool.judged.jsonl").exists()


def test_qrels_level_2_equals_judge_trec_l2_on_the_same_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = _qrels_judge()
    out = tmp_path / "r"
    report = judge.compare_systems(
        _write(tmp_path),
        out,
        backend=fake,
        qrels=_partial(tmp_path),
        qrels_level=2,
        measures=[*MEASURES, "ndcg_cut_3"],
        cache=False,
        resamples=200,
    )
    # Only the holes were judged.
    assert report.pool.human_labels == 5 and fake.requests and len(fake.requests) == report.pool.judged
    conv = report.conventions
    assert conv["qrels_level"] == 2 and conv["qrels_level_source"] == "--qrels-level"
    assert conv["human_labels_scale"] == "graded" and conv["scale"] == "binary"
    assert conv["relevance_level"] == 1 and conv["pairs_fixed_by_people"] == 5
    assert "grade >= 2 is relevant" in conv["human_labels_mapping"]["rule"]
    # The pool is the labels made binary at 2, judged or labelled alike.
    full = _qrels_file(tmp_path / "full.qrels", GRADES)
    binary = {q: {d: int(g >= 2) for d, g in docs.items()} for q, docs in GRADES.items()}
    assert read_qrels(out / "pool.qrels").to_dict() == binary
    for name in RUNS:
        run = out / "runs" / f"{name}.run"
        # binary-relevance measures: judge trec -l 2 on the graded labels themselves
        assert (
            main(
                ["trec", "--json", "-l", "2", *(x for m in MEASURES for x in ("-m", m)), str(full), str(run)]
            )
            == 0
        )
        trec = json.loads(capsys.readouterr().out)["all"]
        assert {m: report.systems[name].measures[m] for m in MEASURES} == {m: trec[m] for m in MEASURES}
        # NDCG's gains are the binary pool's: judge trec on the labels made binary
        bin_path = _qrels_file(tmp_path / "bin.qrels", binary)
        assert main(["trec", "--json", "-m", "ndcg_cut_3", str(bin_path), str(run)]) == 0
        assert (
            report.systems[name].measures["ndcg_cut_3"]
            == json.loads(capsys.readouterr().out)["all"]["ndcg_cut_3"]
        )


def test_explicit_l_is_the_default_qrels_level(tmp_path: Path) -> None:
    report = judge.compare_systems(
        _write(tmp_path),
        tmp_path / "r",
        backend=_qrels_judge(),
        qrels=_partial(tmp_path),
        relevance_level=2,
        cache=False,
        resamples=200,
    )
    conv = report.conventions
    assert (conv["qrels_level"], conv["qrels_level_source"], conv["relevance_level"]) == (2, "-l", 1)
    assert "qrels_level" in (tmp_path / "r" / "report.md").read_text(encoding="utf-8")


def test_order_stability_draws_only_judge_decided_pairs(tmp_path: Path) -> None:
    # Every pooled pair labelled by people: nothing to redraw, no stability figure, and the
    # report says how many pairs people fixed.
    report = judge.compare_systems(
        _write(tmp_path),
        tmp_path / "r",
        backend=RuleBackend.keyword(["[G2]", "[G3]"], text_of=passage_of, p_match=0.6),
        qrels=_qrels_file(tmp_path / "full.qrels", GRADES),
        qrels_level=2,
        cache=False,
        resamples=200,
    )
    assert report.pool.judged == 0
    assert all(c.order_stability is None for c in report.comparisons)
    assert report.conventions["pairs_fixed_by_people"] == report.pool.unique_pairs
    assert "fixed by human labels" in (tmp_path / "r" / "report.md").read_text(encoding="utf-8")


def test_resolution_rules() -> None:
    graded = read_qrels_from({"q": {"a": 3, "b": 0}})
    binary = read_qrels_from({"q": {"a": 1, "b": 0}})
    kw: dict[str, Any] = {"qrels_yes_grade": None, "grade_threshold": 2}
    # graded judge, graded labels: as they are, the judge's threshold
    s = resolve_pool_scale("graded", graded, relevance_level=None, qrels_level=None, **kw)
    assert s.mapping is not None and s.mapping.identity and s.level == 2
    # graded judge, 0/1 labels: need the grade a 1 stands for
    with pytest.raises(ValueError, match="qrels-yes-grade"):
        resolve_pool_scale("graded", binary, relevance_level=None, qrels_level=None, **kw)
    s = resolve_pool_scale(
        "graded", binary, relevance_level=None, qrels_level=None, qrels_yes_grade=2, grade_threshold=2
    )
    assert s.mapping is not None and s.mapping.apply(1) == 2
    # binary pool: -l 2 could never be reached
    with pytest.raises(ValueError, match="-l 2 on a binary pool"):
        resolve_pool_scale("binary", None, relevance_level=2, qrels_level=None, **kw)
    with pytest.raises(ValueError, match="disagree"):
        resolve_pool_scale("binary", graded, relevance_level=3, qrels_level=2, **kw)
    assert resolve_pool_scale("binary", binary, relevance_level=None, qrels_level=None, **kw).level == 1


def read_qrels_from(labels: dict[str, dict[str, int]]) -> Any:
    from judge.io._trec import Qrels

    return Qrels.from_mapping(labels)


def test_server_refuses_graded_qrels_with_a_binary_judge_naming_the_option(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from _server import app_for
    from fastapi.testclient import TestClient

    rows = {
        name: [
            {
                "id": q,
                "query": f"问题 {q}",
                "retrieval_context": [{"id": d, "text": _text(q, d)} for d in docs],
            }
            for q, docs in run.items()
        ]
        for name, run in RUNS.items()
    }
    labels = "".join(f"{q} 0 {d} {GRADES[q][d]}\n" for q, ds in PARTIAL.items() for d in ds)
    fake = _qrels_judge()
    with TestClient(app_for(tmp_path, backend=fake)) as client:
        r = client.post("/v1/compare", json={"systems": rows, "options": {"qrels": labels}})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "options.qrels_level" and "graded" in r.json()["detail"]
        r = client.post("/v1/compare", json={"systems": rows, "options": {"qrels": labels, "qrels_level": 2}})
        assert r.status_code == 202, r.text
    assert fake.requests == [] or all("[G" in passage_of(x) for x in fake.requests)
