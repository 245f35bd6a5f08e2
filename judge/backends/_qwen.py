"""``qwen:<model>``: Qwen on DashScope through the official ``dashscope`` SDK (native API).

Why the SDK and not langchain's ``ChatTongyi``/``Tongyi``: those drop ``temperature=``/
``seed=`` given to the constructor unless they are repeated in ``model_kwargs``, and expose
neither logprobs nor partial (prefill) mode. ``dashscope.aigc.generation.AioGeneration.call``
is async and puts every parameter we give it into the request body's ``parameters``:

* ``result_format="message"``, ``temperature``, ``top_p``, ``seed``, ``max_tokens``;
* JSON: ``structured="json_object"`` (default) sends ``response_format={"type":
  "json_object"}`` when ``request.json_schema`` is set (DashScope then wants the word
  "JSON" in the prompt); ``"json_schema"`` sends ``{"type": "json_schema", "json_schema":
  {"name", "schema", "strict"}}`` (newer models); ``"none"`` sends nothing;
* prefill (``request.answer_prefix``): a trailing ``{"role": "assistant", "content":
  prefix, "partial": true}`` message (DashScope partial mode); no ``response_format`` then;
* probability mode (``request.candidates``): ``logprobs=true``, ``top_logprobs`` (default
  5, DashScope's maximum) and ``max_tokens=1``; ``token_probs`` as for the OpenAI backend;
* Qwen3 open-weight models (``qwen3-8b``, ``qwen3-235b-a22b`` ...) need
  ``enable_thinking=false`` outside streaming: sent automatically for them unless
  ``enable_thinking=`` says otherwise.

Key from ``api_key=`` or ``$DASHSCOPE_API_KEY``. Base URL from ``base_url=`` (the native
API root, e.g. ``https://dashscope-intl.aliyuncs.com/api/v1``) or the SDK's default /
``$DASHSCOPE_HTTP_BASE_URL``. Each event loop gets its own aiohttp session (closed by
``aclose``). HTTP 429 (or a ``Throttling*`` code) → RateLimitError with Retry-After; 5xx,
timeouts, dropped connections → TransientError; other 4xx → PermanentError.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from judge.backends._base import (
    BackendError,
    ChatRequest,
    Completion,
    ConfigurationError,
    PermanentError,
    TransientError,
    Usage,
    error_for_status,
)
from judge.backends._common import ChatAPIBackend, Structured, close_on_loop
from judge.backends._redact import redact, register_secret

if TYPE_CHECKING:
    import aiohttp

__all__ = ["QwenBackend"]

_QWEN3_OPEN = re.compile(r"^qwen3(\.\d+)?-\d")


class QwenBackend(ChatAPIBackend):
    """Qwen through the DashScope native API (see the module docstring)."""

    def __init__(
        self,
        model: str = "qwen-plus",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        structured: Structured = "json_object",
        strict_schema: bool = False,
        top_logprobs: int = 5,
        enable_thinking: bool | None = None,
        timeout_s: float | None = None,
        max_concurrency: int | None = None,
        extra_parameters: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            "qwen",
            model,
            structured=structured,
            strict_schema=strict_schema,
            top_logprobs=top_logprobs,
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
        )
        key = api_key or os.environ.get("DASHSCOPE_API_KEY")
        if not key:
            raise ConfigurationError(
                "qwen backend: set DASHSCOPE_API_KEY (or pass api_key=) to use DashScope"
            )
        register_secret(key)
        self._api_key = key
        self._base_url = base_url
        if enable_thinking is None and _QWEN3_OPEN.match(model):
            enable_thinking = False
        self.enable_thinking = enable_thinking
        self._extra = dict(extra_parameters or {})
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"QwenBackend(name={self.name!r})"

    def params(self) -> dict[str, Any]:
        params = self.output_params()
        if self.enable_thinking is not None:
            params["enable_thinking"] = self.enable_thinking
        if self._extra:
            params["extra_parameters"] = {k: self._extra[k] for k in sorted(self._extra)}
        return params

    def build_parameters(self, request: ChatRequest) -> dict[str, Any]:
        """The keyword arguments for ``AioGeneration.call`` minus key/session (no network)."""
        kwargs, messages = self.request_kwargs(request, result_format="message")
        if self.enable_thinking is not None:
            kwargs["enable_thinking"] = self.enable_thinking
        if request.answer_prefix is not None:
            messages.append({"role": "assistant", "content": request.answer_prefix, "partial": True})
        self.add_output_mode(kwargs, request)
        for key, value in self._extra.items():
            kwargs.setdefault(key, value)
        return kwargs

    async def _get_session(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            import ssl

            import certifi

            ctx = ssl.create_default_context(cafile=certifi.where())
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ctx, limit=0), trust_env=True
            )
            self._session_loop = loop
        return self._session

    async def complete(self, request: ChatRequest) -> Completion:
        from dashscope.aigc.generation import AioGeneration

        kwargs = self.build_parameters(request)
        session = await self._get_session()
        extra: dict[str, Any] = {"session": session}
        if self._base_url is not None:
            extra["base_address"] = self._base_url
        if self.timeout_s is not None:
            extra["request_timeout"] = self.timeout_s
        started = time.perf_counter()
        try:
            response: Any = await AioGeneration.call(api_key=self._api_key, **kwargs, **extra)
        except Exception as exc:
            raise _translate(self.name, exc) from None
        latency = time.perf_counter() - started
        status = int(getattr(response, "status_code", 0) or 0)
        if status != 200:
            code = getattr(response, "code", None) or ""
            message = getattr(response, "message", None) or ""
            detail = f"{message} ({code})" if code else str(message)
            raise error_for_status(
                status,
                redact(f"{self.name}: HTTP {status}: {detail}"),
                headers=getattr(response, "headers", None) or {},
                code=str(code),
            )
        return self._parse(response, request, latency)

    def _parse(self, response: Any, request: ChatRequest, latency: float) -> Completion:
        output = response.output or {}
        choices = output.get("choices") or []
        if not choices:
            text = output.get("text")
            if text is None:
                raise TransientError(f"{self.name}: the reply had no choices")
            choice: Mapping[str, Any] = {
                "message": {"content": text},
                "finish_reason": output.get("finish_reason"),
            }
        else:
            choice = choices[0]
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, list):  # multimodal-style content parts
            content = "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
        text = content or ""
        usage_raw = response.usage or {}
        usage = Usage(
            prompt_tokens=int(usage_raw.get("input_tokens") or 0),
            completion_tokens=int(usage_raw.get("output_tokens") or 0),
        )
        token_probs = self.token_probs(choice, request)
        return Completion(
            text=text,
            usage=usage,
            model=self.model,
            latency_s=latency,
            token_probs=token_probs,
            finish_reason=choice.get("finish_reason"),
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await close_on_loop(self._session_loop, session.close)


def _translate(name: str, exc: Exception) -> BackendError:
    import aiohttp

    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return TransientError(f"{name}: request timed out")
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return TransientError(redact(f"{name}: connection error: {type(exc).__name__}: {exc}"))
    kind = type(exc).__name__
    if kind in ("ServiceUnavailableError", "TimeoutException", "RequestFailure"):
        return TransientError(redact(f"{name}: {kind}: {exc}"))
    return PermanentError(redact(f"{name}: {kind}: {exc}"))
