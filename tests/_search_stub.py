"""A loopback HTTP stub for the search engines' tests: serves canned JSON per path, can
fail a number of times first (a status or a dropped connection), and records every
request it receives (import as ``from _search_stub import SearchStub``)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DATA = __import__("pathlib").Path(__file__).parent / "data" / "search"


def recorded(name: str) -> Any:
    """A response recorded from an engine's documented shape (tests/data/search/NAME)."""
    return json.loads((DATA / name).read_text(encoding="utf-8"))


@dataclass
class Seen:
    method: str
    path: str
    params: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]


@dataclass
class SearchStub:
    """``routes``: path -> JSON body or a function of the request returning (status, body).
    ``fail_first``: that many requests answered with ``fail_status`` first (0: none);
    ``fail_status`` None closes the connection instead."""

    routes: dict[str, Any]
    fail_first: int = 0
    fail_status: int | None = 503
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    gate: threading.Event | None = None

    def handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        seen = Seen(method, parts.path, urllib.parse.parse_qs(parts.query), body, dict(handler.headers))
        self.seen.append(seen)
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail_first > 0:
            self.fail_first -= 1
            if self.fail_status is None:
                handler.close_connection = True
                handler.connection.shutdown(2)
                return
            self._send(handler, self.fail_status, {"error": "try again"})
            return
        route = self.routes.get(parts.path)
        if route is None:
            self._send(handler, 404, {"error": f"no route {parts.path}"})
            return
        status, payload = route(seen) if callable(route) else (200, route)
        self._send(handler, status, payload)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            return


@contextmanager
def serve(stub: SearchStub) -> Iterator[SearchStub]:
    """Serve ``stub`` on 127.0.0.1 (a free port) in a thread; stop it on exit."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            stub.handle(self, "GET")

        def do_POST(self) -> None:
            stub.handle(self, "POST")

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        if stub.gate is not None:
            stub.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


Route = Callable[[Seen], tuple[int, Any]]
