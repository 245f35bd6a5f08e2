"""The one rule for a number that enters from outside (an engine's hit score, a knob's
value, a bound): a real number (a bool is not one), finite, an integer within SQLite's and
PostgreSQL's int64, and within the range the caller gives."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def number_problem(value: Any, *, low: float | None = None, high: float | None = None) -> str | None:
    """Why ``value`` cannot be taken as a number here (None: it can): not an int, float or
    Decimal, not finite (NaN, Infinity, an integer too large for a float), an integer
    outside int64, or outside ``[low, high]``. The message never repeats a huge value whole."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return f"must be a number, got {_shown(value)}"
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return f"an integer of {len(str(abs(value)))} digits is out of range (64-bit integers only)"
    try:
        number = float(value)
    except (OverflowError, ValueError):
        number = math.inf
    if not math.isfinite(number):
        return f"must be a finite number, got {_shown(value)}"
    if low is not None and high is not None and not low <= number <= high:
        return f"must be between {low:g} and {high:g}, got {_shown(value)}"
    if low is not None and number < low:
        return f"must be >= {low:g}, got {_shown(value)}"
    if high is not None and number > high:
        return f"must be <= {high:g}, got {_shown(value)}"
    return None


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, Decimal) else str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
