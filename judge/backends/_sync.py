"""The one bridge from sync code to the async core.

Everything in `judge` is written async once; ``judge.evaluate``, ``RelevancyJudge.measure``,
``judge eval`` and the deepeval adapter's ``generate`` are thin sync wrappers that call
:func:`run_sync`. It runs the coroutine on one private event loop that lives on a daemon
thread for the life of the process, so

* it works the same from plain code, from a notebook or an async test (a loop already
  running in the caller's thread is never re-entered or blocked by a nested ``asyncio.run``);
* a backend object used by many sync calls keeps its HTTP client, its aiohttp session and
  its rate limiter between them (they are bound to one loop);
* Ctrl-C (or any exception) in the waiting thread cancels the coroutine.

A sync wrapper called *from a coroutine running on that loop* (sync code nested inside our
own async code) gets a fresh loop on a one-off thread instead, so the loop never waits
for itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = ["run_sync", "synchronous"]

P = ParamSpec("P")
T = TypeVar("T")


class _LoopThread:
    """One event loop on a daemon thread, started on first use (and again if it died)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed() or not self._alive():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self.thread = loop, thread
            return self._loop

    def _alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


_SHARED = _LoopThread("judge-sync")


def _one_off(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a new thread (the caller's thread is our loop's thread)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="judge-sync-nested")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code and return its result (or raise its error)."""
    if threading.current_thread() is _SHARED.thread:
        return _one_off(coro)
    future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, _SHARED.loop())
    try:
        return future.result()
    except BaseException:
        future.cancel()  # Ctrl-C or a failure while waiting: stop the coroutine too
        raise


def synchronous(fn: Callable[P, Coroutine[Any, Any, T]], name: str) -> Callable[P, T]:
    """``fn`` run to completion by :func:`run_sync`, as a function called ``name`` with
    ``fn``'s signature (``inspect.signature`` and ``help()`` show its parameters) and
    docstring."""

    @functools.wraps(fn)
    def sync(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(fn(*args, **kwargs))

    sync.__name__ = sync.__qualname__ = name
    doc = inspect.cleandoc(fn.__doc__ or "")
    sync.__doc__ = f"Synchronous :func:`{fn.__name__}` (same arguments, same result).\n\n{doc}"
    return sync
