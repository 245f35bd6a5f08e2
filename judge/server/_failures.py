"""Failures whose cause is known, answered as such instead of a bare 500.

* The LLM upstream refuses the request for good (wrong key: 401/403, wrong URL or model:
  404, any :class:`~judge.backends.PermanentError`): ``502`` with a JSON body naming the
  backend and the upstream status. A job stops at the first one (the batch driver does not
  go on, and a PermanentError is never retried) and fails with the same message.
* The server's storage cannot be written (no space, quota, read-only file system or
  directory, a read-only or full SQLite database): ``503`` with a clear message. A job
  stopped by it fails with that message and is resumed by ``POST /v1/jobs/{id}/resume``
  once the storage is back (its finished queries and judged passages are kept).
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from typing import Any

from fastapi.responses import JSONResponse
from starlette.requests import Request

from judge.backends import PermanentError, UnsupportedError, redact

LOGGER = logging.getLogger("judge.server")

_STORAGE_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied (read-only directory?)",
    errno.EPERM: "operation not permitted (read-only directory?)",
}
# What sqlite3 says when its file cannot be written.
_SQLITE_STORAGE = ("readonly", "read-only", "disk is full", "disk i/o error", "unable to open database")


def storage_problem(exc: BaseException) -> str | None:
    """What is wrong with the storage, if ``exc`` (or its cause) says the storage is full or
    cannot be written; else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _STORAGE_ERRNOS:
            return _STORAGE_ERRNOS[current.errno]
        if isinstance(current, sqlite3.OperationalError):
            text = str(current).lower()
            if any(marker in text for marker in _SQLITE_STORAGE):
                return f"the job database cannot be written ({current})"
        current = current.__cause__ or current.__context__
    return None


def storage_message(problem: str) -> str:
    return (
        f"the server cannot store jobs: {problem}; free space or make the jobs directory and "
        "database writable, then retry (POST /v1/jobs/{id}/resume resumes a job it stopped)"
    )


def unavailable(problem: str) -> JSONResponse:
    return JSONResponse(
        {"detail": storage_message(problem), "cause": "storage"},
        status_code=503,
        headers={"Retry-After": "60"},
    )


def upstream_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def upstream_error(exc: PermanentError, backend: str) -> JSONResponse:
    """``/v1/evaluate``'s answer when the LLM upstream refused the request for good (422 when
    the backend cannot do what the options ask, e.g. probability mode without logprobs)."""
    if isinstance(exc, UnsupportedError):
        return JSONResponse(
            {"detail": redact(str(exc)), "fields": ["body.config"], "backend": backend}, status_code=422
        )
    status = upstream_status(exc)
    shown = f"HTTP {status}" if status is not None else "a permanent error"
    return JSONResponse(
        {
            "detail": redact(f"the LLM backend {backend} refused the request ({shown}): {exc}"),
            "backend": backend,
            "upstream_status": status,
        },
        status_code=502,
    )


def job_error(exc: BaseException) -> str:
    """A failed job's ``error``: what stopped it, in words."""
    problem = storage_problem(exc)
    if problem is not None:
        return storage_message(problem)
    if isinstance(exc, PermanentError):
        status = upstream_status(exc)
        shown = f" (HTTP {status})" if status is not None else ""
        return redact(f"the LLM backend refused the request{shown}: {exc}")
    return redact(f"{type(exc).__name__}: {exc}")


async def on_storage_error(request: Request, exc: Exception) -> Any:
    """Exception handler for OSError and sqlite3 errors: 503 when the storage is the cause,
    else the usual 500 (re-raised)."""
    problem = storage_problem(exc)
    if problem is None:
        raise exc
    LOGGER.error("%s %s: storage: %s (%s)", request.method, request.url.path, problem, exc)
    return unavailable(problem)
