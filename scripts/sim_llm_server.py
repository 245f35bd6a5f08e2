#!/usr/bin/env python
"""A simulated OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

It does not import ``judge``. It answers ``POST /v1/chat/completions`` (and
``/chat/completions``) like a slow, faulty LLM provider:

* latency: each accepted request waits ``latency_ms`` +/- uniform ``jitter_ms``;
* capacity: more than ``capacity`` requests in flight -> immediate HTTP 429 with
  ``Retry-After: <retry_after_s>`` (a hung request keeps its slot until its client gives up);
* faults, drawn per request from a seeded RNG: ``error_rate`` HTTP 500s, ``garbage_rate``
  HTTP 200 replies whose content is not JSON, ``hang_rate`` requests never answered
  (held ``hang_s`` seconds or until the client gives up);
* a held prompt: every request whose prompt contains ``hold_marker`` (when set) hangs like
  that, so a test can keep one chosen passage unanswered for as long as it needs;
* harmless extras, chosen per prompt (a hash of it, so a repeated prompt gets the same
  reply): ``extra_key_rate`` of the judge replies carry one key the schema does not ask for
  (``"grade": 0`` on a binary verdict, ``"verdict": "no"`` on a graded one), and
  ``null_reason_rate`` of them have ``"reason": null``. A judge should accept both (the
  verdict is valid) and re-ask neither.

It names itself ``simulated-judge`` everywhere (``GET /v1/models`` and the ``model`` of
every reply, whatever the request named): point the judge at it as
``--backend openai:simulated-judge --base-url http://127.0.0.1:PORT/v1`` so that what the
judge shows (``/v1/info``, the viewer, a run's summary) names it as simulated too.

Replies are deterministic functions of the prompt. A passage may carry a marker
``<rel=N>`` (N in 0..3) that fixes its grade; without one the grade is a hash of the text
(the text between ``<passage>`` and ``</passage>`` when the prompt has such a block).
Binary verdict: yes iff grade >= 2. It recognises three prompt kinds:

* ``judge`` (anything else): ``{"verdict": "yes"|"no", "reason": ...}``, or
  ``{"grade": N, "reason": ...}`` when the request's JSON schema (``response_format``) or
  the prompt asks for a ``grade``;
* ``deepeval_verdicts`` (deepeval ContextualRelevancyMetric's per-context prompt):
  ``{"verdicts": [{"statement": ..., "verdict": ...}]}`` judged on the ``Context:`` text;
* ``deepeval_reason``: ``{"reason": ...}``.

Observability: every request that reached the handler is one JSON line in ``--log``
(``n``, ``t``, ``kind``, ``key`` = SHA-256 prefix of the prompt, ``outcome`` = ok | 429 |
500 | garbage | hang, ``peer`` = the client's address), written and flushed when the request
arrives; ``GET /stats`` returns counters (total, per outcome, per client address, in flight,
max in flight, repeated keys) and
``utilization``: the time-averaged number of requests in flight between the first arrival
and the last reply, divided by the capacity (how busy the client kept the server), with
``mean_service_s`` the measured time to answer an ok request; ``POST /config`` with a
JSON object changes latency/fault settings at run time (e.g. turn faults off);
``POST /reset`` zeroes the counters.

Run: ``python scripts/sim_llm_server.py --port 0 --latency-ms 500 --capacity 64``. It prints
``READY http://127.0.0.1:<port>/v1`` on stdout once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from typing import IO, Any

from aiohttp import web

_MARKER = re.compile(r"<rel=([0-3])>")
_PASSAGE = re.compile(r"<passage>\n(.*?)\n</passage>", re.DOTALL)


@dataclass
class SimConfig:
    latency_ms: float = 50.0
    jitter_ms: float = 10.0
    capacity: int = 64
    retry_after_s: float = 1.0
    error_rate: float = 0.0
    garbage_rate: float = 0.0
    hang_rate: float = 0.0
    hang_s: float = 3600.0
    hold_marker: str = ""  # a prompt containing it hangs (a chosen passage never answered)
    extra_key_rate: float = 0.0
    null_reason_rate: float = 0.0
    seed: int = 0
    model: str = "simulated-judge"  # its only model, named so nothing mistakes it for a paid one


def grade_of(text: str) -> int:
    """The deterministic grade of a passage (or of a whole prompt)."""
    m = _MARKER.findall(text)
    if m:
        return int(m[-1])
    return hashlib.sha256(text.encode("utf-8")).digest()[0] % 4


def _prompt_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "\n".join(parts)


def _schema_props(body: dict[str, Any]) -> set[str]:
    rf = body.get("response_format")
    if not isinstance(rf, dict):
        return set()
    schema = rf.get("json_schema", {})
    if isinstance(schema, dict):
        schema = schema.get("schema", schema)
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    return set(props) if isinstance(props, dict) else set()


def classify(body: dict[str, Any]) -> str:
    text = _prompt_text(body)
    props = _schema_props(body)
    if "verdicts" in props or "list of 'verdicts'" in text:
        return "deepeval_verdicts"
    if "Contextual Relevancy Score" in text:
        return "deepeval_reason"
    return "judge"


def _share(text: str, salt: str) -> float:
    """A deterministic number in [0, 1) for a prompt (which replies get extras)."""
    digest = hashlib.sha256(f"{salt}\0{text}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def answer(kind: str, body: dict[str, Any], config: SimConfig | None = None) -> str:
    """The reply content for a well-behaved request (with the harmless extras ``config`` asks for)."""
    text = _prompt_text(body)
    if kind == "deepeval_verdicts":
        ctx = text
        if "\nContext:\n" in text:
            ctx = text.rsplit("\nContext:\n", 1)[1].rsplit("\n\nJSON:", 1)[0]
        g = grade_of(ctx)
        stmt = ctx.strip()[:80] or "(empty)"
        verdict: dict[str, Any] = {"statement": stmt, "verdict": "yes" if g >= 2 else "no"}
        if g < 2:
            verdict["reason"] = "not about the input"
        return json.dumps({"verdicts": [verdict]})
    if kind == "deepeval_reason":
        return json.dumps({"reason": "The score is as computed from the verdicts."})
    blocks = _PASSAGE.findall(text)
    passage = blocks[-1] if blocks else text
    g = grade_of(passage)
    props = _schema_props(body)
    graded = "grade" in props or (not props and '"grade"' in text)
    reply: dict[str, Any] = (
        {"grade": g, "reason": f"模拟评分 {g}"}
        if graded
        else {"verdict": "yes" if g >= 2 else "no", "reason": "模拟判断"}
    )
    if config is not None and _share(text, "null") < config.null_reason_rate:
        reply["reason"] = None
    if config is not None and _share(text, "extra") < config.extra_key_rate:
        if graded:
            reply["verdict"] = "yes" if g >= 2 else "no"
        else:
            reply["grade"] = 0
    return json.dumps(reply, ensure_ascii=False)


class SimServer:
    def __init__(self, config: SimConfig, log: IO[str] | None = None) -> None:
        self.config = config
        self.log = log
        self.rng = random.Random(config.seed)
        self.inflight = 0
        self.max_inflight = 0
        self.seq = 0
        self.outcomes: Counter[str] = Counter()
        self.keys: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.peers: Counter[str] = Counter()  # requests per client address
        self.started = time.monotonic()
        self._reset_window()

    def _reset_window(self) -> None:
        # Time-weighted in-flight integral between the first arrival and the last reply.
        self.busy = 0.0
        self.last_change: float | None = None
        self.first_arrival: float | None = None
        self.last_reply: float | None = None
        self.service_s = 0.0
        self.served = 0

    def _track(self, delta: int) -> None:
        now = time.monotonic()
        if self.last_change is not None:
            self.busy += self.inflight * (now - self.last_change)
        self.last_change = now
        if self.first_arrival is None:
            self.first_arrival = now
        self.inflight += delta
        if delta < 0:
            self.last_reply = now

    def _log(self, entry: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"error": {"message": "invalid JSON body"}}, status=400)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return web.json_response({"error": {"message": "messages required"}}, status=400)
        cfg = self.config
        kind = classify(body)
        prompt = _prompt_text(body)
        key = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
        self.seq += 1
        n = self.seq
        if self.inflight >= cfg.capacity:
            outcome = "429"
        else:
            r = self.rng.random()
            if r < cfg.error_rate:
                outcome = "500"
            elif r < cfg.error_rate + cfg.garbage_rate:
                outcome = "garbage"
            elif r < cfg.error_rate + cfg.garbage_rate + cfg.hang_rate:
                outcome = "hang"
            else:
                outcome = "ok"
            if cfg.hold_marker and cfg.hold_marker in prompt:
                outcome = "hang"
        self.outcomes[outcome] += 1
        self.kinds[kind] += 1
        peer = request.remote or "?"
        self.peers[peer] += 1
        if outcome != "429":
            self.keys[key] += 1
        self._log(
            {
                "n": n,
                "t": round(time.monotonic() - self.started, 4),
                "mono": time.monotonic(),  # the host's clock, comparable across processes
                "kind": kind,
                "key": key,
                "outcome": outcome,
                "peer": peer,
            }
        )
        if outcome == "429":
            return web.json_response(
                {"error": {"message": "rate limited: server at capacity", "type": "rate_limit"}},
                status=429,
                headers={"Retry-After": f"{cfg.retry_after_s:g}"},
            )
        self._track(+1)
        self.max_inflight = max(self.max_inflight, self.inflight)
        arrived = time.monotonic()
        try:
            if outcome == "hang":
                await asyncio.sleep(cfg.hang_s)
                return web.json_response({"error": {"message": "gateway timeout"}}, status=504)
            delay = max(0.0, cfg.latency_ms + self.rng.uniform(-cfg.jitter_ms, cfg.jitter_ms)) / 1000.0
            await asyncio.sleep(delay)
            if outcome == "500":
                return web.json_response({"error": {"message": "internal error (simulated)"}}, status=500)
            content = (
                "I'm sorry, as a language model I cannot <b>"
                if outcome == "garbage"
                else answer(kind, body, cfg)
            )
            prompt_tokens = max(1, len(prompt) // 4)
            completion_tokens = max(1, len(content) // 4)
            return web.json_response(
                {
                    "id": f"chatcmpl-sim-{n}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": cfg.model,  # its own id, whatever the request named
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "logprobs": None,
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                }
            )
        finally:
            if outcome == "ok":
                self.service_s += time.monotonic() - arrived
                self.served += 1
            self._track(-1)

    async def stats(self, request: web.Request) -> web.Response:
        span = 0.0
        if self.first_arrival is not None and self.last_reply is not None:
            span = self.last_reply - self.first_arrival
        return web.json_response(
            {
                "busy_span_s": span,
                "mean_inflight": self.busy / span if span > 0 else 0.0,
                "utilization": self.busy / (span * self.config.capacity) if span > 0 else 0.0,
                "mean_service_s": self.service_s / self.served if self.served else 0.0,
                "total": self.seq,
                "outcomes": dict(self.outcomes),
                "kinds": dict(self.kinds),
                "peers": dict(self.peers),
                "inflight": self.inflight,
                "max_inflight": self.max_inflight,
                "distinct_keys": len(self.keys),
                "repeated_keys": sum(1 for c in self.keys.values() if c > 1),
                "config": asdict(self.config),
            }
        )

    async def set_config(self, request: web.Request) -> web.Response:
        changes = await request.json()
        names = {f.name for f in fields(SimConfig)}
        for k, v in changes.items():
            if k not in names:
                return web.json_response({"error": f"unknown setting {k}"}, status=400)
            setattr(self.config, k, type(getattr(self.config, k))(v))
        return web.json_response(asdict(self.config))

    async def reset(self, request: web.Request) -> web.Response:
        self.seq = 0
        self.max_inflight = self.inflight
        self.outcomes.clear()
        self.keys.clear()
        self.kinds.clear()
        self.peers.clear()
        self._reset_window()
        return web.json_response({"ok": True})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.config.model, "object": "model"}]})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/chat/completions", self.chat)
            app.router.add_get(f"{prefix}/models", self.models)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/config", self.set_config)
        app.router.add_post("/reset", self.reset)
        return app


async def serve(config: SimConfig, host: str, port: int, log_path: str | None) -> None:
    log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
    server = SimServer(config, log)
    # handler_cancellation: a request whose client gave up (e.g. timed out on a hung reply)
    # stops holding a capacity slot, as on a real provider.
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True, shutdown_timeout=0.5)
    await site.start()
    real_port = runner.addresses[0][1] if runner.addresses else port
    print(f"READY http://{host}:{real_port}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    if log is not None:
        log.close()


class SimProcess:
    """Run this server as a subprocess (for tests and benchmarks): ``with SimProcess(...) as sim``.

    ``sim.base_url`` is the ``/v1`` URL; ``sim.stats()``, ``sim.configure(**changes)``,
    ``sim.log_entries()`` read its counters and request log.
    """

    def __init__(self, log_path: str | None = None, **settings: Any) -> None:
        import subprocess

        self._subprocess = subprocess
        self.log_path = log_path
        self.settings = settings
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> SimProcess:
        cmd = [sys.executable, __file__, "--port", "0"]
        if self.log_path:
            cmd += ["--log", self.log_path]
        for key, value in self.settings.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        self.proc = self._subprocess.Popen(cmd, stdout=self._subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.proc.kill()
            raise RuntimeError(f"simulated server did not start: {line!r}")
        self.base_url = line.split()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except self._subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def root(self) -> str:
        return self.base_url.rsplit("/v1", 1)[0]

    def _call(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        import urllib.request

        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.root + path, data=data, method="POST" if data else "GET")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("/stats")
        return result

    def configure(self, **changes: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._call("/config", changes)
        return result

    def reset(self) -> None:
        self._call("/reset", {})

    def log_entries(self) -> list[dict[str, Any]]:
        if not self.log_path:
            return []
        with open(self.log_path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.endswith("\n")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on READY)")
    p.add_argument("--log", default=None, help="append one JSON line per request here")
    d = SimConfig()
    p.add_argument("--latency-ms", type=float, default=d.latency_ms)
    p.add_argument("--jitter-ms", type=float, default=d.jitter_ms)
    p.add_argument("--capacity", type=int, default=d.capacity)
    p.add_argument("--retry-after-s", type=float, default=d.retry_after_s)
    p.add_argument("--error-rate", type=float, default=d.error_rate)
    p.add_argument("--garbage-rate", type=float, default=d.garbage_rate)
    p.add_argument("--hang-rate", type=float, default=d.hang_rate)
    p.add_argument("--hang-s", type=float, default=d.hang_s)
    p.add_argument("--hold-marker", default=d.hold_marker, help="a prompt containing this text hangs")
    p.add_argument(
        "--extra-key-rate",
        type=float,
        default=d.extra_key_rate,
        help='share of judge replies with one extra key (binary: "grade": 0; graded: "verdict")',
    )
    p.add_argument(
        "--null-reason-rate",
        type=float,
        default=d.null_reason_rate,
        help="share of judge replies whose reason is null",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    a = p.parse_args(argv)
    cfg = SimConfig(
        latency_ms=a.latency_ms,
        jitter_ms=a.jitter_ms,
        capacity=a.capacity,
        retry_after_s=a.retry_after_s,
        error_rate=a.error_rate,
        garbage_rate=a.garbage_rate,
        hang_rate=a.hang_rate,
        hang_s=a.hang_s,
        hold_marker=a.hold_marker,
        extra_key_rate=a.extra_key_rate,
        null_reason_rate=a.null_reason_rate,
        seed=a.seed,
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(cfg, a.host, a.port, a.log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
