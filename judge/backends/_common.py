"""Request-building pieces shared by the chat backends (OpenAI-compatible and DashScope)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from judge.backends._base import ChatRequest, ConfigurationError

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
