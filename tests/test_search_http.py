"""HTTP engines against loopback servers: a generic JSON API, Elasticsearch and Solr with
responses recorded from their documented shapes, OpenSearch against osmem-server; retries,
timeouts, secrets, and the exit-2 errors that name the configuration and the field."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _search_stub import SearchStub, Seen, recorded, serve

from judge.cli import main
from judge.io import read_dataset, read_run
from judge.search import (
    Query,
    SearchError,
    SearchOptions,
    load_config,
    read_queries,
    run_search,
)

FAST = SearchOptions(max_retries=3, backoff_s=0, timeout_s=10)
QUERIES = [Query("q1", "pale gums"), Query("q2", "anemia")]


def toml(tmp_path: Path, text: str, name: str = "engine") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_http_post_template_mapping_and_secret_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-token-7f1e9a"
    monkeypatch.setenv("SEARCH_TOKEN", secret)
    stub = SearchStub({"/passages/_search": recorded("elasticsearch_search.json")})
    with serve(stub):
        cfg = load_config(
            toml(
                tmp_path,
                f"""engine = "http"
url = "{stub.url}/passages/_search"
method = "POST"
body = '{{"size": {{{{depth}}}}, "query": {{"match": {{"text": {{{{query|json}}}}}}}}}}'
[headers]
Authorization = "Bearer ${{SEARCH_TOKEN}}"
[response]
ids = "hits.hits[*]._id"
text = "hits.hits[*]._source.text"
score = "hits.hits[*]._score"
""",
            )
        )
        run = run_search(QUERIES, cfg, tmp_path / "run.jsonl", options=FAST)
    assert len(stub.seen) == 2
    sent = stub.seen[0]
    assert sent.method == "POST" and sent.headers["Authorization"] == f"Bearer {secret}"
    assert json.loads(sent.body) == {"size": 10, "query": {"match": {"text": "pale gums"}}}
    records = read_dataset(run.dataset_path)
    assert [p.id for p in records[0].passages] == ["p17", "p03", "p44"]
    assert records[0].passages[0].text == "Anemia in dogs shows as pale gums and tiredness."
    ranking = read_run(run.trec_path).ranking("q1")
    assert ranking == [("p17", 2.1451), ("p03", 1.2204), ("p44", 0.4102)]
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["first_request"]["headers"]["Authorization"] == "Bearer ${SEARCH_TOKEN}"
    assert meta["first_request"]["body"]["query"]["match"]["text"] == "pale gums"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_http_get_with_url_params_and_the_cli_output_has_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "k-93b1c0ffee"
    monkeypatch.setenv("API_KEY", secret)

    def answer(seen: Seen) -> tuple[int, Any]:
        q = seen.params["q"][0]
        return 200, {"data": {"items": [{"doc": {"key": f"{q}-1", "body": f"about {q}"}, "s": 2}]}}

    stub = SearchStub({"/api/search": answer})
    with serve(stub):
        cfg = toml(
            tmp_path,
            f"""engine = "http"
url = "{stub.url}/api/search"
[url_params]
q = "{{{{query}}}}"
n = "{{{{depth}}}}"
boost = "##title_boost##"
[headers]
X-Api-Key = "${{API_KEY}}"
[params]
title_boost = 3
[response]
ids = "data.items[*].doc.key"
text = "data.items[*].doc.body"
score = "$.data.items[*].s"
""",
        )
        queries = tmp_path / "q.tsv"
        queries.write_text("a\t小狗 贫血\n", encoding="utf-8")
        out = tmp_path / "run.jsonl"
        assert (
            main(["search", str(queries), "--config", str(cfg), "--set", "title_boost=5", "-o", str(out)])
            == 0
        )
    captured = capsys.readouterr()
    assert stub.seen[0].params == {"q": ["小狗 贫血"], "n": ["10"], "boost": ["5"]}
    assert stub.seen[0].headers["X-Api-Key"] == secret
    assert [p.id for p in read_dataset(out)[0].passages] == ["小狗 贫血-1"]
    assert secret not in captured.out + captured.err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_elasticsearch_engine_defaults_version_and_stats(tmp_path: Path) -> None:
    stub = SearchStub(
        {
            "/passages/_search": recorded("elasticsearch_search.json"),
            "/": recorded("elasticsearch_root.json"),
            "/passages/_count": {"count": 3, "_shards": {"total": 1}},
        }
    )
    with serve(stub):
        cfg = load_config(
            toml(tmp_path, f'engine = "elasticsearch"\nurl = "{stub.url}"\nindex = "passages"\ndepth = 3\n')
        )
        run = run_search(QUERIES[:1], cfg, tmp_path / "es.jsonl", options=FAST)
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["engine"]["version"] == "elasticsearch 8.11.1"
    assert meta["engine"]["stats"] == {"index": "passages", "documents": 3}
    assert json.loads(stub.seen[0].body) == {"size": 3, "query": {"match": {"text": "pale gums"}}}
    assert [p.id for p in read_dataset(run.dataset_path)[0].passages] == ["p17", "p03", "p44"]


def test_opensearch_recorded_response(tmp_path: Path) -> None:
    stub = SearchStub(
        {"/passages/_search": recorded("opensearch_search.json"), "/": recorded("opensearch_root.json")}
    )
    with serve(stub):
        cfg = load_config(toml(tmp_path, f'engine = "opensearch"\nurl = "{stub.url}/passages/_search"\n'))
        run = run_search([Query("z", "小狗贫血")], cfg, tmp_path / "os.jsonl", options=FAST)
    rec = read_dataset(run.dataset_path)[0]
    assert [(p.id, p.text) for p in rec.passages] == [
        ("zh-9", "小狗贫血最常见的表现是牙龈苍白。"),
        ("zh-2", "狗狗贫血时常出现食欲下降。"),
    ]
    assert json.loads(run.meta_path.read_text(encoding="utf-8"))["engine"]["version"] == "opensearch 2.11.0"


@pytest.fixture(scope="module")
def osmem() -> Iterator[Any]:
    osmem_server = pytest.importorskip("osmem_server", reason="needs osmem-server (pip install osmem-server)")
    with osmem_server.OsmemServer.start(japanese=False, addr="127.0.0.1:0") as server:
        yield server


def test_opensearch_engine_against_osmem(tmp_path: Path, osmem: Any) -> None:
    from osmem_server import _request

    with osmem.clone() as clone:
        assert clone.url.startswith("http://127.0.0.1:")
        docs = {
            "d1": "anemia in dogs shows as pale gums",
            "d2": "cats vomit hairballs",
            "d3": "pale gums and anemia and more anemia",
        }
        for did, text in docs.items():
            _request("PUT", f"{clone.url}/passages/_doc/{did}?refresh=true", {"text": text})
        cfg = load_config(
            toml(tmp_path, f'engine = "opensearch"\nurl = "{clone.url}"\nindex = "passages"\ndepth = 5\n')
        )
        run = run_search(
            [Query("q1", "anemia"), Query("q2", "hairballs"), Query("q3", "zebra")], cfg, tmp_path / "r.jsonl"
        )
    records = {r.id: r for r in read_dataset(run.dataset_path)}
    assert {p.id for p in records["q1"].passages} == {"d1", "d3"}
    assert [p.id for p in records["q2"].passages] == ["d2"]
    assert run.no_hits == ("q3",)
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["engine"]["version"].startswith("opensearch ")
    assert meta["engine"]["stats"] == {"index": "passages", "documents": 3}


def test_solr_recorded_response_and_params_template(tmp_path: Path) -> None:
    stub = SearchStub(
        {
            "/solr/passages/select": recorded("solr_select.json"),
            "/solr/admin/info/system": recorded("solr_system.json"),
        }
    )
    with serve(stub):
        cfg = load_config(
            toml(
                tmp_path,
                f"""engine = "solr"
url = "{stub.url}/solr/passages/select"
[url_params]
q = "{{{{query}}}}"
defType = "edismax"
qf = "title^{{{{title_boost}}}} text"
rows = "{{{{depth}}}}"
fl = "id,text,score"
[params]
title_boost = 2
""",
            )
        )
        run = run_search([Query("q", "pale gums")], cfg, tmp_path / "solr.jsonl", options=FAST)
    assert stub.seen[0].params["qf"] == ["title^2 text"] and stub.seen[0].params["defType"] == ["edismax"]
    rec = read_dataset(run.dataset_path)[0]
    assert [(p.id, p.text) for p in rec.passages] == [
        ("doc-7", "Pale gums are a sign of anemia."),
        ("doc-2", "Gums turn pale when red cells are low."),  # a multi-valued field joined
    ]
    assert json.loads(run.meta_path.read_text(encoding="utf-8"))["engine"]["version"] == "solr 9.4.0"


@pytest.mark.parametrize("fail_status", [503, 429, None])
def test_transient_failures_are_retried_then_succeed(tmp_path: Path, fail_status: int | None) -> None:
    stub = SearchStub({"/s": recorded("elasticsearch_search.json")}, fail_first=2, fail_status=fail_status)
    with serve(stub):
        cfg = load_config(toml(tmp_path, f'engine = "elasticsearch"\nurl = "{stub.url}/s"\n'))
        run = run_search(
            QUERIES[:1], cfg, tmp_path / "r.jsonl", options=SearchOptions(max_retries=2, backoff_s=0)
        )
    search_calls = [s for s in stub.seen if s.path == "/s"]
    assert len(search_calls) == 3 and run.queries_searched == 1


def test_retries_are_bounded_and_a_bad_request_is_not_retried(tmp_path: Path) -> None:
    stub = SearchStub({"/s": recorded("elasticsearch_search.json")}, fail_first=100)
    with serve(stub):
        cfg = load_config(toml(tmp_path, f'engine = "elasticsearch"\nurl = "{stub.url}/s"\n'))
        with pytest.raises(SearchError, match="HTTP 503") as err:
            run_search(QUERIES, cfg, tmp_path / "r.jsonl", options=SearchOptions(max_retries=2, backoff_s=0))
        assert err.value.field == "url" and len(stub.seen) == 3
    stub = SearchStub({"/s": lambda seen: (400, {"error": "parsing_exception"})})
    with serve(stub):
        cfg = load_config(toml(tmp_path, f'engine = "elasticsearch"\nurl = "{stub.url}/s"\n'))
        with pytest.raises(SearchError, match=r"HTTP 400: .*parsing_exception") as err:
            run_search(QUERIES, cfg, tmp_path / "r2.jsonl", options=FAST)
        assert err.value.field == "body" and len(stub.seen) == 1


def test_a_hung_engine_times_out(tmp_path: Path) -> None:
    stub = SearchStub({"/s": recorded("elasticsearch_search.json")}, gate=threading.Event())
    with serve(stub):
        cfg = load_config(toml(tmp_path, f'engine = "elasticsearch"\nurl = "{stub.url}/s"\n'))
        with pytest.raises(SearchError, match=r"no answer within 0\.2 s|timed out") as err:
            run_search(
                QUERIES,
                cfg,
                tmp_path / "r.jsonl",
                options=SearchOptions(timeout_s=0.2, max_retries=1, backoff_s=0),
            )
    assert err.value.field == "url" and len(stub.seen) == 2  # the first try and one retry


def test_concurrency_is_capped(tmp_path: Path) -> None:
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def answer(seen: Seen) -> tuple[int, Any]:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.01)
        with lock:
            state["now"] -= 1
        return 200, recorded("elasticsearch_search.json")

    stub = SearchStub({"/s": answer})
    with serve(stub):
        cfg = load_config(toml(tmp_path, f'engine = "elasticsearch"\nurl = "{stub.url}/s"\n'))
        queries = [Query(f"q{i}", f"query {i}") for i in range(20)]
        run = run_search(queries, cfg, tmp_path / "r.jsonl", options=SearchOptions(concurrency=2))
    assert run.queries_searched == 20 and 1 <= state["max"] <= 2


def test_failure_after_the_probe_keeps_lines_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = {"n": 0}

    def flaky(seen: Seen) -> tuple[int, Any]:
        calls["n"] += 1
        return (200, recorded("elasticsearch_search.json")) if calls["n"] == 1 else (503, {"error": "down"})

    stub = SearchStub({"/s": flaky})
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tone\nq2\ttwo\nq3\tthree\n", encoding="utf-8")
    with serve(stub):
        cfg = toml(tmp_path, f'engine = "elasticsearch"\nurl = "{stub.url}/s"\n')
        out = tmp_path / "r.jsonl"
        args = [
            "search",
            str(queries),
            "--config",
            str(cfg),
            "-o",
            str(out),
            "--retries",
            "1",
            "--concurrency",
            "1",
        ]
        assert main(args) == 3
        assert "re-run to resume" in capsys.readouterr().err
        assert [r.id for r in read_dataset(out)] == ["q1"]
        # Resumed while the engine is still down: the probe (q2) fails first, exit 2, q1 kept.
        with pytest.raises(SearchError, match="first query 'q2'"):
            run_search(
                read_queries(queries),
                load_config(cfg),
                out,
                options=SearchOptions(max_retries=0, backoff_s=0),
            )
        assert [r.id for r in read_dataset(out)] == ["q1"]
        calls["n"] = -100  # the engine is back
        stub.routes["/s"] = lambda seen: (200, recorded("elasticsearch_search.json"))
        assert main(args) == 0
    assert "2 searched, 1 reused" in capsys.readouterr().out
    assert [r.id for r in read_dataset(out)] == ["q1", "q2", "q3"]


def test_exit_2_naming_config_and_field_before_any_other_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tone\nq2\ttwo\n", encoding="utf-8")
    # A mapping that finds no ids: one request (the probe), then exit 2 on response.ids.
    stub = SearchStub({"/s": {"results": [{"id": "a"}]}})
    with serve(stub):
        cfg = toml(
            tmp_path,
            f'engine = "http"\nurl = "{stub.url}/s"\n'
            '[response]\nids = "hits.hits[*]._id"\ntext = "hits.hits[*].t"\n',
            "mapping",
        )
        assert main(["search", str(queries), "--config", str(cfg), "-o", str(tmp_path / "a.jsonl")]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "field 'response.ids'" in err and "results" in err
    assert len(stub.seen) == 1 and not (tmp_path / "a.jsonl").exists()  # no empty run file
    # An unreachable engine: exit 2 on url.
    with serve(SearchStub({})) as gone:
        dead_url = gone.url
    cfg = toml(tmp_path, f'engine = "opensearch"\nurl = "{dead_url}/s"\n', "dead")
    assert (
        main(
            ["search", str(queries), "--config", str(cfg), "-o", str(tmp_path / "b.jsonl"), "--retries", "0"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(cfg) in err and "field 'url'" in err and "cannot reach" in err
    # A header naming an unset environment variable.
    cfg = toml(
        tmp_path,
        f'engine = "opensearch"\nurl = "{dead_url}/s"\n[headers]\nX = "${{NOT_SET_ANYWHERE_42}}"\n',
        "env",
    )
    assert main(["search", str(queries), "--config", str(cfg), "-o", str(tmp_path / "c.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "field 'headers.X'" in err and "NOT_SET_ANYWHERE_42" in err
