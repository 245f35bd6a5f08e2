"""PriceTable: default Qwen prices, prefix lookup, user overrides from dicts and JSON files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.backends import ConfigurationError, ModelPrice, PriceTable, Usage


def test_default_table_prices_common_qwen_models() -> None:
    t = PriceTable.default()
    assert t.currency == "CNY"
    assert t.price_for("qwen-plus") == ModelPrice(0.8, 2.0)
    assert t.price_for("qwen-max") == ModelPrice(2.4, 9.6)
    assert t.price_for("qwen-turbo") == ModelPrice(0.3, 0.6)
    # 1,000 input + 500 output tokens on qwen-plus: (1000*0.8 + 500*2.0) / 1e6 CNY
    assert t.cost_of("qwen-plus", Usage(1000, 500)) == pytest.approx(0.0018)
    assert t.cost_of("qwen2.5-coder-1.5b-q4km", Usage(10**6, 10**6)) == 0.0


def test_lookup_by_prefix_and_spec() -> None:
    t = PriceTable.default()
    assert t.price_for("qwen-plus-2025-01-25") == t.price_for("qwen-plus")
    assert t.price_for("qwen-plus-latest") == t.price_for("qwen-plus")
    assert t.price_for("qwen:qwen-max") == t.price_for("qwen-max")
    assert t.price_for("openai:qwen-turbo") == t.price_for("qwen-turbo")
    # a key is only a prefix at a "-" boundary: qwen2.5-7b-instruct is not qwen2.5-72b-instruct
    assert t.price_for("qwen2.5-72b-instruct") == ModelPrice(4.0, 12.0)
    assert t.price_for("qwen2.5-7b-instruct") == ModelPrice(0.5, 1.0)
    assert t.price_for("qwen-plusplus") is None
    assert t.price_for("gpt-4o") is None
    assert t.cost_of("gpt-4o", Usage(100, 100)) == 0.0


def test_from_mapping_per_1k_and_per_1m_extends_default() -> None:
    t = PriceTable.from_mapping(
        {
            "my-model": {"input_per_1k": 0.002, "output_per_1k": 0.006},
            "qwen-plus": {"input_per_1m": 1.0, "output_per_1m": 3.0},
        }
    )
    assert t.price_for("my-model") == ModelPrice(2.0, 6.0)
    assert t.price_for("qwen-plus") == ModelPrice(1.0, 3.0)  # overridden
    assert t.price_for("qwen-max") == ModelPrice(2.4, 9.6)  # kept from the default
    assert t.cost_of("my-model", Usage(1000, 1000)) == pytest.approx(0.008)


def test_other_currency_does_not_mix_with_default() -> None:
    t = PriceTable.from_mapping(
        {"currency": "USD", "models": {"gpt-4o-mini": {"input_per_1m": 0.15, "output_per_1m": 0.6}}}
    )
    assert t.currency == "USD"
    assert t.models == ("gpt-4o-mini",)
    assert t.price_for("qwen-plus") is None


def test_from_json_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"currency": "CNY", "models": {"x": {"input_per_1m": 1, "output_per_1m": 2}}}))
    t = PriceTable.from_json(path)
    assert t.price_for("x") == ModelPrice(1.0, 2.0)
    assert t.price_for("qwen-plus") == ModelPrice(0.8, 2.0)
    monkeypatch.setenv("JUDGE_PRICES", str(path))
    assert PriceTable.from_env() == t
    monkeypatch.delenv("JUDGE_PRICES")
    assert PriceTable.from_env() == PriceTable.default()
    # round trip
    assert PriceTable.from_mapping(t.to_mapping(), extend_default=False) == t


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"m": {"input_per_1m": 1}}', "field 'output_per_1m' is missing"),
        (
            '{"m": {"input_per_1m": -1, "output_per_1m": 1}}',
            "field 'input_per_1m': expected a non-negative number",
        ),
        ('{"m": {"input_per_1m": "1", "output_per_1m": 1}}', "field 'input_per_1m'"),
        ('{"m": {"input_per_1m": 1, "input_per_1k": 1, "output_per_1m": 1}}', "not both"),
        ('{"m": {"input_per_1m": 1, "output_per_1m": 1, "colour": 1}}', "unknown field(s) colour"),
        ('{"m": 3}', "model 'm': expected an object"),
        ("[1, 2]", "expected a JSON object"),
        ('{"m": {', "invalid JSON"),
    ],
)
def test_bad_price_files_name_file_and_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError) as info:
        PriceTable.from_json(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_missing_price_file() -> None:
    with pytest.raises(ConfigurationError, match="cannot read price table"):
        PriceTable.from_json("/nonexistent/prices.json")


def test_with_prices_copy() -> None:
    base = PriceTable.default()
    t = base.with_prices({"qwen-plus": {"input_per_1m": 9, "output_per_1m": 9}})
    assert t.price_for("qwen-plus") == ModelPrice(9.0, 9.0)
    assert base.price_for("qwen-plus") == ModelPrice(0.8, 2.0)
