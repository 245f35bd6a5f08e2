"""Demonstrations from a team's labels: :class:`ExampleSpec` (how many, from where),
:class:`Example` (one labelled passage), :class:`ExampleBank` (every labelled passage of a
run, chosen per passage) and how a chosen set is rendered, hashed and recorded.

For a passage of query q, :meth:`ExampleBank.for_passage` picks up to ``n`` labelled
passages: q's own (``same``), then, with ``source="nearest"``, those of the labelled
queries most similar to q (the bank's ``neighbours``, found above this floor with the
embedded BM25 of :mod:`judge.search` and handed down as data). The rule:

* never the passage itself (same query id and passage id) nor its twin: texts equal once
  normalised (:func:`twin_key`: Unicode NFKC, case folded, runs of whitespace one space,
  none at the ends) are one passage, so a labelled passage is never its own example and
  of two labelled twins only the first (by the order below) is a candidate;
* balanced: ``n - n // 2`` yes and ``n // 2`` no where the labels allow, the other side
  filling what one side lacks ("yes" is a value >= ``yes_at``: 1 on the binary scale, the
  judge's grade threshold on the graded one);
* shortest first (q's own before a neighbour's), within ``budget_tokens`` (estimated as
  the resilient backend estimates: a CJK character one token, other text four characters
  a token), shared between the sides: each side first spends only its share (the budget
  times its part of ``n``, rounded down), a passage longer than what is left of it skipped;
  a side that holds labels but fits none of them in its share shows its shortest one cut
  to the share (ending in "…", when at least :data:`MIN_SHORTENED_TOKENS` of its text are
  left); what the sides left unspent then fills the places still open, the side showing
  fewer first. So long "yes" labels never push every "no" out (they used to: three long "yes"
  labels spent the whole budget);
* shown in a fixed order, yes and no alternating (yes first), so every passage of a query
  sees the same block and an embedded model's prefix cache serves them all;
* a block that shows one side only ends with a note (``prompts/examples_note.toml``, in the
  template's language and mode) saying how many of each side the candidates hold, so three
  "yes" examples are not read as "the usual answer is yes" (:class:`ExampleChoice`'s
  ``held``; the note joins :func:`examples_hash`).

Values are on the judge's scale already (binary 0/1, graded 0-3): the caller maps labels
with the run's stated mapping (``--labels-level``, ``--qrels-level`` ...) before they get
here. A verdict records what it saw (:class:`~judge.judging.ExamplesSeen`: the examples'
query ids, passage ids and labels, and :func:`examples_hash`) and the verdict cache key
includes the hash: a verdict made with demonstrations is another verdict.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import Any, Literal, get_args

from judge.backends import ConfigError
from judge.judging._config import JudgeConfig
from judge.judging._models import ExampleRef, ExamplesSeen
from judge.judging._templates import (
    EXAMPLES_NOTE_FILE,
    PromptTemplate,
    TemplateError,
    load_template,
    templates_dir,
)

ExampleSource = Literal["same", "nearest"]
EXAMPLE_SOURCES: tuple[ExampleSource, ...] = get_args(ExampleSource)
#: The most examples a passage may be shown (``--examples`` is checked against it).
MAX_EXAMPLES = 16
#: Estimated tokens the examples of one passage may take together.
DEFAULT_EXAMPLE_BUDGET = 1200
#: Labelled queries searched per query in ``nearest`` mode.
NEAREST_QUERIES = 5
#: The fewest estimated tokens of text a passage cut to its side's share keeps (fewer: dropped).
MIN_SHORTENED_TOKENS = 32
#: What ends a passage cut to fit the budget.
ELLIPSIS = "…"

_TAGS = re.compile(r"<(\s*/?\s*(?:passage|example)\b[^<>]*)>", re.IGNORECASE)


@dataclass(frozen=True)
class ExampleSpec:
    """How many demonstrations a passage gets and from where (a run setting:
    ``RunSpec.examples``). ``n``: 0 (none, the default) to :data:`MAX_EXAMPLES`.
    ``source``: ``same`` (the query's own labelled passages) or ``nearest`` (those, then
    the labelled passages of the most similar labelled queries). ``budget_tokens``: the
    estimated tokens the examples of one passage may take. Invalid values raise
    :class:`~judge.backends.ConfigError` naming ``examples`` or ``examples_from``."""

    n: int = 0
    source: ExampleSource = "same"
    budget_tokens: int = DEFAULT_EXAMPLE_BUDGET

    def __post_init__(self) -> None:
        n = self.n
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_EXAMPLES:
            raise ConfigError(f"must be an integer 0..{MAX_EXAMPLES}, got {n!r}", field="examples")
        if self.source not in EXAMPLE_SOURCES:
            raise ConfigError(f"must be 'same' or 'nearest', not {self.source!r}", field="examples_from")
        budget = self.budget_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ConfigError(f"must be an integer >= 1, got {budget!r}", field="examples_budget")

    @property
    def active(self) -> bool:
        return self.n > 0

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "source": self.source, "budget_tokens": self.budget_tokens}


@dataclass(frozen=True)
class Example:
    """One labelled passage: its query (id and text), its id, text and label ``value`` on
    the judge's scale (binary 0/1, graded 0-3)."""

    query_id: str
    id: str
    query: str
    text: str
    value: int

    def ref(self) -> ExampleRef:
        return ExampleRef(query_id=self.query_id, id=self.id, label=self.value)


class ExampleChoice(tuple[Example, ...]):
    """The examples one passage is shown, in prompt order (a tuple of :class:`Example`),
    with ``held``: ``(yes, no)``, the candidates of each side the labels held, when the
    block shows one side only (None otherwise: no note); ``yes_at`` as chosen with."""

    held: tuple[int, int] | None
    yes_at: int

    def __new__(
        cls, items: Iterable[Example] = (), *, held: tuple[int, int] | None = None, yes_at: int = 1
    ) -> ExampleChoice:
        choice = super().__new__(cls, items)
        choice.held = held if choice else None
        choice.yes_at = yes_at
        return choice


@lru_cache(maxsize=8192)
def twin_key(text: str) -> str:
    """What twins share: ``text`` in Unicode NFKC, case folded, each run of whitespace one
    space and none at the ends (``"Water  boils "`` and ``"water boils"`` are twins)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


_NOTE_PLACEHOLDERS = {
    "binary": frozenset({"yes", "no", "shown_yes", "shown_no"}),
    "graded": frozenset({"yes", "no", "shown_yes", "shown_no", "yes_at"}),
}


@cache
def _notes() -> tuple[dict[tuple[str, str], str], str]:
    """``prompts/examples_note.toml``: (language, mode) -> the note's text, checked
    strictly, and the sha256 of the file."""
    path = templates_dir() / EXAMPLES_NOTE_FILE
    try:
        data = path.read_bytes()
        raw = tomllib.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TemplateError(f"cannot read the examples note: {exc}", path=path) from exc
    notes: dict[tuple[str, str], str] = {}
    for language in ("zh", "en"):
        table = raw.get(language)
        if not isinstance(table, dict):
            raise TemplateError("must be a table of binary and graded", path=path, field=language)
        for mode, wanted in _NOTE_PLACEHOLDERS.items():
            text = table.get(mode)
            where = f"{language}.{mode}"
            if not isinstance(text, str):
                raise TemplateError("must be a string", path=path, field=where)
            tpl = string.Template(text)
            if not tpl.is_valid() or set(tpl.get_identifiers()) != wanted:
                raise TemplateError(f"must use exactly {sorted(wanted)}", path=path, field=where)
            notes[(language, mode)] = text
    return notes, hashlib.sha256(data).hexdigest()


def examples_note(examples: Sequence[Example], language: str, mode: str) -> str:
    """The note a one-sided block ends with (empty for a block that shows both sides, or
    none): how many of each side the labels held and the block shows."""
    held = getattr(examples, "held", None)
    if not examples or held is None:
        return ""
    yes_at = int(getattr(examples, "yes_at", 1))
    shown_yes = sum(1 for e in examples if e.value >= yes_at)
    kind = "graded" if mode == "graded" else "binary"
    text = _notes()[0][(language if language in ("zh", "en") else "en", kind)]
    values = {"yes": held[0], "no": held[1], "shown_yes": shown_yes, "shown_no": len(examples) - shown_yes}
    if mode == "graded":
        values["yes_at"] = yes_at
    return string.Template(text).substitute(values)


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` as the budget counts them: a wide (CJK) character one, other
    characters four to a token."""
    wide = sum(1 for ch in text if ord(ch) >= 0x2E80)
    return wide + -(-(len(text) - wide) // 4)


def defuse_example(text: str) -> str:
    """An example's text with any ``<passage>``/``<example>`` tag made harmless (full-width
    brackets), so it cannot close its own delimiter."""
    return _TAGS.sub(lambda m: f"＜{m.group(1)}＞", text)


def examples_hash(examples: Sequence[Example]) -> str | None:
    """sha256 of the examples as shown (query, text, label, in order) and their ids; None
    for none (a zero-shot verdict's key stays what it always was)."""
    if not examples:
        return None
    payload: list[list[Any]] = [[e.query_id, e.id, e.query, e.text, e.value] for e in examples]
    held = getattr(examples, "held", None)
    if held is not None:  # the block ends with the note: its counts and the note file's text
        payload.append(["note", list(held), int(getattr(examples, "yes_at", 1)), _notes()[1]])
    blob = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def examples_seen(examples: Sequence[Example]) -> ExamplesSeen | None:
    """What a verdict records of its examples (None for none)."""
    digest = examples_hash(examples)
    if digest is None:
        return None
    return ExamplesSeen(hash=digest, items=[e.ref() for e in examples])


def answer_of(value: int, mode: str, yes_at: int) -> str:
    """The answer an example shows: ``yes``/``no`` for a binary template, the grade for a
    graded one."""
    if mode == "graded":
        return str(value)
    return "yes" if value >= yes_at else "no"


def render_examples(template: PromptTemplate, examples: Sequence[Example], *, yes_at: int = 1) -> str:
    """The ``${examples}`` block of ``template`` for ``examples`` (empty for none)."""
    if not examples:
        return ""
    fmt = template.example_format
    if fmt is None:
        raise TemplateError(f"template {template.id} has no ${{examples}} slot", field="examples")
    return fmt.render(
        [
            {
                "query": defuse_example(e.query),
                "passage": defuse_example(e.text),
                "answer": answer_of(e.value, template.mode, yes_at),
            }
            for e in examples
        ],
        examples_note(examples, template.language, template.mode),
    )


def check_example_slot(templates: Iterable[PromptTemplate]) -> None:
    """Refuse ``--examples`` for a template without the slot: a :class:`TemplateError`
    naming the template (exit 2)."""
    for template in templates:
        if not template.supports_examples:
            raise TemplateError(
                f"template {template.id} has no ${{examples}} slot (and [examples] table), so it "
                "cannot show worked examples: add them, or drop --examples",
                path=template.path,
                field="examples",
            )


def _wrapped_tokens(example: Example) -> int:
    # the text, the query and about 20 tokens of wrapping per example
    return estimate_tokens(example.text) + estimate_tokens(example.query) + 20


def _shortened(example: Example, tokens: int) -> Example | None:
    """``example`` with its text cut so that it costs at most ``tokens`` (its query and
    wrapping counted), ending in :data:`ELLIPSIS`; None when less than
    :data:`MIN_SHORTENED_TOKENS` of text would be left."""
    room = tokens - _wrapped_tokens(replace(example, text=""))
    if room < MIN_SHORTENED_TOKENS:
        return None
    text = example.text
    lo, hi = 0, len(text)  # the longest prefix whose cut text fits: estimate_tokens grows with it
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid].rstrip() + ELLIPSIS) <= room:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space > lo // 2:  # end at a word where one is near
        cut = cut[:space]
    return replace(example, text=cut.rstrip() + ELLIPSIS)


def _candidates(groups: Sequence[Sequence[Example]], yes_at: int) -> dict[bool, list[Example]]:
    """Each side's candidates in order (a group's shortest first, groups in priority
    order), the second of two twins left out."""
    sides: dict[bool, list[Example]] = {True: [], False: []}
    seen: set[str] = set()
    for group in groups:
        for e in sorted(group, key=lambda e: (_wrapped_tokens(e), e.query_id, e.id)):
            key = twin_key(e.text)
            if key in seen:
                continue
            seen.add(key)
            sides[e.value >= yes_at].append(e)
    return sides


def _within_budget(
    sides: Mapping[bool, Sequence[Example]], want: Mapping[bool, int], budget_tokens: int
) -> dict[bool, list[Example]]:
    """Each side's examples within its share of the budget, then what is left unspent
    (the module docstring's rule)."""
    total = want[True] + want[False]
    chosen: dict[bool, list[Example]] = {True: [], False: []}
    pending: dict[bool, list[Example]] = {True: [], False: []}
    spent = 0
    for side in (True, False):
        share = budget_tokens * want[side] // total if total else 0
        used = 0
        for e in sides[side]:
            cost = _wrapped_tokens(e)
            if len(chosen[side]) < want[side] and used + cost <= share:
                chosen[side].append(e)
                used += cost
            else:
                pending[side].append(e)
        if want[side] and not chosen[side] and pending[side]:
            cut = _shortened(pending[side][0], share)
            if cut is not None:
                chosen[side].append(cut)
                pending[side].pop(0)
                used += _wrapped_tokens(cut)
        spent += used
    left = budget_tokens - spent
    placed = True
    while placed:  # the sides' unspent budget fills the open places, the side showing fewer first
        placed = False
        for side in sorted((True, False), key=lambda s: (len(chosen[s]), not s)):
            if len(chosen[side]) >= want[side]:
                continue
            fits = next((e for e in pending[side] if _wrapped_tokens(e) <= left), None)
            if fits is not None:
                chosen[side].append(fits)
                pending[side].remove(fits)
                left -= _wrapped_tokens(fits)
                placed = True
                break
    return chosen


def select_examples(
    groups: Sequence[Sequence[Example]],
    n: int,
    *,
    yes_at: int = 1,
    budget_tokens: int = DEFAULT_EXAMPLE_BUDGET,
) -> ExampleChoice:
    """Up to ``n`` examples from ``groups`` (in priority order: the query's own first), by
    the rule of the module docstring; ``held`` set when they show one side only."""
    if n <= 0:
        return ExampleChoice(yes_at=yes_at)
    sides = _candidates(groups, yes_at)
    want = {True: n - n // 2, False: n // 2}
    for side in (True, False):  # one side short: the other fills
        short = want[side] - len(sides[side])
        if short > 0:
            want[side] -= short
            want[not side] += short
    chosen = _within_budget(sides, want, budget_tokens)
    out: list[Example] = []
    yes, no = chosen[True], chosen[False]
    for i in range(max(len(yes), len(no))):
        out += yes[i : i + 1] + no[i : i + 1]
    held = (len(sides[True]), len(sides[False])) if not yes or not no else None
    return ExampleChoice(out, held=held, yes_at=yes_at)


@dataclass
class ExampleBank:
    """Every labelled passage a run holds the text of, by query id, and how a passage's
    examples are chosen from them (:meth:`for_passage`).

    ``labelled``: query id -> its labelled passages (values on the judge's scale).
    ``neighbours``: query id -> the labelled queries most similar to it, best first
    (``nearest`` mode; empty otherwise). ``yes_at``: the value from which an example is a
    "yes". ``skipped``: labels whose passage text the run does not hold (not used).
    ``mapping``: how the labels were put on the judge's scale (echoed in summaries).
    ``queries``: every query of the run by id (what ``nearest`` searches with).
    ``used``: per query id, the other queries whose examples it was shown (filled as
    passages are chosen for; the summary's "which queries were used"). ``pooled``: the
    bank of a comparison's pool (``compare-systems``, ``experiment``: what is at stake is
    the order of systems). ``caution``: the warning :func:`~judge.judging.examples_caution`
    gave for this run (None: none), echoed by :meth:`describe` as ``warning``."""

    spec: ExampleSpec
    labelled: Mapping[str, Sequence[Example]]
    neighbours: Mapping[str, Sequence[str]] = field(default_factory=dict)
    yes_at: int = 1
    skipped: int = 0
    mapping: Mapping[str, Any] = field(default_factory=dict)
    queries: Mapping[str, str] = field(default_factory=dict)
    used: dict[str, set[str]] = field(default_factory=dict)
    pooled: bool = False
    caution: str | None = None

    def for_passage(self, query_id: str | None, passage_id: str | None, text: str) -> ExampleChoice:
        """The examples a passage of ``query_id`` is shown (never itself nor its twin)."""
        if not self.spec.active or query_id is None:
            return ExampleChoice(yes_at=self.yes_at)
        own = twin_key(text)

        def other(e: Example) -> bool:
            same_id = passage_id is not None and e.query_id == query_id and e.id == passage_id
            return not same_id and twin_key(e.text) != own

        groups = [[e for e in self.labelled.get(query_id, ()) if other(e)]]
        if self.spec.source == "nearest":
            for near in self.neighbours.get(query_id, ()):
                if near != query_id:
                    groups.append([e for e in self.labelled.get(near, ()) if other(e)])
        chosen = select_examples(
            groups, self.spec.n, yes_at=self.yes_at, budget_tokens=self.spec.budget_tokens
        )
        borrowed = {e.query_id for e in chosen if e.query_id != query_id}
        if borrowed:
            self.used.setdefault(query_id, set()).update(borrowed)
        return chosen

    @property
    def labelled_passages(self) -> int:
        return sum(len(v) for v in self.labelled.values())

    def describe(self) -> dict[str, Any]:
        """The summary's ``examples``: the setting, the labels found, the mapping and, in
        ``nearest`` mode, which labelled queries each query borrowed examples from."""
        out: dict[str, Any] = {
            **self.spec.as_dict(),
            "labelled_queries": sum(1 for v in self.labelled.values() if v),
            "labelled_passages": self.labelled_passages,
            "labels_without_text": self.skipped,
            "yes_at": self.yes_at,
            "mapping": dict(self.mapping),
            "order": "balanced yes/no, shortest first, each side within its share of the budget first, "
            "yes and no alternating; twins (NFKC, case, whitespace) never shown as each other's example; "
            "a one-sided block says how many of each side the labels hold",
        }
        if self.spec.source == "nearest":
            out["nearest_by"] = "the embedded BM25 of judge.search over the labelled queries' texts"
            out["borrowed_from"] = {q: sorted(v) for q, v in sorted(self.used.items())}
        if self.caution is not None:
            out["warning"] = self.caution
        return out


def bank_of(
    spec: ExampleSpec,
    labelled: Mapping[str, Mapping[str, int]],
    queries: Mapping[str, str],
    texts: Mapping[str, Mapping[str, str]],
    *,
    yes_at: int = 1,
    mapping: Mapping[str, Any] | None = None,
) -> ExampleBank:
    """A bank from labels on the judge's scale (``{query id: {passage id: value}}``), the
    query texts and the passage texts the run holds (``{query id: {passage id: text}}``);
    a label without a text is counted in ``skipped``."""
    bank: dict[str, list[Example]] = {}
    skipped = 0
    for qid, by_id in labelled.items():
        have = texts.get(qid, {})
        for pid, value in by_id.items():
            if value < 0:
                continue
            text = have.get(pid)
            if text is None or qid not in queries:
                skipped += 1
                continue
            bank.setdefault(qid, []).append(Example(qid, pid, queries[qid], text, int(value)))
    return ExampleBank(
        spec, bank, yes_at=yes_at, skipped=skipped, mapping=dict(mapping or {}), queries=dict(queries)
    )


def check_examples_config(config: JudgeConfig, spec: ExampleSpec, *, listwise: bool = False) -> None:
    """Before any call: with ``spec.n > 0``, every template ``config`` may use (both
    languages for ``auto``) has the ``${examples}`` slot, and the run is pointwise; a
    :class:`TemplateError` naming the template or ``--examples`` otherwise (exit 2)."""
    if not spec.active:
        return
    if listwise:
        raise TemplateError("listwise judging shows no worked examples: drop --listwise", field="examples")
    check_example_slot([load_template(t) for t in config.template_ids().values()])
