"""Pieces shared by the backends: what the two chat APIs (OpenAI-compatible and DashScope)
have in common (:class:`ChatAPIBackend`: settings, request building, probabilities,
closing), the JSON-schema name, reading token log-probabilities, one prompt string for
single-prompt models, and mapping a foreign library's exception onto our error classes."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from judge.backends._base import (
    BackendError,
    ChatRequest,
    ConfigurationError,
    Message,
    PermanentError,
    TransientError,
    UnsupportedError,
    candidate_probs,
    error_for_status,
)
from judge.backends._redact import redact

Structured = Literal["json_schema", "json_object", "none"]
STRUCTURED = ("json_schema", "json_object", "none")


def check_structured(structured: str) -> None:
    if structured not in STRUCTURED:
        raise ConfigurationError(f"structured must be one of {', '.join(STRUCTURED)}; got {structured!r}")


def check_top_logprobs(top_logprobs: int) -> None:
    if top_logprobs < 1:
        raise ConfigurationError(f"top_logprobs must be >= 1, got {top_logprobs}")


def chat_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """The request's messages as plain ``{"role", "content"}`` dicts."""
    return [{"role": m.role, "content": m.content} for m in request.messages]


def add_sampling(kwargs: dict[str, Any], request: ChatRequest) -> None:
    """Add ``top_p``, ``seed`` and ``max_tokens`` when the request sets them."""
    if request.top_p is not None:
        kwargs["top_p"] = request.top_p
    if request.seed is not None:
        kwargs["seed"] = request.seed
    if request.max_tokens is not None:
        kwargs["max_tokens"] = request.max_tokens


def add_output_mode(
    kwargs: dict[str, Any],
    request: ChatRequest,
    *,
    structured: Structured,
    strict_schema: bool,
    top_logprobs: int,
    schema_name: Callable[[Mapping[str, Any]], str],
) -> None:
    """Probability mode (logprobs, one token) or the JSON ``response_format`` (none with a prefix)."""
    if request.candidates is not None:
        kwargs["logprobs"] = True
        kwargs["top_logprobs"] = top_logprobs
        kwargs["max_tokens"] = 1
    elif request.json_schema is not None and request.answer_prefix is None:
        if structured == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(request.json_schema),
                    "schema": request.json_schema,
                    "strict": strict_schema,
                },
            }
        elif structured == "json_object":
            kwargs["response_format"] = {"type": "json_object"}


def schema_name(schema: Mapping[str, Any]) -> str:
    """The ``json_schema.name`` sent with a schema: its title with every character outside
    ``[A-Za-z0-9_-]`` replaced by ``_`` and cut to 64 characters (OpenAI's rule, which
    DashScope shares), ``response`` when it has none."""
    title = schema.get("title")
    name = (
        "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_-") else "_" for ch in str(title))
        if title
        else ""
    )
    return name[:64] or "response"


def logprob_value(value: object) -> float:
    """A reported log-probability. A missing or non-numeric one means probability 0
    (``-inf``): a token the server gave no number for carries no evidence, and counting it
    as certain (probability 1) would decide a verdict on nothing."""
    if isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value):
        return float(value)
    return -math.inf


def first_token_logprobs(choice: Mapping[str, Any], name: str) -> list[tuple[str, float]]:
    """The first generated token's top alternatives ``[(token, logprob)]`` from an
    OpenAI-style ``choice["logprobs"]["content"]`` (DashScope's has the same shape; its
    ``top_logprobs`` may also be a ``{token: logprob}`` mapping); the token itself when no
    alternatives are listed. No logprobs at all raises :class:`UnsupportedError`."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not content or not isinstance(content, list) or not isinstance(content[0], Mapping):
        raise UnsupportedError(f"{name}: the server returned no logprobs")
    first = content[0]
    raw = first.get("top_logprobs") or []
    if isinstance(raw, Mapping):
        top = [(str(t), logprob_value(lp)) for t, lp in raw.items()]
    else:
        top = [
            (str(t.get("token", "")), logprob_value(t.get("logprob"))) for t in raw if isinstance(t, Mapping)
        ]
    if not top:
        top = [(str(first.get("token", "")), logprob_value(first.get("logprob")))]
    return top


class ChatAPIBackend:
    """The part the chat-API backends share (``openai:``, ``qwen:``): the output-mode
    settings (``structured``, ``strict_schema``, ``top_logprobs``; checked here) and how they
    enter ``params()`` and a request, the request's messages and sampling, and reading
    ``token_probs`` off a reply's choice. Each subclass keeps its own transport."""

    def __init__(
        self,
        scheme: str,
        model: str,
        *,
        structured: Structured,
        strict_schema: bool,
        top_logprobs: int,
        timeout_s: float | None,
        max_concurrency: int | None,
    ) -> None:
        if not model:
            raise ConfigurationError(f"{scheme} backend needs a model name, e.g. {scheme}:qwen-plus")
        check_structured(structured)
        check_top_logprobs(top_logprobs)
        self.name = f"{scheme}:{model}"
        self.model = model
        self.supports_probabilities = True
        self.max_concurrency = max_concurrency
        self.structured: Structured = structured
        self.strict_schema = strict_schema
        self.top_logprobs = top_logprobs
        self.timeout_s = timeout_s

    def output_params(self, **between: Any) -> dict[str, Any]:
        """The output-mode entries of ``params()`` (``between``: the backend's own, placed
        before ``top_logprobs``)."""
        params: dict[str, Any] = {"structured": self.structured, **between, "top_logprobs": self.top_logprobs}
        if self.structured == "json_schema":
            params["strict_schema"] = self.strict_schema
        return params

    def request_kwargs(
        self, request: ChatRequest, **fixed: Any
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The call's keywords so far (model, messages, ``fixed``, temperature and the
        sampling the request sets) and its message list (to append a prefix to)."""
        messages = chat_messages(request)
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, **fixed}
        kwargs["temperature"] = request.temperature
        add_sampling(kwargs, request)
        return kwargs, messages

    def add_output_mode(self, kwargs: dict[str, Any], request: ChatRequest) -> None:
        """:func:`add_output_mode` with this backend's settings."""
        add_output_mode(
            kwargs,
            request,
            structured=self.structured,
            strict_schema=self.strict_schema,
            top_logprobs=self.top_logprobs,
            schema_name=schema_name,
        )

    def token_probs(self, choice: Mapping[str, Any], request: ChatRequest) -> dict[str, float] | None:
        """P(candidate) from the choice's first-token logprobs in probability mode, else None."""
        if request.candidates is None:
            return None
        return candidate_probs(first_token_logprobs(choice, self.name), request.candidates)


async def close_on_loop(loop: asyncio.AbstractEventLoop | None, close: Callable[[], Awaitable[Any]]) -> None:
    """Await ``close()`` when the running loop is ``loop`` (a connection pool can only be
    closed on the loop that made it); closing is best effort."""
    try:
        if loop is asyncio.get_running_loop():
            await close()
    except Exception:  # closing is best effort
        pass


def render_prompt(messages: tuple[Message, ...]) -> str:
    """One prompt string for a single-prompt model (a deepeval model, a LangChain LLM): the
    messages' contents in order; with assistant turns present (few-shot, re-asks), every
    turn is labelled with its role."""
    if any(m.role == "assistant" for m in messages):
        labels = {"system": "System", "user": "User", "assistant": "Assistant"}
        return "\n\n".join(f"{labels[m.role]}: {m.content}" for m in messages)
    return "\n\n".join(m.content for m in messages)


_STATUS_IN_TEXT = re.compile(r"status[_ ]?code\W{0,3}(\d{3})\b", re.IGNORECASE)
_CODE_IN_TEXT = re.compile(r"\bcode\W{1,3}([A-Za-z][\w.]*)")
_TRANSIENT_WORDS = ("Timeout", "Connection", "ServiceUnavailable", "InternalServer", "Overloaded")


def _status_of(exc: Exception, text: str) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if status is None and isinstance(holder, Mapping):
            status = holder.get("status_code")
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    match = _STATUS_IN_TEXT.search(text)
    return int(match.group(1)) if match else None


def foreign_error(name: str, exc: Exception) -> BackendError:
    """Map an exception from a library we do not control (a deepeval model, a LangChain
    model and the SDK underneath it) onto our classes, with a redacted message:

    * an HTTP status, from ``exc.status_code``, ``exc.response.status_code`` (or
      ``["status_code"]``), else a ``status_code: NNN`` in the message (LangChain's Tongyi
      raises ``HTTPError("... status_code: 429 \\n code: Throttling ...")``): 429 or a
      ``Throttling*`` code -> :class:`RateLimitError` (with Retry-After when the response
      has headers), 408/409/5xx -> :class:`TransientError`, other 4xx -> :class:`PermanentError`;
    * a class named ``*RateLimit*`` -> RateLimitError; timeouts, connection errors and
      classes named ``*Timeout*``/``*Connection*``/``*ServiceUnavailable*``/``*InternalServer*``
      -> TransientError;
    * anything else -> PermanentError (retrying a bug does not mend it).
    """
    if isinstance(exc, BackendError):
        return exc
    kind = type(exc).__name__
    text = str(exc)
    message = redact(f"{name}: {kind}: {text}")
    status = _status_of(exc, text)
    code_match = _CODE_IN_TEXT.search(text)
    code = str(getattr(exc, "code", None) or (code_match.group(1) if code_match else ""))
    if status is not None and 400 <= status < 600:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        return error_for_status(
            status, message, headers=dict(headers) if isinstance(headers, Mapping) else None, code=code
        )
    if "RateLimit" in kind or code.startswith("Throttling"):
        return error_for_status(429, message)
    if isinstance(exc, TimeoutError | ConnectionError) or any(w in kind for w in _TRANSIENT_WORDS):
        return TransientError(message)
    return PermanentError(message)
