"""What ``POST /v1/evaluate`` needs per request, without redoing per request what does not
change between requests:

* the judging config of a set of options is built and resolved for the backend once
  (:class:`ConfigCache`; a handful of distinct option sets in practice, bounded anyway);
* the verdicts a request judges are written to the verdict cache together, before the
  answer is sent (:class:`RequestStore`), instead of one commit per passage; requests
  that finish together share one transaction (:class:`GroupCommit`). Every judged verdict
  is committed to the cache before its request is answered;
* the answer is the result's JSON as pydantic writes it (no parse and re-dump).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi.responses import Response

from judge.judging import JudgeConfig, PassageVerdict, VerdictStore, resolve_config


class ConfigCache:
    """Resolved :class:`JudgeConfig` per unresolved config (at most ``size`` kept; the oldest
    goes). ``build`` turns a request's options into its config (a few microseconds, and it
    validates them); resolving it for the backend, which reads templates, is what is kept."""

    def __init__(self, build: Callable[[Mapping[str, Any]], JudgeConfig], backend: object, size: int = 256):
        self._build = build
        self._backend = backend
        self._size = size
        self._configs: dict[JudgeConfig, JudgeConfig] = {}

    def get(self, options: Mapping[str, Any]) -> JudgeConfig:
        """The resolved config of ``options`` (raises what ``build`` raises for bad ones)."""
        config = self._build(options)
        found = self._configs.get(config)
        if found is None:
            found = resolve_config(config, self._backend)
            if len(self._configs) >= self._size:
                self._configs.pop(next(iter(self._configs)))
            self._configs[config] = found
        return found


Items = Sequence[tuple[str, PassageVerdict]]


class GroupCommit:
    """The verdict cache's writer for concurrent requests: :meth:`write` returns once the
    items are committed, and the items of every request that writes while a commit is being
    prepared go into the same one (one transaction for several requests instead of one
    each). An error of the commit is raised in every request of the group. Items whose
    request was cancelled meanwhile are still written."""

    def __init__(self, store: VerdictStore) -> None:
        self.store = store
        self._items: list[tuple[str, PassageVerdict]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self.commits = 0  # how many transactions were made (for tests and benchmarks)

    async def write(self, items: Items) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._items.extend(items)
        self._waiters.append(done)
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._drain())
        await done

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # requests that finish in this turn of the loop join in
        while self._items:
            items, waiters = self._items, self._waiters
            self._items, self._waiters = [], []
            try:
                await self._put(items)
            except Exception as exc:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _put(self, items: Items) -> None:
        self.commits += 1
        put_many = getattr(self.store, "put_many", None)
        if put_many is not None:
            await put_many(list(items))
        else:
            for key, verdict in items:
                await self.store.put(key, verdict)


class RequestStore:
    """A verdict store for one request: reads go to the cache (this request's own pending
    verdicts first), writes wait for :meth:`flush`, which hands them to ``writer`` (shared
    by the requests of a server) in one go."""

    def __init__(self, writer: GroupCommit) -> None:
        self.store = writer.store
        self.writer = writer
        self.pending: dict[str, PassageVerdict] = {}

    async def get(self, key: str) -> PassageVerdict | None:
        found = self.pending.get(key)
        return found if found is not None else await self.store.get(key)

    async def put(self, key: str, verdict: PassageVerdict) -> None:
        self.pending[key] = verdict

    async def flush(self) -> None:
        pending, self.pending = self.pending, {}
        if pending:
            await self.writer.write(list(pending.items()))


def json_response(payload: str) -> Response:
    return Response(payload, media_type="application/json")
