"""The Ray engine: an :class:`~judge.batch._executor.Executor` whose passages are judged by
a pool of Ray actors (``judge score --engine ray``). It fans a query out as the local
engine does (:class:`~judge.batch.FanOutExecutor`), with actor calls as its calls.

Shape (there is still one batch driver, in the driver process):

* the **driver** (:class:`~judge.batch._driver.BatchDriver`) plans, looks every passage up
  in the verdict store (hits never reach Ray), hands the misses of each query to
  :class:`RayExecutor`, and commits: each verdict goes into the one SQLite cache the moment
  it comes back, the query's line into the output file, the summary at the end. Workers
  never see the cache or the output: they may run on machines that cannot share one SQLite
  file, and a driver killed with ``kill -9`` loses only the calls in flight (its actors die
  with it; the cache holds everything that came back);
* **judging workers** are long-lived actors (:class:`_Worker`), each with its own backend
  built from a picklable :class:`BackendSpec` (or a pickled backend object): an HTTP client
  for a remote provider, or for the embedded model one model per actor whose llama.cpp
  threads match the actor's ``num_cpus``. The executor sends one passage per actor call
  (one query per call when listwise) to the least busy actor, at most
  ``ceil(window / workers)`` per actor; verdicts stream back as they finish;
* **one limiter actor** (:class:`_Limiter`, async) holds the cluster-wide call policy: an
  :class:`~judge.backends.AdaptiveLimiter` with ``concurrency`` slots (AIMD on 429) and the
  rpm/tpm buckets. Every worker's :class:`~judge.backends.ResilientBackend` acquires a slot
  from it before each provider call and releases it after (:class:`_RemoteLimiter`); a
  429's ``Retry-After`` seen by any worker pauses every worker (the limiter's
  pause-until). Retries, timeouts and cost accounting stay in each worker's wrapper.

Worker failure: a call whose actor died (killed, node lost) is asked again on another
actor; the dead actor's slots are returned to the limiter and a replacement is started,
at most ``max_worker_restarts`` times in a run. Past that budget, or with no live actor
left, the run fails with :class:`WorkerLostError`; queries already committed stay
committed and every verdict already returned is in the cache.

Ray is imported lazily: the rest of ``judge`` never needs it (extra ``judge[ray]``).
The actors themselves (workers, limiter) and what is shipped to them are in
:mod:`judge.batch._ray_actors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

from judge.backends import (
    DEFAULT_MAX_RETRIES,
    Backend,
    BackendStats,
    ConfigurationError,
    PermanentError,
    ResilientBackend,
)
from judge.batch._executor import FanOutExecutor, PassageJob
from judge.batch._ray_actors import (
    BackendSpec,
    ShippedTemplate,
    _Limiter,
    _Worker,
    read_template_file,
)
from judge.batch._run_spec import RunSpec, run_spec
from judge.judging import JudgeConfig, Passage, PassageVerdict

__all__ = ["BackendSpec", "RayExecutor", "WorkerLostError", "ray_available"]

# Environment a worker needs to resolve the same backend as the driver (keys, endpoints).
_FORWARDED_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "DASHSCOPE_API_KEY",
    "JUDGE_BACKEND",
    "JUDGE_HOME",
    "DEEPEVAL_TELEMETRY_OPT_OUT",
    "DEEPEVAL_FILE_SYSTEM",
    "DEEPEVAL_DISABLE_DOTENV",
)


# How long to wait before asking again after an actor was unreachable for a moment.
_UNAVAILABLE_PAUSE_S = 0.2
# Unavailable answers in a row after which an actor counts as lost (a minute for one call
# asking again every 0.2 s; sooner when several of its calls are asking).
_UNAVAILABLE_LIMIT = 300
#: How long the driver waits for the limiter actor to answer when a worker could not reach
#: it, before it gives the run up as lost (the head or the driver's node is gone).
LIMITER_CHECK_S = 10.0


class WorkerLostError(PermanentError, RuntimeError):
    """Judging workers died more often than the run allows, none is left, or the cluster
    itself is gone (its head lost): asking again in this run will not help. A
    :class:`~judge.backends.PermanentError`, so the run stops at once (the CLI: ``judge:
    backend error: ...``, exit 3), keeping every query written and every verdict cached."""


def ray_available() -> bool:
    """Whether ``ray`` can be imported (``pip install 'judge[ray]'``)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigurationError(
            "the Ray engine needs ray: pip install 'judge[ray]' (or pip install 'ray[data]')"
        ) from None
    return ray


def _cluster_events_to_stderr(ray: Any) -> None:
    """Ray prints the cluster's events (a node marked dead, an actor lost) on the driver's
    stdout, where ``judge score`` writes its summary: send them to stderr. The printer is
    looked up by name each time, so replacing it is enough; a Ray without it is left as is."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    printer = getattr(worker, "print_to_stdstream", None)
    if worker is None or printer is None or getattr(printer, "to_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def _ship(backend: BackendSpec | str | Backend) -> tuple[BackendSpec | None, bytes | None]:
    """(spec, None) for a spec or spec string; (None, pickled backend) for an object that
    pickles; a clear error for one that does not."""
    if isinstance(backend, str):
        return BackendSpec(backend), None
    if isinstance(backend, BackendSpec):
        return backend, None
    try:
        import cloudpickle  # shipped with ray

        return None, cloudpickle.dumps(backend)
    except Exception as exc:
        raise ConfigurationError(
            f"backend {type(backend).__name__} cannot be shipped to Ray workers ({type(exc).__name__}: "
            f"{exc}); give a spec instead (e.g. 'openai:<model>' with base_url, 'local:<model>')"
        ) from None


@dataclass
class _Slot:
    owner: str
    handle: Any
    busy: int = 0
    alive: bool = True
    unavailable: int = 0  # ActorUnavailableError answers in a row
    node_id: str | None = None  # where Ray placed it (known once it is ready)
    node_ip: str | None = None
    batches: int = 0  # actor calls answered (a passage each; a query each when listwise)
    passages: int = 0


class RayExecutor(FanOutExecutor):
    """Judges passages on a pool of Ray actors; see the module docstring.

    ``backend``: a :class:`BackendSpec`, a spec string (``openai:<model>``, ``local:...``),
    or a backend object that pickles (a :class:`ResilientBackend` is unwrapped; its
    ``max_retries``/``timeout_s`` are kept unless the spec's policy sets them). ``spec``:
    the run's :class:`~judge.batch.RunSpec`, taken as is: ``workers`` judging actors,
    ``worker_cpus`` each (the actor's ``num_cpus`` and the embedded model's threads),
    the policy's concurrency and rpm/tpm as the global limits (one limiter actor; its
    concurrency is the cluster's: :meth:`RunSpec.for_backend` makes it concrete),
    ``window`` passages handed to actors at once (default ``2 * concurrency``),
    ``address`` the cluster (``None``/``"local"``: start a local one unless Ray is already
    initialised; ``"auto"`` or ``HOST:PORT``: join). The keywords ``workers``,
    ``cpus_per_worker``, ``concurrency``, ``rpm``, ``tpm``, ``max_retries``, ``timeout_s``,
    ``window`` and ``address`` are laid over ``spec`` through the same resolution
    (:func:`~judge.batch.run_spec`; None: not given). ``max_worker_restarts``: replacement
    actors a run may start (default ``workers``). ``ready_timeout_s``: how long to wait for
    the actors to be placed. The executor starts Ray on first use; :meth:`aclose` kills its
    actors (and shuts Ray down if it started it).
    """

    def __init__(
        self,
        backend: BackendSpec | str | Backend,
        spec: RunSpec | None = None,
        *,
        workers: int | None = None,
        cpus_per_worker: float | None = None,
        concurrency: int | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
        max_retries: int | None = None,
        timeout_s: float | None = None,
        window: int | None = None,
        address: str | None = None,
        max_worker_restarts: int | None = None,
        ready_timeout_s: float = 120.0,
    ) -> None:
        if isinstance(backend, ResilientBackend):
            if max_retries is None and (spec is None or spec.policy.max_retries == DEFAULT_MAX_RETRIES):
                max_retries = backend.max_retries
            if timeout_s is None and (spec is None or spec.policy.timeout_s is None):
                timeout_s = backend.timeout_s
            backend = backend.inner
        spec = run_spec(
            spec,
            engine="ray",
            workers=workers,
            worker_cpus=cpus_per_worker,
            concurrency=concurrency,
            rpm=rpm,
            tpm=tpm,
            max_retries=max_retries,
            timeout_s=timeout_s,
            window=window,
            address=address,
        )
        shipped, pickled = _ship(backend)
        if shipped is not None and shipped.is_local and "n_threads" not in shipped.options:
            threads = max(1, int(spec.worker_cpus))
            shipped = BackendSpec(
                shipped.spec, shipped.base_url, {**dict(shipped.options), "n_threads": threads}
            )
        self.run_spec = spec
        self.spec = shipped
        self._pickled = pickled
        self.workers = spec.workers
        self.cpus_per_worker = spec.worker_cpus
        self.concurrency = spec.policy.ceiling()
        self.window = spec.window if spec.window is not None else 2 * self.concurrency
        self.per_worker = max(1, math.ceil(self.window / self.workers))
        self.policy = spec.policy
        self.address = spec.address
        self.max_worker_restarts = self.workers if max_worker_restarts is None else max_worker_restarts
        self.ready_timeout_s = ready_timeout_s
        self.restarts = 0
        self.reasked = 0
        self._ray: Any = None
        self._started_ray = False
        self._limiter: Any = None
        self._slots: list[_Slot] = []
        self._numbered = 0
        self._changed: asyncio.Condition | None = None
        self._start_lock: asyncio.Lock | None = None
        self._stats: dict[str, BackendStats] = {}
        self._placing: set[asyncio.Task[None]] = set()
        self._templates: dict[str, ShippedTemplate | None] = {}

    @property
    def name(self) -> str:
        return "ray"

    # -- start / stop -------------------------------------------------------------------------

    def _runtime_env(self) -> dict[str, Any]:
        env = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
        return {"env_vars": env} if env else {}

    async def start(self) -> None:
        """Start (or join) Ray, the limiter actor and the workers; idempotent."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
            self._changed = asyncio.Condition()
        async with self._start_lock:
            if self._limiter is not None:
                return
            ray = _import_ray()
            self._ray = ray
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            if not ray.is_initialized():
                local = self.address in (None, "", "local")
                ray.init(
                    address=None if local else self.address,
                    include_dashboard=False if local else None,
                    log_to_driver=False,
                    configure_logging=False,
                )
                self._started_ray = True
            _cluster_events_to_stderr(ray)
            # The limiter is the run's state: it lives on the driver's node, so that losing
            # any other host never loses it (a worker host's loss costs only its actors).
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            limiter_cls = ray.remote(num_cpus=0, max_concurrency=10_000)(_Limiter)
            policy = self.policy
            self._limiter = limiter_cls.options(scheduling_strategy=here).remote(
                policy.ceiling(), policy.rpm, policy.tpm
            )
            await self._within_ready_timeout(
                self._limiter.state.remote(),
                f"the Ray limiter actor did not start within {self.ready_timeout_s:g} s: is the "
                "cluster healthy (ray status)?",
            )
            new = [self._spawn() for _ in range(self.workers)]
            await self._await_ready(new)

    def _spawn(self) -> _Slot:
        ray = self._ray
        self._numbered += 1
        owner = f"w{self._numbered}"
        worker_cls = ray.remote(num_cpus=self.cpus_per_worker, max_concurrency=max(64, 4 * self.per_worker))(
            _Worker
        )
        # SPREAD: the actors go to as many nodes as have room (a host lost costs a share).
        options: dict[str, Any] = {"scheduling_strategy": "SPREAD"}
        runtime_env = self._runtime_env()
        if runtime_env:
            options["runtime_env"] = runtime_env
        handle = worker_cls.options(**options).remote(
            owner, self.spec, self._pickled, self._limiter, self.policy
        )
        slot = _Slot(owner, handle)
        self._slots.append(slot)
        return slot

    async def _within_ready_timeout(self, started: Awaitable[Any], message: str) -> None:
        """Await an actor's start-up for at most ``ready_timeout_s``; past it, WorkerLostError."""
        try:
            async with asyncio.timeout(self.ready_timeout_s):
                await started
        except TimeoutError:
            raise WorkerLostError(message) from None

    async def _await_ready(self, slots: Sequence[_Slot]) -> None:
        async def placed() -> None:
            found = await asyncio.gather(*(s.handle.ready.remote() for s in slots))
            for slot, info in zip(slots, found, strict=True):
                slot.node_id, slot.node_ip = info.get("node_id"), info.get("node_ip")

        await self._within_ready_timeout(
            placed(),
            f"{len(slots)} Ray worker(s) with num_cpus={self.cpus_per_worker:g} were not placed within "
            f"{self.ready_timeout_s:g} s: does the cluster have the CPUs (ray status)?",
        )

    async def aclose(self) -> None:
        """Close the workers' backends, kill the actors; shut Ray down if we started it."""
        ray = self._ray
        if ray is None:
            return
        for task in list(self._placing):
            task.cancel()
        live = [s for s in self._slots if s.alive]
        if live:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await asyncio.gather(*(s.handle.aclose.remote() for s in live), return_exceptions=True)
        for s in self._slots:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(s.handle)
        if self._limiter is not None:
            with contextlib.suppress(Exception):
                ray.kill(self._limiter)
        self._slots = []
        self._limiter = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
        self._ray = None

    # -- accounting -----------------------------------------------------------------------------

    @property
    def stats(self) -> BackendStats:
        """The workers' backend counters, summed (the latest snapshot of each, dead ones
        included): read by the summary and progress like a local backend's stats."""
        return BackendStats.total(self._stats.values())

    def _keep_stats(self, owner: str, snap: BackendStats) -> None:
        mine = self._stats.get(owner)
        self._stats[owner] = snap if mine is None else mine.merge(snap)

    async def limiter_state(self) -> dict[str, Any]:
        """The limiter actor's state (in flight, window, most ever in flight, pauses)."""
        if self._limiter is None:
            return {}
        state: dict[str, Any] = await self._limiter.state.remote()
        return state

    def placement(self) -> dict[str, Any]:
        """Which node judged what, for the run's summary (``this_run.ray``): per node (by
        address) its Ray node id, its actors, and the batches (actor calls: a passage
        each, a query each when listwise) and passages they answered; per actor its node;
        the replacements started and the calls asked again after an actor was lost."""
        nodes: dict[str, dict[str, Any]] = {}
        workers: dict[str, dict[str, Any]] = {}
        for s in self._slots:
            ip = s.node_ip or "unplaced"
            node = nodes.setdefault(ip, {"node_id": s.node_id, "workers": [], "batches": 0, "passages": 0})
            node["workers"].append(s.owner)
            node["batches"] += s.batches
            node["passages"] += s.passages
            workers[s.owner] = {"node_ip": s.node_ip, "alive": s.alive, "batches": s.batches}
        return {"nodes": nodes, "workers": workers, "restarts": self.restarts, "reasked": self.reasked}

    def worker_handles(self) -> list[Any]:
        """The live actors (tests kill one to check failover)."""
        return [s.handle for s in self._slots if s.alive]

    # -- dispatch -------------------------------------------------------------------------------

    async def _take(self) -> _Slot:
        assert self._changed is not None
        async with self._changed:
            while True:
                live = [s for s in self._slots if s.alive]
                if not live:
                    raise WorkerLostError("every Ray judging worker died")
                best = min(live, key=lambda s: s.busy)
                if best.busy < self.per_worker:
                    best.busy += 1
                    return best
                await self._changed.wait()

    async def _give(self, slot: _Slot) -> None:
        assert self._changed is not None
        async with self._changed:
            slot.busy -= 1
            self._changed.notify_all()

    async def _lost(self, slot: _Slot, exc: BaseException) -> None:
        """``slot``'s actor died: give its limiter slots back, start a replacement (within
        the budget)."""
        assert self._changed is not None
        if not slot.alive:
            return
        slot.alive = False
        with contextlib.suppress(Exception):
            await self._limiter.forget.remote(slot.owner)
        if self.restarts >= self.max_worker_restarts:
            async with self._changed:
                self._changed.notify_all()
            if not any(s.alive for s in self._slots):
                raise WorkerLostError(f"every Ray judging worker died (last: {exc})") from None
            return
        self.restarts += 1
        fresh = self._spawn()
        fresh.busy = self.per_worker  # not handed work until it is ready
        # Placed in the background: the live actors go on meanwhile. A lost host's CPUs may
        # be gone for good; a replacement that finds no room within ``ready_timeout_s`` is
        # dropped, and the run ends on the actors it has (an error only if none is left).
        task = asyncio.ensure_future(self._place(fresh))
        self._placing.add(task)
        task.add_done_callback(self._placing.discard)

    async def _place(self, fresh: _Slot) -> None:
        assert self._changed is not None
        try:
            await self._await_ready([fresh])
        except Exception:  # not placed in time, or died starting
            fresh.alive = False
            with contextlib.suppress(Exception):
                self._ray.kill(fresh.handle)
            with contextlib.suppress(Exception):
                await self._limiter.forget.remote(fresh.owner)
        finally:
            async with self._changed:
                fresh.busy = 0
                self._changed.notify_all()

    async def _call(self, method: str, *args: Any) -> Any:
        """Run ``method`` on the least busy live actor; on a dead actor, again on another.

        ``ActorUnavailableError`` (an actor Ray cannot reach for now, e.g. a node under heavy
        load, which may come back) asks again without declaring the actor dead: replacing a
        live actor would leave two running where the run asked for one. Ray raises
        ``ActorDiedError`` once it knows the actor is gone, and that is what starts a
        replacement."""
        ray = self._ray
        while True:
            slot = await self._take()
            try:
                result, snap = await getattr(slot.handle, method).remote(*args)
            except ray.exceptions.RayActorError as exc:  # ActorUnavailableError is one too
                await self._give(slot)
                self.reasked += 1
                if isinstance(exc, ray.exceptions.ActorUnavailableError):
                    slot.unavailable += 1
                    if slot.unavailable < _UNAVAILABLE_LIMIT:
                        await asyncio.sleep(_UNAVAILABLE_PAUSE_S)
                        continue
                await self._lost(slot, exc)
                continue
            await self._give(slot)
            slot.unavailable = 0
            if isinstance(result, ray.exceptions.RayError):
                # Raised inside the worker by its one Ray call, to the limiter actor.
                await self._check_limiter(slot, result)
                self.reasked += 1
                continue
            slot.batches += 1
            slot.passages += len(args[1]) if method == "judge_list" else 1
            self._keep_stats(slot.owner, snap)
            if isinstance(result, BaseException):
                raise result
            return result

    async def _check_limiter(self, slot: _Slot, exc: BaseException) -> None:
        """A worker could not reach the limiter actor: ask it from here, within
        :data:`LIMITER_CHECK_S`. It answers: a passing fault, the call is asked again. It does
        not: the limiter is gone with the driver's node or the cluster's head, and no call
        can be made within the run's limits any more: :class:`WorkerLostError`."""
        try:
            async with asyncio.timeout(LIMITER_CHECK_S):
                await self._limiter.state.remote()
        except Exception as lost:
            raise WorkerLostError(
                f"the Ray cluster is lost: the run's limiter actor (on the driver's node) does not "
                f"answer ({type(lost).__name__}; worker {slot.owner} on {slot.node_ip}: "
                f"{type(exc).__name__}); is the head node down? Every verdict returned so far is "
                "in the cache and every finished query in the output: once the cluster is back, run "
                "the same command again to judge only what is missing"
            ) from None

    async def judge_one(self, query: str, job: PassageJob, config: JudgeConfig) -> PassageVerdict:
        shipped = self._template(config.template)
        # the examples only when there are some: a zero-shot call is the same call as before
        # they existed (a worker of an older judge on the cluster still answers it)
        extra = (job.examples,) if job.examples else ()
        verdict: PassageVerdict = await self._call(
            "judge_one", query, job.index, job.passage, config, shipped, *extra
        )
        return verdict

    def _template(self, ref: str | None) -> ShippedTemplate | None:
        """A template file's bytes, read once per run on the driver (see
        :func:`read_template_file`): the workers get the template itself, not a path."""
        if not ref:
            return None
        if ref not in self._templates:
            self._templates[ref] = read_template_file(ref)
        return self._templates[ref]

    async def judge_list(
        self, query: str, passages: list[Passage], config: JudgeConfig, template: str | None
    ) -> list[PassageVerdict]:
        shipped = (self._template(config.template), self._template(template))
        found: list[PassageVerdict] = await self._call(
            "judge_list", query, passages, config, template, shipped
        )
        return found
