"""``POST /v1/evaluate``'s per-request work: a request's verdicts go to the cache in one
write, and the judging config of an option set is resolved once, not per request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import MARKER, make_config
from fastapi.testclient import TestClient

from judge.judging._models import PassageVerdict
from judge.server import _fastpath, create_app


class CountingStore:
    """A dict verdict store that counts its writes."""

    def __init__(self) -> None:
        self.data: dict[str, PassageVerdict] = {}
        self.puts = 0
        self.put_manys: list[int] = []

    async def get(self, key: str) -> PassageVerdict | None:
        return self.data.get(key)

    async def put(self, key: str, verdict: PassageVerdict) -> None:
        self.puts += 1
        self.data[key] = verdict

    async def put_many(self, items: list[tuple[str, PassageVerdict]]) -> None:
        self.put_manys.append(len(items))
        self.data.update(items)


def _body(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "query": f"问题 {i}",
        "retrieval_context": [f"段落 {j} " + (MARKER if j % 2 == 0 else "") for j in range(5)],
        **extra,
    }


def test_a_requests_verdicts_are_cached_in_one_write(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    store = CountingStore()
    config.runtime.store = store
    with TestClient(create_app(config)) as client:
        for i in range(3):
            r = client.post("/v1/evaluate", json=_body(i))
            assert r.status_code == 200
            assert [v["verdict"] for v in r.json()["verdicts"]] == ["yes", "no", "yes", "no", "yes"]
        assert store.puts == 0 and store.put_manys == [5, 5, 5]
        assert len(store.data) == 15  # every verdict cached
        again = client.post("/v1/evaluate", json=_body(0)).json()  # served from the cache
        assert again["usage"]["calls"] == 0 and store.put_manys == [5, 5, 5]


def test_the_config_of_an_option_set_is_resolved_once(tmp_path: Path, monkeypatch: Any) -> None:
    calls: list[Any] = []
    original = _fastpath.resolve_config

    def counting(config: Any, backend: Any) -> Any:
        calls.append(config.mode)
        return original(config, backend)

    monkeypatch.setattr(_fastpath, "resolve_config", counting)
    with TestClient(create_app(make_config(tmp_path))) as client:
        for i in range(4):
            assert client.post("/v1/evaluate", json=_body(i)).status_code == 200
        for i in range(3):
            assert client.post("/v1/evaluate", json=_body(i, mode="graded")).status_code == 200
        r = client.post("/v1/evaluate", json=_body(9, config={"p_yes_threshold": 2}))
        assert r.status_code == 422
    assert calls == ["binary", "graded"]
