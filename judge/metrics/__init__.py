"""Ranking metrics: pure per-query functions, the measure registry, TREC-style evaluation
and significance tests.

The registry (:func:`parse_measure`, :func:`register_measure`) is the one vocabulary of
measures in ``judge``: ``judge trec`` evaluates runs with it under trec_eval's conventions,
and every figure computed on an LLM judge's verdicts (``JudgeResult``, ``judge score``
records and summaries, stability reports) is a registry measure parsed with the label-free
conventions of :data:`LABEL_FREE` and computed on a :class:`JudgedList`.
"""

from typing import TYPE_CHECKING

from judge.metrics._answer import ANSWER_METRICS, answer_scores, gen_eval
from judge.metrics._diversity import DIVERSITY_CONVENTIONS
from judge.metrics._evaluate import (
    Evaluation,
    JudgedQuery,
    Value,
    evaluate,
    format_trec_eval,
    ordered_measures,
)
from judge.metrics._expected_pooled import EXPECTED_FORMS, expected_pooled_values, has_expected_form
from judge.metrics._expected_ranking import expected_average_precision, expected_ndcg
from judge.metrics._judged import (
    LABEL_FREE,
    JudgedList,
    NamedMeasure,
    judge_measure,
    parse_named_measures,
    split_measure_list,
    truth_measure,
    truth_values,
)
from judge.metrics._measure import (
    MIN_GEO_MEAN,
    Aggregate,
    ApDenominator,
    Conventions,
    IdcgSource,
    Measure,
)
from judge.metrics._measure_parser import parse_measure, parse_measure_args, parse_measures
from judge.metrics._ppi import (
    COVERAGE_GOAL,
    LINEAR_MEASURES,
    MEASURED_COVERAGE,
    MIN_LABELS,
    PpiFigure,
    PpiInterval,
    calibrated_effects,
    inclusion_probabilities,
    interval_valid,
    is_linear,
    label_effects,
    poisson_draw,
    ppi_figure,
    rectified_mean,
)
from judge.metrics._ppi_paired import (
    DifferingPairs,
    PairedDifference,
    differing_pairs,
    paired_difference,
)
from judge.metrics._query import RankedQuery
from judge.metrics._ranking import (
    NOT_IN_POOL,
    UNJUDGED_IN_POOL,
    Gain,
    UnjudgedPolicy,
    apply_unjudged,
    average_precision,
    binarize,
    dcg,
    f1_at_k,
    gain_values,
    hit_rate,
    mean_reciprocal_rank_all_hits,
    ndcg,
    precision_at_k,
    r_precision,
    recall_at_k,
    reciprocal_rank,
    set_precision,
    success_at_k,
)
from judge.metrics._redundancy import REDUNDANCY_CONVENTIONS, redundancy_by_k
from judge.metrics._registry import (
    NICKNAMES,
    available_measures,
    measure_family,
    register_measure,
    registry_version,
    unregister_measure,
)
from judge.metrics._scales import (
    MAX_GRADE,
    SCALES,
    Scale,
    ScaleError,
    ScaleMapping,
    check_label,
    check_scale,
    resolve_mapping,
    scale_of_labels,
)
from judge.metrics._significance import (
    EXACT_LIMIT,
    INTERVAL_EXACT_LIMIT,
    MC_MARGIN,
    PERMUTATION_CONVENTION,
    UNDECIDED,
    Comparison,
    PairedTest,
    bootstrap_ci,
    compare_scores,
    exact_sign_flip_p,
    holm,
    holm_adjust,
    holm_with_se,
    paired_t_test,
    percentile_bootstrap_mean,
    permutation_interval,
    permutation_test,
    significance,
)
from judge.metrics._source_quality_recall import (
    LOW_QUALITY_MAX,
    ClaimSupport,
    claim_recall_at_k,
    claim_status_at_k,
    low_quality_share_at_k,
    quality_weighted_ndcg,
    source_quality_at_k,
)

__all__ = [
    "ANSWER_METRICS",
    "COVERAGE_GOAL",
    "DIVERSITY_CONVENTIONS",
    "EXACT_LIMIT",
    "EXPECTED_FORMS",
    "INTERVAL_EXACT_LIMIT",
    "LABEL_FREE",
    "LINEAR_MEASURES",
    "LOW_QUALITY_MAX",
    "MAX_GRADE",
    "MC_MARGIN",
    "MEASURED_COVERAGE",
    "MIN_GEO_MEAN",
    "MIN_LABELS",
    "NICKNAMES",
    "NOT_IN_POOL",
    "PERMUTATION_CONVENTION",
    "REDUNDANCY_CONVENTIONS",
    "SCALES",
    "UNDECIDED",
    "UNJUDGED_IN_POOL",
    "Aggregate",
    "ApDenominator",
    "ClaimSupport",
    "Comparison",
    "Conventions",
    "DifferingPairs",
    "Evaluation",
    "Gain",
    "IdcgSource",
    "JudgedList",
    "JudgedQuery",
    "Measure",
    "NamedMeasure",
    "PairedDifference",
    "PairedTest",
    "PpiFigure",
    "PpiInterval",
    "RankedQuery",
    "Scale",
    "ScaleError",
    "ScaleMapping",
    "UnjudgedPolicy",
    "Value",
    "answer_scores",
    "apply_unjudged",
    "available_measures",
    "average_precision",
    "binarize",
    "bootstrap_ci",
    "calibrated_effects",
    "check_label",
    "check_scale",
    "claim_recall_at_k",
    "claim_status_at_k",
    "compare_scores",
    "dcg",
    "differing_pairs",
    "evaluate",
    "exact_sign_flip_p",
    "expected_average_precision",
    "expected_ndcg",
    "expected_pooled_values",
    "f1_at_k",
    "format_trec_eval",
    "gain_values",
    "gen_eval",
    "has_expected_form",
    "hit_rate",
    "holm",
    "holm_adjust",
    "holm_with_se",
    "inclusion_probabilities",
    "interval_valid",
    "is_linear",
    "judge_measure",
    "label_effects",
    "low_quality_share_at_k",
    "mean_reciprocal_rank_all_hits",
    "measure_family",
    "ndcg",
    "ordered_measures",
    "paired_difference",
    "paired_t_test",
    "parse_measure",
    "parse_measure_args",
    "parse_measures",
    "parse_named_measures",
    "percentile_bootstrap_mean",
    "permutation_interval",
    "permutation_test",
    "poisson_draw",
    "ppi_figure",
    "precision_at_k",
    "quality_weighted_ndcg",
    "r_precision",
    "recall_at_k",
    "reciprocal_rank",
    "rectified_mean",
    "redundancy_by_k",
    "register_measure",
    "registry_version",
    "resolve_mapping",
    "scale_of_labels",
    "set_precision",
    "significance",
    "source_quality_at_k",
    "split_measure_list",
    "success_at_k",
    "truth_measure",
    "truth_values",
    "unregister_measure",
]

# Agreement metrics (judge/metrics/_agreement.py) are imported on first use (PEP 562
# ``__getattr__``): _agreement pulls in scipy.stats and krippendorff, which cost 0.5-2 s at
# start-up that `judge trec` and the ranking metrics do not need.
_AGREEMENT_NAMES = (
    "AgreementUndefinedError",
    "AlphaLevel",
    "KappaWeights",
    "TauVariant",
    "binary_kappa",
    "cohen_kappa",
    "confusion_matrix",
    "exact_agreement",
    "kendall_tau",
    "krippendorff_alpha",
    "roc_auc",
    "spearman_rho",
)
if TYPE_CHECKING:
    from judge.metrics._agreement import AgreementUndefinedError as AgreementUndefinedError
    from judge.metrics._agreement import AlphaLevel as AlphaLevel
    from judge.metrics._agreement import KappaWeights as KappaWeights
    from judge.metrics._agreement import TauVariant as TauVariant
    from judge.metrics._agreement import binary_kappa as binary_kappa
    from judge.metrics._agreement import cohen_kappa as cohen_kappa
    from judge.metrics._agreement import confusion_matrix as confusion_matrix
    from judge.metrics._agreement import exact_agreement as exact_agreement
    from judge.metrics._agreement import kendall_tau as kendall_tau
    from judge.metrics._agreement import krippendorff_alpha as krippendorff_alpha
    from judge.metrics._agreement import roc_auc as roc_auc
    from judge.metrics._agreement import spearman_rho as spearman_rho

__all__ += list(_AGREEMENT_NAMES)


def __getattr__(name: str) -> object:
    if name in _AGREEMENT_NAMES:
        from judge.metrics import _agreement

        value = getattr(_agreement, name)
        globals()[name] = value
        return value
    if name in _REVIEW_NAMES:
        from judge.metrics import _label_agreement as _review

        value = getattr(_review, name)
        globals()[name] = value
        return value
    if name in _ADAPT_NAMES:
        from judge.metrics import _adapt

        value = getattr(_adapt, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'judge.metrics' has no attribute {name!r}")


# Review agreement and calibration (judge/metrics/_label_agreement.py): loaded on first use too.
_REVIEW_NAMES = (
    "BIASED_SAMPLE_NOTE",
    "MIN_CALIBRATION_LABELS",
    "AgreementFigures",
    "AgreementItem",
    "AgreementReport",
    "CalibrationError",
    "CalibrationResult",
    "ReviewerPair",
    "agreement_figures",
    "calibrate_threshold",
    "label_agreement",
    "reviewer_agreement",
)
if TYPE_CHECKING:
    from judge.metrics._label_agreement import BIASED_SAMPLE_NOTE as BIASED_SAMPLE_NOTE
    from judge.metrics._label_agreement import MIN_CALIBRATION_LABELS as MIN_CALIBRATION_LABELS
    from judge.metrics._label_agreement import AgreementFigures as AgreementFigures
    from judge.metrics._label_agreement import AgreementItem as AgreementItem
    from judge.metrics._label_agreement import AgreementReport as AgreementReport
    from judge.metrics._label_agreement import CalibrationError as CalibrationError
    from judge.metrics._label_agreement import CalibrationResult as CalibrationResult
    from judge.metrics._label_agreement import ReviewerPair as ReviewerPair
    from judge.metrics._label_agreement import agreement_figures as agreement_figures
    from judge.metrics._label_agreement import calibrate_threshold as calibrate_threshold
    from judge.metrics._label_agreement import label_agreement as label_agreement
    from judge.metrics._label_agreement import reviewer_agreement as reviewer_agreement

__all__ += list(_REVIEW_NAMES)

# The rule learned from a run's labels (``--adapt``, judge/metrics/_adapt.py): on first use too.
_ADAPT_NAMES = (
    "ADAPT_METHOD",
    "MIN_ADAPT_LABELS",
    "MIN_ADAPT_QUERIES",
    "MIN_QUERY_PASSAGES",
    "RELEVANCE_FEEDBACK",
    "Adaptation",
    "adaptation_features",
    "centre_by_query",
    "fit_adaptation",
    "fit_logistic",
    "relevance_feedback",
)
if TYPE_CHECKING:
    from judge.metrics._adapt import ADAPT_METHOD as ADAPT_METHOD
    from judge.metrics._adapt import MIN_ADAPT_LABELS as MIN_ADAPT_LABELS
    from judge.metrics._adapt import MIN_ADAPT_QUERIES as MIN_ADAPT_QUERIES
    from judge.metrics._adapt import MIN_QUERY_PASSAGES as MIN_QUERY_PASSAGES
    from judge.metrics._adapt import RELEVANCE_FEEDBACK as RELEVANCE_FEEDBACK
    from judge.metrics._adapt import Adaptation as Adaptation
    from judge.metrics._adapt import adaptation_features as adaptation_features
    from judge.metrics._adapt import centre_by_query as centre_by_query
    from judge.metrics._adapt import fit_adaptation as fit_adaptation
    from judge.metrics._adapt import fit_logistic as fit_logistic
    from judge.metrics._adapt import relevance_feedback as relevance_feedback

__all__ += list(_ADAPT_NAMES)
