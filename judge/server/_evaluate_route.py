"""``POST /v1/evaluate``: judge one query's passages now and answer with the result.

The route's per-request work is kept small by :mod:`judge.server._fastpath` (configs
resolved once per option set, one cache write per request, the answer serialised once).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from judge.backends import PermanentError
from judge.server import _bounds, _failures, _fastpath
from judge.server._job_kind import Runtime, config_of
from judge.server._jobs import option_error
from judge.server._metrics import ServerMetrics
from judge.server._schemas import EvaluateRequest

# The youngest generation is collected after this many allocations (Python's default: 700).
GC_YOUNG_THRESHOLD = 20_000
_GC_SAVED: list[tuple[int, int, int]] = []  # the settings before the first server started
_GC_USERS = [0]  # servers running in this process


@contextlib.asynccontextmanager
async def _frozen_heap(_: object) -> AsyncIterator[None]:
    """While the server runs, what it holds once started (modules, the app, caches) is out
    of the garbage collector's way: a request allocates many short-lived objects, and each
    full collection would otherwise walk the whole heap (about a sixth of a request's CPU).
    Frozen objects are still freed when their last reference goes; they are handed back to
    the collector when the server stops. The youngest generation is also collected less
    often, so that the objects of the requests in flight are not scanned (and promoted)
    again and again (a few percent of a request's CPU; a few MB more between collections).
    Both settings are put back when the last server of the process stops."""
    if not _GC_SAVED:
        threshold = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(max(threshold[0], GC_YOUNG_THRESHOLD), *threshold[1:])
        _GC_SAVED.append(threshold)
    _GC_USERS[0] += 1
    try:
        yield
    finally:
        _GC_USERS[0] -= 1
        if _GC_USERS[0] == 0 and _GC_SAVED:
            gc.set_threshold(*_GC_SAVED.pop())
            gc.unfreeze()


def evaluate_router(
    rt: Runtime,
    defaults: dict[str, Any],
    max_passages: int,
    metrics: ServerMetrics,
) -> APIRouter:
    """The ``/v1/evaluate`` route of a server: ``defaults`` are its judging options,
    ``max_passages`` the most passages one request may carry."""
    # JSON bodies checked as on every route; the heap frozen while the server runs
    router = APIRouter(route_class=_bounds.ParsedBodyRoute, lifespan=_frozen_heap)
    configs = _fastpath.ConfigCache(config_of, rt.backend)  # per option set
    writer = None if rt.store is None else _fastpath.GroupCommit(rt.store)

    @router.post("/v1/evaluate", tags=["evaluate"])
    async def evaluate(body: EvaluateRequest) -> Response:
        """Judge one query's passages now; the Python API's ``JudgeResult`` as JSON.

        ``summary: true`` also asks for a summary reason (one more LLM call)."""
        from judge import aevaluate
        from judge.judging import Passage

        if len(body.retrieval_context) > max_passages:
            return JSONResponse(
                {
                    "detail": f"retrieval_context has {len(body.retrieval_context)} passages; at most "
                    f"{max_passages} per request (submit a job for more)",
                    "field": "retrieval_context",
                },
                status_code=413,
            )
        if (refused := _bounds.query_too_long(body.query, rt.bounds)) is not None:
            return refused
        opts = dict(defaults)
        if body.config is not None:
            opts.update({k: v for k, v in body.config.model_dump().items() if v is not None})
        if body.mode is not None:
            opts["mode"] = body.mode
        try:
            judge_config = configs.get(opts)
        except ValueError as exc:
            raise option_error(exc, "body", "config") from None
        passages = [p if isinstance(p, str) else Passage(p.text, p.id) for p in body.retrieval_context]
        store = None if writer is None else _fastpath.RequestStore(writer)
        try:
            result = await aevaluate(
                body.query,
                passages,
                backend=rt.backend,
                config=judge_config,
                k=body.k,
                store=store,
                summary=body.summary,
            )
        except PermanentError as exc:
            return _failures.upstream_error(exc, rt.backend.name)
        finally:
            if store is not None:
                await store.flush()  # what was judged is cached, even when the request fails
        counts: dict[str, int] = {}
        for v in result.verdicts:
            counts[v.verdict] = counts.get(v.verdict, 0) + 1
        metrics.count_verdicts(counts)
        return _fastpath.json_response(result.model_dump_json())

    return router


__all__ = ["evaluate_router"]
