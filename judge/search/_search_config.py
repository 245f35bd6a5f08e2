"""Search configurations: one TOML file each, identified by a hash of its content.

The two minimal forms::

    engine = "embedded"          # the default
    index = "indexes/dl19"       # relative paths are relative to the TOML file
    depth = 10
    [params]
    k1 = 1.2
    b = 0.75

    engine = "http"
    url = "http://127.0.0.1:9200/passages/_search"
    method = "POST"
    body = '{"size": {{depth}}, "query": {"match": {"text": {{query|json}}}}}'
    [response]
    ids = "hits.hits[*]._id"
    text = "hits.hits[*]._source.text"

``name`` is the file's stem unless the file gives one. ``[params]`` holds the knobs
(strings, integers, finite floats, booleans) that templates use and that ``--set`` and
grids change; :meth:`SearchConfig.with_params` makes the configuration with other values
(and another hash). The hash is the SHA-256 of the canonical JSON of the effective content
(the file's keys with the defaults filled in and the knobs' current values; ``name`` left
out), so two runs with one hash asked the same engine the same thing.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judge.io import number_problem
from judge.search._fusion import DENSE_PARAMS, FUSION_PARAMS, check_fusion_params
from judge.search._jsonpath import parse_path
from judge.search._request_template import Template, Value, compile_template
from judge.search._search_errors import SearchError

ENGINES = ("embedded", "http", "opensearch", "elasticsearch", "solr", "postgres", "python", "hybrid")
DEFAULT_ENGINE = "embedded"
DEFAULT_DEPTH = 10
MAX_DEPTH = 10_000
SHORT_HASH = 12

#: The embedded engine's knobs and their defaults (bm25s's variants; Lucene's k1 and b).
EMBEDDED_PARAMS: dict[str, Value] = {"k1": 1.2, "b": 0.75, "method": "lucene", "delta": 0.5}
BM25_METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")
#: The range of each numeric knob of the embedded engine (None: unbounded).
EMBEDDED_RANGES: dict[str, tuple[float | None, float | None]] = {
    "k1": (0.0, None),
    "b": (0.0, 1.0),
    "delta": (0.0, None),
}

_SEARCH_BODY = '{"size": {{depth}}, "query": {"match": {"text": {{query|json}}}}}'
_ES_RESPONSE = {
    "ids": "hits.hits[*]._id",
    "text": "hits.hits[*]._source.text",
    "score": "hits.hits[*]._score",
}
_SOLR_RESPONSE = {
    "ids": "response.docs[*].id",
    "text": "response.docs[*].text",
    "score": "response.docs[*].score",
}
_SOLR_PARAMS = {"q": "{{query}}", "rows": "{{depth}}", "fl": "id,text,score", "wt": "json"}

_COMMON_KEYS = {"name", "engine", "depth", "params", "description"}
_ENGINE_KEYS: dict[str, set[str]] = {
    "embedded": {"index", "encoder"},
    "http": {"url", "method", "body", "url_params", "headers", "response"},
    "opensearch": {"url", "index", "body", "headers", "response"},
    "elasticsearch": {"url", "index", "body", "headers", "response"},
    "solr": {"url", "url_params", "headers", "response"},
    "postgres": {"dsn", "dsn_env", "sql"},
    "python": {"callable", "retriever", "pythonpath"},
    "hybrid": {"sources"},
}
_LOADING: list[Path] = []  # the hybrid configurations being loaded (a loop of sources is refused)


@dataclass(frozen=True)
class SearchConfig:
    """One search configuration. ``content`` is the effective content the hash is taken of;
    the engine-specific fields are None when the engine has no use for them."""

    name: str
    engine: str
    depth: int
    params: dict[str, Value]
    hash: str
    path: Path | None
    content: dict[str, Any] = field(repr=False)
    index: Path | None = None
    url: str | None = None
    method: str | None = None
    body: Template | None = None
    url_params: dict[str, Template] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    response: dict[str, str] = field(default_factory=dict)
    dsn: str | None = None
    dsn_env: str | None = None
    sql: str | None = None
    callable: str | None = None
    retriever: str | None = None
    pythonpath: Path | None = None
    encoder: str | None = None
    sources: tuple[SearchConfig, ...] = ()

    @property
    def short_hash(self) -> str:
        """The hash as shown: its first 12 hex digits."""
        return self.hash[:SHORT_HASH]

    @property
    def variables(self) -> set[str]:
        """Names a template may use: ``query``, ``depth`` and the knobs."""
        return {"query", "depth", *self.params}

    def with_params(self, values: Mapping[str, object]) -> SearchConfig:
        """This configuration with some knobs set to other values (a new hash). A knob the
        configuration does not have is a :class:`SearchError` naming it."""
        raw = dict(self.content)
        raw["params"] = _apply_overrides(self.params, values, self.path, self.engine)
        if "name" not in raw:
            raw["name"] = self.name
        return _build(raw, self.path, self.name)

    def template_variables(self, query: str) -> dict[str, Value]:
        return {**self.params, "query": query, "depth": self.depth}


def parse_overrides(items: Iterable[str]) -> dict[str, Value]:
    """``["k1=0.9", "b=0.3", "method=bm25+"]`` as ``{"k1": 0.9, "b": 0.3, "method": "bm25+"}``:
    integers and finite floats are parsed, ``true``/``false`` are booleans, the rest strings."""
    out: dict[str, Value] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SearchError(f"expected KNOB=VALUE, got {item!r}", field="--set")
        out[name] = _parse_value(text.strip(), name)
    return out


def _parse_value(text: str, name: str) -> Value:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    problem = number_problem(number)
    if problem is not None:
        raise SearchError(f"knob {name!r}: {problem}", field=f"params.{name}")
    return number


def _check_value(name: str, value: object, path: Path | None) -> Value:
    where = str(path) if path is not None else None
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        problem = number_problem(value)
        if problem is not None:
            raise SearchError(problem, path=where, field=f"params.{name}")
        return value
    raise SearchError(
        f"a knob must be a string, number or boolean, got {type(value).__name__}",
        path=where,
        field=f"params.{name}",
    )


def _coerce(name: str, old: Value, new: object, path: Path | None) -> Value:
    """``new`` in the type of the knob's current value (an int given for a float knob is
    that float; a number given for a string knob is its text)."""
    value = _check_value(name, new, path)
    if isinstance(old, bool) or isinstance(value, bool):
        if type(old) is not type(value):
            raise SearchError(
                f"knob {name!r} is {_plain_type(old)}, got {value!r}",
                path=_where(path),
                field=f"params.{name}",
            )
        return value
    if isinstance(old, float) and isinstance(value, int):
        return float(value)
    if isinstance(old, str) and not isinstance(value, str):
        return str(value)
    if isinstance(old, int | float) and isinstance(value, str):
        raise SearchError(
            f"knob {name!r} is a number, got {value!r}", path=_where(path), field=f"params.{name}"
        )
    return value


def _plain_type(value: Value) -> str:
    return {bool: "a boolean", str: "a string", int: "an integer", float: "a number"}[type(value)]


def _where(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def _apply_overrides(
    params: Mapping[str, Value], overrides: Mapping[str, object], path: Path | None, engine: str
) -> dict[str, Value]:
    out = dict(params)
    for name, value in overrides.items():
        if engine == "embedded" and name in DENSE_PARAMS and name not in out:
            out[name] = DENSE_PARAMS[name]
        if name not in out:
            known = ", ".join(sorted(out)) or "none"
            raise SearchError(
                f"unknown knob {name!r}: the configuration's [params] has {known}",
                path=_where(path),
                field=f"params.{name}",
            )
        out[name] = _coerce(name, out[name], value, path)
    if engine == "embedded":  # dense knobs at their defaults stay out (BM25 hashes unchanged)
        for name, default in DENSE_PARAMS.items():
            if name in out and type(out[name]) is type(default) and out[name] == default:
                del out[name]
    return out


def load_config(path: str | Path, overrides: Mapping[str, object] | None = None) -> SearchConfig:
    """Read and check a configuration TOML; ``overrides`` set knobs (see :func:`parse_overrides`)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SearchError(f"cannot read: {exc.strerror}", path=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise SearchError(f"invalid UTF-8 at byte {exc.start}", path=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise SearchError(f"not valid TOML ({exc})", path=str(path)) from None
    config = _build(raw, path, path.stem)
    return config.with_params(overrides) if overrides else config


def config_from_dict(
    raw: Mapping[str, Any], *, name: str = "config", base: Path | None = None
) -> SearchConfig:
    """A configuration from a dict shaped like the TOML (relative paths against ``base``,
    else the working directory)."""
    path = None if base is None else base / f"{name}.toml"
    return _build(dict(raw), path, name, base=base)


def _string(raw: Mapping[str, Any], key: str, path: Path | None, *, required: bool = False) -> str | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise SearchError("missing", path=_where(path), field=key)
        return None
    if not isinstance(value, str) or not value.strip():
        raise SearchError("must be a non-empty string", path=_where(path), field=key)
    return value


def _table(raw: Mapping[str, Any], key: str, path: Path | None) -> dict[str, str]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise SearchError("must be a table", path=_where(path), field=key)
    for k, v in value.items():
        if not isinstance(v, str | int | float) or isinstance(v, bool):
            raise SearchError("must be a string", path=_where(path), field=f"{key}.{k}")
    return {str(k): str(v) for k, v in value.items()}


def _depth(raw: Mapping[str, Any], path: Path | None) -> int:
    depth = raw.get("depth", DEFAULT_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise SearchError(
            f"must be an integer from 1 to {MAX_DEPTH}, got {depth!r}", path=_where(path), field="depth"
        )
    return depth


def _params(raw: Mapping[str, Any], path: Path | None, engine: str) -> dict[str, Value]:
    given = raw.get("params", {})
    if not isinstance(given, dict):
        raise SearchError("must be a table", path=_where(path), field="params")
    params: dict[str, Value] = {}
    if engine == "embedded":
        params.update(EMBEDDED_PARAMS)
        for name in given:
            if name not in EMBEDDED_PARAMS and name not in DENSE_PARAMS:
                known = ", ".join([*EMBEDDED_PARAMS, *DENSE_PARAMS])
                raise SearchError(
                    f"unknown knob {name!r} for the embedded engine (known: {known})",
                    path=_where(path),
                    field=f"params.{name}",
                )
        return _apply_overrides(params, given, path, engine)
    if engine == "hybrid":
        params.update(FUSION_PARAMS)
        for name in given:
            if name not in FUSION_PARAMS:
                raise SearchError(
                    f"unknown knob {name!r} for the hybrid engine (known: {', '.join(FUSION_PARAMS)})",
                    path=_where(path),
                    field=f"params.{name}",
                )
        return _apply_overrides(params, given, path, engine)
    for name, value in given.items():
        if name in ("query", "depth"):
            raise SearchError(
                f"{name!r} is reserved for the template", path=_where(path), field=f"params.{name}"
            )
        params[str(name)] = _check_value(str(name), value, path)
    return params


def _check_embedded_params(params: Mapping[str, Value], path: Path | None) -> None:
    where = _where(path)
    for name, (low, high) in EMBEDDED_RANGES.items():
        problem = number_problem(params[name], low=low, high=high)
        if problem is not None:
            raise SearchError(problem, path=where, field=f"params.{name}")
    if params["method"] not in BM25_METHODS:
        raise SearchError(
            f"unknown BM25 variant {params['method']!r} (known: {', '.join(BM25_METHODS)})",
            path=where,
            field="params.method",
        )
    check_fusion_params(params, where)


def _relative(value: str, path: Path | None, base: Path | None = None) -> Path:
    p = Path(value).expanduser()
    if p.is_absolute():
        return p
    root = base if base is not None else (path.parent if path is not None else Path.cwd())
    return root / p


def _engine_fields(
    raw: dict[str, Any], engine: str, path: Path | None, variables: set[str], base: Path | None
) -> dict[str, Any]:
    where = _where(path)
    out: dict[str, Any] = {}
    if engine == "embedded":
        out["index"] = _relative(_string(raw, "index", path, required=True) or "", path, base)
        out["encoder"] = _string(raw, "encoder", path)
        return out
    if engine in ("http", "opensearch", "elasticsearch", "solr"):
        return _http_fields(raw, engine, path, variables)
    if engine == "hybrid":
        out["sources"] = _sources(raw, path, base)
        return out
    if engine == "postgres":
        out["sql"] = _string(raw, "sql", path, required=True)
        out["dsn"] = _string(raw, "dsn", path)
        out["dsn_env"] = _string(raw, "dsn_env", path)
        if "%(query)s" not in (out["sql"] or ""):
            raise SearchError("must bind the query as %(query)s", path=where, field="sql")
        return out
    out["callable"] = _string(raw, "callable", path)
    out["retriever"] = _string(raw, "retriever", path)
    if (out["callable"] is None) == (out["retriever"] is None):
        raise SearchError("give exactly one of callable or retriever", path=where, field="callable")
    for key in ("callable", "retriever"):
        if out[key] is not None and ":" not in out[key]:
            raise SearchError(f"expected module:attribute, got {out[key]!r}", path=where, field=key)
    pythonpath = _string(raw, "pythonpath", path)
    out["pythonpath"] = None if pythonpath is None else _relative(pythonpath, path, base)
    return out


def _sources(raw: Mapping[str, Any], path: Path | None, base: Path | None) -> tuple[SearchConfig, ...]:
    """A hybrid configuration's two sources, each a configuration file (relative to this one)."""
    where = _where(path)
    given = raw.get("sources")
    if not isinstance(given, list) or len(given) != 2 or not all(isinstance(s, str) and s for s in given):
        raise SearchError(
            'must be a list of two configuration files, e.g. ["bm25.toml", "dense.toml"]',
            path=where,
            field="sources",
        )
    out: list[SearchConfig] = []
    for i, item in enumerate(given):
        source = _relative(item, path, base).resolve()
        if source in _LOADING:
            raise SearchError(f"{item!r} is a source of itself (a loop)", path=where, field=f"sources[{i}]")
        _LOADING.append(source)
        try:
            out.append(load_config(source))
        except SearchError as exc:
            raise SearchError(
                f"{exc.message} (source {i} of {where or 'a hybrid configuration'})",
                path=exc.path or where,
                line=exc.line,
                field=exc.field or f"sources[{i}]",
            ) from None
        finally:
            _LOADING.pop()
    return tuple(out)


def _http_fields(raw: dict[str, Any], engine: str, path: Path | None, variables: set[str]) -> dict[str, Any]:
    where = _where(path)
    out: dict[str, Any] = {}
    url = _string(raw, "url", path, required=True) or ""
    if not url.startswith(("http://", "https://")):
        raise SearchError(f"must be an http:// or https:// URL, got {url!r}", path=where, field="url")
    if engine in ("opensearch", "elasticsearch"):
        index = _string(raw, "index", path)
        if index is not None:
            url = f"{url.rstrip('/')}/{index}/_search"
        raw.setdefault("body", _SEARCH_BODY)
        raw.setdefault("response", dict(_ES_RESPONSE))
        out["method"] = "POST"
    elif engine == "solr":
        raw.setdefault("url_params", dict(_SOLR_PARAMS))
        raw.setdefault("response", dict(_SOLR_RESPONSE))
        out["method"] = "GET"
    else:
        method = (_string(raw, "method", path) or ("POST" if "body" in raw else "GET")).upper()
        if method not in ("GET", "POST"):
            raise SearchError(f"must be GET or POST, got {method!r}", path=where, field="method")
        if method == "GET" and "body" in raw:
            raise SearchError("a GET request has no body: use [url_params]", path=where, field="body")
        out["method"] = method
    out["url"] = compile_template(url, "url", path, variables).text
    body = _string(raw, "body", path)
    out["body"] = None if body is None else compile_template(body, "body", path, variables)
    out["url_params"] = {
        k: compile_template(v, f"url_params.{k}", path, variables)
        for k, v in _table(raw, "url_params", path).items()
    }
    out["headers"] = _table(raw, "headers", path)
    response = _table(raw, "response", path)
    for key in response:
        if key not in ("ids", "text", "score"):
            raise SearchError("unknown key (known: ids, text, score)", path=where, field=f"response.{key}")
        try:
            parse_path(response[key])
        except ValueError as exc:
            raise SearchError(str(exc), path=where, field=f"response.{key}") from None
    for key in ("ids", "text"):
        if key not in response:
            raise SearchError(
                "missing (a path such as hits.hits[*]._id)", path=where, field=f"response.{key}"
            )
    out["response"] = response
    return out


def _canonical_hash(content: Mapping[str, Any]) -> str:
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _build(
    raw: dict[str, Any], path: Path | None, default_name: str, *, base: Path | None = None
) -> SearchConfig:
    where = _where(path)
    raw = dict(raw)
    engine = raw.get("engine", DEFAULT_ENGINE)
    if engine not in ENGINES:
        raise SearchError(
            f"unknown engine {engine!r} (known: {', '.join(ENGINES)})", path=where, field="engine"
        )
    allowed = _COMMON_KEYS | _ENGINE_KEYS[engine]
    for key in raw:
        if key not in allowed:
            raise SearchError(
                f"unknown key for the {engine} engine (known: {', '.join(sorted(allowed))})",
                path=where,
                field=key,
            )
    name = _string(raw, "name", path) or default_name
    depth = _depth(raw, path)
    params = _params(raw, path, engine)
    if engine == "embedded":
        _check_embedded_params(params, path)
    elif engine == "hybrid":
        check_fusion_params(params, where)
    variables = {"query", "depth", *params}
    fields = _engine_fields(raw, engine, path, variables, base)
    content = {k: v for k, v in raw.items() if k not in ("name", "description")}
    content.update(engine=engine, depth=depth, params=params)
    hashed = content
    if engine == "hybrid":  # a source's file edited is another configuration
        hashed = {**content, "source_hashes": [s.hash for s in fields["sources"]]}
    return SearchConfig(
        name=name,
        engine=engine,
        depth=depth,
        params=params,
        hash=_canonical_hash(hashed),
        path=path,
        content={**content, "name": name} if "name" in raw else content,
        **fields,
    )


def with_encoder(config: SearchConfig, spec: str) -> SearchConfig:
    """``config`` (embedded) searching its dense vectors with the encoder ``spec`` the user
    names (``judge search --encoder``): a registered name or ``module:attribute``."""
    if config.engine != "embedded":
        raise SearchError(
            f"--encoder applies to an embedded configuration, not {config.engine!r}: "
            "set encoder = ... in the embedded source's own file",
            path=_where(config.path),
            field="--encoder",
        )
    raw = dict(config.content)
    raw["encoder"] = spec
    raw.setdefault("name", config.name)
    return _build(raw, config.path, config.name)


def replace_depth(config: SearchConfig, depth: int) -> SearchConfig:
    """``config`` asking for ``depth`` results (a new hash)."""
    raw = dict(config.content)
    raw["depth"] = depth
    raw.setdefault("name", config.name)
    return _build(raw, config.path, config.name)


__all__ = [
    "SearchConfig",
    "config_from_dict",
    "load_config",
    "parse_overrides",
    "replace_depth",
    "with_encoder",
]
