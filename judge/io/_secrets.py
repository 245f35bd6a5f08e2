"""Keep secrets out of messages, logs and reprs: one registry for the LLM backends' API
keys and the search engines' header tokens and DSNs alike.

``redact(text)`` replaces every known secret (the values of ``DASHSCOPE_API_KEY`` and
``OPENAI_API_KEY`` at call time, plus every key, token or DSN registered through
:func:`register_secret` by a backend or a search engine) and anything that looks like a
bearer token or an ``sk-...`` key with ``***``. Every exception message a backend or an
engine raises passes through it, so does every error the command line prints, and the
``judge.backends`` logger carries a filter that redacts each record.
"""

from __future__ import annotations

import logging
import os
import re
import threading

__all__ = ["RedactingFilter", "redact", "register_secret"]

_ENV_KEYS = ("DASHSCOPE_API_KEY", "OPENAI_API_KEY")
# Values shorter than this are placeholders ("EMPTY", "dummy", "none"), not secrets; redacting
# them would mangle ordinary words in messages.
_MIN_SECRET_LEN = 8
_MASK = "***"

_PATTERNS = (
    # OpenAI / DashScope style keys: sk-..., sk-proj-..., sk-ant-...
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    # Authorization headers echoed in errors.
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-\.=:/+]{6,}"),
    # api_key=..., "api_key": "...", apikey: ...
    re.compile(r"(?i)(api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{6,}"),
)

_lock = threading.Lock()
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember ``value`` as a secret so that :func:`redact` removes it everywhere."""
    if value and len(value) >= _MIN_SECRET_LEN:
        # Also as a repr shows it (``'a\\r\\nb'``, ``b'\\xc3\\xa9'``): an exception's text
        # often quotes the value that way.
        forms = {value, repr(value)[1:-1], repr(value.encode("utf-8", "replace"))[2:-1]}
        with _lock:
            _registered.update(f for f in forms if len(f) >= _MIN_SECRET_LEN)


def _known_secrets() -> list[str]:
    with _lock:
        secrets = set(_registered)
    for name in _ENV_KEYS:
        value = os.environ.get(name)
        if value and len(value) >= _MIN_SECRET_LEN:
            secrets.add(value)
    # Longest first, so a key that contains another is removed whole.
    return sorted(secrets, key=len, reverse=True)


def redact(text: str) -> str:
    """Return ``text`` with every known API key and key-like token replaced by ``***``."""
    for secret in _known_secrets():
        if secret in text:
            text = text.replace(secret, _MASK)
    text = _PATTERNS[0].sub("sk-" + _MASK, text)
    for pattern in _PATTERNS[1:]:
        text = pattern.sub(lambda m: m.group(1) + _MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the fully formatted message of every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error path
            return True
        record.msg = redact(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            # The formatted traceback would print the exception text unredacted.
            exc = record.exc_info[1]
            record.msg = f"{record.msg} [{type(exc).__name__}: {redact(str(exc))}]"
            record.exc_info = None
            record.exc_text = None
        return True
