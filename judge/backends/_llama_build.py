"""The llama.cpp build under the embedded judge: the CPU features its kernels were built with
(part of the judge's fingerprint), the kernels known to crash it, and the
llama-cpp-python version."""

from __future__ import annotations

import importlib.metadata
import os
import re

from judge.backends._base import ConfigurationError

__all__ = [
    "CRASHING_KERNELS",
    "NO_AMX_FLAGS",
    "REBUILD_WITHOUT_AMX",
    "kernel_features",
    "llama_version",
    "refuse_crashing_kernels",
]


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


def llama_version() -> str:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
