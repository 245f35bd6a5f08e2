"""The one call policy (CallPolicy), the one factory (make_backend) and the one sync bridge."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import judge
from judge.backends import (
    DEFAULT_CONCURRENCY,
    CallPolicy,
    ChatRequest,
    ConfigError,
    ConfigurationError,
    Message,
    ModelPrice,
    PriceTable,
    ResilientBackend,
    RuleBackend,
    ScriptedBackend,
    Usage,
    make_backend,
)
from judge.backends._sync import run_sync

REQUEST = ChatRequest(messages=(Message("user", "x"),))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 2.5}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"rpm": 0}, "rpm"),
        ({"tpm": -5.0}, "tpm"),
        ({"backoff_base_s": -1}, "backoff_base_s"),
        ({"prices": 3}, "prices"),
    ],
)
def test_policy_errors_name_their_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        CallPolicy(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field} must be")
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigurationError)


def test_one_default_for_concurrency_capped_by_the_backend() -> None:
    remote = ScriptedBackend(["x"])  # max_concurrency None: a remote API
    local = ScriptedBackend(["x"], max_concurrency=1)  # the embedded model
    assert DEFAULT_CONCURRENCY == 16
    assert CallPolicy().concurrency_for(remote) == 16
    assert CallPolicy().concurrency_for(local) == 1
    assert CallPolicy(concurrency=4).concurrency_for(remote) == 4
    assert CallPolicy(concurrency=4).concurrency_for(local) == 1  # never more than it can serve
    made = make_backend(remote)
    assert isinstance(made, ResilientBackend)
    assert (made.max_concurrency, made.limiter.limit, made.max_retries, made.timeout_s) == (16, 16, 5, 60.0)
    assert make_backend(local).timeout_s == 600.0  # one call at a time: calls queue


def test_make_backend_applies_the_policy() -> None:
    policy = CallPolicy(concurrency=3, timeout_s=7.5, max_retries=1, rpm=120, tpm=9000)
    made = make_backend(RuleBackend.keyword("RELEVANT"), policy=policy)
    assert made.policy is policy
    assert (made.max_concurrency, made.timeout_s, made.max_retries) == (3, 7.5, 1)
    # an already-resilient backend passes through, or is re-wrapped under a new policy
    assert make_backend(made) is made
    other = make_backend(made, policy=CallPolicy(concurrency=2))
    assert other is not made and other.inner is made.inner and other.max_concurrency == 2


def test_make_backend_resolves_specs_and_names_a_bad_one() -> None:
    with pytest.raises(ConfigurationError) as info:
        make_backend("nonsense:model")
    assert info.value.field == "backend"
    with pytest.raises(ConfigurationError) as info:
        make_backend(42)
    assert info.value.field == "backend"


def test_policy_and_settings_are_exclusive_on_the_wrapper() -> None:
    with pytest.raises(ConfigurationError) as info:
        ResilientBackend(ScriptedBackend(["x"]), policy=CallPolicy(), max_retries=2)
    assert info.value.field == "policy"


def test_price_overrides(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"currency": "USD", "models": {"m": {"input_per_1m": 1, "output_per_1m": 2}}}')
    assert CallPolicy(prices=str(path)).price_table().currency == "USD"
    table = CallPolicy(prices={"m": {"input_per_1m": 3, "output_per_1m": 4}}).price_table()
    assert table.price_for("m") == ModelPrice(3.0, 4.0)
    assert table.price_for("qwen-plus") is not None  # laid over the default table


async def test_the_local_backend_is_free_by_its_attribute_not_its_name() -> None:
    """Pricing asks the backend (``free = True``), not the name: an embedded model under any
    name costs 0 and is never "unpriced", and a remote model named local:* is priced."""
    free = ScriptedBackend(["a"], name="embedded:any-name", model="whatever.gguf", usage=Usage(1000, 100))
    free.free = True  # type: ignore[attr-defined]
    rb = ResilientBackend(
        free, prices=PriceTable.from_mapping({"whatever.gguf": {"input_per_1m": 9, "output_per_1m": 9}})
    )
    c = await rb.complete(REQUEST)
    assert c.cost == 0.0 and rb.stats.unpriced_calls == 0
    named_local = ScriptedBackend(["a"], name="local:qwen-plus", model="qwen-plus", usage=Usage(1_000_000, 0))
    priced = ResilientBackend(named_local, prices=PriceTable.default())
    assert (await priced.complete(REQUEST)).cost == pytest.approx(0.8)


def test_local_backend_declares_itself_free() -> None:
    local = pytest.importorskip("judge.backends._local")
    assert local.LocalBackend.free is True


# ---- the one sync bridge --------------------------------------------------------------------


async def _where() -> str:
    await asyncio.sleep(0)
    return threading.current_thread().name


def test_run_sync_from_plain_code_and_from_a_running_loop() -> None:
    first = run_sync(_where())
    assert first == run_sync(_where()) == "judge-sync"  # one private loop, reused

    async def inside() -> str:
        return run_sync(_where())  # a loop is running here: not re-entered

    assert asyncio.run(inside()) == "judge-sync"


def test_run_sync_nested_in_our_own_loop_does_not_deadlock() -> None:
    async def outer() -> str:
        return run_sync(_where())  # sync code called from a coroutine on the bridge's loop

    assert run_sync(outer()) == "judge-sync-nested"


def test_run_sync_propagates_errors() -> None:
    async def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        run_sync(boom())


def test_evaluate_reuses_a_backend_across_sync_calls() -> None:
    backend = make_backend(RuleBackend.keyword("RELEVANT"))
    for _ in range(3):
        result = judge.evaluate("q", ["RELEVANT a", "b"], backend=backend, summary=False)
        assert [v.verdict for v in result.verdicts] == ["yes", "no"]
    assert backend.stats.requests == 6
