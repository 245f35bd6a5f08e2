"""DeepEval in both directions.

* :class:`DeepEvalBackend` wraps any ``deepeval.models.DeepEvalBaseLLM`` as one of our
  backends. It calls ``a_generate(prompt)`` (``generate`` in a worker thread when
  ``a_generate`` raises NotImplementedError). When ``request.json_schema`` is set and the
  model's method declares a ``schema`` parameter (or ``**kwargs``), a pydantic model built
  from the JSON schema is passed as ``schema=``; a model that does not declare it is called
  without (we inspect the signature instead of catching TypeError, so a real TypeError
  inside the model is reported, not silently retried the way deepeval's
  ``generate_with_schema`` does). The reply may be a str, a pydantic instance, a dict, or a
  ``(reply, cost)`` tuple (deepeval's native models); the cost, when numeric, is passed on
  in ``Completion.cost``. Token usage is unknown: zeros. No token probabilities, no prefill.

* :func:`as_deepeval_model` turns any of our backends into a ``DeepEvalBaseLLM`` that can
  sit in a deepeval metric's ``model=`` slot: ``generate``/``a_generate(prompt,
  schema=None)`` return the pydantic instance when a schema is given and the reply parses,
  else the raw text (deepeval then parses it itself). It never raises TypeError (deepeval
  would silently re-call it without the schema). The sync ``generate`` runs the async path
  through :func:`judge.backends._sync.run_sync` (one private event-loop thread), so
  clients and limiters are reused between calls.

deepeval is imported lazily (and with its import-time notice sent to stderr, not stdout),
so ``import judge.backends`` stays light.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from judge.backends._base import (
    Backend,
    BackendError,
    ChatRequest,
    Completion,
    Message,
    PermanentError,
    UnsupportedError,
    Usage,
)
from judge.backends._common import foreign_error, render_prompt
from judge.backends._json import json_objects
from judge.backends._redact import redact
from judge.backends._sync import run_sync

if TYPE_CHECKING:
    from deepeval.models import DeepEvalBaseLLM

__all__ = ["DeepEvalBackend", "as_deepeval_model", "is_deepeval_model", "schema_to_model"]

T = TypeVar("T")


def import_deepeval_models() -> Any:
    """Import ``deepeval.models`` with our env opt-outs set and its stdout notice diverted."""
    import judge._env  # noqa: F401  (sets DEEPEVAL_* before deepeval is imported)

    with contextlib.redirect_stdout(sys.stderr):
        import deepeval.models as models
    return models


def is_deepeval_model(obj: object) -> TypeGuard[DeepEvalBaseLLM]:
    """True when ``obj`` is a ``DeepEvalBaseLLM`` (without importing deepeval needlessly)."""
    module = sys.modules.get("deepeval.models.base_model")
    base = getattr(module, "DeepEvalBaseLLM", None) if module is not None else None
    return base is not None and isinstance(obj, base)


# -- JSON schema → pydantic model ------------------------------------------------------------

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
}


class _SchemaUnsupported(Exception):
    pass


def schema_to_model(schema: Mapping[str, Any], name: str | None = None) -> type[BaseModel] | None:
    """A pydantic model for a JSON schema of an object (None when a construct is unsupported).

    Supports properties of type string/integer/number/boolean/null, ``enum``/``const``
    (as Literal), ``minimum``/``maximum``/``minLength``/``maxLength``, arrays, nested
    objects, ``$ref`` into ``$defs``/``definitions``, ``anyOf``/``oneOf`` and ``required``;
    ``additionalProperties: false`` forbids extra keys.
    """
    defs: dict[str, Any] = dict(schema.get("$defs") or {}) | dict(schema.get("definitions") or {})
    try:
        return _object_model(schema, name or str(schema.get("title") or "Response"), defs, depth=0)
    except _SchemaUnsupported:
        return None


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    key = str(ref).rsplit("/", 1)[-1]
    if key not in defs:
        raise _SchemaUnsupported(ref)
    target = defs[key]
    if not isinstance(target, Mapping):
        raise _SchemaUnsupported(ref)
    return target


def _object_model(node: Mapping[str, Any], name: str, defs: Mapping[str, Any], depth: int) -> type[BaseModel]:
    if depth > 8:
        raise _SchemaUnsupported("too deep")
    node = _resolve(node, defs)
    if node.get("type", "object") != "object" or not isinstance(node.get("properties"), Mapping):
        raise _SchemaUnsupported("not an object with properties")
    required = set(node.get("required") or [])
    fields: dict[str, Any] = {}
    for prop, sub in node["properties"].items():
        if not isinstance(sub, Mapping) or not str(prop).isidentifier() or str(prop).startswith("_"):
            raise _SchemaUnsupported(prop)
        annotation = _annotation(sub, f"{name}_{prop}", defs, depth)
        constraints: dict[str, Any] = {}
        resolved = _resolve(sub, defs)
        for json_key, py_key in (
            ("minimum", "ge"),
            ("maximum", "le"),
            ("exclusiveMinimum", "gt"),
            ("exclusiveMaximum", "lt"),
            ("minLength", "min_length"),
            ("maxLength", "max_length"),
        ):
            if json_key in resolved and not isinstance(resolved[json_key], bool):
                constraints[py_key] = resolved[json_key]
        if prop in required:
            fields[str(prop)] = (annotation, Field(..., **constraints))
        else:
            fields[str(prop)] = (annotation | None, Field(default=resolved.get("default"), **constraints))
    extra: Literal["forbid", "ignore"] = "forbid" if node.get("additionalProperties") is False else "ignore"
    safe_name = re.sub(r"\W", "_", name) or "Response"
    model: type[BaseModel] = create_model(safe_name, __config__=ConfigDict(extra=extra), **fields)
    return model


def _annotation(node: Mapping[str, Any], name: str, defs: Mapping[str, Any], depth: int) -> Any:
    node = _resolve(node, defs)
    if "const" in node:
        return Literal[node["const"]]
    if "enum" in node:
        values = tuple(node["enum"])
        if not values or not all(isinstance(v, str | int | bool) or v is None for v in values):
            raise _SchemaUnsupported("enum")
        return Literal[values]
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = [_annotation(o, name, defs, depth + 1) for o in node[key] if isinstance(o, Mapping)]
            if not options:
                raise _SchemaUnsupported(key)
            result = options[0]
            for option in options[1:]:
                result = result | option
            return result
    kind = node.get("type")
    if isinstance(kind, list):
        result = None
        for k in kind:
            part = _annotation({**node, "type": k}, name, defs, depth)
            result = part if result is None else result | part
        if result is None:
            raise _SchemaUnsupported("empty type list")
        return result
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    if kind == "array":
        items = node.get("items")
        inner = _annotation(items, name + "_item", defs, depth + 1) if isinstance(items, Mapping) else Any
        return list[inner]  # type: ignore[valid-type]
    if kind == "object" or "properties" in node:
        if isinstance(node.get("properties"), Mapping):
            return _object_model(node, name, defs, depth + 1)
        return dict[str, Any]
    raise _SchemaUnsupported(f"type {kind!r}")


# -- a DeepEvalBaseLLM as our backend -----------------------------------------------------------


def _accepts_kwarg(func: Any, name: str) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class DeepEvalBackend:
    """Any ``DeepEvalBaseLLM`` behind our Backend protocol (see the module docstring)."""

    def __init__(
        self,
        model: DeepEvalBaseLLM,
        *,
        name: str | None = None,
        use_schema: bool = True,
        max_concurrency: int | None = None,
    ) -> None:
        import_deepeval_models()
        if not is_deepeval_model(model):
            raise TypeError(
                f"DeepEvalBackend needs a deepeval.models.DeepEvalBaseLLM, got {type(model).__name__}"
            )
        self.llm = model
        try:
            model_name = model.get_model_name()
        except Exception:
            model_name = None
        cls = type(model)
        self.model = str(model_name) if model_name else cls.__name__
        self.name = name or f"deepeval:{cls.__name__}"
        self.supports_probabilities = False
        self.max_concurrency = max_concurrency
        self.use_schema = use_schema
        self._class_path = f"{cls.__module__}.{cls.__qualname__}"
        self._sync_only = False

    def __repr__(self) -> str:
        return f"DeepEvalBackend(name={self.name!r}, model={self.model!r})"

    def params(self) -> dict[str, Any]:
        return {"class": self._class_path, "use_schema": self.use_schema}

    async def complete(self, request: ChatRequest) -> Completion:
        if request.candidates is not None:
            raise UnsupportedError(f"{self.name}: deepeval models expose no token probabilities")
        if request.answer_prefix is not None:
            raise UnsupportedError(f"{self.name}: deepeval models cannot continue an assistant prefix")
        prompt = render_prompt(request.messages)
        schema_cls = None
        if request.json_schema is not None and self.use_schema:
            schema_cls = schema_to_model(request.json_schema)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            result = await self._call(prompt, schema_cls)
        except BackendError:
            raise
        except Exception as exc:
            raise foreign_error(self.name, exc) from None
        text, cost = _reply_text(result)
        return Completion(
            text=text,
            usage=Usage(),
            model=self.model,
            latency_s=loop.time() - started,
            cost=cost,
            finish_reason="stop",
        )

    async def _call(self, prompt: str, schema_cls: type[BaseModel] | None) -> Any:
        if not self._sync_only:
            method = self.llm.a_generate
            kwargs = (
                {"schema": schema_cls} if schema_cls is not None and _accepts_kwarg(method, "schema") else {}
            )
            try:
                return await method(prompt, **kwargs)
            except NotImplementedError:
                self._sync_only = True
        sync = self.llm.generate
        kwargs = {"schema": schema_cls} if schema_cls is not None and _accepts_kwarg(sync, "schema") else {}
        return await asyncio.to_thread(sync, prompt, **kwargs)

    async def aclose(self) -> None:
        return None


def _reply_text(result: Any) -> tuple[str, float | None]:
    cost: float | None = None
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and (result[1] is None or (isinstance(result[1], int | float) and not isinstance(result[1], bool)))
    ):
        result, raw_cost = result
        cost = float(raw_cost) if raw_cost is not None else None
    if isinstance(result, BaseModel):
        return result.model_dump_json(), cost
    if isinstance(result, dict | list):
        return json.dumps(result, ensure_ascii=False), cost
    if isinstance(result, str):
        return result, cost
    return str(result), cost


# -- our backend as a DeepEvalBaseLLM -----------------------------------------------------------


_adapter_cls: type[Any] | None = None


def _schema_model(schema: Any) -> type[BaseModel] | None:
    """The pydantic model deepeval passed as ``schema``, if it passed one."""
    return schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None


@dataclass(frozen=True)
class _Generation:
    """What every request of the adapter carries besides its prompt: the sampling settings,
    the length limit and the system prompt."""

    temperature: float
    top_p: float | None
    seed: int | None
    max_tokens: int | None
    system_prompt: str | None

    def request(self, prompt: str, model: type[BaseModel] | None) -> ChatRequest:
        """The request for ``prompt``, its reply constrained to ``model``'s JSON schema if given."""
        user = Message("user", str(prompt))
        return ChatRequest(
            messages=(Message("system", self.system_prompt), user) if self.system_prompt else (user,),
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            max_tokens=self.max_tokens,
            json_schema=model.model_json_schema() if model is not None else None,
        )


def _adapter_class() -> type[Any]:
    global _adapter_cls
    if _adapter_cls is not None:
        return _adapter_cls
    models = import_deepeval_models()
    base: type[Any] = models.DeepEvalBaseLLM

    class JudgeBackendLLM(base):  # type: ignore[misc,valid-type]
        """A judge backend in deepeval's ``model=`` slot."""

        def __init__(self, backend: Backend, settings: _Generation) -> None:
            self.backend = backend
            self.settings = settings
            self.usage = Usage()
            self.calls = 0
            self.last_completion: Completion | None = None
            super().__init__(model=backend.name)

        def __repr__(self) -> str:
            return f"JudgeBackendLLM({self.backend!r})"

        def load_model(self, *args: Any, **kwargs: Any) -> Backend:
            return self.backend

        def get_model_name(self, *args: Any, **kwargs: Any) -> str:
            return self.backend.name

        def supports_structured_outputs(self) -> bool:
            return True

        def supports_json_mode(self) -> bool:
            return True

        def supports_temperature(self) -> bool:
            return True

        def supports_log_probs(self) -> bool:
            return False

        async def a_generate(self, prompt: str, schema: Any = None, **kwargs: Any) -> Any:
            request = self.settings.request(prompt, _schema_model(schema))
            try:
                completion = await self.backend.complete(request)
            except TypeError as exc:  # deepeval would swallow it and re-call without schema
                raise PermanentError(redact(f"{self.backend.name}: TypeError: {exc}")) from None
            self.calls += 1
            self.usage = self.usage + completion.usage
            self.last_completion = completion
            model = _schema_model(schema)
            parsed = parse_into(model, completion.text) if model is not None else None
            return parsed if parsed is not None else completion.text

        def generate(self, prompt: str, schema: Any = None, **kwargs: Any) -> Any:
            return run_sync(self.a_generate(prompt, schema=schema))

    _adapter_cls = JudgeBackendLLM
    return JudgeBackendLLM


def parse_into(schema: type[BaseModel], text: str) -> BaseModel | None:
    """``schema`` validated from the first JSON object in ``text`` that fits it (the
    package's one extraction, :func:`judge.backends._json.json_objects`); None if none fits."""
    for obj in json_objects(text):
        try:
            return schema.model_validate(obj)
        except ValidationError:
            continue
    return None


def as_deepeval_model(
    backend: Backend,
    *,
    temperature: float = 0.0,
    top_p: float | None = None,
    seed: int | None = None,
    max_tokens: int | None = None,
    system_prompt: str | None = None,
) -> DeepEvalBaseLLM:
    """Our ``backend`` as a ``deepeval.models.DeepEvalBaseLLM`` for deepeval's own metrics.

    A :class:`DeepEvalBackend` is unwrapped to the deepeval model it wraps.
    """
    if isinstance(backend, DeepEvalBackend):
        return backend.llm
    cls = _adapter_class()
    adapter: DeepEvalBaseLLM = cls(backend, _Generation(temperature, top_p, seed, max_tokens, system_prompt))
    return adapter
