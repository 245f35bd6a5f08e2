"""Choose the judge backend (:func:`resolve_backend`) and make it resilient (:func:`make_backend`).

:func:`make_backend` is the one factory every entry point uses (``judge.evaluate``,
``RelevancyJudge``, ``judge score``/``eval``/``stability``/``nightly``, the scripts): it
resolves a spec string or an object and wraps it once in :class:`ResilientBackend` under a
:class:`~judge.backends.CallPolicy` (concurrency, timeout, retries, rate limits, prices).

:func:`resolve_backend` gives the raw backend. Order (first match wins):

1. an explicit ``spec`` — a Backend object (returned as is), a ``DeepEvalBaseLLM``
   (wrapped in :class:`DeepEvalBackend`), a LangChain ``BaseLanguageModel`` (``Tongyi``,
   ``ChatTongyi``, any chat model or LLM: wrapped in :class:`LangChainBackend`), or a
   string ``prefix:model``:
   ``qwen:<model>``, ``openai:<model>``, ``local:<model id or .gguf path>``,
   ``deepeval:<module>:<Class>`` (instantiated with ``**options``),
   ``qrels:<file>[:<level>]`` (answers from known labels: :class:`~judge.backends.QrelsBackend`);
2. ``base_url=`` given without a spec → ``openai:<$OPENAI_MODEL or default>``;
3. ``$JUDGE_BACKEND`` set (not blank) → that spec string, read as in 1 (e.g.
   ``JUDGE_BACKEND=qrels:datasets/sample.qrels``: the default judge of every command, the
   server and the Python API, for a shell or a CI job);
4. ``$DASHSCOPE_API_KEY`` set → ``qwen:qwen-plus``;
5. ``$OPENAI_BASE_URL`` set → ``openai:<$OPENAI_MODEL or default>`` (``qwen-plus`` for a
   DashScope URL, else ``gpt-4o-mini``);
6. else the embedded judge ``local:qwen2.5-coder-1.5b-q4km``.

``describe_backend`` gives the CLI's stderr line.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import weakref
from typing import TYPE_CHECKING, Any

from judge.backends._base import Backend, ConfigurationError
from judge.backends._model_file import EMBEDDED_MODEL_NAME
from judge.backends._policy import CallPolicy

if TYPE_CHECKING:
    from deepeval.models import DeepEvalBaseLLM

    from judge.backends._resilient import ResilientBackend

__all__ = [
    "BACKEND_ENV",
    "DEFAULT_LOCAL_MODEL",
    "DEFAULT_QWEN_MODEL",
    "SPEC_PREFIXES",
    "describe_backend",
    "make_backend",
    "resolve_backend",
    "resolve_cascade",
]

DEFAULT_QWEN_MODEL = "qwen-plus"
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b-q4km"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
SPEC_PREFIXES = ("qwen", "openai", "local", "deepeval", "qrels")
# The environment variable naming the default judge (a spec string, as --backend takes).
BACKEND_ENV = "JUDGE_BACKEND"

_reasons: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()


def _remember(backend: Backend, reason: str) -> Backend:
    # Not weak-referenceable: describe_backend just omits the reason.
    with contextlib.suppress(TypeError):
        _reasons[backend] = reason
    return backend


def _default_openai_model(base_url: str | None) -> str:
    from judge.backends._openai import is_dashscope_url

    env_model = os.environ.get("OPENAI_MODEL")
    if env_model:
        return env_model
    return DEFAULT_QWEN_MODEL if is_dashscope_url(base_url) else DEFAULT_OPENAI_MODEL


def make_backend(
    spec_or_object: Any = None,
    *,
    policy: CallPolicy | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    **options: Any,
) -> ResilientBackend:
    """The resilient backend for a spec string, a Backend, a deepeval ``DeepEvalBaseLLM``, a
    LangChain ``BaseLanguageModel`` or None (the environment; see :func:`resolve_backend`),
    under ``policy`` (default ``CallPolicy()``: 16 calls in flight capped by the backend's
    own limit, 60 s per call, 5 retries).

    A backend that is already resilient is returned as is when no policy is given; with a
    policy, its inner backend gets a new wrapper under that policy. ``base_url``/``api_key``/
    ``options`` go to :func:`resolve_backend`. Errors: :class:`ConfigurationError` naming
    the field (``backend``, ``base_url``, a policy field ...).
    """
    from judge.backends._resilient import ResilientBackend

    if isinstance(spec_or_object, ResilientBackend):
        if policy is None:
            return spec_or_object
        return ResilientBackend(spec_or_object.inner, policy=policy)
    inner = resolve_backend(spec_or_object, base_url=base_url, api_key=api_key, **options)
    if isinstance(inner, ResilientBackend):
        return inner if policy is None else ResilientBackend(inner.inner, policy=policy)
    return ResilientBackend(inner, policy=policy if policy is not None else CallPolicy())


def resolve_backend(
    spec: str | Backend | DeepEvalBaseLLM | Any | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    **options: Any,
) -> Backend:
    """The raw backend for ``spec`` (a string, a Backend, a DeepEvalBaseLLM, a LangChain
    model) or the environment; :func:`make_backend` wraps it under the call policy.

    ``base_url``/``api_key`` go to the backends that take them; ``options`` to the backend's
    constructor (e.g. ``structured="json_schema"``). Raises :class:`ConfigurationError` for
    an unknown prefix, a missing key or a bad option.
    """
    from judge.backends._deepeval import DeepEvalBackend, is_deepeval_model
    from judge.backends._langchain import LangChainBackend, is_langchain_model

    if spec is not None and not isinstance(spec, str):
        if is_deepeval_model(spec):
            return _remember(DeepEvalBackend(spec, **options), "deepeval model passed")
        if is_langchain_model(spec):
            return _remember(LangChainBackend(spec, **options), "LangChain model passed")
        if isinstance(spec, Backend):
            return _remember(spec, "backend object passed")
        raise ConfigurationError(
            "must be a spec string, a Backend, a deepeval DeepEvalBaseLLM or a LangChain "
            f"BaseLanguageModel; got {type(spec).__name__}",
            field="backend",
        )
    if isinstance(spec, str) and spec.strip():
        return _remember(_from_spec(spec.strip(), base_url, api_key, options), "explicit backend")
    if base_url:
        model = _default_openai_model(base_url)
        return _remember(_build("openai", model, base_url, api_key, options), "--base-url given")
    env_spec = os.environ.get(BACKEND_ENV, "").strip()
    if env_spec:
        try:
            backend = _from_spec(env_spec, base_url, api_key, options)
        except ConfigurationError as exc:
            # No field: the CLI would name --backend, which was not given.
            raise ConfigurationError(f"${BACKEND_ENV}: {exc}") from None
        return _remember(backend, f"{BACKEND_ENV} set")
    if os.environ.get("DASHSCOPE_API_KEY"):
        return _remember(_build("qwen", DEFAULT_QWEN_MODEL, None, api_key, options), "DASHSCOPE_API_KEY set")
    env_url = os.environ.get("OPENAI_BASE_URL")
    if env_url:
        model = _default_openai_model(env_url)
        return _remember(_build("openai", model, None, api_key, options), "OPENAI_BASE_URL set")
    return _remember(
        _build("local", DEFAULT_LOCAL_MODEL, None, None, options),
        f"no DASHSCOPE_API_KEY or OPENAI_BASE_URL: the embedded model {EMBEDDED_MODEL_NAME}",
    )


def _from_spec(spec: str, base_url: str | None, api_key: str | None, options: dict[str, Any]) -> Backend:
    prefix, sep, model = spec.partition(":")
    prefix = prefix.strip().lower()
    if not sep or prefix not in SPEC_PREFIXES:
        raise ConfigurationError(
            f"{spec!r} is unknown: expected one of "
            + ", ".join(f"{p}:<model>" for p in SPEC_PREFIXES)
            + " (e.g. qwen:qwen-plus, openai:gpt-4o-mini, local:qwen2.5-coder-1.5b-q4km)",
            field="backend",
        )
    model = model.strip()
    if not model:
        if prefix == "qwen":
            model = DEFAULT_QWEN_MODEL
        elif prefix == "local":
            model = DEFAULT_LOCAL_MODEL
        elif prefix == "openai":
            model = _default_openai_model(base_url or os.environ.get("OPENAI_BASE_URL"))
        else:
            raise ConfigurationError(
                f"{prefix} backend spec needs "
                + (
                    "a class: deepeval:<module>:<Class>"
                    if prefix == "deepeval"
                    else "a file: qrels:FILE[:level]"
                ),
                field="backend",
            )
    return _build(prefix, model, base_url, api_key, options)


def _build(
    prefix: str, model: str, base_url: str | None, api_key: str | None, options: dict[str, Any]
) -> Backend:
    try:
        if prefix == "qwen":
            from judge.backends._qwen import QwenBackend

            return QwenBackend(model, api_key=api_key, base_url=base_url, **options)
        if prefix == "openai":
            from judge.backends._openai import OpenAIBackend

            return OpenAIBackend(model, base_url=base_url, api_key=api_key, **options)
        if prefix == "local":
            return _local(model, options)
        if prefix == "qrels":
            from judge.backends._qrels import QrelsBackend, parse_qrels_spec

            path, level = parse_qrels_spec(model)
            return QrelsBackend(path, level, **options)
        return _deepeval_class(model, options)
    except TypeError as exc:
        raise ConfigurationError(f"bad option for backend {prefix}:{model}: {exc}") from None


def resolve_cascade(
    specs: str, *, margin: float = 0.1, base_url: str | None = None, api_key: str | None = None
) -> Backend:
    """``CHEAP,EXPENSIVE`` (two backend specs) as one :class:`~judge.backends.CascadeBackend`
    with ``margin``; each spec resolved by :func:`resolve_backend`. :func:`make_backend`
    wraps the result as any backend."""
    from judge.backends._cascade import CascadeBackend

    parts = [p.strip() for p in specs.split(",")]
    if len(parts) != 2 or not all(parts):
        raise ConfigurationError(
            f"expected CHEAP,EXPENSIVE (two backend specs), got {specs!r}", field="cascade"
        )
    cheap = resolve_backend(parts[0], base_url=base_url, api_key=api_key)
    expensive = resolve_backend(parts[1], base_url=base_url, api_key=api_key)
    return _remember(CascadeBackend(cheap, expensive, margin=margin), "--cascade given")


def _local(model: str, options: dict[str, Any]) -> Backend:
    try:
        module = importlib.import_module("judge.backends._local")
    except ImportError as exc:
        raise ConfigurationError(
            f"the embedded judge is not available ({exc}); install it with: pip install 'judge[local]'"
        ) from None
    local_cls = module.LocalBackend
    model_path = None if model == DEFAULT_LOCAL_MODEL else model
    backend: Backend = local_cls(model_path, **options)
    return backend


def _deepeval_class(target: str, options: dict[str, Any]) -> Backend:
    from judge.backends._deepeval import DeepEvalBackend, import_deepeval_models, is_deepeval_model

    import_deepeval_models()
    module_name, sep, class_name = target.partition(":")
    if not sep:
        module_name, _, class_name = target.rpartition(".")
    if not module_name or not class_name:
        raise ConfigurationError(f"deepeval backend spec needs <module>:<Class>, got {target!r}")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load deepeval model class {target!r}: {exc}") from None
    instance = cls(**options)
    if not is_deepeval_model(instance):
        raise ConfigurationError(f"{target!r} is not a deepeval.models.DeepEvalBaseLLM")
    return DeepEvalBackend(instance, name=f"deepeval:{class_name}")


def _reason_of(backend: object) -> str | None:
    try:
        return _reasons.get(backend)
    except TypeError:
        return None


def describe_backend(backend: Backend) -> str:
    """The CLI's stderr line: ``judge: using judge qwen:qwen-plus (DASHSCOPE_API_KEY set)``."""
    target: Any = backend
    reason = _reason_of(target)
    # Look through wrappers (ResilientBackend.inner) for the reason recorded at resolution.
    while reason is None and hasattr(target, "inner"):
        target = target.inner
        reason = _reason_of(target)
    if backend.name == f"local:{DEFAULT_LOCAL_MODEL}" and EMBEDDED_MODEL_NAME not in (reason or ""):
        reason = f"the embedded model {EMBEDDED_MODEL_NAME}" + (f"; {reason}" if reason else "")
    suffix = f" ({reason})" if reason else ""
    return f"judge: using judge {backend.name}{suffix}"
