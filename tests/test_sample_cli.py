"""The sample mode on the command line: several draws over one output record union
probabilities; the documented round trip (sample, label, ``export --sample``,
``--sample-labels``) holds for ids with a space and ``%``; an inclusion probability below the
floor and ``--sample-level`` without ``--sample-labels`` are exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.cli import main
from judge.store import LabelStore


def _dataset(tmp_path: Path, ids: dict[str, list[str]]) -> Path:
    data = tmp_path / "d.jsonl"
    lines = [
        json.dumps(
            {
                "id": q,
                "query": f"query {q}",
                "retrieval_context": [{"id": d, "text": f"text {d}"} for d in docs],
            }
        )
        for q, docs in ids.items()
    ]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data


def _score(tmp_path: Path, data: Path, qrels: Path, *extra: str, out: str = "out.jsonl") -> int:
    return main(
        ["score", str(data), "-o", str(tmp_path / out), "--backend", f"qrels:{qrels}", "--no-cache",
         "--quiet", "-k", "2", *extra]
    )  # fmt: skip


def test_ids_with_a_space_and_percent_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The docs' steps with ids ``q 0``, ``a%b c`` and ``d%20``: the export escapes them
    (``q%200``, ``a%25b%20c``, ``d%2520``) and ``--sample-labels`` reads them back."""
    data = _dataset(tmp_path, {"q 0": ["a%b c", "b"], "q1": ["c", "d%20"]})
    judge = tmp_path / "judge.qrels"  # the qrels judge reads a whitespace in an id as _
    judge.write_text("q_0 0 a%b_c 1\nq_0 0 b 1\nq1 0 c 1\nq1 0 d%20 0\n", encoding="utf-8")
    assert _score(tmp_path, data, judge) == 0
    store = str(tmp_path / "labels.sqlite")
    assert main(["labels", "sample", str(tmp_path / "out.jsonl"), "--store", store, "--n", "4"]) == 0
    labels = tmp_path / "labels.qrels"  # reviewers label two drawn pairs, ids escaped as exports write them
    labels.write_text("q%200 0 a%25b%20c 0\nq1 0 d%2520 1\nq1 0 c 1\nq%200 0 b 1\n", encoding="utf-8")
    assert main(["labels", "import", str(labels), "--reviewer", "ann", "--store", store]) == 0
    sample = tmp_path / "sample.qrels"
    assert main(["labels", "export", "--sample", "--store", store, "-o", str(sample)]) == 0
    lines = sample.read_text(encoding="utf-8").splitlines()[1:]
    assert lines == ["q%200 0 a%25b%20c 0 1.0", "q%200 0 b 1 1.0", "q1 0 c 1 1.0", "q1 0 d%2520 1 1.0"]
    (tmp_path / "out.jsonl").unlink()
    capsys.readouterr()
    assert _score(tmp_path, data, judge, "--sample-labels", str(sample)) == 0
    ppi = json.loads((tmp_path / "out.summary.json").read_text(encoding="utf-8"))["ppi"]
    # a%b c labelled 0 (judge yes): q 0's P@2 1 -> 0.5, -0.25 on the mean; d%20 labelled 1 (judge
    # no): q1's 0.5 -> 1, +0.25; every pair drawn with probability 1: 0.75 - 0.25 + 0.25 = 0.75
    assert ppi["labels"] == 4 and ppi["unlabelled"] == 0
    assert ppi["precision"]["2"]["judge"] == pytest.approx(0.75)
    assert ppi["precision"]["2"]["estimate"] == pytest.approx(0.75)


def test_two_draws_over_one_output_record_the_union_probability(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 judged pairs, ``--n 2`` twice: each draw gives every pair 2/8 = 0.25, so a pair either
    draw took was drawn with probability 1 - 0.75^2 = 0.4375; the export writes that, and the
    second draw is independent of the first although the seed is the same."""
    data = _dataset(tmp_path, {f"q{i}": ["a", "b"] for i in range(4)})
    judge = tmp_path / "judge.qrels"
    judge.write_text("".join(f"q{i} 0 a 1\nq{i} 0 b 0\n" for i in range(4)), encoding="utf-8")
    assert _score(tmp_path, data, judge) == 0
    store = str(tmp_path / "labels.sqlite")
    draw = ["labels", "sample", str(tmp_path / "out.jsonl"), "--store", store, "--n", "2", "--seed", "5"]
    capsys.readouterr()
    assert main(draw) == 0
    first = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert first and {d["inclusion"] for d in first} == {0.25}
    assert main(draw) == 0
    second = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert second and {d["inclusion"] for d in second} == {0.4375}
    took = {(d["qid"], d["docno"]) for d in first + second}
    with LabelStore(store) as s:
        drawn = s.sample_draws()
    assert {(q, d) for q, d, _, _ in drawn} == took and {p for _, _, p, _ in drawn} == {0.4375}
    sample = tmp_path / "sample.qrels"
    assert main(["labels", "export", "--sample", "--store", store, "-o", str(sample)]) == 0
    rows = [x.split() for x in sample.read_text(encoding="utf-8").splitlines()[1:]]
    assert len(rows) == len(took) and {r[4] for r in rows} == {"0.4375"} and {r[3] for r in rows} == {"-1"}


def test_export_names_the_output_when_several_were_sampled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _dataset(tmp_path, {"q0": ["a", "b"]})
    judge = tmp_path / "judge.qrels"
    judge.write_text("q0 0 a 1\nq0 0 b 0\n", encoding="utf-8")
    assert _score(tmp_path, data, judge) == 0
    assert _score(tmp_path, data, judge, out="other.jsonl") == 0
    store = str(tmp_path / "labels.sqlite")
    for out in ("out.jsonl", "other.jsonl"):
        assert main(["labels", "sample", str(tmp_path / out), "--store", store, "--n", "2"]) == 0
    sample = tmp_path / "sample.qrels"
    capsys.readouterr()
    assert main(["labels", "export", "--sample", "--store", store, "-o", str(sample)]) == 2
    assert "--job" in capsys.readouterr().err and not sample.exists()
    job = ["--job", str(tmp_path / "other.jsonl")]
    assert main(["labels", "export", "--sample", "--store", store, "-o", str(sample), *job]) == 0
    assert str(tmp_path / "other.jsonl") in sample.read_text(encoding="utf-8").splitlines()[0]


def test_a_probability_below_the_floor_and_a_level_without_labels_are_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _dataset(tmp_path, {"q0": ["a", "b"]})
    judge = tmp_path / "judge.qrels"
    judge.write_text("q0 0 a 1\nq0 0 b 0\n", encoding="utf-8")
    tiny = tmp_path / "tiny.qrels"
    tiny.write_text("q0 0 a 1 0.5\nq0 0 b 0 1e-320\n", encoding="utf-8")
    capsys.readouterr()
    assert _score(tmp_path, data, judge, "--sample-labels", str(tiny)) == 2
    err = capsys.readouterr().err
    assert f"{tiny}:2" in err and "inclusion" in err and "1e-06" in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()
    # a draw whose probabilities would fall below the floor is refused before anything is recorded
    assert _score(tmp_path, data, judge) == 0
    store = str(tmp_path / "labels.sqlite")
    capsys.readouterr()
    assert main(["labels", "sample", str(tmp_path / "out.jsonl"), "--store", store, "--n", "1e-9"]) == 2
    assert "--n" in capsys.readouterr().err
    with LabelStore(store) as s:
        assert s.sample_jobs() == []
    (tmp_path / "out.jsonl").unlink()
    for flags in (["--sample-level", "2"], ["--allow-unlabelled"]):
        assert _score(tmp_path, data, judge, *flags) == 2
        assert f"{flags[0]} is only used with --sample-labels" in capsys.readouterr().err
        assert not (tmp_path / "out.jsonl").exists()
    compare = ["compare-systems", f"A={data}", f"B={data}", "-o", str(tmp_path / "cmp"), "--backend",
               f"qrels:{judge}", "--no-cache", "--quiet", "--sample-level", "2"]  # fmt: skip
    assert main(compare) == 2
    assert "--sample-level is only used with --sample-labels" in capsys.readouterr().err
    # and in Python
    import judge as api
    from judge.io import InputError

    with pytest.raises(InputError) as info:
        api.compare_systems({"A": data, "B": data}, backend=f"qrels:{judge}", cache=False, sample_level=2)
    assert info.value.field == "sample_level"


def test_a_comparison_names_each_systems_unlabelled_drawn_pairs(tmp_path: Path) -> None:
    """compare-systems with a sample file whose q1 d was drawn and left unlabelled: the system
    that ranks q1 d names it (and the report says so), with or without --allow-unlabelled; the
    system that does not rank it does not."""
    a = _dataset(tmp_path, {"q0": ["a", "b"], "q1": ["c", "d"]})
    b = tmp_path / "b.jsonl"
    b.write_text(
        a.read_text(encoding="utf-8").replace(', {"id": "d", "text": "text d"}', ""), encoding="utf-8"
    )
    judge = tmp_path / "judge.qrels"
    judge.write_text("q0 0 a 1\nq0 0 b 1\nq1 0 c 1\nq1 0 d 0\n", encoding="utf-8")
    sample = tmp_path / "sample.qrels"
    sample.write_text("q0 0 b 0 1.0\nq1 0 c 1 1.0\nq1 0 d -1 1.0\n", encoding="utf-8")
    base = ["compare-systems", f"A={a}", f"B={b}", "--backend", f"qrels:{judge}", "--no-cache", "--quiet",
            "--stability-resamples", "0", "--resamples", "50", "-m", "P_2",
            "--sample-labels", str(sample)]  # fmt: skip
    for allow, out in ((False, "cmp"), (True, "cmp2")):
        assert main([*base, "-o", str(tmp_path / out), *(["--allow-unlabelled"] if allow else [])]) == 0
        report = json.loads((tmp_path / out / "report.json").read_text(encoding="utf-8"))
        pa, pb = report["systems"]["A"]["ppi"], report["systems"]["B"]["ppi"]
        assert pa["unlabelled_pairs"] == [["q1", "d"]] and pa["allow_unlabelled"] is allow
        assert pb["unlabelled_pairs"] == [] and pb["interval_note"] is None
        # A: the judge's P@2 (1 + 0.5) / 2 = 0.75; b labelled 0: -0.25; c agrees; d counts as agreeing
        assert pa["precision"]["2"]["estimate"] == pytest.approx(0.5)
        md = (tmp_path / out / "report.md").read_text(encoding="utf-8")
        assert "2 of 4, 1 unlabelled" in md and "drawn pair(s) left unlabelled" in md
