"""The measure API under one module name: re-exports :mod:`judge.metrics._measure`,
:mod:`judge.metrics._query`, :mod:`judge.metrics._registry` and
:mod:`judge.metrics._measure_parser`. Import these names from :mod:`judge.metrics`."""

from judge.metrics._measure import (
    MIN_GEO_MEAN,
    Aggregate,
    ApDenominator,
    Conventions,
    IdcgSource,
    Measure,
)
from judge.metrics._measure_parser import parse_measure, parse_measure_args, parse_measures
from judge.metrics._query import RankedQuery
from judge.metrics._registry import (
    NICKNAMES,
    available_measures,
    measure_family,
    register_measure,
    registry_version,
    unregister_measure,
)

__all__ = [
    "MIN_GEO_MEAN",
    "NICKNAMES",
    "Aggregate",
    "ApDenominator",
    "Conventions",
    "IdcgSource",
    "Measure",
    "RankedQuery",
    "available_measures",
    "measure_family",
    "parse_measure",
    "parse_measure_args",
    "parse_measures",
    "register_measure",
    "registry_version",
    "unregister_measure",
]
