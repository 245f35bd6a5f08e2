"""A stand-in for llama-cpp-python under :class:`~judge.backends._local.LocalBackend`: no
model, no native code, every answer known in advance.

* :class:`FakeLlama` tokenises one character per token (so a reason's prompt always extends
  its probability prompt token by token, as Qwen's tokeniser does for the judge's JSON),
  evaluates by appending to ``input_ids`` and answers every probability pass with ``yes``.
* :func:`fake_llama_cpp` is a module object with the C functions the backend calls (KV
  state copy, the batched-reasons context and ``llama_decode``); the reason context writes
  ``REASON_WORDS`` tokens per sequence, then the end-of-generation token.
* :func:`install` puts both in place on a backend (``sys.modules["llama_cpp"]`` via
  ``monkeypatch``) and replaces ``asyncio.to_thread`` by a coroutine that runs the work on
  the event loop once its request's gate (an :class:`asyncio.Event`) is open: a test decides
  the interleaving of calls with events, never with timing.
"""

from __future__ import annotations

import asyncio
import ctypes
import struct
import types
from collections.abc import Callable
from typing import Any

import pytest

from judge.backends import ChatRequest
from judge.backends._local import LocalBackend

N_VOCAB = 256
EOG = 0
REASON_WORDS = 3  # tokens generated per reason before the end-of-generation token


class _Params(ctypes.Structure):
    _fields_ = [
        ("n_seq_max", ctypes.c_uint32),
        ("kv_unified", ctypes.c_bool),
        ("n_threads", ctypes.c_int32),
        ("n_threads_batch", ctypes.c_int32),
    ]


def _logits(best: int) -> Any:
    """A pointer to ``N_VOCAB`` float logits whose largest is ``best``."""
    row = (ctypes.c_float * N_VOCAB)()
    row[best] = 10.0
    return ctypes.cast(row, ctypes.POINTER(ctypes.c_float)), row


class FakeLlama:
    """Just what LocalBackend touches of ``llama_cpp.Llama``."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.input_ids: list[int] = []
        self.evaluated = 0  # tokens evaluated by eval() over the fake's life
        self.ctx = object()
        self.model = object()
        self.context_params = _Params(1, False, 1, 1)
        self.metadata: dict[str, str] = {}
        self._keepalive: list[Any] = []
        self.on_eval: Callable[[], None] = lambda: None  # called before every eval()

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    @n_tokens.setter
    def n_tokens(self, value: int) -> None:
        del self.input_ids[value:]

    def token(self, char: str) -> int:
        if char not in self.vocab:
            self.vocab[char] = len(self.vocab) + 1  # 0 is EOG
            if len(self.vocab) >= N_VOCAB:
                raise AssertionError("the fake vocabulary is full")
        return self.vocab[char]

    def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return [self.token(c) for c in text.decode("utf-8")]

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None) -> bytes:
        chars = {v: k for k, v in self.vocab.items()}
        return "".join(chars[t] for t in tokens).encode("utf-8")

    def eval(self, tokens: list[int]) -> None:
        self.on_eval()
        self.input_ids.extend(tokens)
        self.evaluated += len(tokens)

    def n_vocab(self) -> int:
        return N_VOCAB

    def reset(self) -> None:
        self.input_ids.clear()

    def close(self) -> None:
        return None

    def main_logits(self) -> Any:
        pointer, row = _logits(self.token("y"))  # every probability pass: "yes"
        self._keepalive = [row]
        return pointer

    def create_completion(self, prompt: list[int], max_tokens: int, **_: Any) -> dict[str, Any]:
        """The sequential reason: the same words the batched context writes."""
        self.input_ids[:] = list(prompt)
        text = "w" * min(REASON_WORDS, max_tokens)
        choice = {"text": text, "finish_reason": "stop"}
        return {"choices": [choice], "usage": {"completion_tokens": len(text) + 1}}


class _Batch:
    def __init__(self, n: int) -> None:
        self.token = [0] * n
        self.pos = [0] * n
        self.n_seq_id = [0] * n
        self.seq_id = [[0] for _ in range(n)]
        self.logits = [False] * n
        self.n_tokens = 0


class _ReasonContext:
    def __init__(self) -> None:
        self.decodes: dict[int, int] = {}  # sequence -> decode steps with its logits
        self.rows: dict[int, int] = {}  # batch row -> its sequence
        self.keepalive: list[Any] = []


def fake_llama_cpp(llm: FakeLlama) -> types.ModuleType:
    """The C functions LocalBackend calls, over ``llm``."""
    mod = types.ModuleType("llama_cpp")

    def get_size(ctx: Any, seq: int) -> int:
        return 8

    def get_data(ctx: Any, buffer: Any, size: int, seq: int) -> int:
        packed = struct.pack("<q", llm.n_tokens)
        ctypes.memmove(buffer, packed, len(packed))
        return size

    def set_data(ctx: _ReasonContext, buffer: Any, size: int, seq: int) -> int:
        ctx.decodes[seq] = 0
        return size

    def decode(ctx: _ReasonContext, batch: _Batch) -> int:
        ctx.rows = {}
        for row in range(batch.n_tokens):
            if batch.logits[row]:
                seq = batch.seq_id[row][0]
                ctx.decodes[seq] += 1
                ctx.rows[row] = seq
        return 0

    def logits_ith(ctx: Any, row: int) -> Any:
        if ctx is llm.ctx:
            return llm.main_logits()
        seq = ctx.rows[row]
        pointer, data = _logits(EOG if ctx.decodes[seq] > REASON_WORDS else llm.token("w"))
        ctx.keepalive.append(data)
        return pointer

    functions: dict[str, Callable[..., Any]] = {
        "llama_state_seq_get_size": get_size,
        "llama_state_seq_get_data": get_data,
        "llama_state_seq_set_data": set_data,
        "llama_init_from_model": lambda model, params: _ReasonContext(),
        "llama_batch_init": lambda n, embd, n_seq: _Batch(n),
        "llama_batch_free": lambda batch: None,
        "llama_free": lambda ctx: None,
        "llama_get_memory": lambda ctx: ctx,
        "llama_memory_clear": lambda memory, data: None,
        "llama_model_get_vocab": lambda model: None,
        "llama_vocab_is_eog": lambda vocab, token: token == EOG,
        "llama_decode": decode,
        "llama_get_logits_ith": logits_ith,
    }
    for name, fn in functions.items():
        setattr(mod, name, fn)
    return mod


class _Rendered:
    def __init__(self, prompt: str) -> None:
        self.prompt = prompt


def _formatter(messages: list[dict[str, str]]) -> _Rendered:
    text = "".join(f"<{m['role']}>{m['content']}</>" for m in messages)
    return _Rendered(text + "<assistant>")


class Gates:
    """Which requests wait before their (fake) llama.cpp work runs: ``close(request)``
    makes that request's work wait until ``open(request)``."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}
        self.rounds = 0  # event-loop rounds every piece of work lets pass first (a slow model)

    def close(self, request: ChatRequest) -> None:
        self._events[id(request)] = asyncio.Event()

    def open(self, request: ChatRequest) -> None:
        self._events[id(request)].set()

    async def to_thread(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        await settle(self.rounds)
        for arg in args:
            if isinstance(arg, ChatRequest) and id(arg) in self._events:
                await self._events[id(arg)].wait()
        return fn(*args, **kwargs)


def install(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeLlama, Gates]:
    """Give ``backend`` a loaded fake model and run its llama.cpp work on the event loop
    (without machine-wide turns: tests that want them set ``backend._turns``)."""
    llm = FakeLlama()
    backend._turns = None
    monkeypatch.setitem(__import__("sys").modules, "llama_cpp", fake_llama_cpp(llm))
    gates = Gates()
    monkeypatch.setattr(asyncio, "to_thread", gates.to_thread)
    backend._llm = llm  # type: ignore[assignment]
    backend._formatter = _formatter  # type: ignore[assignment]
    return llm, gates


async def settle(rounds: int = 20) -> None:
    """Let every task that can run reach its next wait (no thread is involved)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
