"""The contract every LLM backend fulfils, and the errors it may raise.

A backend is one small async object: ``complete(request) -> Completion``. It turns one
``ChatRequest`` into one provider call and reports what the provider returned, including
token usage and, when asked and available, the probabilities of candidate answer tokens.
Retries, timeouts, rate limiting, caching and cost accounting are *not* a backend's job:
they are written once in :mod:`judge.backends._resilient` around any backend.

Errors are classified so that the wrapper can decide what to do:

* :class:`RateLimitError` (HTTP 429): wait ``retry_after`` seconds if the provider said so,
  slow the whole client down, try again.
* :class:`TransientError` (timeouts, connection resets, HTTP 5xx): back off and retry.
* :class:`PermanentError` (bad request, authentication, unknown model): never retried.
  It stops a run: every other request would fail too.
* :class:`RequestError`, a PermanentError about *one* request (a prompt longer than the
  model's context, a reply refused by a content filter): never retried, and the run goes
  on: that pair becomes unjudged with the error (``--retry-unjudged`` asks again).
"""

from __future__ import annotations

import datetime
import email.utils
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat call. Everything that can change the reply is a field here.

    ``json_schema``: a JSON schema the reply must follow; backends with a JSON mode or
    structured output use it (llama.cpp grammar, OpenAI ``response_format``, DashScope
    ``result_format``/json mode); backends without one ignore it and the caller parses.

    ``answer_prefix``: text the assistant's reply is forced to start with (prefill). Used by
    probability mode so that the very next token is the answer token.

    ``candidates``: probability mode. When set, the backend returns in
    ``Completion.token_probs`` the probability of each candidate string being the next
    token after ``answer_prefix`` (renormalisation is left to the caller). Backends that
    cannot expose token probabilities raise :class:`UnsupportedError`.

    ``meta``: what is being judged, by identifier (``query_id``, ``passage_id``; only those
    known). Never sent to a provider and not part of :meth:`cache_params`: the verdict of an
    LLM depends on the text, not on ids. Backends that answer from known labels (the qrels
    backend) read it.
    """

    messages: tuple[Message, ...]
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    json_schema: dict[str, Any] | None = None
    answer_prefix: str | None = None
    candidates: tuple[str, ...] | None = None
    meta: Mapping[str, str] | None = None

    def cache_params(self) -> dict[str, Any]:
        """The request fields that change the output, for cache keys."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "json_schema": self.json_schema,
            "answer_prefix": self.answer_prefix,
            "candidates": list(self.candidates) if self.candidates else None,
        }


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    latency_s: float = 0.0
    token_probs: dict[str, float] | None = None
    finish_reason: str | None = None
    # Filled by ResilientBackend: the priced cost of this call in the price table's
    # currency (None when nobody priced it; a deepeval model may report its own), and how
    # many provider calls it took (1 = no retry).
    cost: float | None = None
    attempts: int = 1
    # Set by a cascade of judges (CascadeBackend): the name of the judge whose answer this is.
    decided_by: str | None = None


def candidate_probs(top_logprobs: Iterable[tuple[str, float]], candidates: Iterable[str]) -> dict[str, float]:
    """Probability of each candidate answer from the next token's top log-probabilities.

    A token counts for a candidate when its stripped, lower-cased text equals the
    candidate's (so ``"yes"``, ``" yes"`` and ``"Yes"`` all count for ``yes``); the
    probabilities of all such tokens are summed. A candidate no top token matches gets 0.0.
    No renormalisation: the caller decides how to treat the mass outside the candidates.
    """
    keys = {c: c.strip().lower() for c in candidates}
    totals = dict.fromkeys(keys.values(), 0.0)
    for token, logprob in top_logprobs:
        norm = token.strip().lower()
        if norm in totals:
            totals[norm] += math.exp(logprob)
    return {c: min(1.0, totals[k]) for c, k in keys.items()}


@runtime_checkable
class Backend(Protocol):
    """What every backend module provides.

    ``name`` is the spec string that selects it (``qwen:qwen-plus``, ``openai:gpt-4o-mini``,
    ``local:qwen2.5-coder-1.5b-q4km``, ``deepeval:<class>``); ``model`` the model id sent to
    the provider. ``params()`` returns the backend-level settings that change outputs (base
    URL is not one of them; a quantisation or a model revision is) for cache keys; it never
    contains secrets. ``supports_probabilities`` says whether ``candidates`` works; an
    optional ``prefers_probabilities = True`` makes probability mode the default for this
    backend (``JudgeConfig.probability=None``; the embedded model sets it).
    ``max_concurrency`` is the most parallel calls this backend can usefully serve (1 for
    the embedded model, None for unbounded remote APIs); the call policy never exceeds it.
    An optional ``free = True`` says the backend runs on this machine and its calls cost
    nothing (the embedded model): cost accounting asks the backend, not its name.
    """

    name: str
    model: str
    supports_probabilities: bool
    max_concurrency: int | None

    def params(self) -> dict[str, Any]: ...

    async def complete(self, request: ChatRequest) -> Completion: ...

    async def aclose(self) -> None: ...


class BackendError(Exception):
    """Base of every error a backend raises. Messages never contain API keys. ``status``:
    the provider's HTTP status, when the error is an HTTP answer. ``resume_helps``: running
    the same command again, as it is, may finish the work (a lost connection or cluster),
    rather than only once the cause is fixed (a key, a model name)."""

    status: int | None = None
    resume_helps: bool = False


class TransientError(BackendError):
    """Timeouts, dropped connections, HTTP 5xx: worth retrying after a backoff."""

    resume_helps = True


class RateLimitError(TransientError):
    """HTTP 429. ``retry_after`` is the provider's Retry-After in seconds, if given."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(BackendError):
    """Bad request, authentication failure, unknown model: retrying will not help."""


class UnsupportedError(PermanentError):
    """The backend cannot do what the request asks (e.g. token probabilities)."""


class RequestError(PermanentError):
    """This one request cannot be answered (its prompt does not fit the model's context, a
    content filter refused it); other requests can. Never retried; the judging core makes
    the pair unjudged with this error instead of stopping the run."""


#: Backend errors that end one pair's judgment (unjudged, with the error) but not the run.
PAIR_ERRORS: tuple[type[BackendError], ...] = (TransientError, RequestError)

#: Words of a 400/422 body that say the request itself is at fault, not the key or model:
#: context-length overflows and content filters (OpenAI, Azure, DashScope spellings).
_REQUEST_FAULTS = (
    "context_length",
    "context length",
    "maximum context",
    "too many tokens",
    "content_filter",
    "content management policy",
    "datainspectionfailed",
    "inappropriate content",
    "range of input length",
)


class ConfigError(ValueError):
    """A setting of a config object is invalid. ``field`` names the setting (the config
    object's attribute, e.g. ``concurrency`` or ``p_yes_threshold``; None when no single
    field is at fault) and ``message`` says what is wrong with it, written to follow the
    field's name: ``str(exc)`` is ``"p_yes_threshold must be in [0, 1], not 1.5"``. The CLI
    maps ``field`` to its flag with a table (``judge.cli._flags.FLAG_FOR_FIELD``) and shows
    ``message``; nothing parses the message text."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field} {message}" if field else message)


class ConfigurationError(BackendError, ConfigError):
    """A backend spec or its settings are invalid (unknown prefix, missing key, a bad call
    policy). ``field`` as for :class:`ConfigError`."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        ConfigError.__init__(self, message, field=field)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def error_for_status(
    status: int, message: str, *, headers: Mapping[str, str] | None = None, code: str | None = None
) -> BackendError:
    """The error class for an HTTP status: 429 (or a ``Throttling*`` code) → RateLimitError
    with Retry-After; 408, 409, 5xx → TransientError; 413, and a 400/422 about the prompt
    itself (too long for the context, refused by a content filter) → RequestError; other
    4xx → PermanentError. ``message`` must already be redacted."""
    error: BackendError
    said = f"{code or ''} {message}".lower()
    if status == 429 or (code or "").startswith("Throttling"):
        error = RateLimitError(message, retry_after=parse_retry_after(headers))
    elif status in (408, 409) or status >= 500:
        error = TransientError(message)
    elif status == 413 or (status in (400, 422) and any(w in said for w in _REQUEST_FAULTS)):
        error = RequestError(message)
    else:
        error = PermanentError(message)
    error.status = status
    return error
