"""The ``python`` engine: a retriever of your own, in process.

``callable = "module:function"``: called as ``function(query, depth, **params)`` (sync or
async); it returns a list of hits, each a dict (``id``, ``text``, optional ``score``), a
tuple ``(id, text[, score])``, or a LangChain ``Document`` (id from ``metadata["id"]``,
else ``Document.id``). ``retriever = "module:attribute"``: a LangChain ``BaseRetriever``
(or a zero-argument factory returning one), asked with ``ainvoke(query)`` and cut at
``depth``. ``pythonpath`` (relative to the TOML) is put first on ``sys.path``.

The code runs off the runner's event loop, so the runner's timeout holds whatever it does:
a synchronous function in a daemon thread of its own per call, coroutines (an async
function, a retriever's ``ainvoke``) on one event loop in a daemon thread of the engine's.
A call that does not answer in time is abandoned (its thread never keeps the process
alive); an answer is read at most ``depth`` items far (an endless generator is cut there).
An exception from the code is a retried failure naming ``callable`` (``retriever``); an
answer that is not a list of hits is a :class:`SearchError` naming it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import inspect
import itertools
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from judge.search._hits import Hit, make_hit
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError, TransientSearchError

_STOP_WAIT_S = 1.0  # how long close() waits for the coroutine thread to stop before abandoning it


def _load(spec: str, path: str | None, field: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SearchError(f"cannot import {module_name!r}: {exc}", path=path, field=field) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SearchError(f"{module_name!r} has no attribute {attr!r}", path=path, field=field)
        obj = getattr(obj, part)
    return obj


class PythonEngine:
    def __init__(self, config: SearchConfig) -> None:
        self.config = config
        self.where = None if config.path is None else str(config.path)
        if config.pythonpath is not None and str(config.pythonpath) not in sys.path:
            sys.path.insert(0, str(config.pythonpath))
        self.field = "callable" if config.callable else "retriever"
        spec = config.callable or config.retriever or ""
        target = _load(spec, self.where, self.field)
        self.retriever: Any = None
        self.function: Any = None
        self.loop_thread: _LoopThread | None = None
        if config.retriever is not None:
            if not hasattr(target, "ainvoke") and callable(target):
                target = target()
            if not hasattr(target, "ainvoke"):
                raise SearchError(
                    f"{spec!r} is not a LangChain retriever", path=self.where, field="retriever"
                )
            self.retriever = target
        else:
            if not callable(target):
                raise SearchError(f"{spec!r} is not callable", path=self.where, field="callable")
            self.function = target

    async def search(self, query: str, depth: int) -> list[Hit]:
        try:
            if self.retriever is not None or inspect.iscoroutinefunction(self.function):
                items = await asyncio.wrap_future(self._coroutines().submit(self._acall(query, depth)))
            else:
                items = await _in_thread(lambda: self._call(query, depth))
        except SearchError:
            raise
        except Exception as exc:
            raise TransientSearchError(
                f"the {self.field} raised {type(exc).__name__}: {exc}", field=self.field
            ) from exc
        return [self._hit(i, item) for i, item in enumerate(items)]

    def _call(self, query: str, depth: int) -> list[Any]:
        """A synchronous function's answer, read at most ``depth`` items far (in its thread)."""
        result = self.function(query, depth, **self.config.params)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return self._take(result, depth)

    async def _acall(self, query: str, depth: int) -> list[Any]:
        if self.retriever is not None:
            result = await self.retriever.ainvoke(query)
        else:
            result = await self.function(query, depth, **self.config.params)
        return self._take(result, depth)

    def _take(self, result: Any, depth: int) -> list[Any]:
        if isinstance(result, str | bytes | dict) or not hasattr(result, "__iter__"):
            raise SearchError(
                f"the {self.field} returned {type(result).__name__}, not a list of hits",
                path=self.where,
                field=self.field,
            )
        return list(itertools.islice(result, depth))

    def _coroutines(self) -> _LoopThread:
        if self.loop_thread is None:
            self.loop_thread = _LoopThread()
        return self.loop_thread

    def _hit(self, i: int, item: Any) -> Hit:
        score: Any = None
        if isinstance(item, dict):
            hid, text, score = item.get("id"), item.get("text"), item.get("score")
        elif isinstance(item, tuple | list) and len(item) in (2, 3):
            hid, text = item[0], item[1]
            score = item[2] if len(item) == 3 else None
        elif hasattr(item, "page_content"):
            metadata = getattr(item, "metadata", None) or {}
            hid, text = metadata.get("id", getattr(item, "id", None)), item.page_content
            score = metadata.get("score")
        else:
            raise SearchError(
                f"hit {i}: expected a dict, an (id, text[, score]) tuple or a Document, "
                f"got {type(item).__name__}",
                path=self.where,
                field=self.field,
            )
        return make_hit(i, hid, text, score, path=self.where, field=self.field)

    async def version(self) -> str | None:
        module = (self.config.callable or self.config.retriever or "").partition(":")[0]
        version = getattr(sys.modules.get(module), "__version__", None)
        return None if version is None else f"{module} {version}"

    async def stats(self) -> dict[str, Any]:
        return {}

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        target = self.config.callable or self.config.retriever
        return {self.field: target, "query": query, "depth": depth, "params": dict(self.config.params)}

    async def close(self) -> None:
        if self.loop_thread is not None:
            self.loop_thread.stop()
            self.loop_thread = None


def _in_thread(work: Callable[[], list[Any]]) -> asyncio.Future[list[Any]]:
    """``work()`` in a daemon thread of its own; the future the runner awaits (and may
    abandon on its timeout: the thread then finishes, or not, unheard)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[list[Any]] = loop.create_future()

    def deliver(result: list[Any] | None, error: BaseException | None) -> None:
        if future.done():  # abandoned
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result or [])

    def run() -> None:
        try:
            result, error = work(), None
        except Exception as exc:
            result, error = None, exc
        except BaseException as exc:  # SystemExit, KeyboardInterrupt in the user's code
            result, error = None, RuntimeError(f"{type(exc).__name__} {exc}")
        with contextlib.suppress(RuntimeError):  # the runner's loop is gone: nobody waits any more
            loop.call_soon_threadsafe(deliver, result, error)

    threading.Thread(target=run, name="judge-python-engine", daemon=True).start()
    return future


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class _LoopThread:
    """An event loop running in a daemon thread, for the coroutines of one engine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="judge-python-engine-loop", daemon=True
        )
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, list[Any]]) -> concurrent.futures.Future[list[Any]]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        def shutdown() -> None:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.call_soon(self.loop.stop)  # after the cancelled tasks' next step

        self.loop.call_soon_threadsafe(shutdown)
        self.thread.join(_STOP_WAIT_S)
        if not self.thread.is_alive():  # else a coroutine blocks it: abandoned with its thread
            self.loop.close()
