"""Any LangChain model as the judge: ``langchain_core`` ``BaseLanguageModel`` objects.

Pass a LangChain model wherever a backend goes (``judge.evaluate(..., backend=model)``,
``RelevancyJudge(model)``, ``judge.resolve_backend(model)``, ``make_backend(model)``): a
chat model (``BaseChatModel``: ``ChatTongyi``, ``ChatOpenAI``, ...) or a completion LLM
(``BaseLLM``: ``Tongyi``, ...). It is wrapped in :class:`LangChainBackend` and then, like
every backend, in :class:`~judge.backends.ResilientBackend` (the call policy: retries,
timeout, rate limits, cost). Only ``langchain_core`` interfaces are used, so any provider
package works and nothing depends on ``langchain_community`` (which its maintainers are
sunsetting):

* a chat model gets our messages as ``SystemMessage``/``HumanMessage``/``AIMessage`` through
  ``ainvoke``; an LLM gets one prompt string (the contents in order; turns labelled by role
  when the conversation has assistant turns, i.e. on a re-ask) through ``agenerate``;
* **per-request sampling settings are call keyword arguments**: ``temperature`` always,
  ``top_p``/``seed``/``max_tokens`` when the judge sets them (the judge's defaults:
  temperature 0, seed 42). They are what ``model.bind(...)`` would add, and reach the
  provider's request (``request_params=`` limits them for a model that refuses one);
* tokens come from ``AIMessage.usage_metadata``, else the ``token_usage``/``usage`` entry
  of ``response_metadata`` (or of an LLM's ``generation_info``/``llm_output``): DashScope's
  ``input_tokens``/``output_tokens`` and OpenAI's ``prompt_tokens``/``completion_tokens``
  both count. A model that reports none counts zero tokens;
* errors map onto ours (:func:`judge.backends._common.foreign_error`): an HTTP status in
  the exception, its response or its message (Tongyi's ``HTTPError("... status_code: 429
  ... code: Throttling ...")``) -> RateLimitError / TransientError (408, 409, 5xx) /
  PermanentError (other 4xx, e.g. Tongyi's ``ValueError`` for 400/401); timeouts and
  connection errors -> TransientError; anything else -> PermanentError;
* name ``langchain:<model name>`` (``model_name``/``model``/``model_id`` of the object, else
  its class name): the name is in every verdict's ``backend`` and, with the model class and
  its ``model_kwargs``, in the verdict cache key. A model priced in the price table (e.g.
  ``langchain:qwen-plus``) is costed like ``qwen:qwen-plus``;
* no token probabilities and no prefill: probability mode is refused (``UnsupportedError``);
  ``json_schema`` is not sent (the templates ask for JSON and the reply is parsed).

**Tongyi and ChatTongyi.** ``langchain_community``'s ``Tongyi``/``ChatTongyi`` have no
``temperature`` or ``seed`` field: ``Tongyi(temperature=0, seed=42)`` is accepted and
silently dropped, so DashScope samples at its default temperature. What reaches
``dashscope.Generation.call`` is ``model``, ``top_p`` (the object's field, 0.8 by default),
``api_key``, ``model_kwargs`` (and ``result_format="message"`` plus ``messages`` for
ChatTongyi, ``prompt`` for Tongyi), then the call's keyword arguments on top. So the
judge's per-request ``temperature``/``seed``/``max_tokens`` arrive because they are call
arguments; settings of your own go in ``model_kwargs`` (``Tongyi(model_kwargs={"temperature":
0})``), never as constructor arguments. Both classes also retry by themselves
(``max_retries=10``, on HTTP errors other than 400/401) underneath our retries: give them
``max_retries=1`` to leave retrying to the call policy.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Collection, Mapping
from typing import Any, TypeGuard

from judge.backends._base import (
    BackendError,
    ChatRequest,
    Completion,
    ConfigurationError,
    UnsupportedError,
    Usage,
)
from judge.backends._common import foreign_error, render_prompt
from judge.backends._redact import register_secret

__all__ = ["REQUEST_PARAMS", "LangChainBackend", "is_langchain_model"]

#: The per-request settings sent as call keyword arguments (when the request sets them).
REQUEST_PARAMS = ("temperature", "top_p", "seed", "max_tokens")
_SECRET_KEY = re.compile(r"api_key|secret|password|access_token|credential", re.IGNORECASE)
_OUTPUT_FIELDS = ("top_p", "top_k", "temperature", "max_tokens", "seed", "streaming")


def is_langchain_model(obj: object) -> TypeGuard[Any]:
    """True when ``obj`` is a ``langchain_core`` ``BaseLanguageModel`` (without importing
    langchain_core needlessly: whoever holds one has imported it)."""
    module = sys.modules.get("langchain_core.language_models.base")
    base = getattr(module, "BaseLanguageModel", None) if module is not None else None
    return base is not None and isinstance(obj, base)


def model_name_of(model: Any) -> str:
    """The model id a LangChain object calls (``model_name``, ``model``, ``model_id``), else
    its class name."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return type(model).__name__


def _is_chat_model(model: Any) -> bool:
    from langchain_core.language_models.chat_models import BaseChatModel

    return isinstance(model, BaseChatModel)


def _register_secrets(model: Any) -> None:
    """Redact the model's secrets (its ``lc_secrets`` fields) from every error message."""
    try:
        names = list(getattr(model, "lc_secrets", {}) or {})
    except Exception:  # a property that fails: nothing to register
        names = []
    for name in names:
        value = getattr(model, name, None)
        getter = getattr(value, "get_secret_value", None)
        secret = getter() if callable(getter) else value
        if isinstance(secret, str) and secret:
            register_secret(secret)


def _usage_from(mapping: object) -> Usage | None:
    if not isinstance(mapping, Mapping):
        return None
    for key in ("token_usage", "usage"):
        raw = mapping.get(key)
        if isinstance(raw, Mapping):
            prompt = raw.get("input_tokens", raw.get("prompt_tokens"))
            completion = raw.get("output_tokens", raw.get("completion_tokens"))
            return Usage(_count(prompt), _count(completion))
    return None


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class LangChainBackend:
    """A ``langchain_core`` ``BaseLanguageModel`` behind our Backend protocol (see the module
    docstring). ``name``: default ``langchain:<model name>``. ``request_params``: which of
    ``temperature``, ``top_p``, ``seed``, ``max_tokens`` are sent per call (default all).
    ``max_concurrency``: the most calls in flight the model can serve (None: the call
    policy decides)."""

    supports_probabilities = False

    def __init__(
        self,
        model: Any,
        *,
        name: str | None = None,
        request_params: Collection[str] = REQUEST_PARAMS,
        max_concurrency: int | None = None,
    ) -> None:
        if not is_langchain_model(model):
            raise ConfigurationError(
                f"must be a langchain_core BaseLanguageModel, got {type(model).__name__}",
                field="backend",
            )
        unknown = set(request_params) - set(REQUEST_PARAMS)
        if unknown:
            raise ConfigurationError(
                f"has unknown name(s) {', '.join(sorted(unknown))}; known: {', '.join(REQUEST_PARAMS)}",
                field="request_params",
            )
        self.llm = model
        self.model = model_name_of(model)
        self.name = name or f"langchain:{self.model}"
        self.max_concurrency = max_concurrency
        self.request_params = tuple(p for p in REQUEST_PARAMS if p in set(request_params))
        self._chat = _is_chat_model(model)
        cls = type(model)
        self._class_path = f"{cls.__module__}.{cls.__qualname__}"
        _register_secrets(model)

    def __repr__(self) -> str:
        return f"LangChainBackend(name={self.name!r}, class={self._class_path!r})"

    def params(self) -> dict[str, Any]:
        """The model class, its output-changing fields and ``model_kwargs`` (never a key)."""
        params: dict[str, Any] = {"class": self._class_path, "request_params": list(self.request_params)}
        for field in _OUTPUT_FIELDS:
            value = getattr(self.llm, field, None)
            if isinstance(value, bool | int | float | str):
                params[field] = value
        extra = getattr(self.llm, "model_kwargs", None)
        if isinstance(extra, Mapping) and extra:
            params["model_kwargs"] = {
                str(k): extra[k] for k in sorted(extra, key=str) if not _SECRET_KEY.search(str(k))
            }
        return params

    def call_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """The per-call keyword arguments for ``request`` (the sampling settings it sets)."""
        values = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            "max_tokens": request.max_tokens,
        }
        return {k: values[k] for k in self.request_params if values[k] is not None}

    def _messages(self, request: ChatRequest) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        return [kinds[m.role](content=m.content) for m in request.messages]

    async def complete(self, request: ChatRequest) -> Completion:
        if request.candidates is not None:
            raise UnsupportedError(f"{self.name}: LangChain models expose no token probabilities here")
        if request.answer_prefix is not None:
            raise UnsupportedError(f"{self.name}: LangChain models cannot continue an assistant prefix")
        kwargs = self.call_kwargs(request)
        started = time.perf_counter()
        try:
            if self._chat:
                message = await self.llm.ainvoke(self._messages(request), **kwargs)
                text, usage, meta = self._from_message(message)
            else:
                result = await self.llm.agenerate([render_prompt(request.messages)], **kwargs)
                text, usage, meta = self._from_llm_result(result)
        except BackendError:
            raise
        except Exception as exc:
            raise foreign_error(self.name, exc) from None
        model = meta.get("model_name") or meta.get("model")
        finish = meta.get("finish_reason")
        return Completion(
            text=text,
            usage=usage,
            model=str(model) if isinstance(model, str) and model else self.model,
            latency_s=time.perf_counter() - started,
            finish_reason=finish if isinstance(finish, str) else None,
        )

    @staticmethod
    def _from_message(message: Any) -> tuple[str, Usage, Mapping[str, Any]]:
        content = getattr(message, "content", message)
        if isinstance(content, list):  # content blocks: keep the text ones
            content = "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
        meta = getattr(message, "response_metadata", None)
        meta = meta if isinstance(meta, Mapping) else {}
        um = getattr(message, "usage_metadata", None)
        if isinstance(um, Mapping) and (um.get("input_tokens") or um.get("output_tokens")):
            usage = Usage(_count(um.get("input_tokens")), _count(um.get("output_tokens")))
        else:
            usage = _usage_from(meta) or Usage()
        return str(content or ""), usage, meta

    @staticmethod
    def _from_llm_result(result: Any) -> tuple[str, Usage, Mapping[str, Any]]:
        generation = result.generations[0][0]
        info = generation.generation_info if isinstance(generation.generation_info, Mapping) else {}
        output = result.llm_output if isinstance(result.llm_output, Mapping) else {}
        usage = _usage_from(info) or _usage_from(output) or Usage()
        return str(generation.text or ""), usage, {**output, **info}

    async def aclose(self) -> None:
        return None
