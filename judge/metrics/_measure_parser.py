"""Measures parsed from text, once: trec_eval names (``map``, ``P_5``, ``ndcg_cut_10``,
``recip_rank`` ...), trec_eval's ``-m`` syntax (nicknames, ``P.5,10``, ``ndcg.1=3,2=9``) and
short forms in the style of ir_measures / ranx (``AP``, ``AP(rel=2)``, ``nDCG@10``, ``P@5``,
``R@100``, ``MRR``, ``map@100``, ``Success@1``, ``IPrec@0.1`` ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from judge.metrics._measure import CONVENTION_KEYS, Conventions, Family, Measure, find_family
from judge.metrics._measure_names import ALIASES, CUT_FAMILY, TREC_SUFFIX_RE
from judge.metrics._registry import NICKNAMES

__all__ = ["parse_measure", "parse_measure_args", "parse_measures"]

_SHORT_RE = re.compile(r"^(?P<base>[A-Za-z0-9_.\-]+?)(?:\((?P<params>[^()]*)\))?(?:@(?P<at>[0-9.]+))?$")
_ATOF_RE = re.compile(r"^\s*[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")
_ATOL_RE = re.compile(r"^\s*[+-]?\d+")
_GAINS = {"linear": "linear", "lin": "linear", "exponential": "exponential", "exp": "exponential"}
_DENOMINATORS = {"qrels": "qrels", "retrieved": "retrieved"}
# key=value parameters with a value from a fixed set: key -> (Measure field, value -> field value, rule)
_CHOICE_PARAMS: dict[str, tuple[str, dict[str, str], str]] = {
    "gain": ("gain", _GAINS, "gain must be linear or exponential"),
    "denominator": ("ap_denominator", _DENOMINATORS, "denominator must be qrels or retrieved"),
    "denom": ("ap_denominator", _DENOMINATORS, "denominator must be qrels or retrieved"),
    "ap_denominator": ("ap_denominator", _DENOMINATORS, "denominator must be qrels or retrieved"),
    "idcg": ("idcg", {"qrels": "qrels", "list": "list"}, "idcg must be qrels or list"),
    "unjudged": (
        "unjudged",
        {"nonrelevant": "nonrelevant", "drop": "drop"},
        "unjudged must be nonrelevant or drop",
    ),
}
# key=value parameters with a non-negative integer value: key -> (Measure field, rule)
_INTEGER_PARAMS: dict[str, tuple[str, str]] = {
    "rel": ("rel", "rel must be a non-negative integer"),
    "cutoff": ("cutoff", "cutoff must be a positive integer"),
    "k": ("cutoff", "cutoff must be a positive integer"),
}


def _family(name: str) -> Family:
    """The family of a name known to be in the table."""
    family = find_family(name)
    if family is None:
        raise ValueError(f"unknown measure {name!r}")
    return family


def _atof(text: str) -> float:
    match = _ATOF_RE.match(text)
    return float(match.group(0)) if match else 0.0


def _atol(text: str) -> int:
    match = _ATOL_RE.match(text)
    return int(match.group(0)) if match else 0


def _apply_params(fields: dict[str, object], family: Family, params: str, text: str) -> None:
    for raw in params.split(","):
        item = raw.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"measure {text!r}: parameter {item!r} is not of the form key=value")
        key, value = (s.strip() for s in item.split("=", 1))
        _apply_param(fields, family, key, value, text)


def _apply_param(fields: dict[str, object], family: Family, key: str, value: str, text: str) -> None:
    key_l, value_l = key.lower(), value.lower()
    if key_l in _CHOICE_PARAMS:
        field, allowed, rule = _CHOICE_PARAMS[key_l]
        if value_l not in allowed:
            raise ValueError(f"measure {text!r}: {rule}, got {value!r}")
        fields[field] = allowed[value_l]
    elif key_l in _INTEGER_PARAMS:
        field, rule = _INTEGER_PARAMS[key_l]
        if not re.fullmatch(r"\d+", value):
            raise ValueError(f"measure {text!r}: {rule}, got {value!r}")
        fields[field] = int(value)
    elif key_l == "judged_only":
        fields["unjudged"] = "drop" if value_l in ("true", "1", "yes") else "nonrelevant"
    elif key_l == "p" and family.name == "rbp":
        fields["values"] = (float(value),)
        fields["param_text"] = f"p={value}"
    elif key_l == "alpha" and family.alpha:
        try:
            fields["alpha"] = float(value)
        except ValueError:
            raise ValueError(f"measure {text!r}: alpha must be a number, got {value!r}") from None
    elif key_l == "beta" and family.name == "set_F":
        fields["values"] = (float(value),)
        fields["param_text"] = value
    else:
        raise ValueError(f"measure {text!r}: unknown parameter {key!r}")


def parse_measure(text: str, *, defaults: Conventions | None = None) -> Measure:
    """Parse one measure: a trec_eval name (``map``, ``P_5``, ``ndcg_cut_10``,
    ``iprec_at_recall_0.10``) or a short form (``AP``, ``AP(rel=2)``, ``nDCG@10``, ``P@5``,
    ``R@100``, ``MRR``, ``map@100``, ``nDCG(gain=exponential)@10``). ValueError names the text.

    ``defaults``: the conventions of the evaluation the measure is parsed for (e.g. the
    label-free ones of :data:`judge.metrics.LABEL_FREE`), applied where the family takes
    them; parameters written in the text (``AP(denominator=qrels)``) override them. Without
    ``defaults`` a measure has trec_eval's conventions.
    """
    original = text
    text = text.strip()
    if not text:
        raise ValueError("empty measure name")
    try:
        return _parse_measure(text, defaults)
    except ValueError as exc:
        message = str(exc)
        if repr(original) in message or repr(text) in message:
            raise
        raise ValueError(f"bad measure {original!r}: {message}") from None


def _convention_fields(family: Family, defaults: Conventions | None) -> dict[str, Any]:
    """The ``defaults`` that apply to ``family`` (a convention it does not take is skipped)."""
    if not defaults:
        return {}
    fields: dict[str, Any] = {}
    for key, value in defaults.items():
        if key not in CONVENTION_KEYS:
            raise ValueError(f"unknown measure convention {key!r} (one of {', '.join(CONVENTION_KEYS)})")
        takes = {"unjudged": True, "ap_denominator": family.ap, "gain": family.graded, "idcg": family.graded}
        if takes[key]:
            fields[key] = value
    return fields


def _parse_measure(text: str, defaults: Conventions | None = None) -> Measure:
    match = _SHORT_RE.match(text)
    if match is None:
        raise ValueError(f"cannot parse measure {text!r}")
    base, params, at = match.group("base"), match.group("params"), match.group("at")
    family_name, at = _resolve_name(base, at, text)
    family = _family(family_name)
    if at is not None and family.params not in ("cutoff", "point"):
        cut_family = CUT_FAMILY.get(family_name)
        if cut_family is None:
            raise ValueError(f"measure {text!r}: {family_name} takes no cutoff")
        family_name, family = cut_family, _family(cut_family)
    fields: dict[str, object] = {}
    fields.update(_convention_fields(family, defaults))
    if at is not None:
        if family.params == "cutoff":
            if not re.fullmatch(r"\d+", at) or int(at) < 1:
                raise ValueError(f"measure {text!r}: cutoff must be a positive integer, got {at!r}")
            fields["cutoff"] = int(at)
        else:
            fields["point"] = float(at)
    if params:
        _apply_params(fields, family, params, text)
    _complete(fields, family, text)
    return Measure(family_name, **fields)  # type: ignore[arg-type]


def _resolve_name(base: str, at: str | None, text: str) -> tuple[str, str | None]:
    """The family ``base`` names (itself, an alias, or either with a trec_eval ``_<number>``
    suffix) and its cut-off or point (``at``, or the suffix's number)."""
    if find_family(base) is not None:
        return base, at
    if base.lower() in ALIASES:
        return ALIASES[base.lower()], at
    suffix = TREC_SUFFIX_RE.match(base)
    if suffix is not None:
        root = suffix.group("base")
        root_name = root if find_family(root) is not None else ALIASES.get(root.lower())
        if root_name is not None:
            if at is not None:
                raise ValueError(f"measure {text!r} has two cutoffs")
            return root_name, suffix.group("num")
    raise ValueError(f"unknown measure {text!r}")


def _complete(fields: dict[str, object], family: Family, text: str) -> None:
    """Refuse a measure without the cut-off or point its family needs; default its values."""
    name = family.name
    if family.params == "cutoff" and family.cutoff_required and "cutoff" not in fields:
        raise ValueError(f"measure {text!r} needs a cutoff, e.g. {name}@10 or {name}_10")
    if family.params == "point" and "point" not in fields:
        raise ValueError(f"measure {text!r} needs a point, e.g. {name}_0.10")
    if family.params == "values" and "values" not in fields and family.default_values:
        fields["values"] = family.default_values


def _trec_dot(text: str, defaults: Conventions | None = None) -> tuple[Measure, ...] | None:
    """trec_eval's ``name.params`` syntax (``P.5,10``, ``ndcg.1=3,2=9``), or None."""
    if "." not in text:
        return None
    root, params = text.split(".", 1)
    family = find_family(root)
    if family is None or not family.trec:
        return None
    conv = _convention_fields(family, defaults)
    if not params:
        raise ValueError(f"measure {text!r}: empty parameter list")
    expand = _DOT_PARAMS.get(family.params)
    if expand is None:
        raise ValueError(f"measure {text!r}: {root} takes no parameters")
    return expand(root, params, conv, text)


def _dot_cutoffs(root: str, params: str, conv: dict[str, Any], text: str) -> tuple[Measure, ...]:
    cutoffs = sorted(_atol(p) for p in params.split(","))
    if cutoffs[0] <= 0:
        raise ValueError(f"measure {text!r}: cutoffs must be positive")
    if len(set(cutoffs)) != len(cutoffs):
        raise ValueError(f"measure {text!r}: duplicate cutoffs")
    return tuple(Measure(root, cutoff=c, **conv) for c in cutoffs)


def _dot_points(root: str, params: str, conv: dict[str, Any], text: str) -> tuple[Measure, ...]:
    points = sorted(_atof(p) for p in params.split(","))
    if len(set(points)) != len(points):
        raise ValueError(f"measure {text!r}: duplicate cutoffs")
    return tuple(Measure(root, point=p, **conv) for p in points)


def _dot_values(root: str, params: str, conv: dict[str, Any], text: str) -> tuple[Measure, ...]:
    values = tuple(_atof(p) for p in params.split(","))
    if root == "utility" and len(values) != 4:
        raise ValueError(f"measure {text!r}: utility needs 4 coefficients")
    return (Measure(root, values=values, param_text=params, **conv),)


def _dot_pairs(root: str, params: str, conv: dict[str, Any], text: str) -> tuple[Measure, ...]:
    gains: list[tuple[int, float]] = []
    values: tuple[float, ...] = ()
    for piece in params.split(","):
        if "=" not in piece:
            raise ValueError(f"measure {text!r}: malformed pair parameter {piece!r}")
        key, value = piece.split("=", 1)
        if re.fullmatch(r"[+-]?\d+", key):
            gains.append((int(key), _atof(value)))
        elif key == "p" and root == "rbp":
            values = (_atof(value),)
    return (Measure(root, gains=tuple(gains), values=values, param_text=params, **conv),)


_DOT_PARAMS: dict[str, Callable[[str, str, dict[str, Any], str], tuple[Measure, ...]]] = {
    "cutoff": _dot_cutoffs,
    "point": _dot_points,
    "values": _dot_values,
    "pairs": _dot_pairs,
}


def parse_measures(text: str, *, defaults: Conventions | None = None) -> tuple[Measure, ...]:
    """Parse a ``-m`` argument, which may stand for several measures: a nickname
    (``official``, ``all_trec``, ``set``), a trec_eval family with default cutoffs (``P``),
    trec_eval's ``name.params`` syntax (``P.5,10``, ``ndcg_cut.10,20``), or one measure.
    ``defaults``: as for :func:`parse_measure`."""
    text = text.strip()
    if text in NICKNAMES:
        out: list[Measure] = []
        for name in NICKNAMES[text]:
            out.extend(_family_defaults(name, defaults))
        return tuple(out)
    dotted = _trec_dot(text, defaults)
    if dotted is not None:
        return dotted
    family = find_family(text)
    if family is not None and family.params in ("cutoff", "point"):
        expanded = _family_defaults(text, defaults)
        if expanded:
            return expanded
    return (parse_measure(text, defaults=defaults),)


def _family_defaults(name: str, defaults: Conventions | None = None) -> tuple[Measure, ...]:
    family = _family(name)
    conv = _convention_fields(family, defaults)
    if family.params == "cutoff":
        return tuple(Measure(name, cutoff=c, **conv) for c in family.default_cutoffs)
    if family.params == "point":
        return tuple(Measure(name, point=p, **conv) for p in family.default_points)
    if family.params == "values":
        return (Measure(name, values=family.default_values, **conv),)
    return (Measure(name, **conv),)


def parse_measure_args(texts: Sequence[str]) -> tuple[Measure, ...]:
    """Measures of several ``-m`` arguments, as trec_eval combines them, in output order.

    As in trec_eval, explicit parameters for a family (``-m relstring.20``) replace that
    family's defaults from a nickname or bare family name (``-m all_trec``, ``-m P``).
    """
    defaults: list[Measure] = []
    explicit: dict[str, tuple[Measure, ...]] = {}
    singles: list[Measure] = []
    for raw in texts:
        text = raw.strip()
        dotted = _trec_dot(text)
        if dotted is not None:
            explicit.setdefault(dotted[0].name, dotted)
        elif text in NICKNAMES or find_family(text) is not None:
            defaults.extend(parse_measures(text))
        else:
            singles.extend(parse_measures(text))
    chosen = [m for m in defaults if m.name not in explicit] + singles
    for group in explicit.values():
        chosen.extend(group)
    unique: dict[str, Measure] = {}
    for m in chosen:
        unique.setdefault(m.trec_name, m)
    return tuple(sorted(unique.values(), key=Measure.sort_key))
