"""Stability runs: judge a dataset K times and measure how much the figures move.

:func:`run_stability` is the harness, :func:`write_report` writes ``report.json``,
``report.md`` and the plots, :func:`compare_settings` measures the variance-reduction
settings side by side, :func:`run_nightly` is the nightly job (history JSONL + trend plot).
Pure statistics (spread, CV, Fleiss' kappa, Krippendorff's alpha, bootstrap) live in
:mod:`judge.stability._stats`.
"""

from judge.stability._harness import (
    REPORT_SCHEMA,
    RunResult,
    StabilityMetric,
    StabilityOptions,
    StabilityReport,
    analyse,
    load_records,
    parse_metric,
    run_stability,
    run_stability_sync,
)
from judge.stability._nightly import (
    HISTORY_SCHEMA,
    NightlyConfig,
    NightlyOutcome,
    append_history,
    git_commit,
    history_entry,
    load_nightly_config,
    plot_trend,
    read_history,
    redraw_trend,
    run_nightly,
)
from judge.stability._report import (
    plot_map_per_run,
    plot_query_ranges,
    render_markdown,
    require_plots,
    summary_lines,
    write_report,
)
from judge.stability._settings import (
    SETTING_NAMES,
    Setting,
    SettingOutcome,
    compare_settings,
    render_settings_markdown,
    variance_settings,
)
from judge.stability._stats import (
    Interval,
    bootstrap_mean_ci,
    coefficient_of_variation,
    deviation_rate,
    fleiss_kappa,
    fleiss_kappa_from_labels,
    flip_rate,
    krippendorff_alpha,
    queries_needed,
    relative_spread,
)

__all__ = [
    "HISTORY_SCHEMA",
    "REPORT_SCHEMA",
    "SETTING_NAMES",
    "Interval",
    "NightlyConfig",
    "NightlyOutcome",
    "RunResult",
    "Setting",
    "SettingOutcome",
    "StabilityMetric",
    "StabilityOptions",
    "StabilityReport",
    "analyse",
    "append_history",
    "bootstrap_mean_ci",
    "coefficient_of_variation",
    "compare_settings",
    "deviation_rate",
    "fleiss_kappa",
    "fleiss_kappa_from_labels",
    "flip_rate",
    "git_commit",
    "history_entry",
    "krippendorff_alpha",
    "load_nightly_config",
    "load_records",
    "parse_metric",
    "plot_map_per_run",
    "plot_query_ranges",
    "plot_trend",
    "queries_needed",
    "read_history",
    "redraw_trend",
    "relative_spread",
    "render_markdown",
    "render_settings_markdown",
    "require_plots",
    "run_nightly",
    "run_stability",
    "run_stability_sync",
    "summary_lines",
    "variance_settings",
    "write_report",
]
