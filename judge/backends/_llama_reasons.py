"""Batched reasons of the embedded judge: the KV states kept after probability passes and the
reasons decoded together over them in a second llama.cpp context.

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
import ctypes
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from judge.backends._base import ChatRequest, Completion, PermanentError, RequestError, Usage
from judge.backends._llama_model import DEFAULT_MAX_TOKENS, LlamaModel, LocalCallStats, PendingReason

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["BatchedReasons"]


class BatchedReasons(LlamaModel):
    """The model with its batched reasons: a probability pass keeps its KV state for the
    reason that may follow, and waiting reasons are decoded together."""

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

    def _batchable(self, request: ChatRequest) -> PendingReason | None:
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
                return PendingReason(request, tokens, kept, state, future, max_tokens)
        return None

    async def _await_batched(self, pending: PendingReason) -> Completion:
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
        batch: list[PendingReason] = []
        budget = self.n_ctx
        for pending in list(self._pending):
            need = len(pending.tokens) + pending.max_tokens
            if len(batch) == self.reason_batch or (batch and need > budget):
                break
            batch.append(pending)
            budget -= need
            self._pending.remove(pending)
        self._flush_task = asyncio.ensure_future(self._flush(batch))

    async def _flush(self, batch: list[PendingReason]) -> None:
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

    def _reasons_blocking(self, batch: list[PendingReason]) -> list[Completion]:
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
