"""Judgments in and out of Quepid and SRW on the command line: ``judge labels import/export``
in the CSV, SRW and RRE formats, ``--qrels`` given as a Quepid-style CSV, and ``judge
export`` of an experiment's judged pool; the bundled Chinese query set and its qrels, judged
by the qrels-backed judge."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from _experiment_fixtures import DATA, Bundled, bundled

from judge.cli import main
from judge.io import InputError, read_judgments, read_qrels_lines
from judge.store import qrels_escape

QUERIES = DATA / "queries.zh.jsonl"
QRELS = DATA / "queries.zh.qrels"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    return bundled(tmp_path_factory.mktemp("bundled"))


def _texts() -> dict[str, str]:
    rows = [json.loads(line) for line in QUERIES.read_text(encoding="utf-8").splitlines()]
    return {r["id"]: r["query"] for r in rows}


def _qrels_pairs(path: Path) -> list[tuple[str, str, int]]:
    return sorted((q, d, g) for _, q, d, g, _ in read_qrels_lines(path).rows())


def _quepid_csv(path: Path) -> Path:
    """The bundled qrels as Quepid exports ratings: query TEXT,docid,rating."""
    texts = _texts()
    with path.open("w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["query", "docid", "rating"])
        for q, d, g in _qrels_pairs(QRELS):
            out.writerow([texts[q], d, g])
    return path


def _query_set_and_qrels(
    tmp_path: Path, queries: dict[str, str], pairs: list[tuple[str, str, int]]
) -> tuple[Path, Path]:
    """A query set (id -> text) and the qrels of ``pairs`` (ids escaped), as files."""
    qs = tmp_path / "qs.jsonl"
    qs.write_text(
        "".join(json.dumps({"id": q, "query": t}, ensure_ascii=False) + "\n" for q, t in queries.items()),
        encoding="utf-8",
    )
    trec = tmp_path / "start.qrels"
    trec.write_text(
        "".join(f"{qrels_escape(q)} 0 {qrels_escape(d)} {g}\n" for q, d, g in pairs), encoding="utf-8"
    )
    return qs, trec


def test_labels_import_csv_then_export_trec_gives_back_the_qrels(tmp_path: Path) -> None:
    labels = _quepid_csv(tmp_path / "labels.csv")
    assert main(["labels", "import", str(labels), "--queries", str(QUERIES)]) == 0
    back = tmp_path / "back.qrels"
    assert main(["labels", "export", "--format", "trec", "-o", str(back)]) == 0
    assert _qrels_pairs(back) == _qrels_pairs(QRELS)  # 1040 pairs, grades 0-2


def test_the_import_records_its_provenance_and_mapping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "srw.json"
    texts = _texts()
    body = {
        "name": "llm",
        "type": "IMPORT_JUDGMENT",
        "judgmentRatings": [
            {
                "query": texts["q01"],
                "ratings": [{"docId": "dog01", "rating": "0.7"}, {"docId": "cat01", "rating": "0.1"}],
            }
        ],
    }
    path.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    assert main(["labels", "import", str(path), "--queries", str(QUERIES)]) == 0
    assert json.loads(capsys.readouterr().out)["scale"] == "srw-0-1"
    assert main(["labels", "list"]) == 0
    rows = {r["docno"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    # 0.7: floor(2.1 + 0.5) = 2; 0.1: floor(0.3 + 0.5) = 0
    assert (rows["dog01"]["label"], rows["cat01"]["label"]) == (2, 0)
    assert rows["dog01"]["scale"] == "graded" and rows["dog01"]["query"] == texts["q01"]
    assert rows["dog01"]["reviewer"] == "srw-import"
    assert rows["dog01"]["comment"].startswith(
        "imported from srw.json (srw, srw-0-1 0.7 -> graded 2: SRW 0-1"
    )


def test_an_ambiguous_scale_or_an_unknown_text_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "l.csv"
    path.write_text(f"query,docid,rating\n{_texts()['q01']},dog01,1\n", encoding="utf-8")
    assert main(["labels", "import", str(path), "--queries", str(QUERIES)]) == 2
    assert "field '--scale'" in capsys.readouterr().err
    path.write_text("query,docid,rating\n小狗,dog01,1\n", encoding="utf-8")
    assert main(["labels", "import", str(path), "--queries", str(QUERIES), "--scale", "binary"]) == 2
    assert "l.csv:2: field 'query'" in capsys.readouterr().err
    assert main(["labels", "import", str(path)]) == 2
    assert "field '--queries'" in capsys.readouterr().err


def test_trec_to_csv_to_srw_to_trec_keeps_hostile_ids_and_texts(tmp_path: Path) -> None:
    """Every id and text comes back exactly; the CSV guards every cell a spreadsheet would take
    for a formula (ids too: they come from whatever engine answered)."""
    queries = {
        "q1": 'red, "dress"\tsize\n中文 100%',
        "q2": "-minus=first",
        "q3": "  spaced  ",
        "=q4": "=SUM(A1)",
        "+q5": "\tplus",
        "q6": "  -minus",
        "q7": "'quoted",
    }
    pairs = [
        ("q1", 'doc,"1" %20', 3),
        ("q1", "文档 二", 0),
        ("q2", "%", 2),
        ("q3", "d'4", 1),
        ("q3", "@at", 0),
        ("=q4", '=HYPERLINK("http://x","y")', 1),
        ("=q4", "+d2", 0),
        ("+q5", "-d3", 1),
        ("+q5", "@d4", 0),
        ("q6", " -d5", 1),
        ("q7", "'d6", 0),
        ("q7", "''=d7", 1),
    ]
    qs, trec = _query_set_and_qrels(tmp_path, queries, pairs)
    steps = [("trec", "csv"), ("csv", "srw"), ("srw", "rre"), ("rre", "trec")]
    current = trec
    for i, (_, out_fmt) in enumerate(steps):
        store = tmp_path / f"store{i}.sqlite"
        extra = ["--reviewer", "nist"] if current.suffix == ".qrels" else ["--queries", str(qs)]
        assert main(["labels", "import", str(current), "--store", str(store), *extra]) == 0
        nxt = tmp_path / f"step{i}.{'qrels' if out_fmt == 'trec' else out_fmt}"
        assert (
            main(
                [
                    "labels",
                    "export",
                    "--store",
                    str(store),
                    "--format",
                    out_fmt,
                    "-o",
                    str(nxt),
                    "--queries",
                    str(qs),
                ]
            )
            == 0
        )
        if out_fmt != "trec":
            got = sorted((j.query, j.docid, int(j.rating)) for j in read_judgments(nxt).judgments)
            assert got == sorted((queries[q], d, g) for q, d, g in pairs)
        if out_fmt == "csv":
            rows = list(csv.reader(nxt.open(encoding="utf-8", newline="")))
            assert len(rows) == 1 + len(pairs)
            assert not [c for row in rows for c in row if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
            assert [" =SUM(A1)", ' =HYPERLINK("http://x","y")', "1"] in rows
            assert ["   -minus", "  -d5", "1"] in rows  # one more space: read back exactly
        current = nxt
    assert current.read_text(encoding="utf-8").count("\n") == len(pairs)
    assert sorted(current.read_text(encoding="utf-8").splitlines()) == sorted(
        trec.read_text(encoding="utf-8").splitlines()
    )


def test_two_query_ids_sharing_a_text_are_never_merged_by_an_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = [("q1", "d1", 1), ("q1", "d2", 0), ("q2", "d1", 0), ("q2", "d3", 1)]
    qs, trec = _query_set_and_qrels(tmp_path, {"q1": "red dress", "q2": "red dress"}, pairs)
    one, two = str(tmp_path / "one.sqlite"), str(tmp_path / "two.sqlite")
    assert main(["labels", "import", str(trec), "--reviewer", "nist", "--store", one]) == 0
    capsys.readouterr()
    for fmt in ("csv", "srw", "rre"):
        out = tmp_path / f"l.{fmt}"
        args = ["labels", "export", "--store", one, "--format", fmt, "--queries", str(qs), "-o", str(out)]
        assert main(args) == 2, fmt
        err = capsys.readouterr().err
        assert "field '--format'" in err and "'q1' and 'q2' share the text 'red dress'" in err
        assert "--format trec" in err and not out.exists()
    # TREC names queries by id: the round trip keeps both, each with its own grades
    back = tmp_path / "back.qrels"
    assert main(["labels", "export", "--store", one, "--format", "trec", "-o", str(back)]) == 0
    assert main(["labels", "import", str(back), "--reviewer", "nist", "--store", two]) == 0
    again = tmp_path / "again.qrels"
    assert main(["labels", "export", "--store", two, "--format", "trec", "-o", str(again)]) == 0
    assert _qrels_pairs(again) == pairs


def test_labels_export_on_quepid_and_srw_scales(tmp_path: Path) -> None:
    labels = _quepid_csv(tmp_path / "labels.csv")
    assert main(["labels", "import", str(labels), "--queries", str(QUERIES)]) == 0
    out = tmp_path / "l.json"
    assert main(["labels", "export", "--format", "srw", "--scale", "srw-0-1", "-o", str(out)]) == 0
    body = json.loads(out.read_text(encoding="utf-8"))
    assert body["type"] == "IMPORT_JUDGMENT" and "judge scale: srw-0-1" in body["description"]
    first = body["judgmentRatings"][0]
    assert first["query"] == _texts()["q01"]
    ratings = {r["docId"]: r["rating"] for r in first["ratings"]}
    assert (ratings["dog01"], ratings["dog03"], ratings["cat01"]) == (
        "0.667",
        "0.333",
        "0.000",
    )  # 2, 1, 0 over 3
    out10 = tmp_path / "l10.csv"
    assert main(["labels", "export", "--format", "csv", "--scale", "quepid-1-10", "-o", str(out10)]) == 0
    assert f"{_texts()['q01']},dog01,7\n" in out10.read_text(encoding="utf-8")  # 1 + 3 * 2


# ---------------------------------------------------------------------------- experiments
def _experiment(data: Bundled, out: Path, *args: str) -> int:
    return main(
        [
            "experiment",
            str(data.queries),
            "--config",
            str(data.config),
            "--grid",
            "k1=0.6,1.2",
            "--backend",
            f"qrels:{data.qrels}",
            "--cache",
            str(out.parent / "cache.sqlite"),
            "--resamples",
            "200",
            "-o",
            str(out),
            "--quiet",
            "--json",
            *args,
        ]
    )


def test_experiment_qrels_as_quepid_csv_gives_the_same_figures(
    data: Bundled, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = _quepid_csv(tmp_path / "labels.csv")
    assert _experiment(data, tmp_path / "trec", "--qrels", str(QRELS), "--qrels-level", "1") == 0
    by_trec = json.loads(capsys.readouterr().out)
    assert _experiment(data, tmp_path / "csv", "--qrels", str(labels), "--qrels-level", "1") == 0
    by_csv = json.loads(capsys.readouterr().out)
    assert {n: s["measures"] for n, s in by_csv["systems"].items()} == {
        n: s["measures"] for n, s in by_trec["systems"].items()
    }
    assert by_csv["experiment"]["best"] == by_trec["experiment"]["best"]
    assert (tmp_path / "csv" / "pool.qrels").read_text() == (tmp_path / "trec" / "pool.qrels").read_text()
    assert by_csv["conventions"]["human_labels_file"] == {
        "format": "csv",
        "scale": "graded-0-3",
        "mapping": "graded 0-3 kept as they are",
    }


def test_qrels_that_are_neither_format_or_ambiguous_are_exit_2(
    data: Bundled, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("q01 0 dog01 2\nhello, world\n", encoding="utf-8")
    assert _experiment(data, tmp_path / "x", "--qrels", str(bad)) == 2
    assert "bad.txt:2" in capsys.readouterr().err
    bad.write_text("hello, world\n", encoding="utf-8")
    assert _experiment(data, tmp_path / "x", "--qrels", str(bad)) == 2
    assert "bad.txt:1: neither TREC qrels" in capsys.readouterr().err
    amb = tmp_path / "amb.csv"
    amb.write_text(f"query,docid,rating\n{_texts()['q01']},dog01,1\n", encoding="utf-8")
    assert _experiment(data, tmp_path / "x", "--qrels", str(amb)) == 2
    assert "field '--qrels-scale'" in capsys.readouterr().err
    assert not (tmp_path / "x" / "pool.qrels").exists()


def test_judge_export_of_an_experiment_has_one_row_per_pooled_pair(
    data: Bundled, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    assert _experiment(data, out) == 0
    capsys.readouterr()
    pool = _qrels_pairs(out / "pool.qrels")
    target = tmp_path / "pool.csv"
    assert main(["export", str(out), "--format", "csv", "-o", str(target)]) == 0
    rows = read_judgments(target).judgments
    assert len(rows) == len(pool) == len(set(pool))
    ids = {t: q for q, t in _texts().items()}
    assert sorted((ids[j.query], j.docid, int(j.rating)) for j in rows) == pool
    srw = tmp_path / "pool.json"
    assert main(["export", str(out), "--format", "srw", "-o", str(srw)]) == 0
    body = json.loads(srw.read_text(encoding="utf-8"))
    assert (
        f"{len(pool)} rating(s) by the LLM judge" in body["description"]
        and "0 by people" in body["description"]
    )
    assert {r["source"] for e in body["judgmentRatings"] for r in e["ratings"]} == {"judge"}
    back = tmp_path / "pool.qrels"
    assert main(["export", str(out), "--format", "trec", "-o", str(back)]) == 0
    assert back.read_text() == (out / "pool.qrels").read_text()
    assert main(["export", str(tmp_path / "nothing"), "--format", "csv", "-o", str(target)]) == 2


def test_judge_export_says_which_ratings_were_people(data: Bundled, tmp_path: Path) -> None:
    few = tmp_path / "few.qrels"
    few.write_text("q01 0 dog01 1\nq01 0 cat01 0\n", encoding="utf-8")
    out = tmp_path / "exp"
    assert _experiment(data, out, "--qrels", str(few)) == 0
    target = tmp_path / "pool.rre.json"
    assert main(["export", str(out), "--format", "rre", "-o", str(target)]) == 0
    body = json.loads(target.read_text(encoding="utf-8"))
    by = body["judge_sources"][_texts()["q01"]]
    assert by["dog01"] == by["cat01"] == "human"  # cat01 is labelled though no run retrieved it
    assert sum(v == "human" for s in body["judge_sources"].values() for v in s.values()) == 2
    assert body["queries"][0]["placeholders"]["$query"] == _texts()["q01"]


def test_labels_as_a_quepid_csv_apply_as_the_trec_qrels_do(
    data: Bundled, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    assert _experiment(data, out) == 0
    capsys.readouterr()
    runs = sorted(out.glob("runs/*.jsonl"))
    labels = _quepid_csv(tmp_path / "labels.csv")
    pools = []
    for i, given in enumerate((QRELS, labels)):
        report = tmp_path / f"cmp{i}"
        args = [f"a={runs[0]}", f"b={runs[1]}", "--backend", f"qrels:{data.qrels}", "--resamples", "200"]
        code = main(
            [
                "compare-systems",
                *args,
                "--labels",
                str(given),
                "--labels-level",
                "1",
                "-o",
                str(report),
                "--quiet",
            ]
        )
        assert code == 0
        pools.append((report / "pool.qrels").read_text())
    assert pools[0] == pools[1]
    capsys.readouterr()
    scored = []
    for given in (QRELS, labels):
        target = tmp_path / f"score-{given.suffix}.jsonl"
        args = [str(runs[0]), "-o", str(target), "--backend", f"qrels:{data.qrels}", "--labels", str(given)]
        assert main(["score", *args, "--labels-level", "1"]) == 0
        summary = json.loads(capsys.readouterr().out)
        scored.append((summary["labels"]["applied"], summary["labels"]["labels"], summary["judge"]["map"]))
    # the qrels grade every corpus passage for every query (1040): each of the run's 125 passages has one
    assert scored[0] == scored[1] and scored[0][:2] == (125, 1040)
    bad = tmp_path / "amb.csv"
    bad.write_text(f"query,docid,rating\n{_texts()['q01']},dog01,1\n", encoding="utf-8")
    assert (
        main(
            [
                "score",
                str(runs[0]),
                "-o",
                str(tmp_path / "x.jsonl"),
                "--backend",
                f"qrels:{data.qrels}",
                "--labels",
                str(bad),
            ]
        )
        == 2
    )
    assert "field '--labels-scale'" in capsys.readouterr().err


def test_a_pool_with_hostile_ids_and_texts_exports_and_comes_back_as_qrels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = {"q1": 'red, "dress"\t100%\n中文', "q 2": "-minus"}
    ids = {"q1": ["doc 1", 'a,"b"', "百分%20"], "q 2": ["doc 1", "@x"]}
    for name, order in (("a", 1), ("b", -1)):
        rows = [
            {
                "id": q,
                "query": texts[q],
                "retrieval_context": [{"id": d, "text": f"{q} {d}"} for d in ids[q][::order]],
            }
            for q in texts
        ]
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        )
    grades = {
        ("q1", "doc 1"): 2,
        ("q1", 'a,"b"'): 0,
        ("q1", "百分%20"): 1,
        ("q 2", "doc 1"): 0,
        ("q 2", "@x"): 3,
    }
    labels = tmp_path / "labels.csv"
    with labels.open("w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["query", "docid", "rating"])
        out.writerows([texts[q], d, g] for (q, d), g in grades.items())
    judge_qrels = tmp_path / "judge.qrels"
    judge_qrels.write_text("x 0 y 0\n")

    def compare(report: Path, qrels: Path) -> None:
        args = [
            "compare-systems",
            f"a={tmp_path / 'a.jsonl'}",
            f"b={tmp_path / 'b.jsonl'}",
            "--qrels",
            str(qrels),
        ]
        assert (
            main(
                [*args, "--backend", f"qrels:{judge_qrels}", "--mode", "graded", "-o", str(report), "--quiet"]
            )
            == 0
        )

    compare(tmp_path / "r1", labels)
    # the pool holds TREC tokens: whitespace in an id became '_'
    assert sorted((tmp_path / "r1" / "pool.qrels").read_text().splitlines()) == sorted(
        ["q1 0 doc_1 2", 'q1 0 a,"b" 0', "q1 0 百分%20 1", "q_2 0 doc_1 0", "q_2 0 @x 3"]
    )
    exported = tmp_path / "pool.csv"
    assert main(["export", str(tmp_path / "r1"), "--format", "csv", "-o", str(exported)]) == 0
    got = {(j.query, j.docid): int(j.rating) for j in read_judgments(exported).judgments}
    assert got == {(texts[q], d): g for (q, d), g in grades.items()}  # original ids and texts
    assert "\n -minus, @x,3\n" in exported.read_text(encoding="utf-8")  # a guard in every cell
    compare(tmp_path / "r2", exported)
    assert (tmp_path / "r2" / "pool.qrels").read_text() == (tmp_path / "r1" / "pool.qrels").read_text()
    srw = tmp_path / "pool.json"
    assert (
        main(["export", str(tmp_path / "r1"), "--format", "srw", "--scale", "srw-0-1", "-o", str(srw)]) == 0
    )
    body = json.loads(srw.read_text(encoding="utf-8"))
    assert "0 rating(s) by the LLM judge" in body["description"] and "5 by people" in body["description"]
    assert {r["docId"]: r["rating"] for r in body["judgmentRatings"][0]["ratings"]} == {
        "doc 1": "0.667",
        'a,"b"': "0.000",
        "百分%20": "0.333",
    }
    capsys.readouterr()
    assert main(["export", str(tmp_path / "r1"), "--format", "csv", "--scale", "binary", "-o", str(srw)]) == 2
    assert "field '--scale'" in capsys.readouterr().err


def test_the_python_api_takes_a_quepid_list_and_its_scale(data: Bundled, tmp_path: Path) -> None:
    import judge

    out = tmp_path / "exp"
    assert _experiment(data, out) == 0
    runs = sorted(out.glob("runs/*.jsonl"))
    texts = _texts()
    ten = tmp_path / "ten.csv"  # Quepid's 1-10 scale: 1, 4, 7, 10 are grades 0, 1, 2, 3
    ten.write_text(f"query,docid,rating\n{texts['q01']},dog01,10\n{texts['q01']},cat01,1\n", encoding="utf-8")
    systems = {"a": runs[0], "b": runs[1]}
    kw = {"backend": f"qrels:{data.qrels}", "resamples": 200, "mode": "graded"}
    report = judge.compare_systems(systems, tmp_path / "r", qrels=ten, qrels_scale="quepid-1-10", **kw)
    assert report.conventions["human_labels_file"]["scale"] == "quepid-1-10"
    lines = (tmp_path / "r" / "pool.qrels").read_text().splitlines()
    assert "q01 0 dog01 3" in lines and "q01 0 cat01 0" in lines  # 10 -> 3, 1 -> 0
    with pytest.raises(InputError) as err:
        judge.compare_systems(systems, tmp_path / "r2", qrels=ten, qrels_scale="likert", **kw)
    assert err.value.field == "--qrels-scale"
