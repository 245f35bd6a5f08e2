"""``openai:<model>``: any OpenAI-compatible chat server through the ``openai`` AsyncOpenAI client.

Works with DashScope's compatible mode (``https://dashscope.aliyuncs.com/compatible-mode/v1``),
vLLM, Ollama (``http://localhost:11434/v1``) and OpenAI itself.

* Base URL: ``base_url=`` (CLI ``--base-url``), else ``$OPENAI_BASE_URL``, else OpenAI's.
* Key: ``api_key=``, else ``$OPENAI_API_KEY``, else ``$DASHSCOPE_API_KEY`` for a DashScope
  URL, else the dummy ``"EMPTY"`` when a base URL is set (local servers need none).
* The client's own retries are off (``max_retries=0``): :class:`ResilientBackend` retries.
* JSON (``request.json_schema`` set): ``structured="json_schema"`` (default) sends
  ``response_format={"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``;
  ``"json_object"`` sends ``{"type": "json_object"}`` (OpenAI and DashScope then require the
  word "JSON" in the prompt); ``"none"`` sends nothing and the caller parses.
* Prefill (``request.answer_prefix``): sent as a trailing assistant message. How the server
  is told to continue it is ``prefill=``: ``"partial"`` marks the message ``"partial": true``
  (DashScope), ``"continue_final_message"`` adds ``continue_final_message: true,
  add_generation_prompt: false`` to the body (vLLM), ``"plain"`` sends the bare message
  (Ollama continues a final assistant message by itself), ``"none"`` refuses prefill with
  :class:`UnsupportedError` (OpenAI). ``"auto"`` (default) picks ``partial`` for a DashScope
  URL, ``none`` for api.openai.com, else ``continue_final_message``. With a prefix the JSON
  ``response_format`` is not sent (the prefix already fixes the format, and grammars would
  restart at the prefix).
* Probability mode (``request.candidates``): ``logprobs=True``, ``top_logprobs`` (default
  20; 5 for DashScope, its maximum) and ``max_tokens=1``; ``Completion.token_probs[c]`` is
  the summed probability of the top tokens whose stripped, lower-cased text is ``c``
  (0.0 when none is). A server that returns no logprobs raises :class:`UnsupportedError`.
* Transport: the ``AsyncOpenAI`` client is built on an ``openai.DefaultAsyncHttpxClient``
  (or ``http_client=``), and each call is one ``POST {base_url}chat/completions`` sent through
  that same HTTP client with the openai client's own headers (auth, user agent, SDK
  headers), URL and timeout; the request is the one ``http_client.build_request`` makes
  (merged once per client, cookies a server set are sent back). The body is built here
  (:meth:`OpenAIBackend.build_body`: what ``chat.completions.create(**build_request(r))``
  would send) and the reply is read as plain JSON: the SDK's typed request transform and
  response models cost about as much CPU as the HTTP exchange itself, which limited batch
  throughput (``scripts/bench_client_cpu.py`` measures it). HTTP errors map as the SDK's
  would (status, ``error.message``/``code``, Retry-After); a 2xx reply that is not JSON or
  has no choices is a :class:`TransientError`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

from judge.backends._base import (
    BackendError,
    ChatRequest,
    Completion,
    ConfigurationError,
    PermanentError,
    TransientError,
    UnsupportedError,
    Usage,
    error_for_status,
)
from judge.backends._common import ChatAPIBackend, Structured, close_on_loop
from judge.backends._redact import redact, register_secret

if TYPE_CHECKING:
    import httpx2
    from openai import AsyncOpenAI

__all__ = ["OpenAIBackend"]

Prefill = Literal["auto", "partial", "continue_final_message", "plain", "none"]
_PREFILLS = ("auto", "partial", "continue_final_message", "plain", "none")
DUMMY_KEY = "EMPTY"


def _host(url: str | None) -> str:
    return (urlparse(url).hostname or "").lower() if url else ""


def is_dashscope_url(url: str | None) -> bool:
    host = _host(url)
    return host.endswith("aliyuncs.com") or host.endswith("aliyun.com")


class OpenAIBackend(ChatAPIBackend):
    """An OpenAI-compatible chat server (see the module docstring)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        structured: Structured = "json_schema",
        strict_schema: bool = False,
        prefill: Prefill = "auto",
        top_logprobs: int | None = None,
        timeout_s: float | None = None,
        max_concurrency: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        http_client: Any = None,
    ) -> None:
        self._base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        dashscope = is_dashscope_url(self._base_url)
        if top_logprobs is None:
            top_logprobs = 5 if dashscope else 20
        super().__init__(
            "openai",
            model,
            structured=structured,
            strict_schema=strict_schema,
            top_logprobs=top_logprobs,
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
        )
        if prefill not in _PREFILLS:
            raise ConfigurationError(f"prefill must be one of {', '.join(_PREFILLS)}; got {prefill!r}")
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key and dashscope:
            key = os.environ.get("DASHSCOPE_API_KEY")
        if not key:
            if self._base_url is None:
                raise ConfigurationError(
                    "openai backend: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server "
                    "that needs no key)"
                )
            key = DUMMY_KEY
        register_secret(key)
        self._api_key = key
        if prefill == "auto":
            if dashscope:
                prefill = "partial"
            elif _host(self._base_url) in ("", "api.openai.com"):
                prefill = "none"
            else:
                prefill = "continue_final_message"
        self.prefill: Prefill = prefill
        self._extra_body = dict(extra_body or {})
        self._http_client = http_client
        self._client: AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._wire: _Wire | None = None

    def __repr__(self) -> str:
        return f"OpenAIBackend(name={self.name!r}, base_url={redact(self._base_url or 'default')!r})"

    @property
    def base_url(self) -> str | None:
        return self._base_url

    def params(self) -> dict[str, Any]:
        params = self.output_params(prefill=self.prefill)
        if self._extra_body:
            params["extra_body"] = json.loads(json.dumps(self._extra_body, sort_keys=True, default=str))
        return params

    def _get_client(self) -> AsyncOpenAI:
        return self._get_wire().client

    def _get_wire(self) -> _Wire:
        # AsyncOpenAI's connection pool belongs to one event loop; a sync wrapper that calls
        # asyncio.run() repeatedly gets a fresh client per loop.
        loop = asyncio.get_running_loop()
        wire = self._wire
        if wire is None or (self._client_loop is not loop and self._http_client is None):
            import openai

            http = self._http_client if self._http_client is not None else openai.DefaultAsyncHttpxClient()
            kwargs: dict[str, Any] = {"api_key": self._api_key, "max_retries": 0, "http_client": http}
            if self._base_url is not None:
                kwargs["base_url"] = self._base_url
            if self.timeout_s is not None:
                kwargs["timeout"] = self.timeout_s
            client = openai.AsyncOpenAI(**kwargs)
            wire = _Wire(client, http)
            self._client = client
            self._client_loop = loop
            self._wire = wire
        return wire

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create`` (no network)."""
        kwargs, messages = self.request_kwargs(request)
        extra_body = dict(self._extra_body)
        if request.answer_prefix is not None:
            if self.prefill == "none":
                raise UnsupportedError(
                    f"{self.name}: this server does not continue an assistant prefix (prefill='none')"
                )
            prefix_message: dict[str, Any] = {"role": "assistant", "content": request.answer_prefix}
            if self.prefill == "partial":
                prefix_message["partial"] = True
            elif self.prefill == "continue_final_message":
                extra_body["continue_final_message"] = True
                extra_body["add_generation_prompt"] = False
            messages.append(prefix_message)
        self.add_output_mode(kwargs, request)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return kwargs

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``: :meth:`build_request` with ``extra_body``
        merged in at the top level, as the openai client sends it (no network)."""
        body = self.build_request(request)
        extra = body.pop("extra_body", None)
        if extra:
            body.update(extra)
        return body

    async def complete(self, request: ChatRequest) -> Completion:
        body = self.build_body(request)
        wire = self._get_wire()
        started = time.perf_counter()
        try:
            content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            response = await wire.http.send(wire.request(content))
        except Exception as exc:
            raise _translate(self.name, exc) from None
        latency = time.perf_counter() - started
        status = response.status_code
        if not 200 <= status < 300:
            message = redact(f"{self.name}: HTTP {status}: {_status_detail(response)}")
            raise error_for_status(status, message, headers=dict(response.headers))
        try:
            data = json.loads(response.content)
        except ValueError:
            raise TransientError(f"{self.name}: the server's reply is not JSON (HTTP {status})") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise TransientError(f"{self.name}: the server returned no choices")
        choice: dict[str, Any] = choices[0]
        message_obj = choice.get("message")
        text = message_obj.get("content") if isinstance(message_obj, dict) else None
        usage_obj = data.get("usage")
        usage = (
            Usage(
                prompt_tokens=_int(usage_obj.get("prompt_tokens")),
                completion_tokens=_int(usage_obj.get("completion_tokens")),
            )
            if isinstance(usage_obj, dict)
            else Usage()
        )
        token_probs = self.token_probs(choice, request)
        model = data.get("model")
        finish_reason = choice.get("finish_reason")
        return Completion(
            text=text if isinstance(text, str) else "",
            usage=usage,
            model=model if isinstance(model, str) and model else self.model,
            latency_s=latency,
            token_probs=token_probs,
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._wire = None
        if client is not None and self._http_client is None:
            await close_on_loop(self._client_loop, client.close)


class _Wire:
    """One openai client and the HTTP client it sends through, with what every call reuses:
    the endpoint URL, the client's headers (auth, user agent, SDK headers) and timeout,
    merged once with the HTTP client's own defaults into a template request."""

    __slots__ = ("_headers", "_proto", "_request_cls", "client", "http")

    def __init__(self, client: AsyncOpenAI, http: httpx2.AsyncClient) -> None:
        self.client = client
        self.http = http
        base = client.base_url  # always ends with "/" (the client enforces it)
        url = base.copy_with(raw_path=base.raw_path + b"chat/completions")
        timeout: Any = client.timeout
        merged = {**client.default_headers, **client.auth_headers}
        headers = {k: v for k, v in merged.items() if isinstance(v, str)}  # drop the SDK's Omit()s
        headers["X-Stainless-Retry-Count"] = "0"
        read = getattr(timeout, "read", timeout)
        if isinstance(read, int | float):
            headers["X-Stainless-Read-Timeout"] = str(read)
        # What http.build_request() makes of every call but its body: URL, the merged
        # headers (client defaults + ours + Host) and the timeout extension.
        self._proto = http.build_request("POST", url, headers=headers, timeout=timeout)
        self._request_cls = type(self._proto)
        self._headers = self._proto.headers.copy()
        self._headers.pop("Content-Length", None)  # each body sets its own

    def request(self, content: bytes) -> httpx2.Request:
        """The POST for one body; as ``http.build_request`` would make it (that is used
        whenever the client holds cookies a server set, so they are sent back)."""
        proto = self._proto
        if self.http.cookies:
            return self.http.build_request(
                "POST", proto.url, content=content, headers=self._headers, extensions=proto.extensions
            )
        return self._request_cls(
            "POST", proto.url, content=content, headers=self._headers, extensions=proto.extensions
        )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _status_detail(response: httpx2.Response) -> str:
    """What the SDK's status error would say: the body's ``error.message`` (and code), else
    ``Error code: N - <body>``."""
    text = response.text.strip()
    try:
        body: Any = json.loads(text)
    except ValueError:
        return f"Error code: {response.status_code}" + (f" - {text}" if text else "")
    err = body.get("error", body) if isinstance(body, Mapping) else None
    if isinstance(err, Mapping):
        msg, code = err.get("message"), err.get("code")
        if msg:
            return f"{msg} ({code})" if code else str(msg)
    return f"Error code: {response.status_code} - {body}"


def _translate(name: str, exc: Exception) -> BackendError:
    """Map an openai exception onto our error classes, with a redacted message."""
    import openai

    timeouts, transport = _http_errors()
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, (openai.APITimeoutError, *timeouts)):
        return TransientError(f"{name}: request timed out")
    if isinstance(exc, (openai.APIConnectionError, *transport)):
        return TransientError(redact(f"{name}: connection error: {type(exc).__name__}: {exc}"))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = _error_detail(exc)
        message = redact(f"{name}: HTTP {status}: {detail}")
        headers = dict(exc.response.headers) if exc.response is not None else None
        return error_for_status(status, message, headers=headers)
    if isinstance(exc, openai.OpenAIError):
        return PermanentError(redact(f"{name}: {type(exc).__name__}: {exc}"))
    if isinstance(exc, TimeoutError | ConnectionError):
        return TransientError(redact(f"{name}: {type(exc).__name__}: {exc}"))
    return PermanentError(redact(f"{name}: unexpected {type(exc).__name__}: {exc}"))


@functools.cache
def _http_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """Timeout and transport exception classes of the HTTP libraries the openai client may
    send through (``httpx2`` for openai >= 3, ``httpx`` before)."""
    timeouts: list[type[Exception]] = []
    transport: list[type[Exception]] = []
    for module_name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        transport.append(module.TransportError)
    return tuple(timeouts), tuple(transport)


def _error_detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            msg = err.get("message")
            code = err.get("code")
            if msg:
                return f"{msg} ({code})" if code else str(msg)
    return str(getattr(exc, "message", None) or exc)
