"""The embedded judge's model: loading the GGUF, rendering a chat into tokens, evaluating a
prompt in aligned blocks over the KV cache it keeps, the candidate tokens of a probability
and the grammar of a JSON schema. How a call runs over it is told in
:mod:`judge.backends._local` (:class:`~judge.backends._local.LocalBackend` is this model plus
the call protocol and the batched reasons of :mod:`judge.backends._llama_reasons`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judge.backends._base import (
    ChatRequest,
    Completion,
    ConfigurationError,
    PermanentError,
    RequestError,
)
from judge.backends._llama_build import kernel_features, refuse_crashing_kernels
from judge.backends._model_file import (
    DEFAULT_MODEL,
    DEFAULT_REASON_BATCH,
    EMBEDDED_BACKEND,
    ModelFileError,
    ensure_model,
    verify_model,
)
from judge.backends._model_turns import MachineTurns, default_threads

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    from llama_cpp.llama_grammar import LlamaGrammar

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_NAME",
    "EVAL_BLOCK",
    "LlamaModel",
    "LocalCallStats",
    "PendingReason",
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


@dataclass(eq=False)
class PendingReason:
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


class LlamaModel:
    """The model under :class:`~judge.backends._local.LocalBackend` (its settings are
    described there) and the state every call shares: the KV cache, the locks, the kept
    states and waiting reasons of the batched reasons."""

    max_concurrency: int | None = 1  # per instance: ``reason_batch``

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
        self._pending: list[PendingReason] = []
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

    # --- the model, its prompt and its KV cache -------------------------------------------

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

    def _turn(self) -> contextlib.AbstractContextManager[None]:
        """This machine's turn for llama.cpp work (none without ``machine_turns``)."""
        return self._turns.turn() if self._turns is not None else contextlib.nullcontext()

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
