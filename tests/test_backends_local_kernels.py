"""The embedded judge refuses a llama.cpp build whose kernels crash, with the rebuild command."""

from __future__ import annotations

import pytest

from judge.backends import ConfigurationError
from judge.backends._llama_build import REBUILD_WITHOUT_AMX, refuse_crashing_kernels


def test_amx_build_is_refused_with_the_rebuild_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUDGE_ALLOW_AMX", raising=False)
    with pytest.raises(ConfigurationError) as err:
        refuse_crashing_kernels("SSE3,AVX2,AVX512,AMX_INT8,OPENMP,REPACK")
    assert "AMX_INT8" in str(err.value)
    assert REBUILD_WITHOUT_AMX in str(err.value)
    assert "-mno-amx-int8" in REBUILD_WITHOUT_AMX


@pytest.mark.parametrize("features", ["", "none", "SSE3,AVX2,FMA,F16C,OPENMP,REPACK", "AVX512,AVX512_VNNI"])
def test_builds_without_crashing_kernels_pass(features: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUDGE_ALLOW_AMX", raising=False)
    refuse_crashing_kernels(features)


def test_the_refusal_can_be_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_ALLOW_AMX", "1")
    refuse_crashing_kernels("AVX2,AMX_INT8")
