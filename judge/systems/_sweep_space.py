"""The configurations of an experiment: ``--grid`` knobs, their points, trial spaces, names.

``--grid NAME=V1,V2,...`` lists a knob's values (each read as a TOML value: ``0.9`` is a
float, ``3`` an integer, ``true`` a boolean, anything else a string); ``--grid NAME=LOW:HIGH``
is a range, which only ``--trials`` can sample (integers when both ends are integers, else
floats). The grid's points are the product of the lists, first knob slowest, each applied to
the base configuration's ``[params]``. A configuration's name is the base configuration's
name followed by its knob values (``bm25-k1_0.9-b_0.3``), so it can be a system name (a
file name and a TREC run tag); its identity is the configuration's hash.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judge.io import InputError

_KNOB = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_UNSAFE = re.compile(r'[\s/\\=:*?"<>|]+')

Value = bool | int | float | str


@dataclass(frozen=True)
class Knob:
    """One knob of ``--grid``: its ``values`` (a list), or a range ``low``..``high``
    (``integer``: both ends integers) that only trials sample."""

    name: str
    values: tuple[Value, ...] | None = None
    low: float | None = None
    high: float | None = None
    integer: bool = False

    @property
    def is_range(self) -> bool:
        return self.values is None


def parse_value(text: str, *, field: str = "--grid") -> Value:
    """One knob value read as TOML (``0.9``, ``3``, ``true``, ``"x"``), else the bare string."""
    raw = text.strip()
    if not raw:
        raise InputError("an empty value", field=field)
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"value {raw!r} is not finite", field=field)
    if not isinstance(value, bool | int | float | str):
        raise InputError(f"value {raw!r} must be a number, a boolean or a string", field=field)
    return value


def _number(text: str, item: str) -> float | int:
    value = parse_value(text)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{item!r}: a range's ends must be numbers, got {text.strip()!r}", field="--grid")
    return value


def parse_knob(item: str) -> Knob:
    """``NAME=V1,V2`` or ``NAME=LOW:HIGH`` (see the module docstring)."""
    name, sep, rest = item.partition("=")
    name = name.strip()
    if not sep or not _KNOB.match(name):
        raise InputError(f"expected NAME=V1,V2,... or NAME=LOW:HIGH, got {item!r}", field="--grid")
    if not rest.strip():
        raise InputError(f"{item!r}: no values after '='", field="--grid")
    if ":" in rest and "," not in rest:
        lo_text, _, hi_text = rest.partition(":")
        low, high = _number(lo_text, item), _number(hi_text, item)
        if not low < high:
            raise InputError(f"{item!r}: a range needs LOW < HIGH", field="--grid")
        integer = isinstance(low, int) and isinstance(high, int)
        return Knob(name, low=float(low), high=float(high), integer=integer)
    values: list[Value] = []
    for text in rest.split(","):
        value = parse_value(text)
        if value in values:
            raise InputError(f"{item!r}: value {text.strip()!r} given twice", field="--grid")
        values.append(value)
    return Knob(name, values=tuple(values))


def parse_grid(items: Iterable[str] | Mapping[str, Any], *, trials: bool = False) -> list[Knob]:
    """Every ``--grid`` item (or a mapping ``{name: [values] | (low, high)}`` from Python),
    checked: one entry per knob; ranges only with ``trials``."""
    knobs: list[Knob] = []
    if isinstance(items, Mapping):
        items = [_item_of(name, spec) for name, spec in items.items()]
    for item in items:
        knob = parse_knob(item)
        if any(k.name == knob.name for k in knobs):
            raise InputError(f"knob {knob.name!r} given twice", field="--grid")
        if knob.is_range and not trials:
            raise InputError(
                f"{item!r}: a range LOW:HIGH can only be sampled with --trials; list the values "
                "(NAME=V1,V2,...) for a grid",
                field="--grid",
            )
        knobs.append(knob)
    return knobs


def _item_of(name: str, spec: Any) -> str:
    """A Python grid entry as its command-line text."""
    if isinstance(spec, tuple) and len(spec) == 2:
        return f"{name}={_text(spec[0])}:{_text(spec[1])}"
    if isinstance(spec, list | tuple):
        return f"{name}=" + ",".join(_text(v) for v in spec)
    return f"{name}={_text(spec)}"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return str(value)


def grid_points(knobs: Sequence[Knob]) -> list[dict[str, Value]]:
    """The product of the knobs' values (first knob slowest)."""
    lists = [[(k.name, v) for v in k.values or ()] for k in knobs]
    return [dict(point) for point in itertools.product(*lists)]


def format_value(value: Any) -> str:
    """A knob value in a configuration's name (floats to 4 significant digits)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def safe_name(text: str) -> str:
    """``text`` usable as a system name: unsafe characters runs become ``_``, no leading dot."""
    cleaned = _UNSAFE.sub("_", text).strip("_") or "config"
    return "c" + cleaned if cleaned.startswith(".") else cleaned


def point_name(base: str, point: Mapping[str, Any]) -> str:
    """``base-k1_0.9-b_0.3``: the base configuration's name and the point's knob values."""
    parts = [safe_name(base), *(safe_name(f"{k}_{format_value(v)}") for k, v in point.items())]
    return "-".join(parts)


def unique_names(names: Sequence[str]) -> list[str]:
    """``names`` with repeats suffixed ``-2``, ``-3``... (first one kept as is)."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for name in names:
        n = seen.get(name, 0) + 1
        seen[name] = n
        candidate = name if n == 1 else f"{name}-{n}"
        while candidate in out:
            n += 1
            candidate = f"{name}-{n}"
        out.append(candidate)
    return out


def varying_knobs(params: Sequence[Mapping[str, Any]]) -> list[str]:
    """The knobs whose value differs between configurations (first-seen order)."""
    keys: dict[str, None] = {}
    for p in params:
        for k in p:
            keys.setdefault(k, None)
    missing = object()
    return [k for k in keys if len({repr(p.get(k, missing)) for p in params}) > 1]


__all__ = [
    "Knob",
    "format_value",
    "grid_points",
    "parse_grid",
    "parse_knob",
    "parse_value",
    "point_name",
    "safe_name",
    "unique_names",
    "varying_knobs",
]
