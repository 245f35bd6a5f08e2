"""The embedded engine, the runner's files and resume, the CLI and ``judge.search(...)``:
BM25 scores against values worked out by hand, jieba on a Chinese query, and the written
dataset read back by ``judge score``."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
from pathlib import Path

import pytest
from _helpers import isolate_cli_env

import judge
from judge.cli import main
from judge.io import read_dataset, read_run
from judge.search import (
    BM25Index,
    Query,
    SearchError,
    SearchOptions,
    arun_search,
    build_index,
    config_from_dict,
    load_config,
    read_queries,
    run_search,
    tokenize_en,
    tokenize_zh,
)

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "search"


def three_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        '{"id": "d1", "text": "cat cat dog"}\n{"id": "d2", "text": "dog"}\n{"id": "d3", "text": "fish"}\n',
        encoding="utf-8",
    )
    build_index(docs, tmp_path / "idx", language="en")
    return tmp_path / "idx"


def lucene(tf: int, df: int, n: int, length: int, avg: float, k1: float, b: float) -> float:
    """bm25s `lucene`: ln(1 + (N - df + .5)/(df + .5)) * tf / (tf + k1 (1 - b + b L/avg))."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * length / avg))


def atire(tf: int, df: int, n: int, length: int, avg: float, k1: float, b: float) -> float:
    """ATIRE: ln(N/df) * tf (k1 + 1) / (tf + k1 (1 - b + b L/avg))."""
    return math.log(n / df) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))


def test_bm25_scores_match_the_formula_by_hand(tmp_path: Path) -> None:
    index = BM25Index(three_docs(tmp_path))
    avg = 5 / 3  # lengths 3, 1, 1
    # "cat": only d1 (tf 2, length 3). By hand with k1 1.2, b .75: ln(8/3) * 2 / (2 + 1.92) = 0.500423.
    [(doc, score)] = index.search("cat", 10, "lucene", 1.2, 0.75, 0.5)
    assert index.ids[doc] == "d1"
    assert score == pytest.approx(math.log(8 / 3) * 2 / 3.92, rel=1e-5)
    assert score == pytest.approx(0.500423, abs=1e-6)
    # "dog": d2 (short) above d1; d3 not matched at all, and a depth of 1 keeps the best.
    got = index.search("dogs", 10, "lucene", 1.2, 0.75, 0.5)
    assert [index.ids[d] for d, _ in got] == ["d2", "d1"]
    assert got[0][1] == pytest.approx(lucene(1, 2, 3, 1, avg, 1.2, 0.75), rel=1e-5)
    assert got[1][1] == pytest.approx(lucene(1, 2, 3, 3, avg, 1.2, 0.75), rel=1e-5)
    assert [index.ids[d] for d, _ in index.search("dog", 1, "lucene", 1.2, 0.75, 0.5)] == ["d2"]
    # Other knobs and another variant from the same stored tokens.
    both = dict((index.ids[d], s) for d, s in index.search("cat dog", 10, "atire", 0.9, 0.3, 0.5))
    assert both["d1"] == pytest.approx(
        atire(2, 1, 3, 3, avg, 0.9, 0.3) + atire(1, 2, 3, 3, avg, 0.9, 0.3), rel=1e-5
    )
    assert both["d2"] == pytest.approx(atire(1, 2, 3, 1, avg, 0.9, 0.3), rel=1e-5)
    # Ties: equal scores keep the corpus order.
    (tmp_path / "t.jsonl").write_text(
        '{"id": "b", "text": "fish"}\n{"id": "a", "text": "fish"}\n', encoding="utf-8"
    )
    tied = BM25Index(build_index(tmp_path / "t.jsonl", tmp_path / "tidx", language="en").path)
    assert [tied.ids[d] for d, _ in tied.search("fish", 5, "lucene", 1.2, 0.75, 0.5)] == ["b", "a"]
    # Nothing matches: no hits (not every document at score 0).
    assert index.search("zebra", 10, "lucene", 1.2, 0.75, 0.5) == []
    assert index.search("the", 10, "lucene", 1.2, 0.75, 0.5) == []  # a stopword only


def test_a_grid_does_not_tokenise_the_corpus_again(tmp_path: Path) -> None:
    idx = three_docs(tmp_path)
    index = BM25Index(idx)
    calls: list[str] = []
    original = index.tokenize

    def counting(text: str) -> list[str]:
        calls.append(text)
        return original(text)

    index.tokenize = counting  # type: ignore[method-assign]
    for k1 in (0.6, 1.5):
        for b in (0.3, 0.9):
            index.search("cat", 5, "lucene", k1, b, 0.5)
    assert calls == ["cat"] * 4  # only the query, once per search
    assert sorted(p.name for p in (idx / "bm25").iterdir()) == [
        "lucene-k1=0.6-b=0.3",
        "lucene-k1=0.6-b=0.9",
        "lucene-k1=1.2-b=0.75",  # built with the index
        "lucene-k1=1.5-b=0.3",
        "lucene-k1=1.5-b=0.9",
    ]
    # A new process (a fresh BM25Index) loads the saved matrices memory-mapped.
    again = BM25Index(idx)
    model = again.scorer("lucene", 0.6, 0.3, 0.5)
    assert type(model.scores["data"]).__name__ == "memmap"


def test_jieba_tokenises_a_chinese_query() -> None:
    assert tokenize_zh("小狗贫血的表现") == ["小狗", "贫血", "表现"]
    assert tokenize_zh("如何冲泡绿茶？") == ["冲泡", "绿茶"]  # function words and punctuation dropped
    assert tokenize_zh("Running 小狗") == ["run", "小狗"]  # Latin words stemmed
    assert tokenize_en("The dogs are running") == ["dog", "run"]


def test_index_build_detects_the_language_and_refuses_bad_lines(tmp_path: Path) -> None:
    info = build_index(BUNDLED / "corpus.zh.jsonl", tmp_path / "zh")
    assert (info.language, info.documents) == ("zh", 65)
    gz = tmp_path / "docs.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"id": 1, "title": "Dogs", "text": "Anemia shows as pale gums"}\n'))
    info = build_index(gz, tmp_path / "en")
    assert (info.language, info.documents) == ("en", 1)
    index = BM25Index(tmp_path / "en")
    assert index.text(0) == "Dogs\nAnemia shows as pale gums"
    assert [index.ids[d] for d, _ in index.search("dog", 3, "lucene", 1.2, 0.75, 0.5)] == [
        "1"
    ]  # the title counts
    cases = [
        ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', 2, "id", "duplicate id"),
        ('{"id": "a", "text": ""}\n', 1, "text", "non-empty string"),
        ('{"id": "a"}\n', 1, "text", "non-empty string"),
        ('{"text": "x"}\n', 1, "id", "non-empty string or an integer"),
        ('{"id": "a", "text": "x", "title": 3}\n', 1, "title", "must be a string"),
        ('{"id": "a", "text": "x"}\nnot json\n', 2, None, "not valid JSON"),
    ]
    for text, line, field, message in cases:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(SearchError, match=message) as err:
            build_index(bad, tmp_path / "bad")
        assert (err.value.path, err.value.line, err.value.field) == (str(bad), line, field)
        assert not (tmp_path / "bad").exists()  # nothing half-built is left
    with pytest.raises(SearchError, match="must be one of"):
        build_index(gz, tmp_path / "x", language="fr")


def test_run_writes_dataset_trec_and_meta_that_judge_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolate_cli_env(tmp_path, monkeypatch)
    idx = tmp_path / "index.zh"
    build_index(BUNDLED / "corpus.zh.jsonl", idx)
    config = config_from_dict({"index": str(idx), "depth": 5}, name="bm25")
    queries = read_queries(BUNDLED / "queries.zh.jsonl")
    out = tmp_path / "runs" / "bm25.jsonl"
    run = run_search(queries, config, out, options=SearchOptions(concurrency=3))
    assert (run.queries_searched, run.queries_reused, run.no_hits) == (16, 0, ())
    assert run.trec_path == tmp_path / "runs" / "bm25.trec"
    assert run.meta_path == tmp_path / "runs" / "bm25.meta.json"
    records = read_dataset(out)
    assert [r.id for r in records] == [q.id for q in queries]  # query-set order
    first = records[0]
    assert first.query == "小狗贫血有什么表现" and len(first.passages) == 5
    assert first.qrels == queries[0].qrels
    assert first.passages[0].id in {"dog01", "dog02", "dog03"}
    trec = read_run(run.trec_path)
    assert trec.run_id == "bm25"
    assert len(trec.query_ids) == 16
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["config"]["hash"] == config.hash and meta["status"] == "complete"
    assert meta["engine"]["version"].startswith("bm25s ")
    assert meta["engine"]["stats"]["documents"] == 65
    assert meta["first_request"]["query_id"] == "q01"
    assert meta["first_request"]["tokens"] == ["小狗", "贫血", "表现"]
    assert set(meta["latency_ms"]) == {q.id for q in queries}
    # judge score reads it as a dataset and scores it against the queries' own qrels.
    qrels = tmp_path / "zh.qrels"
    qrels.write_text(
        "".join(f"{q.id} 0 {d} {g}\n" for q in queries for d, g in (q.qrels or {}).items()), encoding="utf-8"
    )
    scored = tmp_path / "scored.jsonl"
    assert main(["score", str(out), "--backend", f"qrels:{qrels}", "-o", str(scored)]) == 0
    assert len(scored.read_text(encoding="utf-8").splitlines()) == 16
    # compare-systems too
    report = tmp_path / "report"
    code = main(
        [
            "compare-systems",
            f"a={out}",
            f"b={out}",
            "--backend",
            f"qrels:{qrels}",
            "-o",
            str(report),
            "-m",
            "ndcg_cut_5",
        ]
    )
    assert code == 0
    assert (report / "report.json").is_file()


def test_resume_keeps_written_lines_and_drops_a_torn_one(tmp_path: Path) -> None:
    idx = three_docs(tmp_path)
    config = config_from_dict({"index": str(idx)}, name="tiny")
    queries = [Query("q1", "cat"), Query("q2", "dog"), Query("q3", "fish"), Query("q4", "zebra")]
    out = tmp_path / "run.jsonl"
    full = run_search(queries, config, out)
    assert full.no_hits == ("q4",)
    lines = out.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    # A kill after q2's line and part of q3's, with the lines written out of order.
    out.write_bytes(lines[1] + lines[0] + lines[2][:20])
    marker = json.loads(lines[0])
    marker["retrieval_context"][0]["text"] = "kept as written"
    out.write_bytes(lines[1] + json.dumps(marker, ensure_ascii=False).encode() + b"\n" + lines[2][:20])
    again = run_search(queries, config, out)
    assert (again.queries_reused, again.queries_searched) == (2, 2)  # q3 and q4 searched again
    records = read_dataset(out)
    assert [r.id for r in records] == ["q1", "q2", "q3"]  # back in query-set order
    assert records[0].passages[0].text == "kept as written"  # not searched again
    # Another configuration hash is refused, naming the file and the field.
    other = config.with_params({"k1": 0.9})
    with pytest.raises(SearchError, match="another output file") as err:
        run_search(queries, other, out)
    assert (err.value.path, err.value.field) == (str(out), "config")
    # Everything there: nothing searched, nothing changed.
    before = out.read_bytes()
    done = run_search(queries, config, out)
    assert (done.queries_searched, done.queries_reused) == (1, 3)  # only the query without hits
    assert out.read_bytes() == before
    # The dataset removed (its metadata left behind): another configuration starts afresh.
    out.unlink()
    fresh = run_search(queries, other, out)
    assert (fresh.queries_searched, fresh.queries_reused) == (4, 0)
    assert json.loads(fresh.meta_path.read_text(encoding="utf-8"))["config"]["hash"] == other.hash


def test_callable_package_and_api(tmp_path: Path) -> None:
    three_docs(tmp_path)
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text('index = "idx"\ndepth = 2\n[params]\nk1 = 1.2\nb = 0.75\n', encoding="utf-8")
    qpath = tmp_path / "q.tsv"
    qpath.write_text("1\tdog\n", encoding="utf-8")
    run = judge.search(qpath, cfg_path, tmp_path / "a.jsonl", overrides={"k1": 0.9})
    assert run.config.params["k1"] == 0.9 and run.queries_searched == 1
    run2 = judge.search({"x": "cat"}, load_config(cfg_path), tmp_path / "b.jsonl")
    assert [r.id for r in read_dataset(run2.dataset_path)] == ["x"]
    from judge import search
    from judge.search import load_config as lc

    assert search is judge.search and lc is load_config and callable(search)
    assert "search" in judge.__all__
    run3 = asyncio.run(arun_search([Query("y", "fish")], load_config(cfg_path), tmp_path / "c.jsonl"))
    assert [p.id for p in read_dataset(run3.dataset_path)[0].passages] == ["d3"]


def test_cli_index_build_and_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    idx = tmp_path / "index.zh"
    assert main(["index", "build", str(BUNDLED / "corpus.zh.jsonl"), "-o", str(idx)]) == 0
    assert "65 documents" in capsys.readouterr().out
    cfg = tmp_path / "bm25.toml"
    cfg.write_text((BUNDLED / "bm25.toml").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "run.jsonl"
    args = ["search", str(BUNDLED / "queries.zh.jsonl"), "--config", str(cfg), "-o", str(out)]
    assert main([*args, "--set", "k1=0.9", "--set", "b=0.4", "--concurrency", "2"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("judge search: bm25-k1_0.9-b_0.4 (") and "16 searched, 0 reused" in line
    # the run is named and tagged for the knobs it ran with, as a grid's point
    assert {row.split()[-1] for row in out.with_suffix(".trec").read_text(encoding="utf-8").splitlines()} == {
        "bm25-k1_0.9-b_0.4"
    }
    meta = json.loads(out.with_name("run.meta.json").read_text(encoding="utf-8"))
    assert meta["config"]["content"]["params"]["k1"] == 0.9
    # Exit 2 naming the configuration and the field, nothing written.
    assert main([*args[:-1], str(tmp_path / "x.jsonl"), "--set", "boost=2"]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "params.boost" in err
    assert not (tmp_path / "x.jsonl").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text('index = "nowhere"\n', encoding="utf-8")
    assert (
        main(
            [
                "search",
                str(BUNDLED / "queries.zh.jsonl"),
                "--config",
                str(bad),
                "-o",
                str(tmp_path / "y.jsonl"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"{bad}: field 'index'" in err and "nowhere" in err and "judge index build" in err
    assert main([*args, "--concurrency", "0"]) == 2
    assert "concurrency" in capsys.readouterr().err
