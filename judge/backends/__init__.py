"""LLM backends behind one small async protocol, and the wrapper that makes them resilient.

``resolve_backend(spec)`` picks one (``qwen:<model>``, ``openai:<model>``,
``local:qwen2.5-coder-1.5b-q4km``, a Backend object or a deepeval ``DeepEvalBaseLLM``);
``ResilientBackend(backend)`` adds retries, timeouts, adaptive rate limiting and cost
accounting; ``ScriptedBackend``/``RuleBackend`` are the deterministic fakes for tests.
Heavy SDKs (dashscope, openai, deepeval) are imported only when a backend needs them.
"""

from judge.backends._base import (
    Backend,
    BackendError,
    ChatRequest,
    Completion,
    ConfigurationError,
    Message,
    PermanentError,
    RateLimitError,
    Role,
    TransientError,
    UnsupportedError,
    Usage,
    candidate_probs,
    error_for_status,
    parse_retry_after,
)
from judge.backends._deepeval import DeepEvalBackend, as_deepeval_model, schema_to_model
from judge.backends._fake import RuleBackend, ScriptedBackend, ScriptExhaustedError
from judge.backends._openai import OpenAIBackend
from judge.backends._pricing import ModelPrice, PriceTable
from judge.backends._qwen import QwenBackend
from judge.backends._redact import redact, register_secret
from judge.backends._resilient import (
    AdaptiveLimiter,
    BackendStats,
    ResilientBackend,
    ensure_resilient,
    estimate_tokens,
)
from judge.backends._resolve import describe_backend, resolve_backend

__all__ = [
    "AdaptiveLimiter",
    "Backend",
    "BackendError",
    "BackendStats",
    "ChatRequest",
    "Completion",
    "ConfigurationError",
    "DeepEvalBackend",
    "Message",
    "ModelPrice",
    "OpenAIBackend",
    "PermanentError",
    "PriceTable",
    "QwenBackend",
    "RateLimitError",
    "ResilientBackend",
    "Role",
    "RuleBackend",
    "ScriptExhaustedError",
    "ScriptedBackend",
    "TransientError",
    "UnsupportedError",
    "Usage",
    "as_deepeval_model",
    "candidate_probs",
    "describe_backend",
    "ensure_resilient",
    "error_for_status",
    "estimate_tokens",
    "parse_retry_after",
    "redact",
    "register_secret",
    "resolve_backend",
    "schema_to_model",
]
