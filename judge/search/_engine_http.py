"""HTTP engines: any JSON search API (``http``), OpenSearch and Elasticsearch ``_search``
(``opensearch``, ``elasticsearch``: a POST body template, hits from ``hits.hits[*]``) and
Solr ``select`` (``solr``: URL parameters, hits from ``response.docs[*]``).

``[headers]`` values may name environment variables as ``${VAR}``: the value is read when
the engine opens and is registered as a secret (redacted from judge's logs); the request
written to the run's metadata shows ``${VAR}``, never the value.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from typing import Any

import httpx

from judge.io import redact, register_secret
from judge.search._hits import Hit, make_hit
from judge.search._jsonpath import PathNotFound, parse_path, select
from judge.search._request_template import compile_template
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError, TransientSearchError

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}
# What may stand in a header value as sent: visible ASCII, space and tab (RFC 9110 field-vchar).
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SHOWN_ANSWER = 300


def _answer_text(response: httpx.Response) -> str:
    """The start of an answer for an error message, redacted before it is cut (a secret the
    engine echoes is never cut in two past the redaction's reach)."""
    return redact(response.text[: 10 * _SHOWN_ANSWER])[:_SHOWN_ANSWER]


def expand_env(value: str, path: str | None, field: str) -> tuple[str, bool]:
    """``value`` with each ``${VAR}`` replaced by the variable's value (missing: an error
    naming ``field``), and whether it held any."""
    found = False

    def sub(m: re.Match[str]) -> str:
        nonlocal found
        found = True
        name = m.group(1)
        env = os.environ.get(name)
        if env is None:
            raise SearchError(f"the environment variable {name} is not set", path=path, field=field)
        register_secret(env)
        return env

    return _ENV.sub(sub, value), found


class HttpEngine:
    def __init__(self, config: SearchConfig, *, timeout_s: float = 30.0) -> None:
        assert config.url is not None
        self.config = config
        self.where = None if config.path is None else str(config.path)
        self.headers: dict[str, str] = {}
        for name, value in config.headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise SearchError(
                    "not a header name (letters, digits, '-')", path=self.where, field=f"headers.{name}"
                )
            self.headers[name], from_env = expand_env(value, self.where, f"headers.{name}")
            if not _HEADER_VALUE.fullmatch(self.headers[name]):
                source = "the environment variable it names holds" if from_env else "it holds"
                raise SearchError(
                    f"{source} a character a header cannot carry (CR, LF, another control "
                    "character or a non-ASCII one)",
                    path=self.where,
                    field=f"headers.{name}",
                )
        if config.body is not None and not any(k.lower() == "content-type" for k in self.headers):
            self.headers["Content-Type"] = "application/json"
        self.paths = {key: parse_path(value) for key, value in config.response.items()}
        self.url_template = compile_template(config.url, "url", self.where, config.variables)
        self.client = httpx.AsyncClient(timeout=timeout_s, headers=self.headers, trust_env=False)

    def _request(self, query: str) -> tuple[str, dict[str, str], str | None]:
        variables = self.config.template_variables(query)
        url = self.url_template.render(variables)
        params = {k: t.render(variables) for k, t in self.config.url_params.items()}
        body = None if self.config.body is None else self.config.body.render(variables)
        return url, params, body

    def _build(self, query: str) -> tuple[httpx.Request, dict[str, str], str | None]:
        """The request as sent: ``[url_params]`` merged into the query the URL template
        already has (httpx's ``params=`` would replace it)."""
        url, params, body = self._request(query)
        try:
            target = httpx.URL(url)
            if params:
                target = target.copy_merge_params(params)
            content = None if self.config.method != "POST" else (body or "").encode("utf-8")
            request = self.client.build_request(self.config.method or "GET", target, content=content)
        except httpx.InvalidURL as exc:
            raise SearchError(
                f"the rendered URL cannot be sent: {exc}",
                path=self.where,
                field="url_params" if params else "url",
            ) from None
        return request, params, body

    async def search(self, query: str, depth: int) -> list[Hit]:
        request, _, _ = self._build(query)
        try:
            response = await self.client.send(request)
        except httpx.TimeoutException as exc:
            raise TransientSearchError(f"timed out: {exc!r}", field="url") from exc
        except httpx.TransportError as exc:
            raise TransientSearchError(f"cannot reach {request.url}: {exc!r}", field="url") from exc
        return self._hits(response)

    def _hits(self, response: httpx.Response) -> list[Hit]:
        status = response.status_code
        if status in _TRANSIENT_STATUS:
            raise TransientSearchError(f"HTTP {status}: {_answer_text(response)}", field="url")
        if response.is_redirect:
            where = response.headers.get("location", "")
            raise SearchError(
                f"HTTP {status}: the engine redirects to {where[:_SHOWN_ANSWER]!r} (judge does not "
                "follow redirects: put the URL it redirects to in the configuration)",
                path=self.where,
                field="url",
            )
        if status >= 400:
            blame = "body" if self.config.body is not None else "url"
            raise SearchError(f"HTTP {status}: {_answer_text(response)}", path=self.where, field=blame)
        try:
            data = response.json()
        except ValueError:
            raise SearchError(
                f"the answer (HTTP {status}) is not JSON: {_answer_text(response)!r}",
                path=self.where,
                field="response",
            ) from None
        return self.map_hits(data)

    def map_hits(self, data: Any) -> list[Hit]:
        """The hits of one parsed response through the ``[response]`` mapping."""
        try:
            ids = select(data, self.paths["ids"])
        except PathNotFound as exc:
            keys = ", ".join(map(str, data)) if isinstance(data, dict) else type(data).__name__
            raise SearchError(
                f"{self.config.response['ids']!r} finds no ids in the answer ({exc}; its top level: {keys})",
                path=self.where,
                field="response.ids",
            ) from None
        texts = self._select("text", data, len(ids))
        scores = self._select("score", data, len(ids)) if "score" in self.paths else [None] * len(ids)
        hits: list[Hit] = []
        for i, (hid, text, score) in enumerate(zip(ids, texts, scores, strict=True)):
            hits.append(
                make_hit(
                    i,
                    hid,
                    text,
                    score,
                    path=self.where,
                    field="response.ids",
                    text_field="response.text",
                    score_field="response.score",
                )
            )
        return hits

    def _select(self, key: str, data: Any, n: int) -> list[Any]:
        try:
            values = select(data, self.paths[key])
        except PathNotFound as exc:
            raise SearchError(
                f"{self.config.response[key]!r} finds nothing in the answer ({exc})",
                path=self.where,
                field=f"response.{key}",
            ) from None
        if len(values) != n:
            raise SearchError(
                f"{self.config.response[key]!r} finds {len(values)} values for {n} ids",
                path=self.where,
                field=f"response.{key}",
            )
        return values

    def _root(self) -> str:
        parts = urllib.parse.urlsplit(self.config.url or "")
        return f"{parts.scheme}://{parts.netloc}"

    async def version(self) -> str | None:
        engine = self.config.engine
        if engine in ("opensearch", "elasticsearch"):
            response = await self.client.get(self._root() + "/")
            info = response.json().get("version", {})
            return f"{info.get('distribution', engine)} {info.get('number', '?')}"
        if engine == "solr":
            url = self.config.url or ""
            base = url[: url.find("/solr/") + 6] if "/solr/" in url else self._root() + "/solr/"
            response = await self.client.get(base + "admin/info/system", params={"wt": "json"})
            lucene = response.json().get("lucene", {})
            return f"solr {lucene.get('solr-spec-version', '?')}"
        return None

    async def stats(self) -> dict[str, Any]:
        if self.config.engine not in ("opensearch", "elasticsearch"):
            return {}
        path = urllib.parse.urlsplit(self.config.url or "").path.strip("/").split("/")
        if len(path) < 2 or path[-1] != "_search":
            return {}
        response = await self.client.get(f"{self._root()}/{path[-2]}/_count")
        count = response.json().get("count")
        return {"index": path[-2], "documents": count} if isinstance(count, int) else {}

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        request, params, body = self._build(query)
        shown_headers = dict(self.config.headers)
        if "Content-Type" in self.headers and "Content-Type" not in shown_headers:
            shown_headers["Content-Type"] = self.headers["Content-Type"]
        url = str(request.url)
        out: dict[str, Any] = {"method": self.config.method, "url": url, "headers": shown_headers}
        if params:
            out["params"] = params
        if body is not None:
            try:
                out["body"] = json.loads(body)
            except ValueError:
                out["body"] = body
        return out

    async def close(self) -> None:
        await self.client.aclose()
