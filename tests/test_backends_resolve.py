"""resolve_backend: explicit spec or object first, then DASHSCOPE_API_KEY, OPENAI_BASE_URL, local."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from judge.backends import (
    ConfigurationError,
    OpenAIBackend,
    QwenBackend,
    ResilientBackend,
    ScriptedBackend,
    describe_backend,
    resolve_backend,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DASHSCOPE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)


class FakeLocal:
    """Stands in for judge.backends._local.LocalBackend (another module) in resolution tests."""

    def __init__(self, model_path: str | None = None, **options: Any) -> None:
        self.model_path = model_path
        self.options = options
        self.name = "local:qwen2.5-coder-1.5b-q4km" if model_path is None else f"local:{model_path}"
        self.model = "qwen2.5-coder-1.5b-q4km"
        self.supports_probabilities = True
        self.max_concurrency = 1

    def params(self) -> dict[str, Any]:
        return {}

    async def complete(self, request: Any) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


@pytest.fixture
def fake_local(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("judge.backends._local")
    module.LocalBackend = FakeLocal  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "judge.backends._local", module)


def test_dashscope_key_selects_qwen_plus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASHSCOPE_API_KEY", "ds-key-abcdefgh")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")  # the key wins
    b = resolve_backend()
    assert isinstance(b, QwenBackend)
    assert (b.name, b.model) == ("qwen:qwen-plus", "qwen-plus")
    assert describe_backend(b) == "judge: using judge qwen:qwen-plus (DASHSCOPE_API_KEY set)"
    assert (
        describe_backend(ResilientBackend(b)) == "judge: using judge qwen:qwen-plus (DASHSCOPE_API_KEY set)"
    )


def test_openai_base_url_selects_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    b = resolve_backend()
    assert isinstance(b, OpenAIBackend)
    assert b.name == "openai:gpt-4o-mini"
    assert b.base_url == "http://127.0.0.1:8000/v1"
    assert describe_backend(b) == "judge: using judge openai:gpt-4o-mini (OPENAI_BASE_URL set)"
    monkeypatch.setenv("OPENAI_MODEL", "Qwen/Qwen2.5-7B-Instruct")
    assert resolve_backend().name == "openai:Qwen/Qwen2.5-7B-Instruct"


def test_dashscope_compatible_url_defaults_to_qwen_plus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://dashscope.aliyuncs.com/compatible-mode/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abcdefghijkl")
    assert resolve_backend().name == "openai:qwen-plus"


def test_nothing_set_selects_local(fake_local: None) -> None:
    b = resolve_backend()
    assert isinstance(b, FakeLocal)
    assert b.model_path is None
    assert describe_backend(b) == (
        "judge: using judge local:qwen2.5-coder-1.5b-q4km "
        "(no DASHSCOPE_API_KEY or OPENAI_BASE_URL: the embedded model Qwen2.5-Coder-1.5B-Instruct)"
    )
    explicit = resolve_backend("local:qwen2.5-coder-1.5b-q4km", n_threads=2)
    assert isinstance(explicit, FakeLocal)
    assert explicit.options == {"n_threads": 2}
    by_path = resolve_backend("local:/models/other.gguf")
    assert isinstance(by_path, FakeLocal) and by_path.model_path == "/models/other.gguf"


def test_explicit_spec_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASHSCOPE_API_KEY", "ds-key-abcdefgh")
    b = resolve_backend("openai:llama3", base_url="http://127.0.0.1:11434/v1")
    assert isinstance(b, OpenAIBackend)
    assert (b.name, b.base_url) == ("openai:llama3", "http://127.0.0.1:11434/v1")
    assert describe_backend(b) == "judge: using judge openai:llama3 (explicit backend)"
    q = resolve_backend("qwen:qwen-max", structured="json_schema")
    assert isinstance(q, QwenBackend)
    assert (q.model, q.structured) == ("qwen-max", "json_schema")
    assert resolve_backend("qwen:").name == "qwen:qwen-plus"
    assert resolve_backend("QWEN:qwen-turbo").name == "qwen:qwen-turbo"


def test_base_url_without_spec_selects_openai() -> None:
    b = resolve_backend(base_url="http://127.0.0.1:8000/v1")
    assert isinstance(b, OpenAIBackend) and b.base_url == "http://127.0.0.1:8000/v1"
    assert describe_backend(b).endswith("(--base-url given)")


def test_backend_objects_pass_through() -> None:
    s = ScriptedBackend(["x"])
    assert resolve_backend(s) is s
    assert describe_backend(s) == "judge: using judge fake:scripted (backend object passed)"
    r = ResilientBackend(ScriptedBackend(["x"]))
    assert resolve_backend(r) is r


@pytest.mark.parametrize("spec", ["gpt4", "claude:opus", "fake:x", ":model"])
def test_unknown_prefix_lists_valid_ones(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_backend(spec)
    message = str(info.value)
    for prefix in ("qwen:<model>", "openai:<model>", "local:<model>", "deepeval:<model>"):
        assert prefix in message


def test_missing_key_and_bad_options() -> None:
    with pytest.raises(ConfigurationError, match="DASHSCOPE_API_KEY"):
        resolve_backend("qwen:qwen-plus")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        resolve_backend("openai:gpt-4o-mini")
    with pytest.raises(ConfigurationError, match="bad option"):
        resolve_backend("openai:m", base_url="http://127.0.0.1:1/v1", colour="red")
    with pytest.raises(ConfigurationError, match="structured"):
        resolve_backend("openai:m", base_url="http://127.0.0.1:1/v1", structured="xml")
    with pytest.raises(ConfigurationError):
        resolve_backend(42)


def test_missing_local_module_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "judge.backends._local", None)  # import fails
    with pytest.raises(ConfigurationError, match=r"judge\[local\]"):
        resolve_backend()


def test_real_local_backend_resolves_lazily() -> None:
    pytest.importorskip("judge.backends._local")
    b = resolve_backend()
    assert b.name == "local:qwen2.5-coder-1.5b-q4km"
    # one model; several calls in flight so that their reasons can be decoded together
    assert b.max_concurrency == 4 and getattr(b, "queues_calls", False)
