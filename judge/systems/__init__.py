"""Comparing retrieval systems on one judged pool (``judge compare-systems``).

Per query, the union of every system's passages (or each one's top ``depth``) is judged
once through the batch engine of ``judge score``; every system is then scored against that
pool exactly as ``judge trec`` scores a run against qrels, and compared with the first
(the baseline) with ``judge compare``'s paired tests. See :func:`compare_systems`.
"""

from judge.systems._comparison import ComparisonReport, ReportFolder
from judge.systems._inputs import Inputs, check_name, parse_system_args, read_systems
from judge.systems._label_scale import map_human
from judge.systems._model import SCHEMA, PoolSummary, SystemComparison, SystemsReport, SystemSummary
from judge.systems._options import SystemsOptions, pool_scale, read_human_labels
from judge.systems._pool import PoolRun, build_pool, pool_dataset_lines
from judge.systems._run import (
    DEFAULT_REPORT_DIR,
    acompare_systems,
    compare_systems,
    run_compare_systems,
    run_comparison,
)
from judge.systems._scoring import DEFAULT_MEASURES, parse_measures

__all__ = [
    "DEFAULT_MEASURES",
    "DEFAULT_REPORT_DIR",
    "SCHEMA",
    "ComparisonReport",
    "Inputs",
    "PoolRun",
    "PoolSummary",
    "ReportFolder",
    "SystemComparison",
    "SystemSummary",
    "SystemsOptions",
    "SystemsReport",
    "acompare_systems",
    "build_pool",
    "check_name",
    "compare_systems",
    "map_human",
    "parse_measures",
    "parse_system_args",
    "pool_dataset_lines",
    "pool_scale",
    "read_human_labels",
    "read_systems",
    "run_compare_systems",
    "run_comparison",
]
