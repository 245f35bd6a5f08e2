"""The backends' logger, whose records pass through :func:`judge.io.redact` (the secrets
registry itself lives in :mod:`judge.io`, below the backends and the search engines, which
register their keys, tokens and DSNs there alike)."""

from __future__ import annotations

import logging

from judge.io import RedactingFilter, redact, register_secret

__all__ = ["LOGGER", "redact", "register_secret"]

LOGGER = logging.getLogger("judge.backends")
if not any(isinstance(f, RedactingFilter) for f in LOGGER.filters):
    LOGGER.addFilter(RedactingFilter())
