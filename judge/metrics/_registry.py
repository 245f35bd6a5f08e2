"""The table of measure families: every built-in family in trec_eval's output order with
its parameters, conventions, formula and aggregate; the nicknames that stand for several
families; and the registration of extension families.

Per-query semantics are trec_eval's (9.0.x, checked against its test outputs). The formulas
live in the ``_family_*`` modules, one per group of measures that share their arithmetic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

from judge.metrics._family_ap import ELEVEN_POINTS, ap, ap_cut, bpref, eleven_pt_avg, inf_ap, iprec_at_recall
from judge.metrics._family_coverage import rbp_resid, relstring, unj
from judge.metrics._family_diversity import diversity
from judge.metrics._family_gain import (
    bin_g,
    dcg,
    dcg_cut,
    g_measure,
    ideal_dcg,
    ndcg,
    ndcg_cut,
    ndcg_rel,
    rbp,
    rndcg,
)
from judge.metrics._family_rank import (
    f1,
    hit_rate,
    mrr_all_hits,
    precision,
    r_prec,
    r_prec_mult,
    recall,
    recip_rank,
    relative_p,
    success,
)
from judge.metrics._family_set import (
    num_nonrel_judged_ret,
    query_count,
    set_f,
    set_map,
    set_p,
    set_recall,
    set_relative_p,
    utility,
)
from judge.metrics._measure import (
    Family,
    Measure,
    add_family,
    family_names,
    find_family,
    remove_family,
)
from judge.metrics._measure_names import ALIASES, TREC_SUFFIX_RE
from judge.metrics._query import RankedQuery

__all__ = [
    "NICKNAMES",
    "available_measures",
    "measure_family",
    "register_measure",
    "registry_version",
    "unregister_measure",
]

_STD_CUTOFFS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
_NDEVAL_CUTOFFS = (5, 10, 20)
_ALPHA_FAMILIES = frozenset({"alpha_nDCG", "alpha_DCG", "ERR_IA", "nERR_IA"})  # use ndeval's alpha

_BUILT_IN: tuple[Family, ...] = (
    Family("runid", "runid", "none", None, per_query=False, binary=False),
    Family("num_q", "count", "none", None, per_query=False, integer=True, binary=False),
    Family("num_ret", "sum", "none", query_count("num_ret"), integer=True, binary=False),
    Family("num_rel", "sum", "none", query_count("num_rel"), integer=True),
    Family("num_rel_ret", "sum", "none", query_count("num_rel_ret"), integer=True),
    Family("map", "mean", "none", ap, ap=True),
    Family("gm_map", "geometric", "none", ap, per_query=False, ap=True),
    Family("Rprec", "mean", "none", r_prec),
    Family("bpref", "mean", "none", bpref),
    Family("recip_rank", "mean", "none", recip_rank),
    Family("iprec_at_recall", "mean", "point", iprec_at_recall, default_points=ELEVEN_POINTS),
    Family("P", "mean", "cutoff", precision, cutoff_required=True, default_cutoffs=_STD_CUTOFFS),
    Family(
        "relstring", "none", "values", None, binary=False, default_values=(10.0,), compute_string=relstring
    ),
    Family("recall", "mean", "cutoff", recall, cutoff_required=True, default_cutoffs=_STD_CUTOFFS),
    Family("infAP", "mean", "none", inf_ap),
    Family("gm_bpref", "geometric", "none", bpref, per_query=False),
    Family(
        "Rprec_mult",
        "mean",
        "point",
        r_prec_mult,
        default_points=(0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0),
    ),
    Family("utility", "mean", "values", utility, default_values=(1.0, -1.0, 0.0, 0.0)),
    Family("11pt_avg", "mean", "values", eleven_pt_avg, default_values=ELEVEN_POINTS),
    Family("binG", "mean", "none", bin_g),
    Family("G", "mean", "pairs", g_measure, binary=False),
    Family("dcg", "mean", "pairs", dcg, binary=False, graded=True),
    Family("ideal_dcg", "mean", "pairs", ideal_dcg, binary=False, graded=True),
    Family("ndcg", "mean", "pairs", ndcg, binary=False, graded=True),
    Family("ndcg_rel", "mean", "pairs", ndcg_rel, binary=False),
    Family("Rndcg", "mean", "pairs", rndcg, binary=False),
    Family(
        "ndcg_cut",
        "mean",
        "cutoff",
        ndcg_cut,
        cutoff_required=True,
        default_cutoffs=_STD_CUTOFFS,
        binary=False,
        graded=True,
    ),
    Family("map_cut", "mean", "cutoff", ap_cut, cutoff_required=True, default_cutoffs=_STD_CUTOFFS, ap=True),
    Family("relative_P", "mean", "cutoff", relative_p, cutoff_required=True, default_cutoffs=_STD_CUTOFFS),
    Family("success", "mean", "cutoff", success, cutoff_required=True, default_cutoffs=(1, 5, 10)),
    Family("set_P", "mean", "none", set_p),
    Family("set_relative_P", "mean", "none", set_relative_p),
    Family("set_recall", "mean", "none", set_recall),
    Family("set_map", "mean", "none", set_map),
    Family("set_F", "mean", "values", set_f, default_values=(1.0,)),
    Family("num_nonrel_judged_ret", "sum", "none", num_nonrel_judged_ret, integer=True),
    Family("rbp", "mean", "pairs", rbp, binary=False),
    Family("rbp_resid", "mean", "none", rbp_resid, binary=False),
    Family("unj", "mean", "cutoff", unj, cutoff_required=True, default_cutoffs=(5, 10, 20), binary=False),
    # Extensions (not in trec_eval): cut-off variants and the granular LLM-judging measures.
    Family("dcg_cut", "mean", "cutoff", dcg_cut, cutoff_required=True, binary=False, graded=True, trec=False),
    Family("recip_rank_cut", "mean", "cutoff", recip_rank, cutoff_required=True, trec=False),
    Family("F1", "mean", "cutoff", f1, cutoff_required=True, trec=False),
    Family("hit_rate", "mean", "cutoff", hit_rate, trec=False),
    Family("mrr_all_hits", "mean", "cutoff", mrr_all_hits, trec=False),
    # Intent-aware diversity measures (ndeval's), on subtopic qrels: judge/metrics/_diversity.py.
    *(
        Family(
            name,
            "mean",
            "cutoff",
            diversity(name),
            cutoff_required=True,
            default_cutoffs=_NDEVAL_CUTOFFS,
            trec=False,
            diversity=True,
            alpha=name in _ALPHA_FAMILIES,
        )
        for name in ("alpha_nDCG", "alpha_DCG", "ERR_IA", "nERR_IA", "P_IA", "StRecall")
    ),
)
for _family in _BUILT_IN:
    add_family(_family)

_OFFICIAL = (
    "runid",
    "num_q",
    "num_ret",
    "num_rel",
    "num_rel_ret",
    "map",
    "gm_map",
    "Rprec",
    "bpref",
    "recip_rank",
    "iprec_at_recall",
    "P",
)
# The all_trec set of the trec_eval version whose test outputs we reproduce (no dcg/ideal_dcg).
_ALL_TREC = tuple(f.name for f in _BUILT_IN if f.trec and f.name not in ("dcg", "ideal_dcg"))
_SET = ("runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P", "set_recall",
        "set_relative_P", "set_map", "set_F")  # fmt: skip

NICKNAMES: dict[str, tuple[str, ...]] = {"official": _OFFICIAL, "all_trec": _ALL_TREC, "set": _SET}

_REGISTERED: set[str] = set()  # families added by register_measure
_VERSION = [0]  # bumped by register_measure / unregister_measure
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def available_measures() -> tuple[str, ...]:
    """Every measure family in the registry, in trec_eval output order (registered ones last)."""
    return family_names()


def register_measure(
    name: str,
    compute: Callable[[Measure, RankedQuery], float],
    *,
    cutoff: Literal["none", "optional", "required"] = "none",
    aggregate: Literal["mean", "sum", "geometric"] = "mean",
    binary: bool = True,
    graded: bool = False,
    aliases: Sequence[str] = (),
) -> None:
    """Add a measure family to the registry: from then on it parses everywhere a measure
    does (``judge trec -m``, ``judge score -m``, ``judge.evaluate(measures=...)``,
    ``judge stability --metric``) and is computed by ``compute(measure, query)``.

    ``compute`` gets the parsed :class:`Measure` (its ``cutoff`` and conventions) and the
    query's :class:`RankedQuery` (``rel``, ``grades``, ``num_rel`` ...) and returns a float.
    ``cutoff``: whether the family takes ``@k`` / ``_k``. ``binary``: it uses the relevance
    level (accepts ``rel=``); ``graded``: it accepts ``gain=``/``idcg=``. ``aliases``: extra
    case-insensitive names. ValueError when the name or an alias is taken or malformed.
    """
    if not _NAME_RE.fullmatch(name) or TREC_SUFFIX_RE.match(name):
        raise ValueError(f"measure name {name!r} must be letters, digits and '_', not ending in _<number>")
    taken = [
        n for n in (name, *aliases) if find_family(n) is not None or n.lower() in ALIASES or n in NICKNAMES
    ]
    if taken:
        raise ValueError(f"measure name {taken[0]!r} is already registered")
    if aggregate not in ("mean", "sum", "geometric"):
        raise ValueError(f"unknown aggregate {aggregate!r}")
    if cutoff not in ("none", "optional", "required"):
        raise ValueError(f"cutoff must be none, optional or required, not {cutoff!r}")
    family = Family(
        name,
        aggregate,
        "none" if cutoff == "none" else "cutoff",
        compute,
        cutoff_required=cutoff == "required",
        binary=binary,
        graded=graded,
        trec=False,
    )
    add_family(family)
    for alias in aliases:
        ALIASES[alias.lower()] = name
    _REGISTERED.add(name)
    _VERSION[0] += 1


def unregister_measure(name: str) -> None:
    """Remove a family added by :func:`register_measure` (and its aliases)."""
    if name not in _REGISTERED:
        raise ValueError(f"{name!r} is not a registered extension measure")
    _REGISTERED.discard(name)
    remove_family(name)
    for alias in [a for a, target in ALIASES.items() if target == name]:
        del ALIASES[alias]
    _VERSION[0] += 1


def registry_version() -> int:
    """A number that changes whenever a family is registered or removed (for caches of
    parsed measures)."""
    return _VERSION[0]


def measure_family(name: str) -> str:
    """Resolve a family name or short alias to the registry name; ValueError if unknown."""
    if find_family(name) is not None:
        return name
    resolved = ALIASES.get(name.lower())
    if resolved is None:
        raise ValueError(f"unknown measure {name!r}")
    return resolved
