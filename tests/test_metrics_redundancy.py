"""redundancy@k (judge.metrics._redundancy): exact and near duplicates, markup, ties at the
threshold and between copies, short and empty passages, k beyond the list, and its place in
every `judge score` record and summary."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from judge.backends._base import ChatRequest
from judge.backends._fake import RuleBackend
from judge.batch import BatchOptions, score_dataset
from judge.judging import JudgeConfig
from judge.metrics._redundancy import (
    clean_passage,
    duplicate_flags,
    jaccard,
    redundancy_at_k,
    redundancy_by_k,
    shingles,
)
from judge.store import recover_output

# 10 characters -> 6 shingles: abcde bcdef cdefg defgh efghi fghij
TEN = "abcdefghij"


def test_shingles() -> None:
    assert shingles(TEN) == {"abcde", "bcdef", "cdefg", "defgh", "efghi", "fghij"}
    assert shingles("abcde") == {"abcde"}
    assert shingles("abc") == {"abc"}  # shorter than 5: the text itself
    assert shingles("") == frozenset()
    assert jaccard(frozenset(), frozenset()) == 1
    assert jaccard(frozenset({"a"}), frozenset()) == 0


def test_exact_duplicates() -> None:
    passages = [TEN, "zyxwvutsrq", TEN]
    assert duplicate_flags(passages) == [False, False, True]
    assert redundancy_by_k(passages, [1, 2, 3]) == {"1": 0.0, "2": 0.0, "3": pytest.approx(1 / 3)}


def test_near_duplicates_by_hand() -> None:
    # +1 character: 6 shared of 7 shingles -> 6/7 >= 0.8: duplicate
    assert jaccard(shingles(TEN), shingles(TEN + "k")) == Fraction(6, 7)
    # two characters changed at the end: 4 shared of 8 -> 1/2: not a duplicate
    assert jaccard(shingles(TEN), shingles("abcdefghXY")) == Fraction(4, 8)
    assert duplicate_flags([TEN, TEN + "k", "abcdefghXY"]) == [False, True, False]


def test_ties_at_the_threshold_count() -> None:
    # abcdefghi (5 shingles) vs abcdefgh (4, all shared): exactly 4/5 = 0.8 -> duplicate
    assert jaccard(shingles("abcdefghi"), shingles("abcdefgh")) == Fraction(4, 5)
    assert duplicate_flags(["abcdefghi", "abcdefgh"]) == [False, True]
    # abcdefgh vs abcdefg: 3/4 < 0.8 -> not a duplicate
    assert duplicate_flags(["abcdefgh", "abcdefg"]) == [False, False]
    # a threshold is compared exactly: 0.75 accepts 3/4
    assert duplicate_flags(["abcdefgh", "abcdefg"], threshold=0.75) == [False, True]


def test_ties_between_copies_and_chains() -> None:
    # three identical copies: the first is the original, the other two are duplicates
    assert duplicate_flags([TEN, TEN, TEN]) == [False, True, True]
    assert redundancy_at_k([TEN, TEN, TEN], 3) == pytest.approx(2 / 3)
    # a chain: b ~ a (6/7), c ~ b (7/8) but c !~ a (6/8): c still duplicates a higher passage
    a, b, c = TEN, TEN + "k", TEN + "kl"
    assert jaccard(shingles(a), shingles(c)) == Fraction(6, 8)
    assert duplicate_flags([a, b, c]) == [False, True, True]
    # order matters: the lower-ranked copy is the duplicate
    assert duplicate_flags(["other passage here", TEN, TEN]) == [False, False, True]


def test_markup_whitespace_case_and_entities() -> None:
    plain = "小狗贫血的表现包括牙龈苍白和精神萎靡"
    html = "<p>小狗<em>贫血</em>的表现&nbsp;包括<br/>牙龈苍白和<b>精神萎靡</b></p>"
    assert clean_passage(html) == plain
    assert duplicate_flags([plain, html]) == [False, True]
    scripted = "<script>var x = 1;</script><style>p{}</style>Hello <!-- c --> World"
    assert clean_passage(scripted) == "helloworld"
    assert clean_passage("ＡＢＣ Def") == "abcdef"  # NFKC and case folding
    assert clean_passage("a < b and c > d") == "a<bandc>d"  # not markup
    assert clean_passage("x &amp; y") == "x&y"
    assert redundancy_by_k(["<div>Hello World Again</div>", "hello   world again"], [2]) == {"2": 0.5}


def test_short_and_empty_passages() -> None:
    assert duplicate_flags(["abc", "ABC", "abd"]) == [False, True, False]
    assert duplicate_flags(["abcd", "abcde"]) == [False, False]  # {"abcd"} vs {"abcde"}
    assert duplicate_flags(["<br>", "<p></p>", "text"]) == [False, True, False]  # both empty


def test_k_beyond_the_list_and_empty_list() -> None:
    passages = [TEN, TEN]
    # over the 2 passages there are, not padded to k
    assert redundancy_by_k(passages, [1, 5, 10]) == {"1": 0.0, "5": 0.5, "10": 0.5}
    assert redundancy_at_k([], 5) is None
    assert redundancy_by_k([], [5, 10]) == {"5": None, "10": None}


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="cutoff"):
        redundancy_by_k([TEN], [0])
    with pytest.raises(ValueError, match="threshold"):
        duplicate_flags([TEN], threshold=1.5)
    with pytest.raises(TypeError):
        redundancy_by_k(TEN, [5])


def test_only_the_top_k_are_compared() -> None:
    # the duplicate at rank 3 does not count at k=2
    assert redundancy_by_k(["one passage", "another one", "one passage"], [2, 3]) == {
        "2": 0.0,
        "3": pytest.approx(1 / 3),
    }


# ---------------------------------------------------------------------- judge score integration
def _passage_of(request: ChatRequest) -> str:
    text = "\n".join(m.content for m in request.messages if m.role == "user")
    blocks = re.findall(r"<passage>\n(.*?)\n</passage>", text, flags=re.DOTALL)
    return str(blocks[-1]) if blocks else text


async def test_score_records_and_summary_carry_redundancy(tmp_path: Path) -> None:
    rows = [
        {
            "id": "q1",
            "query": "贫血",
            "retrieval_context": ["RELEVANT 小狗贫血", "<em>RELEVANT</em> 小狗贫血", "x"],
        },
        {"id": "q2", "query": "高铁", "retrieval_context": ["高铁票价", "动车时刻表"]},
    ]
    inp = tmp_path / "d.jsonl"
    inp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "o.jsonl"
    backend = RuleBackend.keyword("RELEVANT", text_of=_passage_of)
    options = BatchOptions(progress="quiet", fsync=False, k=(2, 10))
    outcome = await score_dataset(inp, out, backend, JudgeConfig(), options=options)
    recs = {r["id"]: r for r in recover_output(out)}
    assert recs["q1"]["redundancy"] == {"2": 0.5, "10": pytest.approx(1 / 3, abs=1e-6)}
    assert recs["q2"]["redundancy"] == {"2": 0.0, "10": 0.0}
    summary = outcome.summary
    assert summary["redundancy"] == {"2": 0.25, "10": pytest.approx(1 / 6, abs=1e-6)}
    assert "5-gram" in summary["conventions"]["redundancy"]["near_duplicate"]
