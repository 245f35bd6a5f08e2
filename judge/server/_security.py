"""Browser-facing defences of ``judge serve``: the same-origin rule for state-changing
requests (CSRF), the security headers of every HTML page, HTTPS detection for the session
cookie, and the access-log filter that keeps query strings (and any key in them) out of logs.

**Same-origin rule.** A state-changing request (POST, PUT, PATCH, DELETE) that is not
authenticated by a bearer key (so: by the viewer's cookie, the sign-in form itself, or any
request when auth is off) must come from this server's own pages: ``Sec-Fetch-Site`` must be
``same-origin`` (or ``none``: typed by the user), or, from a browser that does not send it,
``Origin`` must name this server's scheme, host and port (``https://HOST:PORT`` is not the
origin of an http server on HOST:PORT). With the cookie, the JSON/NDJSON routes
(``/v1/...``) also refuse the content types an HTML form can send without script
(``text/plain``, ``application/x-www-form-urlencoded``, ``multipart/form-data``). A refusal
is ``403 {"detail": ...}``. Bearer-key clients are never checked: a browser cannot attach an
``Authorization`` header across origins without a CORS preflight, which this server never
grants.

**Host rule** (DNS rebinding). A page on ``rebind.attacker.example`` whose name the attacker
re-points at 127.0.0.1 is, to the browser, same-origin with this server: ``Origin`` and
``Sec-Fetch-Site`` cannot tell it apart, only ``Host`` can. :class:`HostCheck` answers
``421 {"detail": ...}`` before any route (and before authentication) unless ``Host`` names
the address the connection reached (``scope["server"]``) or ``localhost``, both with the
server's port, or one of the operator's ``--allowed-hosts`` (``NAME`` any port,
``NAME:PORT`` that port). It is on whenever the server runs without keys, and with keys when
``--allowed-hosts`` is given.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# FastAPI's own API pages load Swagger UI / ReDoc with inline script from a CDN: they get
# every header but a script policy.
API_DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})


def style_hash(css: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode() + "'"


def viewer_csp(*inline_styles: str) -> str:
    """The viewer's policy: script, style, images and connections from this server only, no
    inline script at all; inline ``<style>`` only for the given blocks (by hash)."""
    styles = " ".join(["'self'", *(style_hash(s) for s in inline_styles)])
    return (
        "default-src 'none'; script-src 'self'; "
        f"style-src {styles}; img-src 'self' data:; font-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"
    )


API_DOC_CSP = "frame-ancestors 'none'; base-uri 'none'; object-src 'none'"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def request_is_https(scope: Scope, trust_forwarded_proto: bool) -> bool:
    """Whether the client reached us over HTTPS: the connection's scheme, or, only when the
    operator says a proxy sets it (``--trust-forwarded-proto``), ``X-Forwarded-Proto``."""
    if scope.get("scheme") in ("https", "wss"):
        return True
    if trust_forwarded_proto:
        proto = _headers(scope).get("x-forwarded-proto", "")
        return proto.split(",")[0].strip().lower() == "https"
    return False


def _host_port(netloc: str, default_port: int) -> tuple[str, int] | None:
    try:
        parts = urllib.parse.urlsplit("//" + netloc)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port if port is not None else default_port


def same_origin(origin: str, host: str | None, scheme: str | None = None) -> bool:
    """``Origin`` names the host and port the request was sent to (``Host``), and, when
    ``scheme`` (the request's: ``http`` or ``https``) is given, that scheme too."""
    if not host or origin.strip().lower() == "null":
        return False
    try:
        parts = urllib.parse.urlsplit(origin.strip())
    except ValueError:
        return False
    origin_scheme = parts.scheme.lower()
    if scheme is not None and origin_scheme != scheme.lower():
        return False
    default = DEFAULT_PORTS.get(scheme.lower() if scheme is not None else origin_scheme)
    if default is None or origin_scheme not in DEFAULT_PORTS:
        return False
    sent_to = _host_port(host, default)
    return sent_to is not None and _host_port(parts.netloc, DEFAULT_PORTS[origin_scheme]) == sent_to


def csrf_refusal(scope: Scope, trust_forwarded_proto: bool = False) -> str | None:
    """Why this request is refused under the same-origin rule (None: it may go on)."""
    if scope.get("method", "GET") not in UNSAFE_METHODS:
        return None
    via = scope.get("state", {}).get("auth_via")
    if via == "bearer":
        return None
    headers = _headers(scope)
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if site is not None:
        if site.strip().lower() not in ("same-origin", "none"):
            return (
                f"cross-site request refused (Sec-Fetch-Site: {site}): state-changing requests "
                "signed in by cookie must come from this server's own pages; scripts use "
                "Authorization: Bearer <key>"
            )
    elif origin is not None and not same_origin(
        origin, headers.get("host"), "https" if request_is_https(scope, trust_forwarded_proto) else "http"
    ):
        return (
            f"cross-origin request refused (Origin {origin} is not this server): state-changing "
            "requests signed in by cookie must come from this server's own pages; scripts use "
            "Authorization: Bearer <key>"
        )
    if via == "cookie" and str(scope.get("path", "")).startswith("/v1/"):
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype in FORM_TYPES:
            return (
                f"Content-Type {ctype} refused for a request signed in by cookie (an HTML form "
                "can send it from any site); send application/json or application/x-ndjson"
            )
    return None


class CsrfCheck:
    """The same-origin rule as ASGI middleware; it runs after authentication (which sets
    ``state.auth_via``)."""

    def __init__(self, app: ASGIApp, *, trust_forwarded_proto: bool = False) -> None:
        self.app = app
        self.trust_forwarded_proto = trust_forwarded_proto

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            reason = csrf_refusal(scope, self.trust_forwarded_proto)
            if reason is not None:
                await _json_refusal(send, 403, reason)
                return
        await self.app(scope, receive, send)


async def _json_refusal(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


LOCAL_NAMES = ("localhost",)


def parse_allowed_hosts(values: Sequence[str]) -> tuple[tuple[str, int | None], ...]:
    """``--allowed-hosts`` entries (``NAME`` or ``NAME:PORT``; IPv6 as ``[::1]:8000``), each
    lower-cased; ValueError naming the entry that is not a host."""
    out: list[tuple[str, int | None]] = []
    for raw in values:
        for entry in (e.strip() for e in raw.split(",")):
            if not entry:
                continue
            try:
                parts = urllib.parse.urlsplit("//" + entry)
                port = parts.port
            except ValueError:
                raise ValueError(f"{entry!r} is not a host or host:port") from None
            if not parts.hostname or parts.path or parts.query or parts.username:
                raise ValueError(f"{entry!r} is not a host or host:port")
            out.append((parts.hostname.lower(), port))
    return tuple(out)


def host_allowed(
    host: str | None, server: tuple[str, int] | None, extra: Sequence[tuple[str, int | None]]
) -> bool:
    """Whether ``Host`` names this server: the address the connection reached or
    ``localhost`` with the server's port, or an allowed ``(name, port)`` (port None: any)."""
    if not host:
        return False
    sent_to = _host_port(host, DEFAULT_PORTS["http"])
    if sent_to is None:
        return False
    name, port = sent_to
    if server is not None:
        own = str(server[0]).lower()
        if name in (own, *LOCAL_NAMES) and port == int(server[1]):
            return True
    return any(name == n and (p is None or p == port) for n, p in extra)


class HostCheck:
    """The host rule (module doc) as ASGI middleware, in front of authentication and every
    route: 421 for a ``Host`` that does not name this server."""

    def __init__(
        self, app: ASGIApp, *, allowed: Sequence[tuple[str, int | None]] = (), keys: bool = False
    ) -> None:
        self.app = app
        self.allowed = tuple(allowed)
        # Without keys the rule is always on; with keys, because --allowed-hosts was given.
        self.why = "this server" if keys else "a server without keys"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _headers(scope).get("host")
            server = scope.get("server")
            own = (str(server[0]), int(server[1])) if server and server[1] is not None else None
            if not host_allowed(host, own, self.allowed):
                shown = (host or "")[:200]
                await _json_refusal(
                    send,
                    421,
                    f"Host {shown!r} is not this server; {self.why} answers only its own "
                    "address, localhost and the names of judge serve --allowed-hosts",
                )
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """Adds ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer`` to every
    response, and to HTML pages without a policy of their own the viewer's
    Content-Security-Policy and ``X-Frame-Options: DENY``."""

    def __init__(self, app: ASGIApp, *, csp: str) -> None:
        self.app = app
        self.csp = csp.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = API_DOC_CSP.encode() if scope.get("path") in API_DOC_PATHS else self.csp

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                extra = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
                if ctype.lower().startswith(b"text/html") and b"content-security-policy" not in names:
                    extra += [(b"content-security-policy", csp), (b"x-frame-options", b"DENY")]
                headers += [(k, v) for k, v in extra if k not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class AccessLogRedactor(logging.Filter):
    """Drops the query string from uvicorn's access-log lines (a key sent as ``?api_key=``
    is refused, but the line would still hold it); the path stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0] + "?[query redacted]", *args[3:])
        return True


def redact_access_log(logger_name: str = "uvicorn.access") -> None:
    """Install :class:`AccessLogRedactor` on uvicorn's access logger (once)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, AccessLogRedactor) for f in logger.filters):
        logger.addFilter(AccessLogRedactor())


__all__ = [
    "CsrfCheck",
    "HostCheck",
    "SecurityHeaders",
    "csrf_refusal",
    "host_allowed",
    "parse_allowed_hosts",
    "redact_access_log",
    "request_is_https",
    "same_origin",
    "viewer_csp",
]
