"""The search side of an adversarial run: a hostile HTTP engine on 127.0.0.1,
Python callables that raise, hang or never stop, broken inputs and outputs, concurrent
writers. Each failure mode ends in exit 2 (or 3) with a message naming the file and the
field, never a traceback, and no secret in stdout, stderr or any file written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_search_postgres import postgres  # noqa: F401 (a real PostgreSQL, started by the fixture)

from judge.cli import main
from judge.io import read_run
from judge.search import Query, SearchOptions, build_index, load_config, run_search

SECRET = "hostile-s3cr3t-9f8e7d6c"
FAST = SearchOptions(max_retries=1, backoff_s=0, timeout_s=10)

Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class Hostile:
    """A loopback engine: ``routes`` maps a path to a function of the request returning
    (status, headers, body bytes); every request is recorded."""

    routes: dict[str, Callable[[Request], Answer]]
    seen: list[Request] = field(default_factory=list)
    url: str = ""


def _json(payload: Any, status: int = 200) -> Answer:
    return status, {"Content-Type": "application/json"}, json.dumps(payload).encode("utf-8")


def _hits(n: int, ids: Callable[[int], str] = lambda i: f"d{i}") -> dict[str, Any]:
    return {"hits": [{"id": ids(i), "text": f"text {i}", "score": float(n - i)} for i in range(n)]}


@contextmanager
def hostile(routes: dict[str, Callable[[Request], Answer]]) -> Iterator[Hostile]:
    engine = Hostile(routes)

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            req = Request(self.command, parts.path, urllib.parse.parse_qs(parts.query), dict(self.headers))
            engine.seen.append(req)
            route = engine.routes.get(parts.path)
            status, headers, body = route(req) if route else _json({"error": "no route"}, 404)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    engine.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield engine
    finally:
        server.shutdown()
        server.server_close()


def http_config(tmp_path: Path, url: str, extra: str = "", name: str = "engine") -> Path:
    """An http configuration; unless ``extra`` gives ``[headers]``, every request carries the
    secret (``X-Token: ${HOSTILE_TOKEN}``), which no failure may print or write."""
    if "[headers]" not in extra:
        extra += '\n[headers]\nX-Token = "${HOSTILE_TOKEN}"'
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'engine = "http"\nurl = "{url}"\n{extra}\n[response]\nids = "hits[*].id"\n'
        'text = "hits[*].text"\nscore = "hits[*].score"\n',
        encoding="utf-8",
    )
    return path


@pytest.fixture(autouse=True)
def _secret_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTILE_TOKEN", SECRET)


def queries(tmp_path: Path, *pairs: tuple[str, str]) -> Path:
    path = tmp_path / "q.jsonl"
    lines = [json.dumps({"id": qid, "query": text}) for qid, text in pairs or (("q1", "anemia"),)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def search(tmp_path: Path, config: Path, *extra: str, out: Path | None = None, qs: Path | None = None) -> int:
    args = [
        "search",
        str(qs or queries(tmp_path)),
        "--config",
        str(config),
        "-o",
        str(out or tmp_path / "run.jsonl"),
    ]
    return main([*args, "--retries", "1", *extra])


def assert_no_secret(tmp_path: Path, captured: pytest.CaptureFixture[str]) -> str:
    """The secret is nowhere: not in stdout, stderr or any file under ``tmp_path``."""
    out = captured.readouterr()
    assert SECRET[:10] not in out.out + out.err  # not even its head
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    return out.err


# ---------------------------------------------------------------------------- the request


def test_the_url_templates_query_is_kept_and_the_meta_shows_what_was_sent(tmp_path: Path) -> None:
    with hostile({"/search": lambda r: _json(_hits(2))}) as engine:
        cfg = http_config(
            tmp_path, f"{engine.url}/search?q={{{{query|url}}}}", '[url_params]\nn = "{{depth}}"'
        )
        run = run_search([Query("q1", "pale gums")], load_config(cfg), tmp_path / "run.jsonl")
    assert engine.seen[0].query == {"q": ["pale gums"], "n": ["10"]}
    assert engine.seen[0].headers["X-Token"] == SECRET
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["first_request"]["url"] == f"{engine.url}/search?q=pale+gums&n=10"


def test_every_engine_answer_is_cut_at_depth_and_deduplicated_by_id(tmp_path: Path) -> None:
    # 30 hits, ids d0 d1 d0 d1 d2 d3 ...: the first of each id is kept, then the top 5
    def answer(r: Request) -> Answer:
        ids = ["d0", "d1", "d0", "d1", *(f"d{i}" for i in range(2, 28))]
        return _json({"hits": [{"id": d, "text": f"t{j}", "score": 30.0 - j} for j, d in enumerate(ids)]})

    with hostile({"/s": answer}) as engine:
        cfg = http_config(tmp_path, f"{engine.url}/s", "depth = 5")
        run = run_search(
            [Query("q1", "a"), Query("q2", "b")], load_config(cfg), tmp_path / "run.jsonl", options=FAST
        )
    lines = [json.loads(line) for line in run.dataset_path.read_text(encoding="utf-8").splitlines()]
    assert [[p["id"] for p in rec["retrieval_context"]] for rec in lines] == [
        ["d0", "d1", "d2", "d3", "d4"]
    ] * 2
    assert lines[0]["retrieval_context"][1]["text"] == "t1"  # the first d1, not the repeat
    assert lines[0]["search"]["dropped"] == {"duplicate_ids": 2, "beyond_depth": 23}
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["dropped"] == {"duplicate_ids": 4, "beyond_depth": 46}
    assert [d for d, _ in read_run(run.trec_path).ranking("q1")] == ["d0", "d1", "d2", "d3", "d4"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"hits": [{"id": "d1", "text": "t", "score": NaN}]}', "finite"),
        (b'{"hits": [{"id": "d1", "text": "t", "score": Infinity}]}', "finite"),
        (b'{"hits": [{"id": "d1", "text": "t", "score": -Infinity}]}', "finite"),
        (b'{"hits": [{"id": "d1", "text": "t", "score": 1' + b"0" * 400 + b"}]}", "401 digits"),
        (b'{"hits": [{"id": "d1", "text": "t", "score": "high"}]}', "must be a number"),
    ],
)
def test_a_score_that_is_not_a_finite_number_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, message: str
) -> None:
    with hostile({"/s": lambda r: (200, {"Content-Type": "application/json"}, body)}) as engine:
        assert search(tmp_path, http_config(tmp_path, f"{engine.url}/s")) == 2
    err = assert_no_secret(tmp_path, capsys)
    assert "field 'response.score'" in err and message in err and "Traceback" not in err
    assert not (tmp_path / "run.jsonl").exists()


@pytest.mark.parametrize(
    ("hit_id", "message"),
    [("", "must not be empty"), ("d\x001", "control character U+0000"), ("x" * 1001, "at most 1000")],
)
def test_a_hit_id_judge_score_would_refuse_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hit_id: str, message: str
) -> None:
    with hostile({"/s": lambda r: _json({"hits": [{"id": hit_id, "text": "t", "score": 1}]})}) as engine:
        assert search(tmp_path, http_config(tmp_path, f"{engine.url}/s")) == 2
    err = assert_no_secret(tmp_path, capsys)
    assert "field 'response.ids'" in err and message in err


def test_a_redirect_is_named_with_where_it_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with hostile({"/old": lambda r: (302, {"Location": "/new"}, b"")}) as engine:
        assert search(tmp_path, http_config(tmp_path, f"{engine.url}/old")) == 2
    err = assert_no_secret(tmp_path, capsys)
    assert "HTTP 302" in err and "redirects to '/new'" in err and "field 'url'" in err
    assert not (tmp_path / "run.jsonl").exists()  # a failed first query leaves no empty run file


def test_a_url_too_long_to_send_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with hostile({"/s": lambda r: _json(_hits(1))}) as engine:
        cfg = http_config(tmp_path, f"{engine.url}/s", f'[url_params]\nq = "{"x" * 1_000_000}"')
        assert search(tmp_path, cfg) == 2
    assert "field 'url_params'" in assert_no_secret(tmp_path, capsys) and engine.seen == []


def test_a_response_path_that_cannot_be_read_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        'engine = "http"\nurl = "http://127.0.0.1:9/s"\n[response]\nids = "hits[*.id"\ntext = "hits[*].t"\n',
        encoding="utf-8",
    )
    assert search(tmp_path, cfg) == 2
    err = capsys.readouterr().err
    assert "field 'response.ids'" in err and "hits[*.id" in err


# ---------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("pad", [0, 262])
def test_a_secret_echoed_in_an_error_answer_is_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, pad: int
) -> None:
    monkeypatch.setenv("HOSTILE_TOKEN", SECRET)

    # pad 262: the secret straddles the 300th character, where a cut before the redaction
    # would leave its head in the message
    def echo(status: int) -> Callable[[Request], Answer]:
        return lambda r: _json({"pad": "p" * pad, "auth": r.headers.get("Authorization")}, status)

    with hostile({"/bad": echo(400), "/down": echo(503)}) as engine:
        for route, status in (("/bad", "HTTP 400"), ("/down", "HTTP 503")):
            cfg = http_config(
                tmp_path, f"{engine.url}{route}", '[headers]\nAuthorization = "Bearer ${HOSTILE_TOKEN}"'
            )
            assert search(tmp_path, cfg, "--timeout", "5") == 2
            err = assert_no_secret(tmp_path, capsys)
            assert status in err and "Bearer ***" in err
        assert engine.seen[0].headers["Authorization"] == f"Bearer {SECRET}"


@pytest.mark.parametrize("value", [f"{SECRET}\r\nX-Injected: 1", f"{SECRET}\n", f"{SECRET}é"])
def test_a_header_value_that_cannot_be_sent_is_exit_2_without_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("HOSTILE_TOKEN", value)
    with hostile({"/s": lambda r: _json(_hits(1))}) as engine:
        cfg = http_config(tmp_path, f"{engine.url}/s", '[headers]\nX-Token = "${HOSTILE_TOKEN}"')
        assert search(tmp_path, cfg) == 2
        assert engine.seen == []
    err = assert_no_secret(tmp_path, capsys)
    assert "field 'headers.X-Token'" in err and "Traceback" not in err


# ---------------------------------------------------------------------------- resume


def test_a_query_whose_text_changed_is_searched_again(tmp_path: Path) -> None:
    with hostile({"/s": lambda r: _json({"hits": [{"id": r.query["q"][0], "text": "t"}]})}) as engine:
        cfg = load_config(http_config(tmp_path, f"{engine.url}/s", '[url_params]\nq = "{{query}}"'))
        out = tmp_path / "run.jsonl"
        run_search([Query("q1", "old"), Query("q2", "same")], cfg, out)
        run = run_search([Query("q1", "new"), Query("q2", "same")], cfg, out)
    assert (run.queries_searched, run.queries_reused) == (1, 1)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(rec["id"], rec["query"], rec["retrieval_context"][0]["id"]) for rec in lines] == [
        ("q1", "new", "new"),
        ("q2", "same", "same"),
    ]


# ---------------------------------------------------------------------------- python engines

MODULE = """
import threading

RELEASE = threading.Event()

def raises(query, depth):
    raise ValueError("the retriever broke")

def hangs(query, depth):
    RELEASE.wait()
    return []

def endless(query, depth):
    i = 0
    while True:
        yield {"id": f"d{i}", "text": "t"}
        i += 1

def garbage(query, depth):
    return 42
"""


@pytest.fixture
def pymod(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "hostile_callables.py").write_text(MODULE, encoding="utf-8")
    yield tmp_path
    module = sys.modules.pop("hostile_callables", None)
    if module is not None:
        module.RELEASE.set()  # the abandoned thread ends


def py_config(folder: Path, name: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(
        f'engine = "python"\npythonpath = "."\ncallable = "hostile_callables:{name}"\ndepth = 3\n'
    )
    return path


@pytest.mark.parametrize(
    ("name", "message"), [("raises", "ValueError: the retriever broke"), ("garbage", "returned int")]
)
def test_a_callable_that_raises_or_returns_garbage_is_exit_2_naming_it(
    pymod: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    assert search(pymod, py_config(pymod, name), "--retries", "0") == 2
    err = capsys.readouterr().err
    assert "field 'callable'" in err and message in err and "Traceback" not in err


def test_a_callable_that_raises_after_the_first_query_is_exit_3(
    pymod: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (pymod / "flaky_callables.py").write_text(
        "def f(query, depth):\n"
        "    if query == 'b':\n"
        "        raise RuntimeError('down')\n"
        "    return [('d1', 't')]\n"
    )
    cfg = pymod / "flaky.toml"
    cfg.write_text('engine = "python"\npythonpath = "."\ncallable = "flaky_callables:f"\n')
    try:
        qs = queries(pymod, ("q1", "a"), ("q2", "b"))
        assert (
            main(["search", str(qs), "--config", str(cfg), "-o", str(pymod / "r.jsonl"), "--retries", "0"])
            == 3
        )
    finally:
        sys.modules.pop("flaky_callables", None)
    err = capsys.readouterr().err
    assert "the callable raised RuntimeError: down" in err
    assert [json.loads(line)["id"] for line in (pymod / "r.jsonl").read_text().splitlines()] == ["q1"]


def test_a_hung_callable_is_abandoned_at_the_timeout(pymod: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert search(pymod, py_config(pymod, "hangs"), "--timeout", "0.2", "--retries", "0") == 2
    err = capsys.readouterr().err
    assert "no answer within 0.2 s" in err and "field 'callable'" in err


def test_an_endless_generator_is_read_to_depth(pymod: Path) -> None:
    run = run_search([Query("q1", "x")], load_config(py_config(pymod, "endless")), pymod / "r.jsonl")
    rec = json.loads(run.dataset_path.read_text(encoding="utf-8"))
    assert [p["id"] for p in rec["retrieval_context"]] == ["d0", "d1", "d2"]


# ---------------------------------------------------------------------------- inputs


def test_a_tsv_query_set_with_a_byte_order_mark(tmp_path: Path) -> None:
    from judge.search import read_queries

    path = tmp_path / "q.tsv"
    path.write_bytes(b"\xef\xbb\xbfq1\tpale gums\nq2\tanemia\n")
    assert [q.id for q in read_queries(path)] == ["q1", "q2"]
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "q1", "query": "a"}\n')
    assert [q.id for q in read_queries(path)] == ["q1"]


@pytest.mark.parametrize(
    ("qid", "message"), [("q\\u00071", "control character U+0007"), ("x" * 1001, "at most 1000")]
)
def test_bad_ids_are_refused_at_the_query_set_and_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], qid: str, message: str
) -> None:
    qs = tmp_path / "q.jsonl"
    qs.write_text(f'{{"id": "ok", "query": "a"}}\n{{"id": "{qid}", "query": "b"}}\n', encoding="utf-8")
    cfg = tmp_path / "bm25.toml"
    cfg.write_text('index = "no-index"\n', encoding="utf-8")
    assert search(tmp_path, cfg, qs=qs) == 2
    err = capsys.readouterr().err
    assert f"{qs}:2: field 'id'" in err and message in err
    docs = tmp_path / "docs.jsonl"
    docs.write_text(f'{{"id": "{qid}", "text": "pale gums"}}\n', encoding="utf-8")
    assert main(["index", "build", str(docs), "-o", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert f"{docs}:1: field 'id'" in err and message in err and not (tmp_path / "idx").exists()


def test_a_huge_knob_value_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "e.toml"
    cfg.write_text(
        'engine = "http"\nurl = "http://127.0.0.1:9/s"\n[params]\nboost = 1\n'
        '[response]\nids = "a"\ntext = "b"\n'
    )
    assert search(tmp_path, cfg, "--set", "boost=" + "9" * 401) == 2
    assert "field 'params.boost'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the index


@pytest.fixture
def index(tmp_path: Path) -> Path:
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "d1", "text": "pale gums in dogs"}\n{"id": "d2", "text": "green tea"}\n')
    build_index(docs, tmp_path / "idx", language="en")
    return tmp_path / "idx"


def bm25_config(index: Path) -> Path:
    cfg = index.parent / "bm25.toml"
    cfg.write_text(f'index = "{index}"\n', encoding="utf-8")
    return cfg


def experiment_args(cfg: Path, out: Path, *grid: str) -> list[str]:
    """``judge experiment`` of one query over ``grid``, judged by a qrels file (no LLM)."""
    qrels = out.parent / "all.qrels"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 0\n", encoding="utf-8")
    qs = queries(out.parent, ("q1", "pale gums"))
    backend = ["--backend", f"qrels:{qrels}", "--no-cache", "--quiet"]
    return ["experiment", str(qs), "--config", str(cfg), *grid, *backend, "-o", str(out)]


def test_a_broken_index_folder_is_exit_2(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (index / "vocab.json").unlink()
    cfg = bm25_config(index)
    assert search(tmp_path, cfg) == 2
    err = capsys.readouterr().err
    assert "field 'index'" in err and "broken index" in err and "vocab.json" in err


KILLED_BUILD = """
import os, signal, sys
from judge.search import _bm25_index

def killed(self, *args):  # the build dies by SIGKILL once its temporary folder is written
    os.kill(os.getpid(), signal.SIGKILL)

_bm25_index.BM25Index.scorer = killed
_bm25_index.build_index(sys.argv[1], sys.argv[2], language="en")
"""


def test_a_build_killed_by_sigkill_leaves_a_folder_the_next_build_removes(
    tmp_path: Path, index: Path
) -> None:
    docs = tmp_path / "docs.jsonl"
    killed = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(docs), str(index)], timeout=120)
    assert killed.returncode == -9
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".idx.tmp-")]
    assert len(left) == 1 and (left[0] / "vocab.json").is_file()  # what kill -9 leaves
    live = tmp_path / f".idx.tmp-{os.getpid()}-live"  # a build still running (this process): kept
    live.mkdir()
    info = build_index(docs, index, language="en")
    assert info.documents == 2 and (index / "index.json").is_file()
    # kept: the live build's folder, and the lock file every build takes beside the index
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".idx")) == [".idx.lock", live.name]


# ---------------------------------------------------------------------------- outputs


def test_an_output_that_is_a_directory_or_cannot_be_written_is_exit_2(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = bm25_config(index)
    (tmp_path / "adir").mkdir()
    assert search(tmp_path, cfg, out=tmp_path / "adir") == 2
    assert "field '-o'" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert search(tmp_path, cfg, out=tmp_path / "afile" / "run.jsonl") == 2  # a place nothing can be written
    err = capsys.readouterr().err
    assert "field '-o'" in err and "Traceback" not in err
    assert main(["index", "build", str(tmp_path / "docs.jsonl"), "-o", str(tmp_path / "afile" / "idx")]) == 2
    assert "field '-o'" in capsys.readouterr().err


def test_a_second_writer_of_a_run_is_refused_naming_the_holder(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = bm25_config(index)
    from judge.io import WriterLock

    out = tmp_path / "run.jsonl"
    with WriterLock(tmp_path / ".run.jsonl.lock"):
        assert search(tmp_path, cfg, out=out) == 2
        err = capsys.readouterr().err
        assert "another judge search" in err and f"pid {os.getpid()}" in err
    assert not out.exists()
    assert search(tmp_path, cfg, out=out) == 0  # the holder gone, the run goes ahead


def test_a_second_experiment_on_one_folder_is_refused_before_any_work(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = bm25_config(index)
    out = tmp_path / "exp"
    args = experiment_args(cfg, out, "--grid", "k1=0.6,1.2")
    from judge.io import WriterLock

    with WriterLock(out / ".experiment.lock"):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "another judge experiment" in err and "pid" in err
    assert sorted(p.name for p in out.iterdir()) == [".experiment.lock"]  # nothing searched, nothing judged
    assert main(args) == 0
    judged = (out / "pool.judged.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(judged) == len(set(judged))


def test_a_trials_range_past_a_knobs_bounds_judges_nothing(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("optuna")
    cfg = bm25_config(index)
    out = tmp_path / "exp"
    args = experiment_args(cfg, out, "--grid", "b=0.2:1.5", "--trials", "2")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "field 'params.b'" in err and "between 0 and 1" in err
    assert not (out / "trials").exists() and not (out / "runs").exists()


# ---------------------------------------------------------------------------- postgres


def test_an_unknown_connection_option_is_exit_2_without_the_dsn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("psycopg", reason="needs psycopg[binary]")
    monkeypatch.setenv("HOSTILE_DSN", f"host=127.0.0.1 password={SECRET} nonsense_option=1")
    cfg = tmp_path / "pg.toml"
    cfg.write_text(
        'engine = "postgres"\ndsn_env = "HOSTILE_DSN"\nsql = "SELECT %(query)s, %(query)s"\n',
        encoding="utf-8",
    )
    assert search(tmp_path, cfg) == 2
    err = assert_no_secret(tmp_path, capsys)
    assert "field 'dsn_env'" in err and "nonsense_option" in err


def test_a_text_score_from_postgresql_is_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    postgres: str,  # noqa: F811 (the fixture of test_search_postgres)
) -> None:
    cfg = tmp_path / "pg.toml"
    sql = "SELECT id, body, 'high' FROM passages WHERE body <> %(query)s ORDER BY id LIMIT %(depth)s"
    cfg.write_text(f'engine = "postgres"\ndsn = "{postgres}"\nsql = "{sql}"\n', encoding="utf-8")
    assert search(tmp_path, cfg) == 2
    err = capsys.readouterr().err
    assert "field 'sql'" in err and "hit 0 ('d1'): the score must be a number, got 'high'" in err
