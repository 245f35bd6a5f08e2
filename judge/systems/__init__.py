"""Comparing retrieval systems on one judged pool (``judge compare-systems``).

Per query, the union of every system's passages (or each one's top ``depth``) is judged
once through the batch engine of ``judge score``; every system is then scored against that
pool exactly as ``judge trec`` scores a run against qrels, and compared with the first
(the baseline) with ``judge compare``'s paired tests. See :func:`compare_systems`.
"""

from judge.systems._adapt_features import (
    FEEDBACK,
    SIMILARITY,
    dataset_features,
    dataset_texts,
    default_encoder,
    encoder_features,
)
from judge.systems._adapt_pool import ADAPT_ORDER_NOTE, check_pool_adapt, pool_adapt_labels
from judge.systems._comparison import ComparisonReport, ReportFolder
from judge.systems._engine_nightly import (
    SEARCH_HISTORY_SCHEMA,
    SearchNightlyConfig,
    SearchNightlyOutcome,
    has_search_section,
    load_search_nightly,
    run_search_nightly,
)
from judge.systems._example_bank import check_pool_examples, pool_example_bank, with_neighbours
from judge.systems._expected import DEFAULT_TEST_FIGURE, TEST_FIGURES, TestFigure, check_test_figure
from judge.systems._inputs import Inputs, check_name, parse_system_args, read_systems
from judge.systems._label_scale import map_human
from judge.systems._model import (
    SCHEMA,
    ExperimentConfiguration,
    ExperimentSummary,
    PoolSummary,
    SystemComparison,
    SystemsReport,
    SystemSummary,
)
from judge.systems._options import (
    SystemsOptions,
    pool_scale,
    query_texts,
    read_human_labels,
    read_qrels_file,
    systems_query_texts,
)
from judge.systems._pair_view import comparison_pair, pair_view
from judge.systems._pool import PoolRun, PoolVerdicts, build_pool, pool_dataset_lines
from judge.systems._pool_export import PoolExport, PoolListing, pool_exchange_rows, pool_judgment_list
from judge.systems._pooled_call import PooledKeywords, systems_options_of
from judge.systems._ppi_report import check_sample_pairs
from judge.systems._reasons import REASONS_DIR, explain_pairs, read_reasons, reasons_config
from judge.systems._run import (
    DEFAULT_REPORT_DIR,
    acompare_systems,
    compare_systems,
    run_compare_systems,
    run_comparison,
)
from judge.systems._scoring import DEFAULT_MEASURES, parse_measures
from judge.systems._sweep import (
    DEFAULT_EXPERIMENT_DIR,
    EXPERIMENT_COMMAND,
    EXPERIMENT_MEASURES,
    ExperimentOptions,
    aexperiment,
    experiment,
    plan_configurations,
    run_experiment,
)
from judge.systems._sweep_space import Knob, parse_grid, point_name

__all__ = [
    "ADAPT_ORDER_NOTE",
    "DEFAULT_EXPERIMENT_DIR",
    "DEFAULT_MEASURES",
    "DEFAULT_REPORT_DIR",
    "DEFAULT_TEST_FIGURE",
    "EXPERIMENT_COMMAND",
    "EXPERIMENT_MEASURES",
    "FEEDBACK",
    "REASONS_DIR",
    "SCHEMA",
    "SEARCH_HISTORY_SCHEMA",
    "SIMILARITY",
    "TEST_FIGURES",
    "ComparisonReport",
    "ExperimentConfiguration",
    "ExperimentOptions",
    "ExperimentSummary",
    "Inputs",
    "Knob",
    "PoolExport",
    "PoolListing",
    "PoolRun",
    "PoolSummary",
    "PoolVerdicts",
    "PooledKeywords",
    "ReportFolder",
    "SearchNightlyConfig",
    "SearchNightlyOutcome",
    "SystemComparison",
    "SystemSummary",
    "SystemsOptions",
    "SystemsReport",
    "TestFigure",
    "acompare_systems",
    "aexperiment",
    "build_pool",
    "check_name",
    "check_pool_adapt",
    "check_pool_examples",
    "check_sample_pairs",
    "check_test_figure",
    "compare_systems",
    "comparison_pair",
    "dataset_features",
    "dataset_texts",
    "default_encoder",
    "encoder_features",
    "experiment",
    "explain_pairs",
    "has_search_section",
    "load_search_nightly",
    "map_human",
    "pair_view",
    "parse_grid",
    "parse_measures",
    "parse_system_args",
    "plan_configurations",
    "point_name",
    "pool_adapt_labels",
    "pool_dataset_lines",
    "pool_example_bank",
    "pool_exchange_rows",
    "pool_judgment_list",
    "pool_scale",
    "query_texts",
    "read_human_labels",
    "read_qrels_file",
    "read_reasons",
    "read_systems",
    "reasons_config",
    "run_compare_systems",
    "run_comparison",
    "run_experiment",
    "run_search_nightly",
    "systems_options_of",
    "systems_query_texts",
    "with_neighbours",
]
