"""Remote dense and hybrid engines, as configurations: OpenSearch's ``hybrid`` query with a
normalization-processor pipeline and Elasticsearch's ``knn`` + ``rrf`` retriever, against a
loopback stub answering responses recorded from the shapes their documentation shows; the
requests sent are checked knob by knob, and the guide shows the same files."""

from __future__ import annotations

import json
from pathlib import Path

from _search_stub import DATA, SearchStub, recorded, serve

from judge.io import read_dataset
from judge.search import Query, SearchOptions, load_config, run_search

ROOT = Path(__file__).resolve().parents[1]
FAST = SearchOptions(max_retries=0, timeout_s=10)


def configured(tmp_path: Path, name: str, url: str) -> Path:
    text = (DATA / name).read_text(encoding="utf-8").replace("http://127.0.0.1:9200", url)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_opensearch_hybrid_query_with_a_normalization_pipeline(tmp_path: Path) -> None:
    stub = SearchStub(
        {
            "/my-nlp-index/_search": recorded("opensearch_hybrid_search.json"),
            "/": recorded("opensearch_root.json"),
            "/my-nlp-index/_count": {"count": 60},
        }
    )
    with serve(stub):
        cfg = load_config(configured(tmp_path, "opensearch_hybrid.toml", stub.url)).with_params(
            {"lexical_weight": 0.4, "neural_weight": 0.6, "normalization": "l2"}
        )
        run = run_search([Query("q01", "小狗贫血有什么表现")], cfg, tmp_path / "os.jsonl", options=FAST)
    body = json.loads(stub.seen[0].body)
    queries = body["query"]["hybrid"]["queries"]
    assert queries[0] == {"match": {"text": {"query": "小狗贫血有什么表现"}}}
    assert queries[1]["neural"]["passage_embedding"] == {
        "query_text": "小狗贫血有什么表现",
        "model_id": "aVeifmUBu1DEm9-nlwUb",
        "k": 100,
    }
    processor = body["search_pipeline"]["phase_results_processors"][0]["normalization-processor"]
    assert processor == {
        "normalization": {"technique": "l2"},
        "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.4, 0.6]}},
    }
    assert body["size"] == 10
    (line,) = [json.loads(x) for x in run.dataset_path.read_text(encoding="utf-8").splitlines()]
    assert [(p["id"], p["score"]) for p in line["retrieval_context"]] == [
        ("dog03", 0.8744404),
        ("dog01", 0.7),
        ("cold02", 0.001),
    ]
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["engine"]["version"] == "opensearch 2.11.0"
    assert meta["first_request"]["body"]["search_pipeline"] == body["search_pipeline"]


def test_elasticsearch_knn_and_rrf_retriever(tmp_path: Path) -> None:
    stub = SearchStub(
        {
            "/passages/_search": recorded("elasticsearch_rrf_search.json"),
            "/": recorded("elasticsearch_root.json"),
        }
    )
    with serve(stub):
        cfg = load_config(configured(tmp_path, "elasticsearch_rrf.toml", stub.url)).with_params(
            {"rank_constant": 20}
        )
        run = run_search([Query("q1", "pale gums in dogs")], cfg, tmp_path / "es.jsonl", options=FAST)
    rrf = json.loads(stub.seen[0].body)["retriever"]["rrf"]
    assert rrf["rank_constant"] == 20 and rrf["rank_window_size"] == 100
    standard, knn = rrf["retrievers"]
    assert standard == {"standard": {"query": {"match": {"text": "pale gums in dogs"}}}}
    assert knn["knn"]["query_vector_builder"]["text_embedding"]["model_text"] == "pale gums in dogs"
    assert (knn["knn"]["k"], knn["knn"]["num_candidates"]) == (50, 100)
    (rec,) = read_dataset(run.dataset_path)
    assert [p.id for p in rec.passages] == ["p17", "p03", "p44", "p08"]
    line = json.loads(run.dataset_path.read_text(encoding="utf-8"))
    assert line["retrieval_context"][0]["score"] == 0.032786883  # 1/61 + 1/61: first in both lists
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["engine"]["version"] == "elasticsearch 8.11.1"


def test_the_guide_shows_these_configurations() -> None:
    guide = (ROOT / "docs" / "guides" / "search.md").read_text(encoding="utf-8")
    for name in ("opensearch_hybrid.toml", "elasticsearch_rrf.toml"):
        text = (DATA / name).read_text(encoding="utf-8")
        body = text[text.index("engine = ") :].strip()
        assert body in guide, name
