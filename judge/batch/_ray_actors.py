"""The actors of the Ray engine and what the driver ships to them: the judging worker
(:class:`_Worker`, its own resilient backend built from a :class:`BackendSpec` or a pickled
backend), the one limiter actor holding the cluster-wide call policy (:class:`_Limiter`)
and its stand-in inside each worker's backend (:class:`_RemoteLimiter`), and template files
shipped as bytes to hosts that may not have them. How the driver runs them is
:mod:`judge.batch._ray`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import pickle
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judge.backends import (
    AdaptiveLimiter,
    Backend,
    BackendStats,
    CallPolicy,
    ResilientBackend,
)
from judge.judging import Example, JudgeConfig, Passage, PassageVerdict

__all__ = [
    "BackendSpec",
    "ShippedTemplate",
    "local_template_path",
    "read_template_file",
]


#: A template file shipped to the workers: (the driver's path, its bytes).
ShippedTemplate = tuple[str, bytes]


def read_template_file(ref: str | None) -> ShippedTemplate | None:
    """A template given by ``.toml`` path, read on the driver to be shipped to the workers
    (their hosts need not have the file); None for a built-in template id (every host has
    the package's templates) or no template."""
    if not ref or not str(ref).endswith(".toml"):
        return None
    return str(ref), Path(ref).expanduser().read_bytes()


def local_template_path(shipped: ShippedTemplate) -> str:
    """A shipped template as a file on this host: under the temp folder, by the sha256 of
    its bytes (the template's hash, so its id and hash are the driver's), written once."""
    ref, data = shipped
    folder = Path(tempfile.gettempdir()) / "judge-templates" / hashlib.sha256(data).hexdigest()
    path = folder / Path(ref).name
    if not path.is_file() or path.read_bytes() != data:
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f".{Path(ref).name}.{os.getpid()}.part"
        part.write_bytes(data)
        os.replace(part, path)
    return str(path)


def _with_local_template(config: JudgeConfig, shipped: ShippedTemplate | None) -> JudgeConfig:
    if shipped is None:
        return config
    return dataclasses.replace(config, template=local_template_path(shipped))


@dataclass(frozen=True)
class BackendSpec:
    """How a worker builds its own backend: ``resolve_backend(spec, base_url=..., **options)``.

    Picklable by construction, unlike a live backend (HTTP pools, a loaded model). For
    ``local:`` specs the executor adds ``n_threads`` = the actor's CPUs unless given."""

    spec: str | None = None
    base_url: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> Backend:
        from judge.backends import resolve_backend

        return resolve_backend(self.spec, base_url=self.base_url, **dict(self.options))

    @property
    def is_local(self) -> bool:
        return bool(self.spec) and str(self.spec).strip().lower().startswith("local")


class _Limiter:
    """The cluster-wide call policy (a Ray async actor): one :class:`AdaptiveLimiter`,
    plus which worker holds which slots (a dead worker's slots are given back)."""

    def __init__(self, concurrency: int | None, rpm: float | None, tpm: float | None) -> None:
        self.limiter = AdaptiveLimiter(
            ceiling=concurrency, rpm=rpm, tpm=tpm, clock=time.monotonic, sleep=asyncio.sleep
        )
        self.held: dict[str, list[int]] = {}
        self.dead: set[str] = set()
        self.max_in_flight = 0
        self.pauses = 0
        self.granted = 0  # slots handed out so far
        # The latest pauses as this actor applied them: when, until when (its monotonic
        # clock, shared by every process of the host) and how many slots had been granted
        # by then. No slot is granted inside a pause, so a call that reaches the provider
        # before a pause ends is one of the ``granted`` before it began.
        self.pause_log: list[dict[str, float]] = []

    async def acquire(self, owner: str, tokens: int) -> int:
        epoch = await self.limiter.acquire(tokens)
        self.granted += 1
        if owner in self.dead:
            # Its worker died while this call waited for a slot: nobody will ever release
            # the slot, so give it back at once (kept, it would shrink the window for good).
            self.limiter.release(tokens, None)
            return epoch
        self.held.setdefault(owner, []).append(tokens)
        self.max_in_flight = max(self.max_in_flight, self.limiter.in_flight)
        return epoch

    async def release(self, owner: str, estimate: int, actual: int | None, success: bool = False) -> None:
        """End one of ``owner``'s calls (``success``: and count it for the AIMD window)."""
        held = self.held.get(owner)
        if held:  # else: forgotten already (its worker was declared dead)
            if estimate in held:
                held.remove(estimate)
            else:
                held.pop()
            self.limiter.release(estimate, actual)
        if success:
            self.limiter.on_success()

    async def on_success(self) -> None:
        self.limiter.on_success()

    async def on_rate_limited(self, epoch: int) -> bool:
        return self.limiter.on_rate_limited(epoch)

    async def pause_for(self, seconds: float) -> None:
        self.pauses += 1
        self.limiter.pause_for(seconds)
        entry = {"at": time.monotonic(), "until": self.limiter.resume_at, "granted": float(self.granted)}
        self.pause_log = [*self.pause_log[-99:], entry]

    async def forget(self, owner: str) -> int:
        """Give back every slot ``owner`` (a dead worker) still holds, and every slot its
        calls still waiting here will get; how many it held."""
        self.dead.add(owner)
        held = self.held.pop(owner, [])
        for estimate in held:
            self.limiter.release(estimate, None)
        return len(held)

    async def state(self) -> dict[str, Any]:
        lim = self.limiter
        return {
            "in_flight": lim.in_flight,
            "limit": lim.limit,
            "max_in_flight": self.max_in_flight,
            "pauses": self.pauses,
            "paused_for_s": max(0.0, lim.resume_at - time.monotonic()),
            "granted": self.granted,
            "pause_log": list(self.pause_log),
        }


class _RemoteLimiter:
    """A :class:`~judge.backends.CallLimiter` that forwards to the :class:`_Limiter` actor.

    ``acquire`` waits for the actor; the rest are fire-and-forget (a slot is given back a
    moment after the call ended, never before, so the global bound holds)."""

    def __init__(self, handle: Any, owner: str, counts_tokens: bool, limit: int | None) -> None:
        self._h = handle
        self._owner = owner
        self._counts_tokens = counts_tokens
        self._limit = limit
        self._pending: list[list[Any]] = []

    @property
    def limit(self) -> int | None:
        return self._limit

    @property
    def counts_tokens(self) -> bool:
        return self._counts_tokens

    async def acquire(self, tokens: int) -> int:
        epoch: int = await self._h.acquire.remote(self._owner, tokens)
        return epoch

    def release(self, estimate: int, actual_tokens: int | None) -> None:
        # Sent on the next loop turn, with on_success (called right after a success) folded
        # in: one message per call instead of two.
        self._pending.append([estimate, actual_tokens, False])
        if len(self._pending) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def on_success(self) -> None:
        if self._pending:
            self._pending[-1][2] = True
        else:
            self._h.on_success.remote()

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for estimate, actual, success in pending:
            self._h.release.remote(self._owner, estimate, actual, success)

    def on_rate_limited(self, epoch: int) -> bool:
        self._h.on_rate_limited.remote(epoch)
        return False  # the limiter actor decides (and halves once per episode)

    def pause_for(self, seconds: float) -> None:
        self._h.pause_for.remote(seconds)


class _Worker:
    """One judging worker (a Ray async actor) with its own resilient backend."""

    def __init__(
        self,
        owner: str,
        spec: BackendSpec | None,
        pickled: bytes | None,
        limiter: Any,
        policy: CallPolicy,
    ) -> None:
        inner: Backend = spec.build() if spec is not None else pickle.loads(pickled or b"")
        self.owner = owner
        # The cluster's limiter holds the concurrency and rate limits; the rest of the
        # policy (retries, timeout, prices) applies in each worker.
        self.backend = ResilientBackend(
            inner,
            max_retries=policy.max_retries,
            timeout_s=policy.timeout_s,
            limiter=_RemoteLimiter(limiter, owner, bool(policy.tpm), policy.ceiling()),
        )

    async def ready(self) -> dict[str, Any]:
        """Where this actor runs (its node's id and address) and what it judges with."""
        import ray

        return {
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "backend": self.backend.name,
            "params": self.backend.params(),
        }

    async def judge_one(
        self,
        query: str,
        index: int,
        passage: Passage,
        config: JudgeConfig,
        template: ShippedTemplate | None = None,
        examples: tuple[Example, ...] = (),
    ) -> tuple[PassageVerdict | BaseException, BackendStats]:
        from judge.judging import judge_passage

        try:
            config = _with_local_template(config, template)
            verdict: PassageVerdict | BaseException = await judge_passage(
                self.backend, query, passage, index, config, examples=examples
            )
        except Exception as exc:  # returned, re-raised by the driver as itself
            verdict = exc
        return verdict, self.backend.stats

    async def judge_list(
        self,
        query: str,
        passages: list[Passage],
        config: JudgeConfig,
        template: str | None,
        shipped: tuple[ShippedTemplate | None, ShippedTemplate | None] = (None, None),
    ) -> tuple[list[PassageVerdict] | BaseException, BackendStats]:
        from judge.judging import judge_listwise

        try:
            config = _with_local_template(config, shipped[0])
            if shipped[1] is not None:
                template = local_template_path(shipped[1])
            result = await judge_listwise(self.backend, query, passages, config, template=template)
            found: list[PassageVerdict] | BaseException = result.verdicts
        except Exception as exc:
            found = exc
        return found, self.backend.stats

    async def aclose(self) -> None:
        await self.backend.aclose()
