"""What the service accepts: the bounds on a request's work and the hostile-input rules.

* **Bounds** (flags of ``judge serve``, shown by ``/v1/info``): a query longer than
  ``max_query_chars`` is refused (422 naming ``query`` on ``/v1/evaluate``; in a job, the
  line is a reject naming its field), never cut: a shortened query asks another question.
  A record with more than ``max_record_passages`` passages is a reject; a job with more
  than ``max_records`` records is refused (413 naming ``records``), and so is a
  comparison with a system of more than ``max_records`` records (422 naming
  ``body.systems.NAME``).
* **Hostile input** (a lone surrogate escape, JSON nested too deep, wrong types) in a job's
  line is a reject of that line (:mod:`judge.io._jsonl`); in a JSON body it is a 422
  naming the problem.
* **Integers** a request gives (a page offset, a seed, a passage index) lie in
  0..:data:`judge.store.MAX_SQLITE_INT`, declared once here (:data:`Offset` for a query
  parameter, :data:`Seed` and :data:`Index` in a body, which also refuse ``true``/``false``
  and ``1.0``): a larger one is a 422 naming it, never an overflow in SQLite (a 500). A
  label cursor is bounded the same way where it is decoded (:func:`judge.store.decode_cursor`).
  Every other integer or number option is a :data:`RequestInt` / :data:`RequestFloat`: JSON
  ``true``/``false`` is refused (422 naming the field), never read as 1/0, and so is a JSON
  string (``{"examples": "2"}``), never read as 2 (a query string's text is read as a number).
* **No server path in a response**: what a job wrote names its files by their place on the
  server; every route gives them relative to the job's folder (``output.jsonl``,
  ``systems/A.jsonl``) through the one scrubbing of :mod:`judge.server._public`.
* **Off the event loop**: a JSON body is parsed in a worker thread (:class:`ParsedBodyRoute`),
  and so are the checks of a job's input.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BeforeValidator, Field, ValidationInfo
from starlette.requests import Request
from starlette.responses import Response

from judge.io import MAX_JSON_DEPTH, DatasetLimits, json_problem
from judge.server._job_files import Validation
from judge.store import MAX_SQLITE_INT

DEFAULT_MAX_QUERY_CHARS = 4000
DEFAULT_MAX_RECORD_PASSAGES = 1000
DEFAULT_MAX_RECORDS = 100_000
# JSON bodies up to this size are parsed on the event loop (well under a millisecond).
INLINE_PARSE_BYTES = 64 * 1024


#: The validation context of options read from a query string, where every value is text.
QUERY_CONTEXT = {"query": True}


def _a_number(value: object, info: ValidationInfo) -> object:
    """JSON ``true``/``false`` is not a number (pydantic's lax mode would read it as 1/0), and
    neither is a JSON string (``"2"``: lax mode would read it as 2); only a query string's
    values (validated with :data:`QUERY_CONTEXT`) are text to be read as numbers."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is not a number")
    if isinstance(value, str) and not (info.context or {}).get("query"):
        raise ValueError(f"{value!r} is a string, not a number (give the number without quotes)")
    return value


RequestInt = Annotated[int, BeforeValidator(_a_number)]
"""An integer option of a body or query (its range is the field's); a boolean, and in a JSON
body a string, is refused."""
RequestFloat = Annotated[float, BeforeValidator(_a_number)]
"""A number option of a body or query (its range is the field's); a boolean, and in a JSON
body a string, is refused."""
Offset = Annotated[int, Query(ge=0, le=MAX_SQLITE_INT, description="items to skip")]
"""A page offset given as a query parameter (``?offset=``)."""
Seed = Annotated[int, Field(strict=True, ge=0, le=MAX_SQLITE_INT)]
"""A resampling seed in a JSON body (an integer, never a boolean or a float)."""
Index = Annotated[int, Field(strict=True, ge=0, le=MAX_SQLITE_INT)]
"""A 0-based position in a JSON body (an integer, never a boolean or a float)."""


@dataclass(frozen=True)
class JobBounds:
    """The bounds of one server's jobs (see the module's docstring)."""

    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
    max_record_passages: int = DEFAULT_MAX_RECORD_PASSAGES
    max_records: int = DEFAULT_MAX_RECORDS

    def dataset(self) -> DatasetLimits:
        return DatasetLimits(max_query_chars=self.max_query_chars, max_passages=self.max_record_passages)

    def info(self) -> dict[str, int]:
        return {
            "max_query_chars": self.max_query_chars,
            "max_record_passages": self.max_record_passages,
            "max_records": self.max_records,
        }


def _unprocessable(message: str, field: str, loc: Sequence[str] | None = None) -> JSONResponse:
    return JSONResponse(
        {
            "detail": [
                {
                    "loc": list(loc) if loc is not None else field.split("."),
                    "msg": message,
                    "type": "value_error",
                }
            ],
            "fields": [field],
        },
        status_code=422,
    )


def _parse_json(raw: bytes) -> tuple[Any, str | None, str | None]:
    """``(value, problem, field)``: the parsed body, or why it is refused."""
    try:
        value = json.loads(raw)
    except RecursionError:
        return None, f"JSON nested deeper than the parser allows (at most {MAX_JSON_DEPTH} levels)", "body"
    problem = json_problem(value, raw.decode("utf-8", "replace"))
    if problem is not None:
        path, message = problem
        return None, message, "body" + (f".{path}" if path else "")
    return value, None, None


class ParsedBodyRoute(APIRoute):
    """A route whose JSON body is parsed and checked in a worker thread before FastAPI reads
    it (a large body never blocks the event loop); a body nested too deep or carrying a
    lone surrogate is a 422 naming where. Routes without a declared body are unchanged."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def parse_first(request: Request) -> Response:
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == "application/json" or ctype.endswith("+json"):
                raw = await request.body()
                if raw:
                    try:
                        if len(raw) > INLINE_PARSE_BYTES:
                            value, problem, field = await asyncio.to_thread(_parse_json, raw)
                        else:  # microseconds: a thread would cost more than it saves
                            value, problem, field = _parse_json(raw)
                    except ValueError:
                        value, problem, field = None, None, None  # FastAPI answers 422 naming the position
                    else:
                        if problem is not None and field is not None:
                            return _unprocessable(problem, field)
                        # FastAPI's request.json() returns this instead of parsing again.
                        request._json = value
            return await handler(request)

        return parse_first


def query_too_long(query: str, bounds: JobBounds) -> JSONResponse | None:
    """``/v1/evaluate``'s refusal of a query over the bound (422 naming ``query``)."""
    if len(query) <= bounds.max_query_chars:
        return None
    return _unprocessable(
        f"query of {len(query)} characters; at most {bounds.max_query_chars} (judge serve --max-query-chars)",
        "body.query",
    )


def too_many_records(check: Validation, bounds: JobBounds) -> JSONResponse | None:
    if check.queries + len(check.rejects) <= bounds.max_records:
        return None
    return JSONResponse(
        {
            "detail": f"more than {bounds.max_records} records in one job (judge serve --max-records); "
            "split the input",
            "field": "records",
        },
        status_code=413,
    )


def _records_in(given: Sequence[Any] | str, stop_after: int) -> int:
    """A system's records as submitted: list items, or NDJSON lines that are not blank
    (counting stops at ``stop_after``)."""
    if not isinstance(given, str):
        return len(given)
    count = 0
    for line in given.split("\n"):
        if line.strip():
            count += 1
            if count >= stop_after:
                break
    return count


def too_many_system_records(
    systems: Mapping[str, Sequence[Any] | str], bounds: JobBounds
) -> JSONResponse | None:
    """``/v1/compare``'s refusal of a system with more records than a job may have (422
    naming ``body.systems.NAME``). Blocking for a large body: call it in a worker thread."""
    for name, given in systems.items():
        if _records_in(given, bounds.max_records + 1) > bounds.max_records:
            return _unprocessable(
                f"system {name!r} has more than {bounds.max_records} records; at most "
                f"{bounds.max_records} per system (judge serve --max-records)",
                f"body.systems.{name}",
                ("body", "systems", name),
            )
    return None


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    """A JSON job's records as its ``input.jsonl`` (ASCII escapes: whatever a record holds
    is written, and a bad string is then rejected by its line). Blocking."""
    with open(path, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
