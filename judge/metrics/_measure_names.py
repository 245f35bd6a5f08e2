"""The names a measure family answers to besides its own: case-insensitive short forms in
the style of ir_measures / ranx (``AP``, ``nDCG``, ``MRR``, ``R``, ``Success`` ...), the
cut-off family that ``@k`` selects, and the trec_eval ``<name>_<number>`` suffix.

:data:`ALIASES` also holds the aliases of families added by
:func:`judge.metrics.register_measure` while they are registered.
"""

from __future__ import annotations

import re

__all__ = ["ALIASES", "CUT_FAMILY", "TREC_SUFFIX_RE"]

# Short forms (lower case) -> family name. Cut-off forms map onto the _cut families.
ALIASES: dict[str, str] = {
    "ap": "map",
    "map": "map",
    "mean_average_precision": "map",
    "average_precision": "map",
    "gmap": "gm_map",
    "gm_ap": "gm_map",
    "gm_map": "gm_map",
    "ndcg": "ndcg",
    "dcg": "dcg",
    "idcg": "ideal_dcg",
    "ideal_dcg": "ideal_dcg",
    "p": "P",
    "prec": "P",
    "precision": "P",
    "r": "recall",
    "recall": "recall",
    "rr": "recip_rank",
    "mrr": "recip_rank",
    "recip_rank": "recip_rank",
    "reciprocal_rank": "recip_rank",
    "rprec": "Rprec",
    "r-prec": "Rprec",
    "r_prec": "Rprec",
    "r-precision": "Rprec",
    "r_precision": "Rprec",
    "success": "success",
    "bpref": "bpref",
    "infap": "infAP",
    "iprec": "iprec_at_recall",
    "iprec_at_recall": "iprec_at_recall",
    "numq": "num_q",
    "num_q": "num_q",
    "numret": "num_ret",
    "num_ret": "num_ret",
    "numrel": "num_rel",
    "num_rel": "num_rel",
    "numrelret": "num_rel_ret",
    "num_rel_ret": "num_rel_ret",
    "setp": "set_P",
    "set_p": "set_P",
    "setr": "set_recall",
    "setrecall": "set_recall",
    "set_recall": "set_recall",
    "setf": "set_F",
    "set_f": "set_F",
    "setrelp": "set_relative_P",
    "set_relative_p": "set_relative_P",
    "set_map": "set_map",
    "relative_p": "relative_P",
    "rbp": "rbp",
    "rbp_resid": "rbp_resid",
    "unj": "unj",
    "utility": "utility",
    "11pt_avg": "11pt_avg",
    "relstring": "relstring",
    "bing": "binG",
    "ndcg_rel": "ndcg_rel",
    "rndcg": "Rndcg",
    "rprec_mult": "Rprec_mult",
    "num_nonrel_judged_ret": "num_nonrel_judged_ret",
    "ndcg_cut": "ndcg_cut",
    "map_cut": "map_cut",
    "f1": "F1",
    "hit_rate": "hit_rate",
    "hitrate": "hit_rate",
    "mrr_all_hits": "mrr_all_hits",
    "mrr_all": "mrr_all_hits",
    "runid": "runid",
    "alpha_ndcg": "alpha_nDCG",
    "alpha-ndcg": "alpha_nDCG",
    "a-ndcg": "alpha_nDCG",
    "alpha_dcg": "alpha_DCG",
    "alpha-dcg": "alpha_DCG",
    "err_ia": "ERR_IA",
    "err-ia": "ERR_IA",
    "nerr_ia": "nERR_IA",
    "nerr-ia": "nERR_IA",
    "p_ia": "P_IA",
    "p-ia": "P_IA",
    "strecall": "StRecall",
    "st_recall": "StRecall",
    "strec": "StRecall",
    "s-recall": "StRecall",
}
# '@k' on a family without cut-off parameter selects its cut-off family.
CUT_FAMILY = {"map": "map_cut", "ndcg": "ndcg_cut", "recip_rank": "recip_rank_cut", "dcg": "dcg_cut"}

# trec_eval's parameter suffix: ``P_5``, ``ndcg_cut_10``, ``iprec_at_recall_0.10``.
TREC_SUFFIX_RE = re.compile(r"^(?P<base>.+?)_(?P<num>\d+(?:\.\d+)?)$")
