"""LLM backends behind one small async protocol, one call policy and one factory.

``make_backend(spec_or_object, policy=CallPolicy(...))`` is the factory every entry point
uses: it resolves a spec (``qwen:<model>``, ``openai:<model>``,
``local:qwen2.5-coder-1.5b-q4km``, ``qrels:FILE[:level]`` for known labels), a Backend
object, a deepeval ``DeepEvalBaseLLM`` or a LangChain ``BaseLanguageModel`` (``Tongyi``,
``ChatTongyi``, ...) with ``resolve_backend`` and wraps it once in ``ResilientBackend``
(retries, timeouts, adaptive rate limiting, cost accounting) under the ``CallPolicy``.
``ScriptedBackend``/``RuleBackend`` are the deterministic fakes for tests. Heavy SDKs
(dashscope, openai, deepeval, langchain) are imported only when a backend needs them.
"""

from judge.backends._base import (
    PAIR_ERRORS,
    Backend,
    BackendError,
    ChatRequest,
    Completion,
    ConfigError,
    ConfigurationError,
    Message,
    PermanentError,
    RateLimitError,
    RequestError,
    Role,
    TransientError,
    UnsupportedError,
    Usage,
    candidate_probs,
    error_for_status,
    parse_retry_after,
)
from judge.backends._call_stats import BackendStats
from judge.backends._cascade import CascadeBackend
from judge.backends._deepeval import DeepEvalBackend, as_deepeval_model, schema_to_model
from judge.backends._fake import RuleBackend, ScriptedBackend, ScriptExhaustedError
from judge.backends._fingerprint import backend_fingerprint
from judge.backends._json import first_json_object
from judge.backends._langchain import LangChainBackend
from judge.backends._model_file import DEFAULT_REASON_BATCH as EMBEDDED_CONCURRENCY
from judge.backends._model_file import EMBEDDED_BACKEND, EMBEDDED_MODEL_NAME
from judge.backends._openai import OpenAIBackend
from judge.backends._policy import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_RETRIES,
    LOCAL_TIMEOUT_S,
    REMOTE_TIMEOUT_S,
    CallPolicy,
)
from judge.backends._pricing import ModelPrice, PriceTable
from judge.backends._qrels import QrelsBackend
from judge.backends._qwen import QwenBackend
from judge.backends._redact import redact, register_secret
from judge.backends._resilient import (
    AdaptiveLimiter,
    ResilientBackend,
    ensure_resilient,
    estimate_tokens,
)
from judge.backends._resolve import describe_backend, make_backend, resolve_backend, resolve_cascade
from judge.backends._sync import run_sync, synchronous

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_RETRIES",
    "EMBEDDED_BACKEND",
    "EMBEDDED_CONCURRENCY",
    "EMBEDDED_MODEL_NAME",
    "LOCAL_TIMEOUT_S",
    "PAIR_ERRORS",
    "REMOTE_TIMEOUT_S",
    "AdaptiveLimiter",
    "Backend",
    "BackendError",
    "BackendStats",
    "CallPolicy",
    "CascadeBackend",
    "ChatRequest",
    "Completion",
    "ConfigError",
    "ConfigurationError",
    "DeepEvalBackend",
    "LangChainBackend",
    "Message",
    "ModelPrice",
    "OpenAIBackend",
    "PermanentError",
    "PriceTable",
    "QrelsBackend",
    "QwenBackend",
    "RateLimitError",
    "RequestError",
    "ResilientBackend",
    "Role",
    "RuleBackend",
    "ScriptExhaustedError",
    "ScriptedBackend",
    "TransientError",
    "UnsupportedError",
    "Usage",
    "as_deepeval_model",
    "backend_fingerprint",
    "candidate_probs",
    "describe_backend",
    "ensure_resilient",
    "error_for_status",
    "estimate_tokens",
    "first_json_object",
    "make_backend",
    "parse_retry_after",
    "redact",
    "register_secret",
    "resolve_backend",
    "resolve_cascade",
    "run_sync",
    "schema_to_model",
    "synchronous",
]
