"""``judge serve``: run the evaluation service (HTTP API, durable jobs, metrics, viewer).

Exit codes: 0 stopped cleanly; 2 bad usage (e.g. listening beyond loopback without API
keys, an unreadable keys file, the ``[server]`` extra missing, the job database held by
another live ``judge serve``); 3 the backend could not be set up.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from judge.cli._flags import add_batch_flags, call_settings, open_backend, ray_ship, run_spec_of
from judge.io import InputError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the evaluation service: HTTP API, durable jobs, Prometheus metrics, results viewer",
        description=(
            "Serve judge over HTTP (OpenAPI at /docs): POST /v1/evaluate judges one query now; "
            "POST /v1/jobs queues a dataset that is scored like `judge score` (same verdict cache), "
            "durably: a killed server resumes its jobs when started again on the same --db. "
            "The web viewer is at /."
        ),
        epilog=(
            "auth: bearer keys from JUDGE_API_KEYS (comma-separated) and/or --api-keys-file; "
            "without keys only a loopback --host is allowed. exit codes: 0 stopped; 2 bad usage or "
            "--db held by another live judge serve; 3 backend could not be set up"
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument(
        "--db",
        default=None,
        help="job database (default $JUDGE_HOME/server.sqlite, beside the verdict cache)",
    )
    p.add_argument("--jobs-dir", default=None, help="job files (default: DB's folder/jobs)")
    p.add_argument("--api-keys-file", default=None, help="file of accepted API keys, one per line")
    p.add_argument(
        "--admin-keys",
        default=None,
        metavar="FILE",
        help="file of API keys (one per line, each also an accepted key) that may import labels under "
        "other reviewers' names (POST /v1/labels keeps each line's reviewer); other keys' imports "
        "naming another reviewer are refused (403)",
    )
    p.add_argument(
        "--session-ttl",
        default="12h",
        metavar="DURATION",
        help="how long a viewer sign-in lasts: seconds, or with a unit (90m, 12h, 7d; default 12h)",
    )
    p.add_argument(
        "--trust-forwarded-proto",
        action="store_true",
        help="a reverse proxy sets X-Forwarded-Proto: trust it to mark the session cookie Secure",
    )
    p.add_argument(
        "--allowed-hosts",
        action="append",
        default=[],
        metavar="NAME[:PORT],...",
        help="Host header values answered beside the server's own address and localhost (DNS-rebinding "
        "defence; without keys every other Host gets 421; with keys the rule applies only when this is set)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=int,
        default=5,
        metavar="SECONDS",
        help="close a connection idle this long after a response (default 5)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection that has not sent a whole request line and headers this long after "
        "it opened or began its next request (default 10)",
    )
    add_batch_flags(p, engine=True)
    p.add_argument(
        "-k", type=int, nargs="+", default=[5, 10], metavar="K", help="default NDCG/P cutoffs (default 5 10)"
    )
    p.add_argument(
        "--labels-store",
        default=None,
        metavar="PATH",
        help="label store (default: labels.sqlite beside --db)",
    )
    p.add_argument(
        "--labels-level",
        type=int,
        default=None,
        metavar="L",
        help="graded labels on a binary job: grade >= L is relevant",
    )
    p.add_argument(
        "--labels-yes-grade",
        type=int,
        default=None,
        metavar="G",
        help="binary labels on a graded job: a yes is grade G",
    )
    p.add_argument(
        "--search-config",
        dest="search_configs",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="register a search configuration experiments may run under NAME (repeatable; an "
        "embedded index is resolved relative to FILE); requests name it, never a path or URL",
    )
    p.add_argument("--max-jobs", type=int, default=1, help="jobs running at once (default 1)")
    p.add_argument("--queue-size", type=int, default=100, help="queued jobs before 429 (default 100)")
    p.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body in MiB (default 64)")
    p.add_argument(
        "--max-passages", type=int, default=200, help="passages per /v1/evaluate request (default 200)"
    )
    p.add_argument(
        "--max-query-chars",
        type=int,
        default=4000,
        help="longest query in characters; a longer one is refused, never cut (default 4000)",
    )
    p.add_argument(
        "--max-record-passages",
        type=int,
        default=1000,
        help="passages per job record; a record with more is rejected (default 1000)",
    )
    p.add_argument(
        "--max-records", type=int, default=100_000, help="records per job; more is a 413 (default 100000)"
    )
    p.add_argument(
        "--backend-factory",
        default=None,
        metavar="MODULE:CALLABLE",
        help="build the backend by calling a Python factory (a custom or fake backend) instead of --backend",
    )
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=run_serve)


def _positive(value: float | None, flag: str) -> None:
    """A finite number above 0 (NaN and infinity are not sizes or times)."""
    if value is not None and not 0 < value < float("inf"):
        raise InputError(f"must be a finite number > 0, got {value}", field=flag)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _duration_s(text: str, flag: str) -> float:
    """``3600``, ``3600s``, ``90m``, ``12h`` or ``7d`` in seconds (> 0)."""
    raw = text.strip().lower()
    scale = _UNITS.get(raw[-1:])
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise InputError(f"{text!r} is not a duration (e.g. 3600, 90m, 12h, 7d)", field=flag) from None
    if not value > 0 or value == float("inf"):
        raise InputError("must be > 0", field=flag)
    return value


def _factory_backend(target: str) -> Any:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise InputError("expected MODULE:CALLABLE", field="--backend-factory")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"cannot load {target!r}: {exc}", field="--backend-factory") from None
    return factory()


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """Prints ``judge serve: listening on http://HOST:PORT`` on stdout once bound (the
        real port when ``--port 0``), for scripts and tests."""

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            for srv in getattr(self, "servers", []):
                for sock in srv.sockets:
                    host, port = sock.getsockname()[:2]
                    shown = f"[{host}]" if ":" in host else host
                    print(f"judge serve: listening on http://{shown}:{port}", flush=True)

    return Server


def _key_ring(args: argparse.Namespace, keys: list[str]) -> tuple[Any, frozenset[str]]:
    """The server's key ring and the labels of its admin keys (``--admin-keys``: keys that may
    import labels under other reviewers' names; each must be an accepted API key)."""
    from judge.server import KeyRing, load_keys

    admin = load_keys("", keys_file=args.admin_keys, flag="--admin-keys") if args.admin_keys else []
    ring = KeyRing(keys)
    admin_labels = frozenset(ring.label_for(k) or "" for k in admin)
    if "" in admin_labels:
        raise InputError(
            "an admin key that is not an accepted API key", path=args.admin_keys, field="--admin-keys"
        )
    return ring, admin_labels


def _checked_serve_flags(args: argparse.Namespace) -> float:
    """Check judge serve's numeric and host flags (InputError naming the flag); the session
    lifetime in seconds."""
    from judge.server import parse_allowed_hosts

    for grade, flag in ((args.labels_level, "--labels-level"), (args.labels_yes_grade, "--labels-yes-grade")):
        if grade is not None and not 1 <= grade <= 3:
            raise InputError(f"must be a grade in 1..3, not {grade}", field=flag)
    for value, flag in (
        (args.max_jobs, "--max-jobs"),
        (args.queue_size, "--queue-size"),
        (args.max_body_mb, "--max-body-mb"),
        (args.max_passages, "--max-passages"),
        (args.max_query_chars, "--max-query-chars"),
        (args.max_record_passages, "--max-record-passages"),
        (args.max_records, "--max-records"),
        (args.keep_alive_timeout, "--keep-alive-timeout"),
        (args.header_timeout, "--header-timeout"),
    ):
        _positive(value, flag)
    if any(k < 1 for k in args.k):
        raise InputError("cutoffs must be positive integers", field="-k")
    if not 0 <= args.port <= 65535:  # the OS would take it modulo 65536: another port
        raise InputError(f"must be a port in 0..65535, got {args.port}", field="--port")
    try:
        parse_allowed_hosts(args.allowed_hosts)
    except ValueError as exc:
        raise InputError(str(exc), field="--allowed-hosts") from None
    return _duration_s(args.session_ttl, "--session-ttl")


def run_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from judge.server import Runtime, ServerConfig, create_app, is_loopback, load_keys
    except ImportError as exc:
        raise InputError(
            f"the server needs the [server] extra ({exc.name} is missing): pip install 'judge[server]'"
        ) from None
    from judge.backends import describe_backend, register_secret
    from judge.io import DEFAULT_MAX_PASSAGE_CHARS
    from judge.server import JUDGE_OPTION_KEYS, JobBounds
    from judge.store import SQLiteVerdictStore, judge_home

    keys = load_keys(keys_file=args.api_keys_file)
    if not keys and not is_loopback(args.host):
        print(
            f"judge serve: refusing to listen on {args.host} without API keys; set JUDGE_API_KEYS or "
            "--api-keys-file, or listen on 127.0.0.1",
            file=sys.stderr,
        )
        return 2
    for key in keys:
        register_secret(key)  # redacted from every error text
    ring, admin_labels = _key_ring(args, keys)
    spec = run_spec_of(args)  # the server's run spec: every job's options are laid over it
    session_ttl_s = _checked_serve_flags(args)
    from judge.server import register_configs

    search_configs = register_configs(args.search_configs)  # exit 2 before anything opens
    from judge.server import header_timeout_protocol

    defaults: dict[str, Any] = {
        **{key: getattr(spec.config, key) for key in JUDGE_OPTION_KEYS},
        "k": list(dict.fromkeys(args.k)),
        "listwise": False,
        "listwise_template": None,
        "max_passage_chars": DEFAULT_MAX_PASSAGE_CHARS,
        "map": {},
    }

    from judge.server import DatabaseBusy, DatabaseLock, redact_access_log

    db_path = Path(args.db) if args.db else judge_home() / "server.sqlite"
    db_lock = DatabaseLock(db_path)
    try:
        db_lock.acquire()  # one writer per database, before the backend is opened
    except DatabaseBusy as exc:
        print(f"judge serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        raise InputError(
            f"cannot lock the job database: {exc.strerror}", path=str(db_lock.path), field="--db"
        ) from None
    backend_spec = _factory_backend(args.backend_factory) if args.backend_factory else args.backend
    backend = open_backend(backend_spec, args.base_url, spec.policy)
    print(describe_backend(backend), file=sys.stderr)
    jobs_dir = Path(args.jobs_dir) if args.jobs_dir else db_path.parent / "jobs"
    store = None if args.no_cache else SQLiteVerdictStore(args.cache)
    from judge.batch import executor_for

    runtime = Runtime(
        backend=backend,
        store=store,
        jobs_dir=jobs_dir,
        concurrency=spec.concurrency_for(backend),
        max_jobs=args.max_jobs,
        queue_size=args.queue_size,
        bounds=JobBounds(args.max_query_chars, args.max_record_passages, args.max_records),
        settings=call_settings(args, backend),
        spec=spec,
        search_configs=search_configs,
        # --engine ray: one set of actors for every job of the server (they die with it).
        executor=executor_for(spec, backend, ray_ship(args, spec)),
    )
    from judge.server import SchemaError

    try:
        app = create_app(
            ServerConfig(
                db_path=db_path,
                jobs_dir=jobs_dir,
                runtime=runtime,
                defaults=defaults,
                keys=ring,
                admin_keys=admin_labels,
                labels_path=Path(args.labels_store) if args.labels_store else None,
                labels_level=args.labels_level,
                labels_yes_grade=args.labels_yes_grade,
                max_body_bytes=int(args.max_body_mb * 1024 * 1024),
                max_passages=args.max_passages,
                session_ttl_s=session_ttl_s,
                trust_forwarded_proto=args.trust_forwarded_proto,
                allowed_hosts=tuple(args.allowed_hosts),
                db_lock=db_lock,
            )
        )
    except SchemaError as exc:
        db_lock.release()
        print(f"judge serve: {exc}", file=sys.stderr)
        return 2
    auth = f"on ({len(keys)} keys)" if keys else "off (loopback only)"
    print(f"judge serve: jobs in {db_path}; auth {auth}", file=sys.stderr)
    server = _server_class()(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            proxy_headers=False,
            http=header_timeout_protocol(args.header_timeout),
            timeout_keep_alive=args.keep_alive_timeout,
            # Open event streams must not hold a shutdown: running jobs resume at the next start.
            timeout_graceful_shutdown=5,
        )
    )
    redact_access_log()  # after uvicorn configured its loggers: no query string in the access log
    try:
        server.run()
        if not server.started:
            return 2  # uvicorn could not bind (it said why)
    finally:
        if store is not None:
            store.close()
    return 0
