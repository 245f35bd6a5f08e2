"""Experiments as service jobs: ``judge serve --search-config NAME=FILE``,
``GET /v1/search-configs``, ``POST /v1/experiments`` and its refusals, and the same report as
``judge experiment`` on the same inputs, across a kill -9 of the server in the middle.

The judge is the qrels-backed one over the bundled Chinese query set's grades (every corpus
passage graded for every query: one call per pair, no re-ask), so the calls counted are the
pairs judged."""

from __future__ import annotations

import csv
import io
import json
import shutil
import signal
import sqlite3
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _experiment_fixtures import DATA, Bundled, bundled
from _server import make_config, serve_env, serve_process, wait_job
from fastapi.testclient import TestClient

from judge.backends import QrelsBackend
from judge.cli import main
from judge.server import create_app, register_configs

GRID = {"k1": [0.6, 1.2], "b": [0.3, 0.75]}
RESAMPLES = 2000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    found = bundled(tmp_path_factory.mktemp("bundled"))
    # the bundled configuration as shipped: its embedded index named relative to the file
    shutil.copy(DATA / "bm25.toml", found.root / "shipped.toml")
    return found


@pytest.fixture(scope="module")
def cli_folder(data: Bundled, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``judge experiment`` on the same inputs: the folder whose figures the service must give."""
    out = tmp_path_factory.mktemp("cli") / "exp"
    code = main(
        [
            "experiment",
            str(data.queries),
            "--config",
            str(data.root / "shipped.toml"),
            "--grid",
            "k1=0.6,1.2",
            "--grid",
            "b=0.3,0.75",
            "--backend",
            f"qrels:{data.qrels}",
            "--cache",
            str(out.parent / "cache.sqlite"),
            "--resamples",
            str(RESAMPLES),
            "-o",
            str(out),
            "--quiet",
            "--json",
        ]
    )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def cli_report(cli_folder: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((cli_folder / "report.json").read_text(encoding="utf-8"))
    return report


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "queries": (DATA / "queries.zh.jsonl").read_text(encoding="utf-8"),
        "config": "bm25",
        "grid": GRID,
        "options": {"resamples": RESAMPLES},
        **extra,
    }


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    """What must agree between the CLI and the service: the answer, every configuration's
    objective and measures, and every test against the baseline."""
    e = report["experiment"]
    return {
        "best": e["best"],
        "best_value": e["best_value"],
        "best_vs_baseline": e["best_vs_baseline"],
        "objective": e["objective"],
        "configurations": {
            c["name"]: (c["objective"], c["params"], c["coverage"]) for c in e["configurations"]
        },
        "knobs": e["knobs"],
        "pairs": e["pairs"],
        "nominal_pairs": e["nominal_pairs"],
        "systems": {n: s["measures"] for n, s in report["systems"].items()},
        "comparisons": report["comparisons"],
        "pool": {k: v for k, v in report["pool"].items() if k != "calls"},
    }


def _app(tmp: Path, data: Bundled, backend: Any = None) -> Any:
    config = make_config(tmp, backend=backend if backend is not None else QrelsBackend(data.qrels))
    config.runtime.search_configs = register_configs([f"bm25={data.root / 'shipped.toml'}"])
    return create_app(config)


def test_the_listing_shows_names_and_knobs_and_no_location(data: Bundled, tmp_path: Path) -> None:
    with TestClient(_app(tmp_path, data)) as client:
        got = client.get("/v1/search-configs")
    assert got.status_code == 200
    assert got.json() == {
        "configs": [
            {
                "name": "bm25",
                "engine": "embedded",
                "depth": 10,
                "knobs": {"k1": 1.2, "b": 0.75, "method": "lucene", "delta": 0.5},
            }
        ]
    }
    assert str(data.root) not in got.text and "index" not in got.text and "toml" not in got.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"config": "other"}, "config"),
        ({"config": "/etc/judge/bm25.toml"}, "body.config"),
        ({"config": "../bm25.toml"}, "body.config"),
        ({"config": "http://search.internal:9200/idx"}, "body.config"),
        ({"grid": {"k1": ["/srv/other-index"]}}, "grid.k1"),
        ({"grid": {"method": ["https://evil.example/x"]}}, "grid.method"),
        ({"grid": {"index": [1, 2]}}, "grid.index"),
        ({"grid": {"k1": [0.6, 1.2], "b": [-1.0]}}, "grid"),
        ({"grid": {"k1": {"low": 0.5, "high": 1.5}}}, "grid.k1"),
        ({"grid": {"k1": [0.6]}}, "grid"),  # one configuration: nothing to compare
        ({"grid": {"k1": [0.6], "b": [0.3]}}, "grid"),
        ({"grid": {}}, "grid"),
        ({"grid": {"k1": list(range(11)), "b": [0.1 * i for i in range(10)]}}, "grid"),
        ({"queries": '{"id": "q1"}\n'}, "queries.query"),
        ({"queries": [{"id": "q1", "query": "x", "path": "/etc"}]}, "body.queries"),
        ({"trials": 1}, "body.trials"),
    ],
)
def test_what_a_request_may_not_name_is_422_with_nothing_run(
    data: Bundled, tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    backend = QrelsBackend(data.qrels)
    with TestClient(_app(tmp_path, data, backend)) as client:
        got = client.post("/v1/experiments", json=_body(**change))
        listed = client.get("/v1/experiments").json()
    assert got.status_code == 422, got.text
    body = got.json()
    fields = [body["field"]] if "field" in body else body.get("fields", [])
    assert any(f == field or f.startswith(field + ".") for f in fields), body
    assert listed["experiments"] == []
    assert not any((tmp_path / "jobs").iterdir()) if (tmp_path / "jobs").exists() else True
    assert backend.calls == 0


def test_a_service_experiment_gives_the_cli_report(
    data: Bundled, tmp_path: Path, cli_report: dict[str, Any]
) -> None:
    backend = QrelsBackend(data.qrels)
    with TestClient(_app(tmp_path, data, backend)) as client:
        posted = client.post("/v1/experiments", json=_body())
        assert posted.status_code == 202, posted.text
        job_id = posted.json()["id"]
        assert posted.headers["location"] == f"/v1/experiments/{job_id}"
        job = wait_job(client, job_id, timeout=300)
        assert job["status"] == "done", job
        report = client.get(f"/v1/experiments/{job_id}/report").json()
        view = client.get(f"/v1/experiments/{job_id}").json()
        listed = client.get("/v1/experiments").json()["experiments"]
        heatmap = client.get(f"/v1/experiments/{job_id}/heatmap.png")
        markdown = client.get(f"/v1/experiments/{job_id}/report?format=md")
        texts = [
            client.get(f"/v1/experiments/{job_id}/report?format={f}").text for f in ("json", "md", "html")
        ]
        texts += [client.get(f"/v1/experiments/{job_id}").text, client.get("/v1/experiments").text]
        best, baseline = report["experiment"]["best"], report["experiment"]["configurations"][0]["name"]
        texts.append(client.get(f"/v1/experiments/{job_id}/pair", params={"a": baseline, "b": best}).text)
    # No response names a server path (the job's folder, the registered
    # configuration's folder or its index); files are named relative to the job or by name.
    for text in texts:
        for where in {str(tmp_path), str(tmp_path.resolve()), str(data.root), str(data.root.resolve())}:
            assert where not in text and json.dumps(where)[1:-1] not in text
    assert _figures(report) == _figures(cli_report)
    assert report["experiment"]["calls"] == cli_report["experiment"]["calls"] == backend.calls
    assert view["summary"]["best"] == cli_report["experiment"]["best"]
    pool = cli_report["pool"]
    assert view["queries_done"] == view["queries_total"] == 16
    assert view["passages_done"] == view["passages_total"] == pool["judged"] + pool["unjudged"]
    assert view["summary"]["configurations"] == {
        c["name"]: c["objective"] for c in cli_report["experiment"]["configurations"]
    }
    assert [j["id"] for j in listed] == [job_id]
    assert heatmap.status_code == 200 and heatmap.content.startswith(b"\x89PNG")
    assert markdown.status_code == 200 and cli_report["experiment"]["best"] in markdown.text


def test_a_service_experiments_tests_do_not_depend_on_its_seed_or_resamples(
    data: Bundled, tmp_path: Path, cli_report: dict[str, Any]
) -> None:
    """16 queries: every randomization test is exact, so the service at 10,000 resamples and
    seed 2 gives the CLI's p-values (2,000 resamples, seed 0) and the same answer."""
    with TestClient(_app(tmp_path, data)) as client:
        posted = client.post("/v1/experiments", json=_body(options={"resamples": 10_000, "seed": 2}))
        assert posted.status_code == 202, posted.text
        job_id = posted.json()["id"]
        assert wait_job(client, job_id, timeout=300)["status"] == "done"
        report = client.get(f"/v1/experiments/{job_id}/report").json()

    def tests(r: dict[str, Any]) -> dict[tuple[str, str], tuple[Any, ...]]:
        return {
            (c["system"], c["measure"]): (c["p_value"], c["p_holm"], c["p_method"], c["p_holm_se"])
            for c in r["comparisons"]
        }

    assert tests(report) == tests(cli_report)
    assert {m for _, _, m, _ in tests(report).values()} == {"exact"}
    assert report["experiment"]["best_vs_baseline"] == cli_report["experiment"]["best_vs_baseline"]


def _call(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    return status, json.loads(raw)


def _follow(url: str) -> list[dict[str, Any]]:
    """The experiment's server-sent events to ``event: end``: its progress views, then the end."""
    seen: list[dict[str, Any]] = []
    event = None
    with urllib.request.urlopen(url, timeout=120) as resp:
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                seen.append({"event": event, **json.loads(line[len("data: ") :])})
                if event == "end":
                    return seen
    raise AssertionError(f"the event stream ended without an end event: {seen[-3:]}")


def _cached(path: Path) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])


def _lines(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(json.loads(x)) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_judge_serve_runs_an_experiment_across_a_kill_9_judging_nothing_twice(
    data: Bundled, tmp_path: Path, cli_report: dict[str, Any]
) -> None:
    """The Done-when test: ``judge serve`` with a registered embedded index and configuration,
    an experiment over the bundled Chinese query set with a 2 x 2 grid and the qrels-backed
    judge, killed (-9) once in the middle (the judge holds every call after the 40th answered
    one, so where it stops is decided, not timed), resumed by the next start and followed over
    SSE to its end: every pair answered once over both lives, and the CLI's figures."""
    gate_after = 40
    log = tmp_path / "calls.log"
    cache = tmp_path / "cache.sqlite"
    args = [
        "--search-config",
        f"bm25={data.root / 'shipped.toml'}",
        "--backend-factory",
        "_experiment_gate:gated_qrels",
        "--db",
        str(tmp_path / "server.sqlite"),
        "--cache",
        str(cache),
    ]
    env = {"JUDGE_TEST_QRELS": str(data.qrels), "JUDGE_TEST_CALL_LOG": str(log)}
    body = json.dumps(_body(), ensure_ascii=False).encode("utf-8")
    with serve_process(args, serve_env(tmp_path, **env, JUDGE_TEST_GATE_AFTER=str(gate_after))) as (
        proc,
        url,
    ):
        status, job = _call(url + "/v1/experiments", "POST", body)
        assert status == 202, job
        job_id = job["id"]
        deadline = time.monotonic() + 300  # a bound on a hung server, not a timing assumption
        while len(_lines(log)) < gate_after or _cached(cache) < gate_after:
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the experiment did not reach the gate"
            )
            time.sleep(0.02)
        status, middle = _call(f"{url}/v1/experiments/{job_id}")
        assert middle["status"] == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(_lines(log)) == gate_after  # the held calls were never answered
    with serve_process(args, serve_env(tmp_path, **env)) as (proc, url):
        events = _follow(f"{url}/v1/experiments/{job_id}/events")
        status, view = _call(f"{url}/v1/experiments/{job_id}")
        status_r, report = _call(f"{url}/v1/experiments/{job_id}/report")
    assert events[-1] == {"event": "end", "id": job_id, "status": "done"}
    done = [e["queries_done"] for e in events if e["event"] == "progress"]
    assert done == sorted(done) and done[-1] == 16
    assert view["status"] == "done" and view["attempts"] == 2
    answered = Counter(_lines(log))
    assert max(answered.values()) == 1  # nothing judged twice
    assert len(answered) == cli_report["experiment"]["pairs"] == cli_report["pool"]["calls"]
    assert status_r == 200 and _figures(report) == _figures(cli_report)


def test_an_engine_secret_never_leaves_the_server_and_its_url_knob_stays_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An http engine registered with a token from the server's environment and a URL that
    names its index through a knob: the listing shows neither, a grid moving the index knob is
    a 422 with no request sent, and an engine that echoes the token in its error answer fails
    the experiment with the token redacted from the job, the listing and the logs."""
    from _search_stub import SearchStub, serve

    token = "tok-very-secret-4711"
    monkeypatch.setenv("SEARCH_TOKEN", token)

    def echo(seen: Any) -> tuple[int, Any]:
        return 401, {"error": f"token refused: {seen.headers.get('Authorization')}"}

    stub = SearchStub({"/products/_search": echo})
    with serve(stub):
        config = tmp_path / "shop.toml"
        config.write_text(
            f'engine = "http"\nurl = "{stub.url}/{{{{index}}}}/_search"\nmethod = "POST"\n'
            'body = \'{"size": {{depth}}, "query": {"match": {"text": {{query|json}}}}, '
            '"boost": {{boost}}}\'\n'
            '[headers]\nAuthorization = "Bearer ${SEARCH_TOKEN}"\n'
            '[params]\nindex = "products"\nboost = 1.0\n'
            '[response]\nids = "hits.hits[*]._id"\ntext = "hits.hits[*]._source.text"\n',
            encoding="utf-8",
        )
        app_config = make_config(tmp_path, backend=QrelsBackend(DATA / "queries.zh.qrels"))
        app_config.runtime.search_configs = register_configs([f"shop={config}"])
        queries = [{"id": "q1", "query": "太阳能板怎么清洗"}, {"id": "q2", "query": "猫咪呕吐的原因"}]
        with TestClient(create_app(app_config)) as client:
            listed = client.get("/v1/search-configs")
            moved = client.post(
                "/v1/experiments", json={"queries": queries, "config": "shop", "grid": {"index": ["secrets"]}}
            )
            assert stub.seen == []
            posted = client.post(
                "/v1/experiments", json={"queries": queries, "config": "shop", "grid": {"boost": [1.0, 2.0]}}
            )
            assert posted.status_code == 202, posted.text
            job = wait_job(client, posted.json()["id"], timeout=120)
            shown = client.get("/v1/experiments").text + client.get(f"/v1/experiments/{job['id']}").text
    assert listed.json()["configs"] == [
        {"name": "shop", "engine": "http", "depth": 10, "knobs": {"index": "products", "boost": 1.0}}
    ]
    assert stub.url not in listed.text and token not in listed.text
    assert moved.status_code == 422 and moved.json()["field"] == "grid.index"
    assert stub.seen and stub.seen[0].headers["Authorization"] == f"Bearer {token}"  # it was sent
    assert job["status"] == "failed" and "token refused" in job["error"]
    assert token not in job["error"] and token not in shown and token not in caplog.text
    files = [p for p in (tmp_path / "jobs").rglob("*") if p.is_file()]
    assert files and not any(token.encode() in p.read_bytes() for p in files)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["bm25"], "expected NAME=FILE"),
        (["a=/nonexistent/bm25.toml"], "no such file"),
        ([f"../x={DATA / 'bm25.toml'}"], "is not a configuration name"),
        ([f"a={DATA / 'bm25.toml'}", f"a={DATA / 'bm25.toml'}"], "registered twice"),
    ],
)
def test_judge_serve_refuses_a_bad_search_config_before_anything_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], items: list[str], expected: str
) -> None:
    flags = [x for item in items for x in ("--search-config", item)]
    db = tmp_path / "server.sqlite"
    code = main(["serve", *flags, "--db", str(db), "--backend", f"qrels:{DATA / 'queries.zh.qrels'}"])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and "--search-config" in err
    assert not db.exists()


def test_a_pair_view_reason_is_asked_on_request_once_and_then_shown(data: Bundled, tmp_path: Path) -> None:
    """A judge that prefers probabilities judges the pool's verdicts first, without reasons;
    a passage of the side-by-side view gets its reason when asked (one explaining call), kept
    and shown by the next view, never asked again."""
    from _helpers import passage_of

    from judge.backends import ChatRequest, RuleBackend

    keyword = RuleBackend.keyword("太阳", text_of=passage_of)
    explained: list[str] = []

    def rule(request: ChatRequest) -> Any:
        if request.candidates is None:
            explained.append(passage_of(request))
        return keyword.rule(request)

    backend = RuleBackend(rule, name="fake:explaining", prefers_probabilities=True)
    with TestClient(_app(tmp_path, data, backend)) as client:
        posted = client.post(
            "/v1/experiments", json=_body(grid={"k1": [1.2, 0.6]}, options={"resamples": 200})
        )
        job = wait_job(client, posted.json()["id"], timeout=300)
        assert job["status"] == "done", job
        names = list(job["summary"]["configurations"])
        url = f"/v1/experiments/{job['id']}/pair?a={names[0]}&b={names[1]}"
        view = client.get(url).json()
        pending = [
            (q["id"], p["docno"])
            for q in view["queries"]
            for p in q["a"]["passages"]
            if p["reason"] is None and p["source"] == "judge" and p["verdict"] != "unjudged"
        ]
        assert pending
        before = len(explained)
        qid, docno = pending[0]
        asked = client.post(f"/v1/jobs/{job['id']}/reasons", json={"query_id": qid, "docno": docno})
        again = client.post(f"/v1/jobs/{job['id']}/reasons", json={"query_id": qid, "docno": docno})
        shown = client.get(url).json()
    assert asked.status_code == 200 and asked.json()["reason"] and asked.json()["calls"] >= 1
    assert len(explained) == before + 1  # one explaining generation, for that pair
    assert again.json()["calls"] == 0 and again.json()["reason"] == asked.json()["reason"]
    found = next(
        p for q in shown["queries"] if q["id"] == qid for p in q["a"]["passages"] if p["docno"] == docno
    )
    assert found["reason"] == asked.json()["reason"]


def test_trials_over_ranges_run_as_the_cli_runs_them(data: Bundled, tmp_path: Path) -> None:
    """``"trials": N`` with ``{"low", "high"}`` ranges samples the space as ``judge experiment
    --grid k1=LOW:HIGH --trials N`` does (same seed: the same trials and the same best)."""
    grid = {"k1": {"low": 0.5, "high": 1.5}, "b": [0.3, 0.75]}
    with TestClient(_app(tmp_path, data)) as client:
        posted = client.post(
            "/v1/experiments", json=_body(grid=grid, trials=3, options={"resamples": 200, "seed": 5})
        )
        assert posted.status_code == 202, posted.text
        job = wait_job(client, posted.json()["id"], timeout=300)
        report = client.get(f"/v1/experiments/{job['id']}/report").json()
    out = tmp_path / "cli"
    code = main(
        [
            "experiment", str(data.queries), "--config", str(data.root / "shipped.toml"),
            "--grid", "k1=0.5:1.5", "--grid", "b=0.3,0.75", "--trials", "3", "--seed", "5",
            "--resamples", "200", "--backend", f"qrels:{data.qrels}",
            "--cache", str(tmp_path / "cli.sqlite"), "-o", str(out), "--quiet", "--json",
        ]
    )  # fmt: skip
    assert code == 0
    cli = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert job["status"] == "done" and report["experiment"]["strategy"] == "trials"
    assert len(report["experiment"]["configurations"]) == 3
    assert _figures(report) == _figures(cli)


def test_an_experiment_is_cancelled_and_a_retried_post_is_the_same_job(data: Bundled, tmp_path: Path) -> None:
    from _server import Gate

    gate = Gate(opened=False)  # every judge call waits: the experiment stays running
    with TestClient(_app(tmp_path, data, gate.backend)) as client:
        headers = {"Idempotency-Key": "exp-1"}
        first = client.post("/v1/experiments", json=_body(), headers=headers)
        again = client.post("/v1/experiments", json=_body(), headers=headers)
        other = client.post("/v1/experiments", json=_body(trials=None, grid={"k1": [0.6]}), headers=headers)
        job_id = first.json()["id"]
        wait_job(client, job_id, ("running",), timeout=120)
        cancelled = client.post(f"/v1/experiments/{job_id}/cancel")
        report = client.get(f"/v1/experiments/{job_id}/report")
        gate.open()
        listed = client.get("/v1/experiments").json()["experiments"]
        twice = client.post(f"/v1/experiments/{job_id}/cancel")
        not_one = client.get(f"/v1/experiments/{job_id}x")
    assert first.status_code == 202 and again.json()["id"] == job_id and again.status_code == 200
    assert other.status_code == 422  # the same key with another body
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert report.status_code == 409 and [j["id"] for j in listed] == [job_id]
    assert twice.status_code == 409 and not_one.status_code == 404


def test_an_experiments_judgments_travel_as_judge_export_writes_them(
    data: Bundled, tmp_path: Path, cli_folder: Path
) -> None:
    """``GET /v1/experiments/{id}/judgments`` is ``judge export`` over the service: the same
    CSV as the CLI's export of the same experiment (one row per pooled pair, the query's
    text first), SRW's list with each rating's source, a stated scale, and 422 for a format it
    does not write."""
    with TestClient(_app(tmp_path, data)) as client:
        job_id = client.post("/v1/experiments", json=_body()).json()["id"]
        assert wait_job(client, job_id, timeout=300)["status"] == "done"
        csv_text = client.get(f"/v1/experiments/{job_id}/judgments").text
        srw = client.get(f"/v1/experiments/{job_id}/judgments", params={"format": "srw"})
        same = client.get(f"/v1/experiments/{job_id}/judgments", params={"scale": "binary"})
        graded = client.get(f"/v1/experiments/{job_id}/judgments", params={"scale": "srw-0-1"})
        wrong = client.get(f"/v1/experiments/{job_id}/judgments", params={"format": "xml"})
    out = tmp_path / "cli.csv"
    assert main(["export", str(cli_folder), "--format", "csv", "-o", str(out)]) == 0
    assert csv_text == out.read_text(encoding="utf-8")
    pooled = (cli_folder / "pool.qrels").read_text(encoding="utf-8").splitlines()
    rows = list(csv.reader(io.StringIO(csv_text)))
    assert rows[0] == ["query", "docid", "rating"] and len(rows) - 1 == len(pooled)
    texts = {
        json.loads(line)["query"] for line in (DATA / "queries.zh.jsonl").read_text("utf-8").splitlines()
    }
    assert {r[0] for r in rows[1:]} <= texts
    body = srw.json()
    assert srw.headers["content-type"].startswith("application/json")
    assert body["type"] == "IMPORT_JUDGMENT" and "by the LLM judge" in body["description"]
    sources = {r["source"] for q in body["judgmentRatings"] for r in q["ratings"]}
    assert sources == {"judge"}  # the qrels-backed judge answered every pooled pair
    assert {r[2] for r in rows[1:]} == {"0", "1"}  # the pool's binary verdicts as they are
    # the stated binary scale writes 0/1 again; SRW's 0-1 scores are a graded scale (0, 1/3,
    # 2/3, 1 for grades 0-3), not one a binary pool's verdicts can be written on
    assert same.status_code == 200 and same.text == csv_text
    assert graded.status_code == 422 and graded.json()["field"] == "scale"
    assert "binary" in graded.json()["detail"]
    assert wrong.status_code == 422
