"""Asking the judge something other than passage relevance (claim support, source quality).

Claim support (contextual recall) and source quality are verdicts like relevance ones (a
yes/no or a 0-3 grade with a Chinese reason), asked with their own templates and their own
variables. They go through the judging core's ask loop (:func:`judge.judging._core.ask_verdict`:
strict parsing, re-asks, unjudged after ``max_reasks``, probability mode, samples) and are
cached in the same verdict store as :class:`PassageVerdict` records, under keys of their own
*kind* (:func:`kind_key`), so they never collide with relevance verdicts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from judge.backends import Backend, Message, UnsupportedError
from judge.judging._config import JudgeConfig, VerdictStore, resolve_config
from judge.judging._core import _defuse
from judge.judging._core import ask_verdict as _ask_verdict
from judge.judging._dimension_models import CallUsage
from judge.judging._models import Mode, PassageVerdict
from judge.judging._templates import PromptTemplate, TemplateError, load_template

_KEY_VERSION = 1


def kind_key(
    kind: str, backend: Backend, config: JudgeConfig, template: PromptTemplate, fields: Mapping[str, str]
) -> str:
    """sha256 hex of a JSON object (sorted keys) holding the key ``kind`` (``claims``,
    ``claim_support``, ``source_quality``), the backend's name, model and params, the
    config's cache params, the template id and hash, and ``fields`` (the texts asked about).
    Relevance keys (:func:`judge.judging.verdict_cache_key`) have no ``kind``, so the two
    never collide."""
    payload = {
        "kind": kind,
        "backend": backend.name,
        "model": backend.model,
        "backend_params": backend.params(),
        "config": config.cache_params(),
        "template_id": template.id,
        "template_hash": template.hash,
        "fields": dict(fields),
        "v": _KEY_VERSION,
    }
    blob = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def aux_config(base: JudgeConfig, mode: Mode, template_id: str, backend: Backend) -> JudgeConfig:
    """``base`` set up for another verdict template: its mode and template, the template's
    own decision threshold (a relevance threshold does not carry over), resolved for
    ``backend`` (probability mode where the backend prefers it)."""
    template = load_template(template_id)
    if template.mode != mode:
        raise TemplateError(
            f"template {template.id} is a {template.mode} template, not {mode}", field="template"
        )
    config = replace(base, mode=mode, template=template.id, p_yes_threshold=None)
    config = resolve_config(config, backend)
    if config.probability and not getattr(backend, "supports_probabilities", False):
        raise UnsupportedError(
            f"backend {backend.name} does not expose token probabilities; run without probability mode"
        )
    if config.probability and not template.supports_probability:
        config = replace(config, probability=False)
    return config


def usage_of(verdicts: Sequence[PassageVerdict]) -> CallUsage:
    """Calls, cache hits, tokens and cost of some verdicts (cached ones cost nothing now)."""
    fresh = [v for v in verdicts if not v.cached]
    return CallUsage(
        calls=sum(v.attempts for v in fresh),
        cached=len(verdicts) - len(fresh),
        prompt_tokens=sum(v.tokens.prompt_tokens for v in fresh),
        completion_tokens=sum(v.tokens.completion_tokens for v in fresh),
        cost=sum(v.cost for v in fresh),
    )


def defuse(text: str) -> str:
    """Neutralise ``<passage>`` tags inside data (see :mod:`judge.judging._core`)."""
    return _defuse(text)


async def ask_verdict(
    backend: Backend,
    config: JudgeConfig,
    messages: tuple[Message, ...],
    *,
    key: str | None,
    store: VerdictStore | None,
    index: int = 0,
) -> PassageVerdict:
    """One verdict with ``config``'s template (a resolved :func:`aux_config`) for rendered
    ``messages``: from the store when ``key`` is there, else asked (re-asked on invalid
    replies, unjudged after ``max_reasks``) and stored when judged."""
    if store is not None and key is not None:
        hit = await store.get(key)
        if hit is not None:
            return hit.model_copy(update={"index": index, "cached": True})
    template = load_template(config.template_id())
    return await _ask_verdict(backend, template, config, messages, index=index, key=key, store=store)


def render(template: PromptTemplate, **values: str) -> tuple[Message, ...]:
    """``template`` rendered with every value defused (data cannot close its delimiters)."""
    return template.render(**{name: defuse(value) for name, value in values.items()})


def config_echo(config: JudgeConfig) -> dict[str, Any]:
    """The settings recorded with a dimension's result."""
    return {"template_id": config.template_id(), **config.cache_params()}
