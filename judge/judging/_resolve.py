"""The backend a judgment runs on: resolved from a spec, an object or the environment,
and always wrapped in :class:`~judge.backends.ResilientBackend` (retries, timeout, cost)."""

from __future__ import annotations

from typing import Any

from judge.backends._base import Backend


def resolve_judge_backend(backend: Any = None, *, base_url: str | None = None) -> Backend:
    """``backend``: a spec string (``qwen:qwen-plus``, ``openai:gpt-4o-mini``, ``local``), a
    Backend, a ``deepeval.models.DeepEvalBaseLLM``, or None (from the environment: an
    explicit backend wins, then ``DASHSCOPE_API_KEY``, ``OPENAI_BASE_URL``, else the
    embedded model). A backend that is already resilient is returned as is."""
    from judge.backends import ResilientBackend, resolve_backend

    if isinstance(backend, ResilientBackend):
        return backend
    resolved: Backend = resolve_backend(backend, base_url=base_url)
    if isinstance(resolved, ResilientBackend):
        return resolved
    return ResilientBackend(resolved)
