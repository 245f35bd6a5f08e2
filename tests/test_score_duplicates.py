"""A passage repeated in one query's list (the same docno twice) of a dataset from any
source: the reader keeps the first and drops the rest, as ``judge search`` does, and says
so (the record's ``dropped``, the summary's ``duplicates_dropped``, a ``dropped`` line in
the rejects file and on stderr). Every figure is the de-duplicated list's, derived by hand
as trec_eval computes it (pytrec_eval gives the same: P_5 0.4, map 0.555556, ndcg_cut_5
0.703918 for q1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.cli import main
from judge.io import iter_dataset
from judge.systems import read_systems

Q1 = {
    "id": "q1",
    "query": "first",
    # d1 again at rank 3: dropped (its first text is the one judged)
    "retrieval_context": [
        {"id": d, "text": t}
        for d, t in (("d1", "one"), ("d2", "two"), ("d1", "1 again"), ("d3", "three"), ("d4", "four"))
    ],
    "qrels": {"d1": 1, "d2": 0, "d3": 1, "d4": 0, "d5": 1},
}
Q2 = {  # bare strings: the docno is the text's hash, so the same text twice is one passage
    "id": "q2",
    "query": "second",
    "retrieval_context": ["same text", "same text", {"id": "d9", "text": "nine"}],
    "qrels": {"d9": 1},
}
LABELS = "q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 1\nq1 0 d4 0\nq1 0 d5 1\nq2 0 d9 1\n"


def _files(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(Q1) + "\n" + json.dumps(Q2) + "\n", encoding="utf-8")
    labels = tmp_path / "labels.qrels"
    labels.write_text(LABELS, encoding="utf-8")
    return data, labels


def _score(tmp_path: Path, *extra: str) -> int:
    data, labels = _files(tmp_path)
    out = tmp_path / "out.jsonl"
    args = ["score", str(data), "-o", str(out), "--backend", f"qrels:{labels}", "--mode", "binary"]
    return main(
        [*args, "--no-cache", "--measure", "P@5", "--measure", "AP", "--measure", "ndcg_cut_5", *extra]
    )


def test_score_counts_a_repeated_passage_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _score(tmp_path) == 0
    q1, q2 = (json.loads(x) for x in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines())
    assert q1["docnos"] == ["d1", "d2", "d3", "d4"] and q1["n_passages"] == 4
    # the record says the dropped repeat still counts where the retrieved list is measured
    assert q1["dropped"] == {"duplicate_ids": 1, "retrieved": 5, "still_counted_in": ["redundancy"]}
    assert q2["dropped"] == {"duplicate_ids": 1, "retrieved": 3, "still_counted_in": ["redundancy"]}
    assert [v["verdict"] for v in q1["verdicts"]] == ["yes", "no", "yes", "no"]
    gt = q1["ground_truth"]
    # trec_eval on [d1 d2 d3 d4], R = 3 (d1 d3 d5): P_5 = 2/5; AP = (1/1 + 2/3) / 3;
    # ndcg_cut_5 = (1 + 1/log2 4) / (1 + 1/log2 3 + 1/log2 4) = 1.5 / 2.130930
    assert gt["measures"] == {"P@5": 0.4, "AP": 0.555556, "ndcg_cut_5": 0.703918}
    assert gt["precision"]["5"] == 0.4 and gt["ap"] == 0.555556 and gt["ndcg"]["5"] == 0.703918
    assert gt["agreement"] == {"tp": 2, "fp": 0, "fn": 0, "tn": 2}
    # The judge's own figures on its verdicts yes no yes no: 2 yes of 4; AP over the 2 yes
    # (1/1 + 2/3) / 2; NDCG's ideal is the judged list re-sorted: 1.5 / (1 + 1/log2 3).
    assert (q1["score"], q1["ap"], q1["ndcg"]["5"]) == (0.5, 0.833333, 0.919721)
    assert q1["measures"]["P@5"] == 0.4
    # q2: [same text, d9], d9 the only relevant, at rank 2: P_5 1/5, AP 1/2, NDCG 1/log2 3
    assert q2["ground_truth"]["measures"] == {"P@5": 0.2, "AP": 0.5, "ndcg_cut_5": 0.63093}
    summary = json.loads((tmp_path / "out.summary.json").read_text(encoding="utf-8"))
    assert summary["passages"] == 6 and summary["this_run"]["duplicates_dropped"] == 2
    assert summary["this_run"]["truncation_warnings"] == 0
    assert summary["ground_truth"]["measures"] == {"P@5": 0.3, "AP": 0.527778, "ndcg_cut_5": 0.667424}
    assert summary["judge"]["map"] == 0.916667  # (0.833333 + 1) / 2
    rejects = [
        json.loads(x) for x in (tmp_path / "out.rejects.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [(r["line"], r["field"], r["action"]) for r in rejects] == [
        (1, "retrieval_context[2]", "dropped"),
        (2, "retrieval_context[1]", "dropped"),
    ]
    assert (
        rejects[0]["error"]
        == "1 passage(s) repeat an earlier docno, dropped (the first kept): [2] repeats [0] (docno 'd1')"
    )
    err = capsys.readouterr().err
    assert "judge score: warning:" in err and "[2] repeats [0] (docno 'd1')" in err


def test_strict_refuses_a_list_with_a_repeat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _score(tmp_path, "--strict") == 2
    err = capsys.readouterr().err
    assert "(would be dropped)" in err and "--strict refuses the file" in err
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text(encoding="utf-8")


def test_the_reader_keeps_the_first_of_each_docno_only(tmp_path: Path) -> None:
    data, _ = _files(tmp_path)
    q1, q2 = list(iter_dataset(data))
    assert not isinstance(q1, Exception) and not isinstance(q2, Exception)
    assert [(p.id, p.text) for p in q1.passages] == [
        ("d1", "one"),
        ("d2", "two"),
        ("d3", "three"),
        ("d4", "four"),
    ]
    assert q1.duplicates == 1 and q1.dropped is not None and q1.dropped.field == "retrieval_context[2]"
    assert q1.warnings == ()
    assert [p.text for p in q2.passages] == ["same text", "nine"]
    # the list as retrieved: a repeat points at the passage kept for its docno
    assert q1.retrieved == (0, 1, 0, 2, 3) and q2.retrieved == (0, 0, 1)
    assert q1.retrieved_texts() == ["one", "two", "one", "three", "four"]
    assert q2.retrieved_texts(2) == ["same text", "same text"]
    single = tmp_path / "single.jsonl"  # no repeat: nothing dropped
    single.write_text(json.dumps({"query": "q", "retrieval_context": ["a", "b"]}) + "\n", encoding="utf-8")
    (only,) = list(iter_dataset(single))
    assert not isinstance(only, Exception) and only.dropped is None and only.duplicates == 0
    assert len(only.passages) == 2 and only.retrieved == () and only.retrieved_texts() == ["a", "b"]


def test_a_line_repeating_one_passage_many_times_is_one_problem(tmp_path: Path) -> None:
    many = tmp_path / "many.jsonl"
    context = [{"id": "d1", "text": "one"}, {"id": "d2", "text": "two"}] * 3000 + ["tail"]
    many.write_text(
        json.dumps({"id": "q", "query": "q", "retrieval_context": context}) + "\n", encoding="utf-8"
    )
    (rec,) = list(iter_dataset(many))
    assert not isinstance(rec, Exception)
    assert [p.docno for p in rec.passages][:2] == ["d1", "d2"] and len(rec.passages) == 3
    assert rec.duplicates == 5998 and rec.dropped is not None
    assert rec.dropped.field == "retrieval_context[2]"
    assert rec.dropped.message == (
        "5998 passage(s) repeat an earlier docno, dropped (the first kept): [2] repeats [0] (docno 'd1'), "
        "[3] repeats [1] (docno 'd2'), [4] repeats [0] (docno 'd1') and 5995 more"
    )


def test_compare_systems_still_counts_the_repeats_once(tmp_path: Path) -> None:
    data, _ = _files(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text(
        json.dumps({**Q1, "retrieval_context": Q1["retrieval_context"][:2]}) + "\n", encoding="utf-8"
    )
    inputs = read_systems({"a": data, "b": other})
    assert inputs.systems[0].queries["q1"].docnos == ("d1", "d2", "d3", "d4")
    assert "2 passage(s) repeated within one ranking were counted once" in inputs.warnings


# Six passages as plain strings, two repeating the first (one exactly, one
# with markup) and one nearly repeating the third. The reader drops the exact repeat (its
# derived docno repeats), but redundancy@k measures what the retriever returned.
SIX = [
    "Anaemia in puppies shows as pale gums and tiredness.",
    "<p>Anaemia in puppies shows as pale <em>gums</em> and tiredness.</p>",
    "Dry dog food keeps for about a year once opened.",
    "Anaemia in puppies shows as pale gums and tiredness.",
    "Dry dog food keeps for about a year once opened!",
    "Vaccinate puppies at eight weeks.",
]


def test_redundancy_counts_a_repeat_the_reader_dropped(tmp_path: Path) -> None:
    data = tmp_path / "six.jsonl"
    data.write_text(json.dumps({"id": "r", "query": "puppy anaemia", "retrieval_context": SIX}) + "\n")
    labels = tmp_path / "labels.qrels"
    labels.write_text("r 0 nothing 0\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["score", str(data), "-o", str(out), "--backend", f"qrels:{labels}", "--no-cache", "-k", "5", "10"]
    assert main([*args, "--quiet"]) == 0
    (rec,) = (json.loads(x) for x in out.read_text(encoding="utf-8").splitlines())
    # the judged list has five passages (the exact repeat at [3] dropped, TREC semantics)...
    assert rec["n_passages"] == 5 and rec["dropped"]["duplicate_ids"] == 1
    # ...but the top 5 as retrieved hold three repeats: [1] (the first with markup), [3] (the
    # first exactly) and [4] (the third with "!" for "."; cleaned, 39 characters, 35 5-grams
    # each, 34 shared of 36: Jaccard 17/18 >= 0.8): 3/5 = 0.6; at 10 (all six) 3/6 = 0.5.
    # With the dropped repeat uncounted it was 2 of [A, <p>A, C, C', V] at both: 0.4.
    assert rec["redundancy"] == {"5": 0.6, "10": 0.5}
    assert rec["dropped"]["retrieved"] == 6 and rec["dropped"]["still_counted_in"] == ["redundancy"]
    summary = json.loads((tmp_path / "out.summary.json").read_text(encoding="utf-8"))
    assert summary["redundancy"] == {"5": 0.6, "10": 0.5}
    assert "still counts at its rank" in summary["conventions"]["redundancy"]["repeats"]


def test_the_guide_redundancy_sample_gives_the_figures_it_prints(tmp_path: Path) -> None:
    """docs/guides/judge-a-dataset.md: r1's sixth passage repeats its fourth exactly (dropped
    by the reader), yet counts: 2 of the top 5 (0.4) and 3 of all 6 (0.5)."""
    root = Path(__file__).resolve().parents[1]
    labels = tmp_path / "labels.qrels"
    labels.write_text("r1 0 nothing 0\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    sample = str(root / "datasets" / "redundancy.sample.jsonl")
    args = ["score", sample, "-o", str(out), "--backend", f"qrels:{labels}", "--no-cache", "-k", "5", "10"]
    assert main([*args, "--quiet"]) == 0
    recs = {r["id"]: r["redundancy"] for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert recs == {"r1": {"5": 0.4, "10": 0.5}, "r2": {"5": 0, "10": 0}}
    guide = (root / "docs" / "guides" / "judge-a-dataset.md").read_text(encoding="utf-8")
    assert '# {"id":"r1","redundancy":{"5":0.4,"10":0.5}}' in guide
    summary = json.loads((tmp_path / "out.summary.json").read_text(encoding="utf-8"))
    assert summary["redundancy"] == {"5": 0.2, "10": 0.25} and '# {"5":0.2,"10":0.25}' in guide
