"""Per-model token prices, for cost accounting from the API's usage fields.

The default table holds DashScope (Alibaba Cloud Model Studio, mainland China) list prices
in CNY per million tokens for common Qwen models, as published when this was written;
prices change, so users override them:

* in code: ``PriceTable.from_mapping({"qwen-plus": {"input_per_1m": 0.8, "output_per_1m": 2}})``
* from a JSON file: ``PriceTable.from_json(path)``, or set ``JUDGE_PRICES=/path/prices.json``
  and use ``PriceTable.from_env()`` (what :class:`~judge.backends.ResilientBackend` does when
  given no table).

A file/mapping is either flat (``{"model": {...}}``) or ``{"currency": "USD", "models":
{...}}``; each entry gives ``input_per_1m``/``output_per_1m`` or ``input_per_1k``/
``output_per_1k``. Entries extend the default table when the currency matches it and
replace it otherwise (prices in two currencies are never mixed).

A model is priced by its exact id, else by the longest table key that prefixes it at a
``-`` boundary (``qwen-plus-2025-01-25`` and ``qwen-plus-latest`` cost what ``qwen-plus``
costs). A spec prefix (``qwen:``, ``openai:``) is ignored. Unknown models cost 0.0 and
:meth:`PriceTable.price_for` returns None so callers can say the cost is unknown.

A backend that runs on this machine says so itself (``free = True``: the embedded judge);
:class:`~judge.backends.ResilientBackend` then counts its calls at 0.0 without a table
entry, whatever the model file is called.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.backends._base import ConfigurationError, Usage

__all__ = ["DEFAULT_CURRENCY", "ModelPrice", "PriceTable"]

DEFAULT_CURRENCY = "CNY"
PRICES_ENV = "JUDGE_PRICES"
_SPEC_PREFIXES = ("qwen:", "openai:", "local:", "deepeval:", "langchain:", "fake:")


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Price of one model, in the table's currency per million tokens."""

    input_per_1m: float
    output_per_1m: float

    def cost(self, usage: Usage) -> float:
        return (
            usage.prompt_tokens * self.input_per_1m + usage.completion_tokens * self.output_per_1m
        ) / 1_000_000


# CNY per 1M tokens (input, output), Model Studio list prices for the base tier.
_DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "qwen-turbo": (0.3, 0.6),
    "qwen-flash": (0.15, 1.5),
    "qwen-plus": (0.8, 2.0),
    "qwen-max": (2.4, 9.6),
    "qwen-long": (0.5, 2.0),
    "qwen3-max": (6.0, 24.0),
    "qwen-coder-plus": (3.5, 7.0),
    "qwen-coder-turbo": (2.0, 6.0),
    "qwen2.5-72b-instruct": (4.0, 12.0),
    "qwen2.5-32b-instruct": (2.0, 6.0),
    "qwen2.5-14b-instruct": (1.0, 3.0),
    "qwen2.5-7b-instruct": (0.5, 1.0),
    "qwen2.5-3b-instruct": (0.3, 0.9),
    "qwen2-72b-instruct": (5.0, 10.0),
    "qwen2-7b-instruct": (1.0, 2.0),
}


class PriceTable:
    """Model id → :class:`ModelPrice`, in one currency."""

    def __init__(
        self, prices: Mapping[str, ModelPrice] | None = None, *, currency: str = DEFAULT_CURRENCY
    ) -> None:
        self.currency = currency
        self._prices: dict[str, ModelPrice] = dict(prices or {})

    def __repr__(self) -> str:
        return f"PriceTable({len(self._prices)} models, currency={self.currency!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PriceTable):
            return NotImplemented
        return self.currency == other.currency and self._prices == other._prices

    __hash__ = None  # type: ignore[assignment]

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted(self._prices))

    @classmethod
    def default(cls) -> PriceTable:
        """The built-in table (CNY per 1M tokens for common Qwen models)."""
        return cls(
            {m: ModelPrice(i, o) for m, (i, o) in _DEFAULT_PRICES.items()},
            currency=DEFAULT_CURRENCY,
        )

    @classmethod
    def from_mapping(
        cls,
        mapping: Mapping[str, Any],
        *,
        currency: str | None = None,
        extend_default: bool = True,
        source: str = "price mapping",
    ) -> PriceTable:
        """Build a table from a mapping (see the module docstring for the format).

        ``currency`` overrides the mapping's own ``currency`` key. With ``extend_default``
        the entries are laid over the default table when the currencies agree.
        """
        if not isinstance(mapping, Mapping):
            raise ConfigurationError(f"{source}: expected a JSON object of model prices")
        entries: Any = mapping
        declared = currency
        if "models" in mapping and isinstance(mapping.get("models"), Mapping):
            entries = mapping["models"]
            raw_currency = mapping.get("currency")
            if declared is None and raw_currency is not None:
                if not isinstance(raw_currency, str) or not raw_currency:
                    raise ConfigurationError(f"{source}: field 'currency': expected a string")
                declared = raw_currency
        currency_final = declared or DEFAULT_CURRENCY
        prices: dict[str, ModelPrice] = {}
        if extend_default and currency_final == DEFAULT_CURRENCY:
            prices.update(cls.default()._prices)
        for model, entry in entries.items():
            prices[str(model)] = _parse_entry(str(model), entry, source)
        return cls(prices, currency=currency_final)

    @classmethod
    def from_json(cls, path: str | Path, *, extend_default: bool = True) -> PriceTable:
        """Read a price table from a JSON file."""
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigurationError(f"{p}: cannot read price table: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{p}:{exc.lineno}: invalid JSON in price table: {exc.msg}") from None
        return cls.from_mapping(data, extend_default=extend_default, source=str(p))

    @classmethod
    def from_env(cls) -> PriceTable:
        """The default table, overridden by the JSON file named in ``$JUDGE_PRICES`` if set."""
        path = os.environ.get(PRICES_ENV)
        if path:
            return cls.from_json(path)
        return cls.default()

    def with_prices(self, mapping: Mapping[str, Any]) -> PriceTable:
        """A copy of this table with ``mapping``'s entries (same format) laid over it."""
        prices = dict(self._prices)
        for model, entry in mapping.items():
            prices[str(model)] = _parse_entry(str(model), entry, "price mapping")
        return PriceTable(prices, currency=self.currency)

    def to_mapping(self) -> dict[str, Any]:
        """The table in the format :meth:`from_mapping` reads."""
        return {
            "currency": self.currency,
            "models": {
                m: {"input_per_1m": p.input_per_1m, "output_per_1m": p.output_per_1m}
                for m, p in sorted(self._prices.items())
            },
        }

    def price_for(self, model: str) -> ModelPrice | None:
        """The price of ``model``: exact id, else the longest key prefixing it at a ``-``."""
        name = model.strip()
        for prefix in _SPEC_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        lowered = name.lower()
        exact = self._prices.get(name) or self._prices.get(lowered)
        if exact is not None:
            return exact
        best: str | None = None
        for key in self._prices:
            k = key.lower()
            at_boundary = lowered.startswith(k) and len(lowered) > len(k) and lowered[len(k)] == "-"
            if at_boundary and (best is None or len(k) > len(best)):
                best = key
        return self._prices[best] if best is not None else None

    def cost_of(self, model: str, usage: Usage) -> float:
        """Cost of ``usage`` tokens on ``model`` in :attr:`currency`; 0.0 when unpriced."""
        price = self.price_for(model)
        return price.cost(usage) if price is not None else 0.0


def _parse_entry(model: str, entry: Any, source: str) -> ModelPrice:
    if not isinstance(entry, Mapping):
        raise ConfigurationError(
            f"{source}: model {model!r}: expected an object with input_per_1m/output_per_1m"
        )
    values: dict[str, float] = {}
    for side in ("input", "output"):
        per_1m = entry.get(f"{side}_per_1m")
        per_1k = entry.get(f"{side}_per_1k")
        if per_1m is not None and per_1k is not None:
            raise ConfigurationError(
                f"{source}: model {model!r}: give {side}_per_1m or {side}_per_1k, not both"
            )
        raw, scale, field = (
            (per_1m, 1.0, f"{side}_per_1m") if per_1m is not None else (per_1k, 1000.0, f"{side}_per_1k")
        )
        if raw is None:
            raise ConfigurationError(f"{source}: model {model!r}: field '{side}_per_1m' is missing")
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
            raise ConfigurationError(
                f"{source}: model {model!r}: field '{field}': expected a non-negative number, got {raw!r}"
            )
        values[side] = float(raw) * scale
    unknown = set(entry) - {"input_per_1m", "output_per_1m", "input_per_1k", "output_per_1k"}
    if unknown:
        raise ConfigurationError(
            f"{source}: model {model!r}: unknown field(s) {', '.join(sorted(map(str, unknown)))}"
        )
    return ModelPrice(values["input"], values["output"])
