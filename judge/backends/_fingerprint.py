"""What determines a backend's numbers, as one string: :func:`backend_fingerprint`.

Two runs with the same fingerprint (and the same data and judge settings) must give the
same figures; when a nightly figure moves and the fingerprint changed too, the cause is the
machine or the build, not a judge that became noisy.

* The embedded model (:class:`~judge.backends.LocalBackend`) has its own ``fingerprint``:
  backend name, model file sha256, llama-cpp-python and llama.cpp build, and the CPU
  features llama.cpp's kernels were compiled with and use (its system info), e.g.
  ``local:qwen2.5-coder-1.5b-q4km|model=sha256:6b9c…|llama-cpp-python=0.3.36|cpu=AVX2,FMA,F16C,…``.
* Any other backend: its kind (the name's prefix), model and, when it has one, the host of
  its base URL: ``openai:gpt-4o-mini|model=gpt-4o-mini|host=127.0.0.1:8000``.
* Wrappers (``ResilientBackend``) pass their inner backend's fingerprint through.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["backend_fingerprint"]


def backend_fingerprint(backend: object) -> str:
    """The fingerprint string of ``backend`` (see the module docstring); never raises."""
    own = getattr(backend, "fingerprint", None)
    if isinstance(own, str) and own:
        return own
    inner = getattr(backend, "inner", None)
    if inner is not None and inner is not backend:
        return backend_fingerprint(inner)
    name = str(getattr(backend, "name", type(backend).__name__))
    parts = [name, f"model={getattr(backend, 'model', '?')}"]
    base_url = getattr(backend, "base_url", None)
    if base_url is None:
        base_url = getattr(backend, "_base_url", None)
    if isinstance(base_url, str) and base_url:
        host = urlsplit(base_url).netloc.rsplit("@", 1)[-1]  # never user:password@
        if host:
            parts.append(f"host={host}")
    return "|".join(parts)
