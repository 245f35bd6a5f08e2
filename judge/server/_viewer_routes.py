"""The web viewer's pages: the job list, a job, a comparison, an experiment (one static page that reads the
API; its scripts and styles are served under ``/static``), and signing in and out
(``POST /login`` with the sign-in form's ``key`` and optional ``name``; ``POST /logout``)."""

from __future__ import annotations

import urllib.parse
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from judge.server._app_state import State
from judge.server._auth import COOKIE_NAME
from judge.server._bounds import ParsedBodyRoute
from judge.server._security import request_is_https
from judge.server._sessions import clean_name, cookie_value, principal_of, signin_page

STATIC_DIR = Path(str(resources.files("judge.server") / "static"))
INDEX_HTML = STATIC_DIR / "index.html"

router = APIRouter(route_class=ParsedBodyRoute, include_in_schema=False)


def index_page() -> FileResponse:
    return FileResponse(INDEX_HTML, media_type="text/html; charset=utf-8")


@router.get("/")
async def home() -> FileResponse:
    return index_page()


@router.get("/compare/{job_id}")
async def compare_page(job_id: str) -> FileResponse:
    return index_page()


@router.get("/experiments/{job_id}")
async def experiment_page(job_id: str) -> FileResponse:
    return index_page()


@router.get("/jobs/{job_id}")
async def job_page(job_id: str) -> FileResponse:
    return index_page()


def _local_target(next_path: str) -> str:
    local = next_path.startswith("/") and not next_path.startswith("//") and "\\" not in next_path
    return next_path if local else "/"


@router.post("/login")
async def login(request: Request, state: State, next: str = "/") -> Response:
    form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"))
    key = (form.get("key") or [""])[0].strip()
    name = clean_name((form.get("name") or [""])[0])
    target = _local_target(next)
    keys, config = state.auth.keys, state.config
    if not keys.enabled:
        return RedirectResponse(target, status_code=303)
    label = keys.label_for(key)
    if label is None:
        return HTMLResponse(signin_page(target, True), status_code=401)
    ttl_s = config.session_ttl_s
    token = state.sessions.create(
        principal=principal_of(label, name), key_label=label, keyring=keys.fingerprint, ttl_s=ttl_s
    )
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE_NAME,
        token,
        max_age=int(ttl_s),
        httponly=True,
        samesite="strict",
        path="/",
        secure=request_is_https(request.scope, config.trust_forwarded_proto),
    )
    return response


@router.post("/logout")
async def logout(request: Request, state: State) -> Response:
    token = cookie_value(request.scope)
    if token is not None:
        state.sessions.delete(token)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(
        COOKIE_NAME,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request_is_https(request.scope, state.config.trust_forwarded_proto),
    )
    return response


__all__ = ["INDEX_HTML", "STATIC_DIR", "index_page", "router"]
