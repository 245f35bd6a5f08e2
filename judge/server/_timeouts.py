"""Connection timeouts of ``judge serve`` (uvicorn does not bound how long a client may take
to send a request's headers).

* **keep-alive** (uvicorn's ``timeout_keep_alive``): a connection idle after a response is
  closed after this many seconds;
* **header read** (:func:`header_timeout_protocol`): a connection that has not sent a whole
  request line and headers this many seconds after it opened, or after it started sending
  its next request, is closed. A client that trickles a few bytes of headers a second
  (slowloris) therefore holds a connection for at most this long; the body of a request is
  bounded by ``--max-body-mb``, not by this timer.

Both are set by ``judge serve --keep-alive-timeout`` and ``--header-timeout``.
"""

from __future__ import annotations

import asyncio
from typing import Any

DEFAULT_KEEP_ALIVE_S = 5.0
DEFAULT_HEADER_TIMEOUT_S = 10.0


def _base_protocol() -> type[Any]:
    """The HTTP protocol class uvicorn's ``http="auto"`` would pick."""
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


def header_timeout_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with a header-read deadline of ``seconds`` (module doc).

    The deadline is armed when the connection opens and whenever bytes arrive while no
    request is in progress; it is met once uvicorn has parsed a request's headers (it then
    starts a new request/response cycle). When it passes unmet, the connection is closed.
    """
    base = _base_protocol()

    class HeaderTimeoutProtocol(base):  # type: ignore[misc, valid-type]
        header_timeout_s = seconds

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            self._arm_header_timer()

        def _waiting_for_request(self) -> bool:
            cycle = self.cycle
            return cycle is None or bool(cycle.response_complete)

        def _arm_header_timer(self) -> None:
            if getattr(self, "_header_timer", None) is None:
                cycle = self.cycle
                self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_deadline, cycle)

        def _header_deadline(self, armed_cycle: Any) -> None:
            self._header_timer = None
            if self.cycle is armed_cycle and self._waiting_for_request() and not self.transport.is_closing():
                self.transport.close()  # no new request's headers in time

        def data_received(self, data: bytes) -> None:
            waiting = self._waiting_for_request()
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before and self._header_timer is not None:
                self._header_timer.cancel()  # a request's headers arrived
                self._header_timer = None
            if waiting and self.cycle is before and not self.transport.is_closing():
                self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            if getattr(self, "_header_timer", None) is not None:
                self._header_timer.cancel()  # type: ignore[union-attr]
                self._header_timer = None
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


__all__ = ["DEFAULT_HEADER_TIMEOUT_S", "DEFAULT_KEEP_ALIVE_S", "header_timeout_protocol"]
