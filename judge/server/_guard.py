"""The one ASGI middleware in front of every route of ``judge serve``: it times the request
for ``/metrics``, checks the key (``Authorization: Bearer`` or the viewer's session cookie;
``/healthz`` is open) and bounds the request body (413 past ``--max-body``, a chunked body
read up to the bound first, then replayed)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import HTMLResponse, JSONResponse, Response

from judge.server._metrics import ServerMetrics
from judge.server._sessions import Authenticator, signin_page

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/healthz"})


class Guard:
    """Metrics timing, auth and the body limit, as one pure ASGI middleware."""

    def __init__(self, app: ASGIApp, *, auth: Authenticator, metrics: ServerMetrics, max_body: int) -> None:
        self.app = app
        self.auth = auth
        self.metrics = metrics
        self.max_body = max_body

    def _authorized(self, scope: Scope) -> bool:
        """Identifies the caller (``request.state.principal``) by bearer key or session."""
        return self.auth.identify(scope) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = int(message["status"])
                started = True
            await send(message)

        path = scope.get("path", "")
        method = scope.get("method", "GET")
        try:
            open_path = path in OPEN_PATHS or self._login(path, method)
            if not self._authorized(scope) and not open_path:
                await self._unauthorized(scope, receive, send_wrapper)
                return
            length = dict(scope.get("headers", [])).get(b"content-length")
            if length is not None and length.isdigit():
                if int(length) > self.max_body:
                    await self._too_large(scope, receive, send_wrapper)
                    return
                await self.app(scope, receive, send_wrapper)
                return
            if method not in ("POST", "PUT", "PATCH"):
                await self.app(scope, receive, send_wrapper)
                return
            # No Content-Length (chunked): read the body up to the limit first, then replay it.
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                size += len(message.get("body", b""))
                if size > self.max_body:
                    await self._too_large(scope, receive, send_wrapper)
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                return await receive()

            await self.app(scope, replay, send_wrapper)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", None) or ("/static" if path.startswith("/static/") else "other")
            self.metrics.observe_http(method, label, status, time.perf_counter() - start)

    @staticmethod
    def _login(path: str, method: str) -> bool:
        return path in ("/login", "/logout") and method == "POST"

    async def _unauthorized(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("path", "/")
        response: Response
        if (
            scope.get("method") == "GET"
            and "text/html" in headers.get("accept", "")
            and not path.startswith("/v1/")
        ):
            response = HTMLResponse(signin_page(path, False), status_code=401)
        else:
            response = JSONResponse(
                {"detail": "missing or invalid API key (Authorization: Bearer <key>)"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="judge"'},
            )
        await response(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body larger than {self.max_body} bytes"}, status_code=413
        )
        await response(scope, receive, send)


__all__ = ["OPEN_PATHS", "Guard"]
