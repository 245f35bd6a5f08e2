"""Worked examples balanced under the token budget, and twins never shown as each other's
example.

Long "yes" labels used to spend the whole budget first: three long relevant and three short
non-relevant labelled passages with ``--examples 4`` showed every prompt 2 yes and 0 no. Now
each side spends its share first (a side that fits nothing in it shows its shortest label
cut to the share), what is left fills the rest, and a block that shows one side only says
how many of each the labels hold. A passage whose text equals a labelled one's up to case,
whitespace or Unicode compatibility forms is never shown that label as an example.

Token costs by hand (``estimate_tokens``: four non-CJK characters a token, rounded up; an
example costs its text, its query and 20 of wrapping): query ``"which"`` 2 tokens."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from judge.backends import ChatRequest, ResilientBackend, RuleBackend
from judge.cli import main
from judge.judging import (
    Example,
    ExampleChoice,
    ExampleSpec,
    bank_of,
    examples_hash,
    load_template,
    render_examples,
    select_examples,
    twin_key,
)

Q = "which"
# 2,200 characters: 550 tokens, 572 as an example; 200 characters: 50 tokens, 72 as an example
YES = [f"Y{i} " + "w" * 2197 for i in range(3)]
NO = [f"N{i} " + "n" * 197 for i in range(3)]


def _long_yes_short_no() -> list[Example]:
    return [Example("q", f"y{i}", Q, t, 1) for i, t in enumerate(YES)] + [
        Example("q", f"n{i}", Q, t, 0) for i, t in enumerate(NO)
    ]


def test_long_yes_labels_leave_the_no_side_its_share() -> None:
    # Budget 1200, n = 4: 2 yes and 2 no wanted, a share of 600 each. Yes: y0 (572) fits,
    # y1 would make 1144 > 600. No: n0 + n1 = 144. Left: 1200 - 572 - 144 = 484 < 572, so
    # no second yes. (The old rule: y0 + y1 = 1144, 56 left, every no (72) skipped.)
    got = select_examples([_long_yes_short_no()], 4)
    assert [e.id for e in got] == ["y0", "n0", "n1"]
    assert isinstance(got, ExampleChoice) and got.held is None  # both sides shown: no note
    assert [e.text for e in got] == [YES[0], NO[0], NO[1]]  # nothing cut


def test_a_side_that_fits_nothing_in_its_share_shows_its_shortest_cut_to_it() -> None:
    # 3,000-character yes labels cost 772 > the yes share 600: y0 is cut to 600 (578 tokens
    # of text: 2,311 characters and the ellipsis, ceil(2312 / 4) = 578); no: n0 + n1 = 144;
    # left 1200 - 600 - 144 = 456 < 772.
    long_yes = [Example("q", f"y{i}", Q, "w" * 2999 + str(i), 1) for i in range(3)]
    no = [Example("q", f"n{i}", Q, t, 0) for i, t in enumerate(NO)]
    got = select_examples([long_yes + no], 4)
    assert [e.id for e in got] == ["y0", "n0", "n1"]
    assert got[0].text == "w" * 2311 + "…"
    # a cut ends at a word when one is near
    words = [Example("q", "y0", Q, "word " * 600, 1), *no]  # 3,000 characters
    cut = select_examples([words], 4)[0].text
    assert cut.endswith("word…") and len(cut) <= 2312 and cut.startswith("word word")


def test_a_share_too_small_to_cut_into_drops_the_label() -> None:
    # budget 100, n = 2: shares 50 / 50. Yes "Y" (1 + 2 + 20 = 23) fits; the no (72) does
    # not, and a cut would leave 50 - 22 = 28 < 32 tokens of text, so none is made; what the
    # sides left, 100 - 23 = 77 >= 72, then takes it.
    no = Example("q", "n0", Q, NO[0], 0)
    got = select_examples([[Example("q", "y0", Q, "Y", 1), no]], 2, budget_tokens=100)
    assert [e.id for e in got] == ["y0", "n0"]
    # budget 90: shares 45 / 45 (a cut would keep 23 < 32), left 90 - 23 = 67 < 72: the no
    # side shows nothing, and the block says what the labels hold
    got = select_examples([[Example("q", "y0", Q, "Y", 1), no]], 2, budget_tokens=90)
    assert [e.id for e in got] == ["y0"] and got.held == (1, 1)


def test_a_one_sided_block_says_how_many_of_each_the_labels_hold() -> None:
    only_yes = [Example("q", f"y{i}", Q, f"yes passage {i}", 1) for i in range(3)]
    got = select_examples([only_yes], 4)
    assert [e.id for e in got] == ["y0", "y1", "y2"] and got.held == (3, 0)
    block = render_examples(load_template("binary.en.v4"), got)
    note = (
        'Note: the labels these examples come from hold 3 "yes" and 0 "no" passages; the examples '
        'above show 3 "yes" and 0 "no", so do not take their answers as the usual answer.\n\n'
    )
    assert block.endswith(note + "The passage to assess:\n")
    # in the template's language, after the examples, before its outro
    zh = render_examples(load_template("binary.zh.v2"), got)
    assert '共有 "yes" 3 条、"no" 0 条' in zh and zh.index("注意") > zh.rindex("</example>")
    # graded: the grade threshold in the note
    graded = select_examples([[Example("q", "g", Q, "three", 3)]], 2, yes_at=2)
    text = render_examples(load_template("graded.en.v2"), graded)
    assert "hold 1 passages of grade 2 or more and 0 below 2" in text
    # both sides shown: no note, and the note is part of what the hash keys on
    both = select_examples([[*only_yes, Example("q", "n", Q, "no passage", 0)]], 4)
    assert both.held is None and "Note:" not in render_examples(load_template("binary.en.v4"), both)
    assert examples_hash(got) != examples_hash(tuple(got))


def test_twins_by_normalised_text() -> None:
    assert twin_key("Water  boils\tat 100 °C. ") == twin_key("water boils at 100 °c.")
    assert twin_key("ＷＡＴＥＲ ｂｏｉｌｓ") == twin_key("water boils")  # NFKC: full-width letters
    assert twin_key("water boils") != twin_key("waterboils")


def test_a_passage_is_never_shown_its_twin() -> None:
    bank = bank_of(
        ExampleSpec(n=4),
        {"q": {"a": 1, "b": 0, "c": 1}},
        {"q": "query"},
        {"q": {"a": "Water boils at 100 C.", "b": "ice is cold", "c": "steam is hot"}},
    )
    for twin in ("Water boils at 100 C. ", "water  boils at 100 c.", "Ｗａｔｅｒ boils at 100 C."):
        assert [e.id for e in bank.for_passage("q", "x", twin)] == ["c", "b"]
    # another passage sees all three (yes shortest first: c is 3 tokens, a 6)
    assert [e.id for e in bank.for_passage("q", "x", "something else")] == ["c", "b", "a"]
    # two labelled twins: one candidate (the first by cost, then id), never both
    twins = bank_of(
        ExampleSpec(n=4),
        {"q": {"a": 1, "a2": 1, "b": 0}},
        {"q": "query"},
        {"q": {"a": "Same text", "a2": "same  TEXT ", "b": "other"}},
    )
    assert [e.id for e in twins.for_passage("q", "x", "unrelated")] == ["a", "b"]


# ------------------------------------------------------------------ end to end: judge score
_PASSAGE = re.compile(r"<passage>\n(.*?)\n</passage>", re.S)
_EXAMPLE = re.compile(r"<example>\n.*?Passage: (.*?)\nAnswer", re.S)


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []
        self.prompts: dict[str, str] = {}

        def rule(request: ChatRequest) -> str:
            user = next(m.content for m in request.messages if m.role == "user")
            passage = _PASSAGE.findall(user)[-1]
            self.seen.append((passage, _EXAMPLE.findall(user)))
            self.prompts[passage] = user
            verdict = "yes" if passage.startswith("Y") else "no"
            return json.dumps({"verdict": verdict, "reason": "x"})

        self.backend = RuleBackend(rule, name="fake:recorder", supports_probabilities=False)

    def factory(self) -> Callable[..., Any]:
        def make(*_a: Any, **kw: Any) -> ResilientBackend:
            return ResilientBackend(self.backend, policy=kw.get("policy"))

        return make


@pytest.fixture()
def recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> _Recorder:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    rec = _Recorder()
    monkeypatch.setattr("judge.backends.make_backend", rec.factory())
    return rec


def test_score_shows_both_sides_and_never_a_twin(recorder: _Recorder, tmp_path: Path) -> None:
    texts = [*YES, *NO, "U0 an unlabelled passage", YES[0] + " ", "U2 another one"]
    data = tmp_path / "data.jsonl"
    ctx = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    data.write_text(json.dumps({"id": "q", "query": Q, "retrieval_context": ctx}) + "\n", encoding="utf-8")
    labels = tmp_path / "labels.qrels"
    labels.write_text("".join(f"q 0 d{i} {int(i < 3)}\n" for i in range(6)), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["score", str(data), "-o", str(out), "--labels", str(labels), "--backend", "fake"]
    assert main([*args, "--language", "en", "--quiet", "--no-recall", "--examples", "4"]) == 0
    shown = dict(recorder.seen)
    assert sorted(shown) == sorted([texts[6], texts[7], texts[8]])  # the labelled six take their labels
    # by hand, as above: one long yes (572 of its 600), the two shortest no (144)
    assert shown[texts[6]] == shown[texts[8]] == [YES[0], NO[0], NO[1]]
    # d7 is d0 with a trailing space: never shown d0, the next yes instead
    assert shown[texts[7]] == [YES[1], NO[0], NO[1]]
    record = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    items = record["verdicts"][7]["examples"]["items"]
    assert [(i["id"], i["label"]) for i in items] == [("d1", 1), ("d3", 0), ("d4", 0)]
    assert "Note:" not in recorder.prompts[texts[6]]  # both sides shown


def test_score_says_what_the_labels_hold_when_one_side_is_shown(recorder: _Recorder, tmp_path: Path) -> None:
    # a query whose labels are all "yes": its other passages see them and the note
    texts = ["Y0 water boils at 100 C", "Y1 at sea level, 100 C", "U0 unlabelled", "U1 also unlabelled"]
    data = tmp_path / "data.jsonl"
    ctx = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    data.write_text(json.dumps({"id": "q", "query": Q, "retrieval_context": ctx}) + "\n", encoding="utf-8")
    labels = tmp_path / "labels.qrels"
    labels.write_text("q 0 d0 1\nq 0 d1 1\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["score", str(data), "-o", str(out), "--labels", str(labels), "--backend", "fake"]
    assert main([*args, "--language", "en", "--quiet", "--no-recall", "--examples", "4"]) == 0
    note = (
        'Note: the labels these examples come from hold 2 "yes" and 0 "no" passages; the examples '
        'above show 2 "yes" and 0 "no", so do not take their answers as the usual answer.'
    )
    for text in texts[2:]:
        prompt = recorder.prompts[text]
        assert note in prompt and prompt.index(note) > prompt.rindex("</example>")
