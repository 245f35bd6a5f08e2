"""No server path and no engine URL in any response: a failed job's error names its
configuration by its registered name and the kind of failure, on every route that shows it
(``/v1/jobs``, ``/v1/jobs/{id}``, both event streams, ``/v1/experiments``, the viewer's job
list, which is ``/v1/jobs``); the whole error goes to the server's log. One scrubbing
(:func:`judge.server._public.public`) serves every route, an error stored before included."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import make_config, ndjson, records, wait_job
from fastapi.testclient import TestClient

from judge.backends import ChatRequest, QrelsBackend, RuleBackend
from judge.server import create_app, register_configs
from judge.server._db import JobDB


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sse(client: TestClient, url: str) -> str:
    with client.stream("GET", url) as r:
        return "".join(r.iter_text())


def _every_route(client: TestClient, job_id: str, *, experiment: bool) -> dict[str, str]:
    """What every route that shows the job answers."""
    texts = {
        "/v1/jobs": client.get("/v1/jobs").text,
        "/v1/jobs?status=failed": client.get("/v1/jobs", params={"status": "failed"}).text,
        "/v1/jobs/{id}": client.get(f"/v1/jobs/{job_id}").text,
        "/v1/jobs/{id}/events": _sse(client, f"/v1/jobs/{job_id}/events"),
    }
    if experiment:
        texts |= {
            "/v1/experiments": client.get("/v1/experiments").text,
            "/v1/experiments/{id}": client.get(f"/v1/experiments/{job_id}").text,
            "/v1/experiments/{id}/events": _sse(client, f"/v1/experiments/{job_id}/events"),
        }
    return texts


def _hidden(text: str, *where: str) -> list[str]:
    """What of ``where`` (server folders, URLs) ``text`` shows, as given or JSON-escaped."""
    return [w for w in where if w in text or json.dumps(w)[1:-1] in text]


def test_a_failed_experiment_names_its_configuration_and_shows_no_path_and_no_url(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An http engine registered at a loopback port nothing listens on: the experiment
    fails at its first query. Every route shows the error with the configuration's
    registered name and the kind of failure, never its file's path, the server's folders or
    the engine's URL; the server's log has the whole error."""
    port = _closed_port()
    url = f"http://127.0.0.1:{port}"
    configs = tmp_path / "configs"
    configs.mkdir()
    config = configs / "shop.toml"
    config.write_text(
        f'engine = "http"\nurl = "{url}/products/_search"\nmethod = "POST"\n'
        'body = \'{"size": {{depth}}, "query": {{query|json}}, "boost": {{boost}}}\'\n'
        "[params]\nboost = 1.0\n"
        '[response]\nids = "hits.hits[*]._id"\ntext = "hits.hits[*]._source.text"\n',
        encoding="utf-8",
    )
    labels = tmp_path / "labels.qrels"
    labels.write_text("q1 0 d1 1\n", encoding="utf-8")
    server = tmp_path / "server"
    server.mkdir()
    app_config = make_config(server, backend=QrelsBackend(labels))
    app_config.runtime.search_configs = register_configs([f"shop={config}"])
    body = {"queries": [{"id": "q1", "query": "x"}], "config": "shop", "grid": {"boost": [1.0, 2.0]}}
    with caplog.at_level(logging.ERROR, logger="judge.server"), TestClient(create_app(app_config)) as client:
        posted = client.post("/v1/experiments", json=body)
        assert posted.status_code == 202, posted.text
        job = wait_job(client, posted.json()["id"], timeout=120)
        texts = _every_route(client, job["id"], experiment=True)
        resumed = client.post(f"/v1/jobs/{job['id']}/resume")
        texts["/v1/jobs/{id}/resume"] = resumed.text
        again = wait_job(client, job["id"], timeout=120)
        texts["/v1/jobs/{id} (resumed)"] = client.get(f"/v1/jobs/{job['id']}").text
    assert job["status"] == "failed" and again["status"] == "failed" and resumed.status_code == 202
    expected = (
        "SearchError: search configuration 'shop': field 'url': the http engine failed for the first "
        "query 'q1': cannot reach <engine URL>: "
    )
    assert job["error"].startswith(expected) and "ConnectError" in job["error"]
    assert again["error"] == job["error"]
    folders = {str(p) for p in (tmp_path, tmp_path.resolve())}
    for route, text in texts.items():
        assert _hidden(text, *folders, url, f":{port}", "shop.toml", "http://") == [], route
    shown = [json.loads(texts[r])["error"] for r in ("/v1/jobs/{id}", "/v1/experiments/{id}")]
    assert shown == [job["error"], job["error"]]
    listed = json.loads(texts["/v1/jobs"])["jobs"]
    experiments = json.loads(texts["/v1/experiments"])["experiments"]
    assert [j["error"] for j in listed] == [j["error"] for j in experiments] == [job["error"]]
    for stream in ("/v1/jobs/{id}/events", "/v1/experiments/{id}/events"):
        progress = [
            json.loads(line[len("data: ") :]) for line in texts[stream].splitlines() if "error" in line
        ]
        assert progress and progress[-1]["error"] == job["error"], stream
    # the whole error, with what the responses hide, in the server's log
    logged = [r.getMessage() for r in caplog.records if job["id"] in r.getMessage()]
    assert logged and str(config) in logged[0] and f"{url}/products/_search" in logged[0]


def test_an_error_stored_before_is_shown_scrubbed_by_every_route(tmp_path: Path) -> None:
    """A failed job's error written by an older server (or a kind of failure the scrubbing
    at storage did not meet) is scrubbed where it is served: its job's folder taken out, any
    other absolute path by its last part, any URL as ``<URL>``; the API's own routes stay."""
    db = JobDB(tmp_path / "server.sqlite")
    db.insert(
        "j0old",
        kind="score",
        options={},
        queries_total=1,
        passages_total=1,
        rejected=0,
        idempotency_hash=None,
        body_hash=None,
    )
    job_dir = tmp_path / "jobs" / "j0old"
    raw = (
        f"OSError: [Errno 5] I/O error: '{job_dir}/output.jsonl' (cache /var/cache/judge/verdicts.sqlite, "
        "backend http://llm.internal:8000/v1/chat/completions): POST /v1/jobs/{id}/resume resumes it"
    )
    db.update("j0old", status="failed", error=raw, finished=2.0)
    db.close()
    with TestClient(create_app(make_config(tmp_path))) as client:
        texts = _every_route(client, "j0old", experiment=False)
    expected = (
        "OSError: [Errno 5] I/O error: 'output.jsonl' (cache verdicts.sqlite, backend <URL>): "
        "POST /v1/jobs/{id}/resume resumes it"
    )
    assert json.loads(texts["/v1/jobs/{id}"])["error"] == expected
    assert json.loads(texts["/v1/jobs"])["jobs"][0]["error"] == expected
    for route, text in texts.items():
        assert _hidden(text, str(tmp_path), "/var/cache", "llm.internal") == [], route


def test_a_failed_comparison_shows_no_path_and_no_url(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A comparison whose judge fails with a message naming a file of the server and a URL:
    its view, the listing and its events show the file by its name and no URL; the log has
    both."""
    cache = tmp_path / "state" / "verdicts.sqlite"

    def rule(request: ChatRequest) -> Any:
        raise RuntimeError(f"cannot write {cache} for http://10.0.0.7:8080/v1")

    app_config = make_config(tmp_path, backend=RuleBackend(rule, name="fake:failing"))
    systems = {"a": ndjson(records(2)).decode(), "b": ndjson(records(2)).decode()}
    with caplog.at_level(logging.ERROR, logger="judge.server"), TestClient(create_app(app_config)) as client:
        posted = client.post("/v1/compare", json={"systems": systems})
        assert posted.status_code == 202, posted.text
        job = wait_job(client, posted.json()["id"], timeout=120)
        texts = _every_route(client, job["id"], experiment=False)
    assert job["status"] == "failed"
    assert job["error"] == "RuntimeError: cannot write verdicts.sqlite for <URL>"
    for route, text in texts.items():
        assert _hidden(text, str(tmp_path), "10.0.0.7", "http://") == [], route
    logged = [r.getMessage() for r in caplog.records]
    assert any(str(cache) in m and "http://10.0.0.7:8080/v1" in m for m in logged)


def test_the_one_scrubbing_keeps_what_is_not_the_servers() -> None:
    """Known rules only outside an error: a report's SVG namespace and a passage's URL stay;
    a registered configuration's file is its name, its engine's URL ``<engine URL>``."""
    from judge.search import config_from_dict
    from judge.server._public import public
    from judge.server._search_configs import RegisteredConfig

    path = Path("/srv/judge/configs/shop.toml")
    config = config_from_dict(
        {"engine": "http", "url": "https://search.internal:9200/{{index}}/_search", "params": {"index": "p"},
         "response": {"ids": "hits.hits[*]._id", "text": "hits.hits[*]._source.text"}},
        name="shop",
        base=path.parent,
    )  # fmt: skip
    configs = {"shop": RegisteredConfig("shop", path, config)}
    job_dir = Path("/srv/judge/jobs/j1")
    report = (
        '<svg xmlns="http://www.w3.org/2000/svg"/> passage: see https://example.org/a. '
        f"{job_dir}/systems/A.jsonl from {path}: https://search.internal:9200/p/_search, refused"
    )
    assert public(report, job_dir, configs) == (
        '<svg xmlns="http://www.w3.org/2000/svg"/> passage: see https://example.org/a. '
        "systems/A.jsonl from search configuration 'shop': <engine URL>, refused"
    )
    assert public({"a": [f"{job_dir}/x.jsonl", 3, None]}, job_dir) == {"a": ["x.jsonl", 3, None]}
    assert public(json.dumps({"f": f"{job_dir}/x"}), job_dir) == '{"f": "x"}'
    assert public("", job_dir, configs, error=True) == ""
