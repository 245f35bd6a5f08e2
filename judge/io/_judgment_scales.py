"""The rating scales of the judgment lists other tools write, and the one stated mapping of
each onto the label store's two scales (``binary`` 0/1, ``graded`` 0-3).

=============  ==========================  ==============================================
scale          ratings                     on the label store
=============  ==========================  ==============================================
``binary``     0, 1                        binary, as they are
``graded-0-3`` 0, 1, 2, 3                  graded, as they are (TREC/NIST grades)
``quepid-0-3`` 0, 1, 2, 3                  graded, as they are (Quepid's default scorer scale)
``quepid-1-10`` 1 .. 10 (integers)         graded ``round((r - 1) / 3)``: 1-2 -> 0, 3-5 -> 1,
                                           6-8 -> 2, 9-10 -> 3 (Quepid's legacy 1-10 scale)
``srw-0-1``    0 .. 1 (decimals)           graded ``floor(3 r + 1/2)``: [0, 1/6) -> 0,
                                           [1/6, 1/2) -> 1, [1/2, 5/6) -> 2, [5/6, 1] -> 3
                                           (the scores of SRW's LLM judgments)
=============  ==========================  ==============================================

Going out, a grade ``g`` is written on the scale asked for by the inverse point of its bin:
``quepid-1-10`` ``1 + 3 g`` (1, 4, 7, 10), ``srw-0-1`` ``g / 3`` with three decimals
(0.000, 0.333, 0.667, 1.000), so what is written reads back as the same grade.

Detection (:func:`detect_scale`) only where the ratings leave one reading: a rating that is
not an integer and every rating in [0, 1] is ``srw-0-1``; integers with a 0 and a 2 or 3 are
``graded-0-3``; integers from 1 with one above 3 are ``quepid-1-10``. Ratings 0/1 only (binary,
0-3 or SRW?) or 1-3 only (0-3 or 1-10?) are ambiguous: the scale must then be given.
Ratings are read as :class:`~decimal.Decimal` from their text, so a bin edge is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Literal

from judge.io._errors import InputError

ExchangeScale = Literal["binary", "graded-0-3", "quepid-0-3", "quepid-1-10", "srw-0-1"]
EXCHANGE_SCALES: tuple[ExchangeScale, ...] = ("quepid-0-3", "quepid-1-10", "srw-0-1", "graded-0-3", "binary")

__all__ = ["EXCHANGE_SCALES", "ExchangeScale", "ScaleRule", "detect_scale", "scale_rule"]

_THREE = Decimal(3)
_HALF = Decimal("0.5")


@dataclass(frozen=True)
class ScaleRule:
    """One exchange scale: its range, whether ratings are integers, the label store's scale
    its ratings land on, and the mapping as one line (recorded with every imported label)."""

    name: ExchangeScale
    low: Decimal
    high: Decimal
    integers: bool
    store_scale: Literal["binary", "graded"]
    rule: str

    def problem(self, rating: Decimal) -> str | None:
        """Why ``rating`` is not on this scale (None: it is)."""
        if not rating.is_finite() or not self.low <= rating <= self.high:
            return f"rating {rating} is not in [{self.low}, {self.high}] (scale {self.name})"
        if self.integers and rating != rating.to_integral_value():
            return f"rating {rating} is not an integer (scale {self.name})"
        return None

    def to_store(self, rating: Decimal) -> int:
        """``rating`` (checked with :meth:`problem` first) on the label store's scale."""
        if self.name == "quepid-1-10":
            return int(((rating - 1) / _THREE + _HALF).to_integral_value(rounding=ROUND_FLOOR))
        if self.name == "srw-0-1":
            return int((rating * _THREE + _HALF).to_integral_value(rounding=ROUND_FLOOR))
        return int(rating)

    def from_store(self, grade: int) -> str:
        """A label store value (0/1 binary or 0-3 graded, as :attr:`store_scale`) written on
        this scale: the inverse point of its bin."""
        if self.name == "quepid-1-10":
            return str(1 + 3 * grade)
        if self.name == "srw-0-1":
            return f"{Decimal(grade) / _THREE:.3f}"
        return str(grade)


_RULES: dict[str, ScaleRule] = {
    "binary": ScaleRule("binary", Decimal(0), Decimal(1), True, "binary", "binary 0/1 kept as they are"),
    "graded-0-3": ScaleRule(
        "graded-0-3", Decimal(0), Decimal(3), True, "graded", "graded 0-3 kept as they are"
    ),
    "quepid-0-3": ScaleRule(
        "quepid-0-3", Decimal(0), Decimal(3), True, "graded", "Quepid 0-3 kept as graded 0-3"
    ),
    "quepid-1-10": ScaleRule(
        "quepid-1-10",
        Decimal(1),
        Decimal(10),
        True,
        "graded",
        "Quepid 1-10 to graded round((r-1)/3): 1-2 -> 0, 3-5 -> 1, 6-8 -> 2, 9-10 -> 3",
    ),
    "srw-0-1": ScaleRule(
        "srw-0-1",
        Decimal(0),
        Decimal(1),
        False,
        "graded",
        "SRW 0-1 to graded floor(3r+1/2): [0,1/6) -> 0, [1/6,1/2) -> 1, [1/2,5/6) -> 2, [5/6,1] -> 3",
    ),
}


def scale_rule(name: str, *, field: str = "--scale") -> ScaleRule:
    """The rule of an exchange scale (``graded`` is ``graded-0-3``); :class:`InputError`
    naming ``field`` for another name."""
    rule = _RULES.get("graded-0-3" if name == "graded" else name)
    if rule is None:
        raise InputError(f"unknown scale {name!r}; one of {', '.join(EXCHANGE_SCALES)}", field=field)
    return rule


def detect_scale(
    ratings: Sequence[tuple[int | None, Decimal]], *, path: str, field: str = "--scale"
) -> ScaleRule:
    """The one scale ``ratings`` (``(line, rating)``) can be on, or :class:`InputError`:
    naming ``field`` when several scales fit (say which), naming the line of a rating no
    scale holds."""
    if not ratings:
        raise InputError("no ratings: the scale cannot be told; give it", path=path, field=field)
    for line, r in ratings:
        if not r.is_finite() or r < 0 or r > 10:
            raise InputError(f"rating {r} is on no known scale (0-1, 0-3, 1-10)", path=path, line=line)
    fractions = [(line, r) for line, r in ratings if r != r.to_integral_value()]
    if fractions:
        above = next(((line, r) for line, r in ratings if r > 1), None)
        if above is not None:
            raise InputError(
                f"rating {above[1]} with decimal ratings (line {fractions[0][0]}): only srw-0-1 has "
                "decimals, and it stops at 1",
                path=path,
                line=above[0],
            )
        return _RULES["srw-0-1"]
    values = {int(r) for _, r in ratings}
    top = max(values)
    if top >= 4:
        if 0 in values:
            line = next(line for line, r in ratings if r >= 4)
            raise InputError(
                "ratings 0 and above 3: on no known scale (quepid-1-10 starts at 1, 0-3 stops at 3)",
                path=path,
                line=line,
            )
        return _RULES["quepid-1-10"]
    if top >= 2 and 0 in values:
        return _RULES["graded-0-3"]
    seen = ", ".join(str(v) for v in sorted(values))
    could = (
        "graded-0-3, quepid-0-3 or quepid-1-10" if top >= 2 else "binary, graded-0-3, quepid-0-3 or srw-0-1"
    )
    raise InputError(
        f"ratings {seen} only: the scale is ambiguous ({could}); give it "
        f"(one of {', '.join(EXCHANGE_SCALES)})",
        path=path,
        field=field,
    )
