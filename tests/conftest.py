"""Fixtures shared across test modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# A default judge chosen in the developer's shell must not leak into tests that expect the
# environment's own resolution (keys, then the embedded model).
os.environ.pop("JUDGE_BACKEND", None)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One local Ray cluster for the whole test session (2 CPUs, no dashboard, usage stats
    off); yields its address for drivers started as subprocesses (``--ray-address``).
    Skips when ray is not installed (``pip install 'judge[ray]'``)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray = pytest.importorskip("ray", reason="the Ray engine needs ray: pip install 'judge[ray]'")
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield str(context.address_info["address"])
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def local_judge() -> Any:
    """The embedded judge (default model and settings), loaded once for the whole session:
    loading it costs seconds to a minute on a loaded 2-core machine, and every test that
    needs the default model shares it. Skips like the embedded-model tests do."""
    pytest.importorskip("llama_cpp")
    from judge.backends._local import LocalBackend

    judge = LocalBackend()
    judge.load()
    return judge
