"""``judge serve``: the evaluation service over HTTP (FastAPI + uvicorn, the ``[server]`` extra).

One process and one SQLite job database: durable scoring jobs through the same batch
driver and verdict cache as ``judge score``, bearer-key auth, Prometheus metrics and a web
results viewer. :func:`create_app` builds the ASGI app; ``judge serve`` runs it.
"""

from judge.server._app import create_app
from judge.server._app_state import ServerConfig
from judge.server._auth import KeyRing, is_loopback, load_keys
from judge.server._bounds import JobBounds
from judge.server._db import SchemaError
from judge.server._job_kind import Runtime
from judge.server._lock import DatabaseBusy, DatabaseLock
from judge.server._schemas import JUDGE_OPTION_KEYS
from judge.server._search_configs import register_configs
from judge.server._security import parse_allowed_hosts, redact_access_log
from judge.server._timeouts import header_timeout_protocol

__all__ = [
    "JUDGE_OPTION_KEYS",
    "DatabaseBusy",
    "DatabaseLock",
    "JobBounds",
    "KeyRing",
    "Runtime",
    "SchemaError",
    "ServerConfig",
    "create_app",
    "header_timeout_protocol",
    "is_loopback",
    "load_keys",
    "parse_allowed_hosts",
    "redact_access_log",
    "register_configs",
]
