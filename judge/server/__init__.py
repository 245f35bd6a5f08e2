"""``judge serve``: the evaluation service over HTTP (FastAPI + uvicorn, the ``[server]`` extra).

One process and one SQLite job database: durable scoring jobs through the same batch
driver and verdict cache as ``judge score``, bearer-key auth, Prometheus metrics and a web
results viewer. :func:`create_app` builds the ASGI app; ``judge serve`` runs it.
"""

from judge.server._app import ServerConfig, create_app
from judge.server._auth import KeyRing, is_loopback, load_keys
from judge.server._jobs import Runtime

__all__ = ["KeyRing", "Runtime", "ServerConfig", "create_app", "is_loopback", "load_keys"]
