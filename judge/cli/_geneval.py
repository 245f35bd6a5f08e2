"""``judge gen-eval``: answer metrics (EM, acc, CoverEM, F1, ROUGE) of generated answers.

    judge gen-eval answers.jsonl [--json] [--map prediction=output] [--normalization ultrarag]

Each line is a JSON object with ``prediction`` (a string) and ``golden_answers`` (a non-empty
list of strings); ``id`` is optional. Every line is validated before anything is printed: a
broken line is reported on stderr as ``file:line: field 'name': problem`` (every broken line,
not only the first) and the exit code is 2.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.io import InputError

_EXIT_BAD_INPUT = 2  # judge.cli.EXIT_BAD_INPUT (not imported: judge.cli imports this module)

GEN_EVAL_FIELDS: dict[str, str] = {
    "id": "the item's id (optional; '#<line>' when absent)",
    "prediction": "the generated answer (required string)",
    "golden_answers": "the reference answers (required non-empty list of strings)",
}


@dataclass(frozen=True, slots=True)
class GenEvalItem:
    """One valid input line."""

    id: str
    line: int
    prediction: str
    golden_answers: tuple[str, ...]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "gen-eval",
        help="answer metrics (EM, acc, CoverEM, F1, ROUGE) of generated answers against references",
        description=(
            "Score each line's 'prediction' against its 'golden_answers' (a list; the best gold "
            "answer counts): em, acc (a gold answer contained in the prediction), coverem, token "
            "f1, rouge-1, rouge-2, rouge-l. Texts are normalised first (SQuAD by default); CJK "
            "text is compared per character."
        ),
        epilog="exit codes: 0 done; 2 bad input (every broken line is named on stderr)",
    )
    p.add_argument("input", metavar="INPUT.jsonl", help="JSONL file (gzip accepted)")
    p.add_argument("--json", action="store_true", help='print {"all": {...}, "per_item": [...]} as JSON')
    p.add_argument(
        "--map",
        action="append",
        metavar="FIELD=NAME",
        help="read FIELD (prediction, golden_answers, id) from the file's NAME; repeatable",
    )
    p.add_argument(
        "--normalization",
        choices=("squad", "ultrarag"),
        default="squad",
        help="squad (default: punctuation removed) or ultrarag (punctuation becomes a space)",
    )
    p.set_defaults(func=run_gen_eval)


def parse_gen_eval_map(items: list[str] | None) -> dict[str, str]:
    """``["prediction=output"]`` -> ``{"prediction": "output"}``; InputError on a bad item."""
    mapping: dict[str, str] = {}
    for item in items or []:
        ours, sep, theirs = (s.strip() for s in item.partition("="))
        if not sep or not ours or not theirs:
            raise InputError(f"--map expects FIELD=NAME, got {item!r}", field="--map")
        if ours not in GEN_EVAL_FIELDS:
            raise InputError(
                f"--map: unknown field {ours!r} (known: {', '.join(GEN_EVAL_FIELDS)})", field="--map"
            )
        mapping[ours] = theirs
    return mapping


def _parse_line(raw: bytes, line: int, path: str, keys: dict[str, str]) -> GenEvalItem:
    def error(message: str, fld: str | None = None) -> InputError:
        return InputError(message, path=path, line=line, field=fld)

    try:
        obj: Any = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"invalid UTF-8 at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise error(f"expected a JSON object, got {type(obj).__name__}")
    id_key, pred_key, gold_key = keys["id"], keys["prediction"], keys["golden_answers"]
    raw_id = obj.get(id_key)
    if raw_id is None:
        item_id = f"#{line}"
    elif isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise error("must be a string or an integer", id_key)
    else:
        item_id = str(raw_id)
    if pred_key not in obj:
        raise error("missing", pred_key)
    prediction = obj[pred_key]
    if not isinstance(prediction, str):
        raise error(f"must be a string, got {type(prediction).__name__}", pred_key)
    if gold_key not in obj:
        raise error("missing", gold_key)
    golds = obj[gold_key]
    if not isinstance(golds, list):
        raise error(f"must be a list of strings, got {type(golds).__name__}", gold_key)
    if not golds:
        raise error("is an empty list", gold_key)
    for i, g in enumerate(golds):
        if not isinstance(g, str):
            raise error(f"must be a string, got {type(g).__name__}", f"{gold_key}[{i}]")
    return GenEvalItem(item_id, line, prediction, tuple(golds))


def read_gen_eval(
    path: str | Path, field_map: dict[str, str] | None = None
) -> tuple[list[GenEvalItem], list[InputError]]:
    """Every valid line and every error (a broken line is an error naming file:line and field).
    Raises InputError when the file cannot be read at all."""
    from judge.io import open_binary

    keys = {name: name for name in GEN_EVAL_FIELDS} | dict(field_map or {})
    where = str(path)
    items: list[GenEvalItem] = []
    errors: list[InputError] = []
    try:
        handle = open_binary(path)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    with handle:
        try:
            for line, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    items.append(_parse_line(raw.rstrip(b"\r\n"), line, where, keys))
                except InputError as err:
                    errors.append(err)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"cannot read: {exc}", path=where) from None
    if not items and not errors:
        errors.append(InputError("empty file: no data lines", path=where))
    return items, errors


def run_gen_eval(args: argparse.Namespace) -> int:
    from judge.metrics import ANSWER_METRICS, gen_eval

    items, errors = read_gen_eval(args.input, parse_gen_eval_map(args.map))
    if errors:
        for err in errors:
            print(f"judge: error: {err}", file=sys.stderr)
        print(f"judge: {len(errors)} broken line(s); nothing was scored", file=sys.stderr)
        return _EXIT_BAD_INPUT
    result = gen_eval(
        [it.prediction for it in items],
        [it.golden_answers for it in items],
        normalization=args.normalization,
        ids=[it.id for it in items],
    )
    for item, scores in zip(items, result["per_item"], strict=True):
        scores["line"] = item.line
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
        return 0
    print(f"# {args.input}: {result['n']} items; normalization {args.normalization}; mean over items")
    width = max(len(m) for m in ANSWER_METRICS)
    for metric in ANSWER_METRICS:
        print(f"{metric.ljust(width)}  {result['all'][metric]:.4f}")
    return 0
