"""The service's own routes: liveness (``/healthz``, open), ``/v1/info`` and Prometheus
``/metrics``."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from judge.server._app_state import State
from judge.server._bounds import ParsedBodyRoute
from judge.server._metrics import CONTENT_TYPE

router = APIRouter(route_class=ParsedBodyRoute, tags=["service"])


def version() -> str:
    try:
        return metadata.version("judge")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness; never needs a key."""
    return {"status": "ok"}


@router.get("/v1/info")
async def info(state: State) -> dict[str, Any]:
    """Version, backend, model, templates and their hashes, defaults and limits."""
    from judge.judging import list_templates

    config, rt = state.config, state.runtime
    templates = [
        {"id": t.id, "mode": t.mode, "language": t.language, "hash": t.hash} for t in list_templates()
    ]
    return {
        "version": version(),
        "backend": rt.backend.name,
        "model": rt.backend.model,
        "templates": templates,
        "defaults": config.defaults,
        "limits": {
            "max_body_bytes": config.max_body_bytes,
            "max_passages": config.max_passages,
            "queue_size": rt.queue_size,
            "max_jobs": rt.max_jobs,
            "concurrency": rt.concurrency,
            **rt.bounds.info(),
        },
        "auth": config.keys.enabled,
        "schema_version": state.db.schema_version,
    }


@router.get("/metrics", response_class=PlainTextResponse)
async def prometheus(state: State) -> Response:
    """Prometheus text exposition; every name starts with ``judge_``."""
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)


__all__ = ["router", "version"]
