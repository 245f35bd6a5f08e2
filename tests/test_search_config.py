"""Search configurations: the issue's two minimal TOMLs exactly as written, knobs and
overrides, the content hash, strict templates with SRW and Quepid aliases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.search import SearchError, compile_template, load_config, parse_overrides

EMBEDDED = """engine = "embedded"
index = "indexes/dl19"
depth = 10
[params]
k1 = 1.2
b = 0.75
"""

HTTP = """engine = "http"
url = "http://127.0.0.1:9200/passages/_search"
method = "POST"
body = '{"size": {{depth}}, "query": {"match": {"text": {{query|json}}}}}'
[response]
ids = "hits.hits[*]._id"
text = "hits.hits[*]._source.text"
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_the_minimal_embedded_config_as_written(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "dl19.toml", EMBEDDED))
    assert (cfg.name, cfg.engine, cfg.depth) == ("dl19", "embedded", 10)
    assert cfg.params == {"k1": 1.2, "b": 0.75, "method": "lucene", "delta": 0.5}
    assert cfg.index == tmp_path / "indexes" / "dl19"  # relative to the TOML file
    assert len(cfg.hash) == 64 and cfg.short_hash == cfg.hash[:12]
    # The hash is the content's: same content elsewhere, same hash; the name is not content.
    other = tmp_path / "sub"
    other.mkdir()
    assert load_config(write(other / "renamed.toml", EMBEDDED)).hash == cfg.hash
    # Defaults written out change nothing; a knob's value does.
    explicit = load_config(write(tmp_path / "x.toml", EMBEDDED + 'method = "lucene"\n'))
    assert explicit.hash == cfg.hash
    assert load_config(write(tmp_path / "y.toml", EMBEDDED.replace("1.2", "0.9"))).hash != cfg.hash


def test_the_minimal_http_config_as_written(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "os.toml", HTTP))
    assert (cfg.engine, cfg.method, cfg.url) == ("http", "POST", "http://127.0.0.1:9200/passages/_search")
    assert cfg.response == {"ids": "hits.hits[*]._id", "text": "hits.hits[*]._source.text"}
    assert cfg.body is not None
    rendered = cfg.body.render(cfg.template_variables('小狗 "贫血"'))
    assert json.loads(rendered) == {"size": 10, "query": {"match": {"text": '小狗 "贫血"'}}}


def test_overrides_and_with_params(tmp_path: Path) -> None:
    path = write(tmp_path / "bm25.toml", EMBEDDED)
    assert parse_overrides(["k1=0.9", "b=1", "method=bm25+", "flag=true", "name=x=y"]) == {
        "k1": 0.9,
        "b": 1,
        "method": "bm25+",
        "flag": True,
        "name": "x=y",
    }
    cfg = load_config(path, parse_overrides(["k1=0.9", "b=1"]))
    assert cfg.params["k1"] == 0.9 and cfg.params["b"] == 1.0 and isinstance(cfg.params["b"], float)
    base = load_config(path)
    moved = base.with_params({"k1": 0.9, "b": 1})
    assert moved.hash == cfg.hash != base.hash
    assert base.params["k1"] == 1.2  # frozen: the original is unchanged
    with pytest.raises(SearchError, match="unknown knob 'title_boost'") as err:
        load_config(path, {"title_boost": 2})
    assert (err.value.path, err.value.field) == (str(path), "params.title_boost")
    with pytest.raises(SearchError, match="KNOB=VALUE"):
        parse_overrides(["k1"])
    with pytest.raises(SearchError, match="finite"):
        parse_overrides(["k1=nan"])
    with pytest.raises(SearchError, match="is a number") as err:
        base.with_params({"k1": "high"})
    assert err.value.field == "params.k1"
    with pytest.raises(SearchError, match="unknown BM25 variant"):
        base.with_params({"method": "bm99"})
    with pytest.raises(SearchError, match="between 0 and 1"):
        base.with_params({"b": 1.5})


def test_knobs_in_templates_and_aliases(tmp_path: Path) -> None:
    text = (
        HTTP.replace(
            'body = \'{"size": {{depth}}, "query": {"match": {"text": {{query|json}}}}}\'',
            'body = \'{"q": "%SearchText%", "q2": "#$query##", "boost": ##title_boost##, '
            '"k": {{ k1 }}, "tag": {{tag|json}}, "n": {{depth}}}\'',
        )
        + '[params]\ntitle_boost = 2.5\nk1 = 3\ntag = "a b"\n'
    )
    cfg = load_config(write(tmp_path / "t.toml", text))
    body = cfg.body
    assert body is not None
    assert json.loads(body.render(cfg.template_variables("cats"))) == {
        "q": "cats",
        "q2": "cats",
        "boost": 2.5,
        "k": 3,
        "tag": "a b",
        "n": 10,
    }
    # One pass: a query holding a placeholder is not rendered again.
    assert '"q": "{{depth}}"' in body.render(cfg.template_variables("{{depth}}"))
    assert cfg.with_params({"title_boost": 4}).body.render(cfg.template_variables("x")).count("2.5") == 1  # type: ignore[union-attr]
    assert '"boost": 4' in cfg.with_params({"title_boost": 4}).body.render(  # type: ignore[union-attr]
        cfg.with_params({"title_boost": 4}).template_variables("x")
    )
    url = compile_template("http://h/s?q={{query|url}}", "url", None, {"query"})
    assert url.render({"query": "a b&c"}) == "http://h/s?q=a%20b%26c"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{{querry}}", "unknown template variable 'querry'"),
        ("##boost##", "unknown template variable 'boost'"),
        ("{{query|upper}}", "unknown filter 'upper'"),
        ("{{ query ", "malformed placeholder"),
        ("{{query}} {{2}}", "malformed placeholder"),
    ],
)
def test_template_errors_name_file_and_field(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path / "bad.toml", HTTP.replace(HTTP.splitlines()[3], f"body = '{body}'"))
    with pytest.raises(SearchError, match=message) as err:
        load_config(path)
    assert (err.value.path, err.value.field) == (str(path), "body")
    assert str(path) in str(err.value) and "field 'body'" in str(err.value)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ('engine = "lucene"\n', "engine", "unknown engine"),
        (EMBEDDED.replace("depth = 10", "depth = 0"), "depth", "from 1 to"),
        (EMBEDDED.replace("depth = 10", "depth = 2.5"), "depth", "from 1 to"),
        (EMBEDDED.replace('index = "indexes/dl19"\n', ""), "index", "missing"),
        (EMBEDDED + "title_boost = 2\n", "params.title_boost", "unknown knob"),
        (EMBEDDED.replace("k1 = 1.2", "k1 = nan"), "params.k1", "finite"),
        (EMBEDDED.replace("k1 = 1.2", "k1 = -1"), "params.k1", ">= 0"),
        ('url = "http://x"\n' + EMBEDDED, "url", "unknown key"),
        (HTTP.replace('ids = "hits.hits[*]._id"\n', ""), "response.ids", "missing"),
        (HTTP.replace("http://127", "ftp://127"), "url", "http:// or https://"),
        (HTTP.replace('method = "POST"', 'method = "PUT"'), "method", "GET or POST"),
        (HTTP.replace('method = "POST"', 'method = "GET"'), "body", "a GET request has no body"),
        (HTTP + "[params]\nquery = 1\n", "params.query", "reserved"),
        (HTTP + "[params]\nx = [1]\n", "params.x", "string, number or boolean"),
        ('engine = "postgres"\nsql = "SELECT 1"\n', "sql", "%(query)s"),
        ('engine = "python"\n', "callable", "exactly one"),
        ('engine = "python"\ncallable = "nocolon"\n', "callable", "module:attribute"),
        ("engine = ", None, "not valid TOML"),
    ],
)
def test_config_errors_name_file_and_field(
    tmp_path: Path, text: str, field: str | None, message: str
) -> None:
    path = write(tmp_path / "c.toml", text)
    with pytest.raises(SearchError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        load_config(path)
    assert (err.value.path, err.value.field) == (str(path), field)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"rate_limit": float("nan")}, "rate_limit"),
        ({"rate_limit": -2}, "rate_limit"),
        ({"backoff_s": -1}, "backoff_s"),
    ],
)
def test_search_options_are_checked(kwargs: dict[str, object], field: str) -> None:
    from judge.search import SearchOptions

    with pytest.raises(SearchError) as err:
        SearchOptions(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_rate_limiter_spaces_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from judge.search import _search_runner

    clock = {"now": 100.0}
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))

    monkeypatch.setattr(_search_runner.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(_search_runner.asyncio, "sleep", fake_sleep)

    async def go() -> None:
        limiter = _search_runner._RateLimiter(4.0)  # 4 per second: one every 0.25 s
        for _ in range(3):
            await limiter.wait()
        clock["now"] += 10  # idle for a while: no debt carried over
        await limiter.wait()

    asyncio.run(go())
    assert slept == [0.25, 0.5]
