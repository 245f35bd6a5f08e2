"""Prompt templates: TOML files in ``prompts/``, rendered strictly.

One file per template, named ``<id>.toml`` (ids look like ``binary.zh.v1``). Fields:

``id``, ``language`` (``zh``/``en``), ``mode`` (``binary``/``graded``/``summary``, or
``claims``: a reference answer split into claims, :mod:`judge.judging._recall`),
``description`` (optional), ``variables`` (the exact set of ``${name}`` placeholders that
``system`` and ``user`` use), ``system``, ``user``, ``reask`` (optional; the follow-up user
turn after an invalid reply, its only placeholder is ``${error}``), ``answer_prefix`` and
``candidates`` (optional, together: probability mode forces the reply to start with
``answer_prefix`` and reads the probabilities of ``candidates`` as the next token), a
``[json_schema]`` table (optional; handed to backends with a JSON mode or grammar), and an
``[examples]`` table (optional; how worked examples read, see below).

Demonstrations (``--examples N``): a verdict template that declares the variable
``examples`` has an ``${examples}`` slot and an ``[examples]`` table of three strings:
``intro`` and ``outro`` (fixed text around the examples, no placeholder) and ``item`` (one
example; placeholders among ``${query}``, ``${passage}`` and ``${answer}``, the answer
being ``yes``/``no`` or a grade ``0``..``3``). The slot renders to nothing when a passage
has no examples (``examples`` is the one variable that may be left out of
:meth:`PromptTemplate.render`: it is then empty), so a template's zero-shot prompt is the
same text as without the slot. A template without the slot refuses ``--examples``.

Rendering uses :class:`string.Template` (``${name}``; ``$$`` is a literal ``$``), so JSON
braces in the prompt need no escaping and substituted text is never expanded again (a
passage containing ``${query}`` stays literal). It is strict: a placeholder not declared in
``variables``, a declared variable the text does not use, a value missing at render time
or an extra value passed raise :class:`TemplateError`.

Every template carries ``hash`` (sha256 of the file's bytes), recorded in every verdict and
part of every cache key, so editing a prompt never reuses verdicts from the old wording.

Where the files are found: ``prompts/`` at the repository root (a source checkout or an
editable install), else ``judge/prompts/`` inside the installed package (the wheel ships the
files there). A template can also be loaded from any ``.toml`` path, e.g. while tuning.
"""

from __future__ import annotations

import hashlib
import string
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path
from stat import S_ISREG
from typing import Any, Literal, cast

from judge.backends import Message
from judge.io import InputError

TemplateMode = Literal["binary", "graded", "summary", "claims"]

_REQUIRED = ("id", "language", "mode", "variables", "system", "user")
_OPTIONAL = ("description", "reask", "answer_prefix", "candidates", "json_schema", "examples")
#: The optional variable: the slot of worked examples (empty when there are none).
EXAMPLES_VARIABLE = "examples"
_EXAMPLE_PARTS = ("intro", "item", "outro")
_EXAMPLE_ITEM_VARIABLES = frozenset({"query", "passage", "answer"})
_LANGUAGES = ("zh", "en")
_MODES = ("binary", "graded", "summary", "claims")
_CANDIDATES: dict[str, frozenset[str]] = {
    "binary": frozenset({"yes", "no"}),
    "graded": frozenset({"0", "1", "2", "3"}),
}
_MARKER = "binary.zh.v1.toml"  # a file that marks a real prompts directory


class TemplateError(InputError):
    """A template file is malformed, unknown, or was rendered with wrong variables."""


def _candidate_dirs() -> list[Path]:
    here = Path(__file__).resolve()
    return [here.parents[2] / "prompts", here.parents[1] / "prompts"]


@cache
def templates_dir() -> Path:
    """The directory the built-in templates are loaded from (found once per process; a
    failure is not cached)."""
    for candidate in _candidate_dirs():
        if (candidate / _MARKER).is_file():
            return candidate
    tried = ", ".join(str(p) for p in _candidate_dirs())
    raise TemplateError(f"the prompt templates are not installed (looked in {tried})")


@lru_cache(maxsize=64)
def _builtin_path(template_id: str) -> Path:
    return templates_dir() / f"{template_id}.toml"


def _placeholders(text: str, where: str, path: Path) -> set[str]:
    tpl = string.Template(text)
    if not tpl.is_valid():
        raise TemplateError(
            "invalid placeholder (use ${name}; write $$ for a literal dollar sign)",
            path=path,
            field=where,
        )
    return set(tpl.get_identifiers())


@dataclass(frozen=True)
class ExampleFormat:
    """How a template's worked examples read: ``intro``, then ``item`` once per example
    (``${query}``, ``${passage}``, ``${answer}``), then ``outro``."""

    intro: str
    item: str
    outro: str

    def render(self, items: list[dict[str, str]], note: str = "") -> str:
        """The examples block for ``items`` (each ``{"query", "passage", "answer"}``); empty
        for none. ``note``: text put after the examples, before ``outro`` (the note of a
        block that shows one side only, rendered by :mod:`judge.judging._examples`)."""
        if not items:
            return ""
        body = "".join(string.Template(self.item).substitute(item) for item in items)
        return f"{self.intro}{body}{note}{self.outro}"


@dataclass(frozen=True)
class PromptTemplate:
    """One loaded template. ``hash`` is the sha256 hex digest of the file's bytes.

    ``p_yes_threshold``: the calibrated decision threshold for probability mode (verdict yes
    iff P(yes) >= it) that ``prompts/calibration.toml`` holds for exactly this file (its
    hash), tuned against human labels; None when there is none (0.5 is used).
    """

    id: str
    language: str
    mode: TemplateMode
    variables: tuple[str, ...]
    system: str
    user: str
    hash: str
    path: Path
    description: str = ""
    reask: str | None = None
    answer_prefix: str | None = None
    candidates: tuple[str, ...] | None = None
    json_schema: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    p_yes_threshold: float | None = None
    example_format: ExampleFormat | None = None

    @property
    def supports_examples(self) -> bool:
        """The template has an ``${examples}`` slot (and its ``[examples]`` table)."""
        return self.example_format is not None

    @property
    def decision_threshold(self) -> float:
        """The P(yes) threshold this template decides at: its calibration, else 0.5."""
        return self.p_yes_threshold if self.p_yes_threshold is not None else 0.5

    @property
    def supports_probability(self) -> bool:
        return self.answer_prefix is not None and self.candidates is not None

    def render(self, **values: str) -> tuple[Message, ...]:
        """The system and user messages with ``values`` substituted (strictly; ``examples``
        may be left out: the slot is then empty)."""
        if EXAMPLES_VARIABLE in self.variables and EXAMPLES_VARIABLE not in values:
            values = {**values, EXAMPLES_VARIABLE: ""}
        self._check_values(values)
        system = string.Template(self.system).substitute(values)
        user = string.Template(self.user).substitute(values)
        if system.strip():
            return (Message("system", system), Message("user", user))
        return (Message("user", user),)

    def render_reask(self, error: str) -> str:
        """The follow-up user turn after an invalid reply."""
        if self.reask is None:
            raise TemplateError(f"template {self.id} has no 'reask' text", path=self.path, field="reask")
        return string.Template(self.reask).substitute(error=error)

    def _check_values(self, values: dict[str, str]) -> None:
        missing = sorted(set(self.variables) - set(values))
        unknown = sorted(set(values) - set(self.variables))
        if missing:
            raise TemplateError(f"template {self.id}: missing value for {', '.join(missing)}")
        if unknown:
            raise TemplateError(f"template {self.id}: unknown variable {', '.join(unknown)}")
        wrong = sorted(name for name, value in values.items() if not isinstance(value, str))
        if wrong:
            raise TemplateError(f"template {self.id}: values must be strings: {', '.join(wrong)}")


def _check_fields(raw: dict[str, Any], path: Path) -> None:
    """Required and known fields, string types, and the id, language and mode values."""
    for key in _REQUIRED:
        if key not in raw:
            raise TemplateError("missing required field", path=path, field=key)
    for key in raw:
        if key not in _REQUIRED and key not in _OPTIONAL:
            raise TemplateError("unknown field", path=path, field=key)
    for key in ("id", "language", "mode", "system", "user", "description", "reask", "answer_prefix"):
        if key in raw and not isinstance(raw[key], str):
            raise TemplateError("must be a string", path=path, field=key)
    if raw["id"] != path.stem:
        raise TemplateError(f"id {raw['id']!r} must equal the file name {path.stem!r}", path=path, field="id")
    if raw["language"] not in _LANGUAGES:
        raise TemplateError(f"must be one of {', '.join(_LANGUAGES)}", path=path, field="language")
    if raw["mode"] not in _MODES:
        raise TemplateError(f"must be one of {', '.join(_MODES)}", path=path, field="mode")


def _check_variables(raw: dict[str, Any], path: Path) -> list[str]:
    """The declared variables, each used by the system or user text and none missing."""
    variables = raw["variables"]
    if not isinstance(variables, list) or not all(isinstance(v, str) for v in variables):
        raise TemplateError("must be a list of names", path=path, field="variables")
    declared = set(variables)
    used = _placeholders(raw["system"], "system", path) | _placeholders(raw["user"], "user", path)
    if used - declared:
        raise TemplateError(
            f"unknown variable {', '.join(sorted(used - declared))} (not in 'variables')",
            path=path,
            field="user",
        )
    if declared - used:
        raise TemplateError(
            f"declared but unused: {', '.join(sorted(declared - used))}", path=path, field="variables"
        )
    return variables


def _check_candidates(prefix: object, candidates: object, mode: TemplateMode, path: Path) -> None:
    """Probability mode: ``answer_prefix`` and the mode's exact ``candidates``, together."""
    if (prefix is None) != (candidates is None):
        raise TemplateError("'answer_prefix' and 'candidates' go together", path=path, field="candidates")
    if candidates is None:
        return
    if mode == "summary":
        raise TemplateError("summary templates have no probability mode", path=path, field="candidates")
    if (
        not isinstance(candidates, list)
        or set(candidates) != _CANDIDATES[mode]
        or len(candidates) != len(_CANDIDATES[mode])
    ):
        expected = ", ".join(sorted(_CANDIDATES[mode]))
        raise TemplateError(f"{mode} candidates must be exactly {expected}", path=path, field="candidates")


def _check_examples(raw: dict[str, Any], variables: list[str], path: Path) -> ExampleFormat | None:
    """The ``[examples]`` table: present exactly when ``${examples}`` is declared, three
    strings, the item's placeholders among query, passage and answer."""
    table = raw.get("examples")
    declared = EXAMPLES_VARIABLE in variables
    if table is None:
        if declared:
            raise TemplateError(
                "declares ${examples} but has no [examples] table (intro, item, outro)",
                path=path,
                field="examples",
            )
        return None
    if not declared:
        raise TemplateError("has an [examples] table but no ${examples} slot", path=path, field="examples")
    if not isinstance(table, dict) or set(table) != set(_EXAMPLE_PARTS):
        raise TemplateError("must be a table of exactly intro, item and outro", path=path, field="examples")
    for part in _EXAMPLE_PARTS:
        if not isinstance(table[part], str):
            raise TemplateError("must be a string", path=path, field=f"examples.{part}")
    for part in ("intro", "outro"):
        if _placeholders(table[part], f"examples.{part}", path):
            raise TemplateError("takes no placeholder", path=path, field=f"examples.{part}")
    used = _placeholders(table["item"], "examples.item", path)
    if used - _EXAMPLE_ITEM_VARIABLES or "passage" not in used or "answer" not in used:
        raise TemplateError(
            "needs ${passage} and ${answer} (and may use ${query}), nothing else",
            path=path,
            field="examples.item",
        )
    return ExampleFormat(table["intro"], table["item"], table["outro"])


def parse_template(data: bytes, path: Path) -> PromptTemplate:
    """Validate one template file's bytes; ``path`` is used in error messages and for the id."""
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TemplateError(f"not a valid UTF-8 TOML file: {exc}", path=path) from exc
    _check_fields(raw, path)
    variables = _check_variables(raw, path)
    reask = raw.get("reask")
    if reask is not None and _placeholders(reask, "reask", path) - {"error"}:
        raise TemplateError("the only placeholder allowed in 'reask' is ${error}", path=path, field="reask")
    mode = cast(TemplateMode, raw["mode"])
    if mode != "summary" and reask is None:
        raise TemplateError("verdict templates need a 'reask' text", path=path, field="reask")
    prefix = raw.get("answer_prefix")
    candidates = raw.get("candidates")
    _check_candidates(prefix, candidates, mode, path)
    schema = raw.get("json_schema")
    if schema is not None and not isinstance(schema, dict):
        raise TemplateError("must be a table", path=path, field="json_schema")
    example_format = _check_examples(raw, variables, path)
    if example_format is not None and mode not in ("binary", "graded"):
        raise TemplateError("only verdict templates take examples", path=path, field="examples")
    return PromptTemplate(
        id=raw["id"],
        language=raw["language"],
        mode=mode,
        variables=tuple(variables),
        system=raw["system"],
        user=raw["user"],
        hash=hashlib.sha256(data).hexdigest(),
        path=path,
        description=raw.get("description", ""),
        reask=reask,
        answer_prefix=prefix,
        candidates=tuple(candidates) if candidates is not None else None,
        json_schema=schema,
        example_format=example_format,
    )


CALIBRATION_FILE = "calibration.toml"
#: The note a one-sided examples block ends with (see :mod:`judge.judging._examples`).
EXAMPLES_NOTE_FILE = "examples_note.toml"
#: The files of the prompts folder that are not templates.
NOT_TEMPLATES = frozenset({CALIBRATION_FILE, EXAMPLES_NOTE_FILE})


def parse_calibration(text: str, path: Path) -> dict[str, float]:
    """Template hash -> calibrated P(yes) threshold, from a calibration file's text."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TemplateError(f"not a valid TOML file: {exc}", path=path) from exc
    out: dict[str, float] = {}
    for template_id, entry in raw.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("template_hash"), str):
            raise TemplateError("each entry needs a template_hash string", path=path, field=template_id)
        value = entry.get("p_yes_threshold")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            where = f"{template_id}.p_yes_threshold"
            raise TemplateError("must be a number in [0, 1]", path=path, field=where)
        out[entry["template_hash"]] = float(value)
    return out


@cache
def calibration() -> dict[str, float]:
    """The built-in calibration, ``prompts/calibration.toml`` (see :func:`parse_calibration`).

    An entry names a template id and the sha256 of the exact file it was tuned for; an
    edited template no longer matches its entry and falls back to 0.5 until it is tuned
    again (a test keeps the shipped entries in step with the shipped templates)."""
    path = templates_dir() / CALIBRATION_FILE
    try:
        return parse_calibration(path.read_text(encoding="utf-8"), path)
    except FileNotFoundError:
        return {}


@cache
def _load_path(path: Path, mtime_ns: int, size: int) -> PromptTemplate:
    template = parse_template(path.read_bytes(), path)
    threshold = calibration().get(template.hash)
    if threshold is None or template.mode != "binary" or not template.supports_probability:
        return template
    return replace(template, p_yes_threshold=threshold)


def load_template(ref: str | Path) -> PromptTemplate:
    """A template by id (``binary.zh.v1``, from :func:`templates_dir`) or by ``.toml`` path.

    Parsed once per file version: each call costs one ``stat`` (an edited file, i.e. a new
    modification time or size, is parsed again)."""
    text = str(ref)
    if isinstance(ref, Path) or text.endswith(".toml"):
        path = Path(ref).expanduser().resolve()
    else:
        if not text or "/" in text or "\\" in text:
            raise TemplateError(f"invalid template id {text!r}")
        path = _builtin_path(text)
        try:
            stat = path.stat()
        except OSError:
            stat = None
        if stat is None or not S_ISREG(stat.st_mode):
            known = ", ".join(t.id for t in list_templates())
            raise TemplateError(f"unknown template id {text!r} (known: {known})", field="template")
        return _load_path(path, stat.st_mtime_ns, stat.st_size)
    try:
        stat = path.stat()
    except OSError as exc:
        raise TemplateError(f"cannot read template: {exc.strerror}", path=path) from exc
    return _load_path(path, stat.st_mtime_ns, stat.st_size)


def list_templates() -> list[PromptTemplate]:
    """Every built-in template, sorted by id."""
    paths = sorted(templates_dir().glob("*.toml"))
    return [load_template(p) for p in paths if p.name not in NOT_TEMPLATES]


# The built-in default per (mode, language): the template that agreed best with human
# labels on the tune halves of scripts/eval_judge.py (docs/agreement.md); the others
# stay available by id. English uses the rules-first layout (binary.en.v4: the fixed rules
# are a prefix every prompt shares) because it keeps binary.en.v2's held-out kappa with a
# shorter prompt to evaluate per passage; Chinese stays passage-first (binary.zh.v2)
# because its rules-first variant (binary.zh.v5) lost kappa on QBQTC.
_DEFAULTS: dict[tuple[str, str], str] = {
    ("binary", "zh"): "binary.zh.v2",
    ("binary", "en"): "binary.en.v4",
    ("graded", "en"): "graded.en.v2",
}


def default_template_id(mode: TemplateMode, language: str) -> str:
    """The built-in template for a mode and language, e.g. ``binary.zh.v2``, ``graded.zh.v1``."""
    return _DEFAULTS.get((mode, language), f"{mode}.{language}.v1")
