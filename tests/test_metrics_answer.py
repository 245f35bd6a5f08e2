"""Answer metrics (judge.metrics._answer): hand-computed values on English and Chinese items,
both normalisations, and agreement with rouge-score on English text."""

from __future__ import annotations

import random

import pytest
from rouge_score import rouge_scorer, tokenizers

import judge
from judge.metrics._answer import (
    CjkRougeTokenizer,
    accuracy,
    answer_scores,
    answer_tokens,
    cover_exact_match,
    exact_match,
    gen_eval,
    normalize_answer,
    rouge_scores,
    token_f1,
)


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-12)


# ---------------------------------------------------------------------- normalisation
def test_squad_normalisation() -> None:
    assert normalize_answer("  The  Cat, sat on a MAT!  ") == "cat sat on mat"
    assert normalize_answer("e-mail") == "email"  # punctuation deleted
    assert normalize_answer("An apple") == "apple"
    assert normalize_answer("theatre") == "theatre"  # only whole-word articles
    # Unicode punctuation and full-width forms (NFKC)
    assert normalize_answer("北京，中国。") == "北京中国"
    assert normalize_answer("ＡＢＣ１２３") == "abc123"


def test_ultrarag_normalisation() -> None:
    assert normalize_answer("e-mail", "ultrarag") == "e mail"  # punctuation becomes a space
    assert normalize_answer("True", "ultrarag") == "yes"
    assert normalize_answer("False", "ultrarag") == "no"
    assert normalize_answer("True story", "ultrarag") == "true story"  # only the whole answer
    assert normalize_answer("snake_case", "ultrarag") == "snake case"
    assert normalize_answer("It’s the ‘one’", "ultrarag") == "it s one"
    assert normalize_answer("True") == "true"  # squad keeps it


def test_unknown_normalisation() -> None:
    with pytest.raises(ValueError, match="normalization"):
        normalize_answer("x", "nltk")  # type: ignore[arg-type]


def test_tokens_mixed_text() -> None:
    assert answer_tokens("iPhone手机 很好用") == ["iphone", "手", "机", "很", "好", "用"]
    assert answer_tokens("2024年GDP增长") == ["2024", "年", "gdp", "增", "长"]
    assert answer_tokens("ひらがなカタカナ") == list("ひらがなカタカナ")
    assert answer_tokens("안녕 하세요") == ["안녕", "하세요"]  # Hangul stays as words
    assert answer_tokens("") == []


# ---------------------------------------------------------------------- English, by hand
def test_english_exact_match() -> None:
    assert exact_match("The Cat sat.", ["a cat sat"]) == 1.0
    assert exact_match("The cat sat down", ["cat sat"]) == 0.0
    assert exact_match("Paris", ["London", "paris"]) == 1.0  # any gold answer


def test_english_contained_answer() -> None:
    # "i think it is paris france": 6 tokens, gold "paris": 1 token, 1 in common
    scores = answer_scores("I think it is Paris, France", ["Paris"])
    assert scores["em"] == 0.0
    assert scores["acc"] == 1.0
    assert scores["coverem"] == 1.0
    assert scores["f1"] == approx(2 * (1 / 6) * 1 / (1 / 6 + 1))  # 2/7


def test_english_cover_but_not_contained() -> None:
    # pred tokens: france has paris as capital (5); gold: paris france (2, both present)
    s = answer_scores("France has Paris as capital.", ["Paris, France"])
    assert s["acc"] == 0.0  # "paris france" is not a substring
    assert s["coverem"] == 1.0
    assert s["f1"] == approx(2 * 0.4 * 1.0 / 1.4)
    # ROUGE (Porter stemming): pred franc has pari as capit; gold pari franc
    assert s["rouge-1"] == approx(2 * 0.4 * 1.0 / 1.4)  # 2 of 5, 2 of 2
    assert s["rouge-2"] == 0.0  # no shared bigram
    assert s["rouge-l"] == approx(2 * 0.2 * 0.5 / 0.7)  # LCS 1: 1/5, 1/2


def test_english_f1_max_over_gold() -> None:
    # gold 1 "capital of france" (3 tokens, 2 shared with the 3-token pred) -> f1 2/3
    # gold 2 "paris" (1 shared) -> P 1/3, R 1 -> f1 1/2
    assert token_f1("Paris of France", ["capital of France", "Paris"]) == approx(2 / 3)


def test_partial_cover() -> None:
    assert cover_exact_match("paris is big", ["paris france"]) == 0.0
    assert accuracy("", ["paris"]) == 0.0


def test_ultrarag_changes_scores() -> None:
    assert exact_match("e-mail", ["email"]) == 1.0
    assert exact_match("e-mail", ["email"], normalization="ultrarag") == 0.0
    assert token_f1("e-mail", ["email"], normalization="ultrarag") == 0.0
    assert exact_match("True", ["yes"], normalization="ultrarag") == 1.0
    assert exact_match("True", ["yes"]) == 0.0
    # "e mail address" vs "e mail": 2 shared of 3 and 2
    assert token_f1("e-mail address", ["e-mail"], normalization="ultrarag") == approx(0.8)


# ---------------------------------------------------------------------- Chinese, by hand
def test_chinese_per_character() -> None:
    # pred 答 案 是 北 京 (5 characters, the full stop removed), gold 北 京 (2)
    s = answer_scores("答案是北京。", ["北京"])
    assert s["em"] == 0.0
    assert s["acc"] == 1.0
    assert s["coverem"] == 1.0
    assert s["f1"] == approx(2 * 0.4 * 1.0 / 1.4)
    assert s["rouge-1"] == approx(2 * 0.4 * 1.0 / 1.4)
    # bigrams 答案 案是 是北 北京 (4) vs 北京 (1): P 1/4, R 1
    assert s["rouge-2"] == approx(2 * 0.25 / 1.25)
    assert s["rouge-l"] == approx(2 * 0.4 * 1.0 / 1.4)  # LCS 北京


def test_chinese_exact_and_partial() -> None:
    assert exact_match("北京。", ["北京"]) == 1.0
    assert exact_match("北 京", ["北京"]) == 1.0  # spaces between characters do not matter
    assert exact_match("ＡＢＣ公司", ["abc 公司"]) == 1.0
    # 上海 vs 上海市: 2 shared, P 2/2, R 2/3 -> 0.8; not contained, 市 missing
    s = answer_scores("上海", ["北京", "上海市"])
    assert s == {
        "em": 0.0,
        "acc": 0.0,
        "coverem": 0.0,
        "f1": approx(0.8),
        "rouge-1": approx(0.8),
        "rouge-2": approx(2 * 1.0 * 0.5 / 1.5),  # 上海 of (上海, 海市)
        "rouge-l": approx(0.8),
    }


def test_chinese_mixed_with_english() -> None:
    # pred iphone 手 机 (3), gold iphone (1) -> f1 2*(1/3)/(4/3) = 0.5
    s = answer_scores("iPhone手机", ["iPhone"])
    assert s["f1"] == approx(0.5)
    assert s["acc"] == 1.0
    assert s["rouge-1"] == approx(0.5)


def test_rouge_score_drops_cjk_ours_keeps_it() -> None:
    default = rouge_scorer.RougeScorer(["rouge1"])
    assert default.score("北京", "答案是北京")["rouge1"].fmeasure == 0.0
    assert CjkRougeTokenizer().tokenize("答案是北京 Apples") == ["答", "案", "是", "北", "京", "appl"]
    assert CjkRougeTokenizer(use_stemmer=False).tokenize("Apples café") == ["apples", "café"]


# ---------------------------------------------------------------------- corner cases
def test_empty_after_normalisation() -> None:
    s = answer_scores("The.", ["a"])
    assert s == {
        "em": 1.0,
        "acc": 0.0,
        "coverem": 0.0,
        "f1": 1.0,
        "rouge-1": 0.0,
        "rouge-2": 0.0,
        "rouge-l": 0.0,
    }
    s = answer_scores("", ["Paris"])
    assert s["em"] == s["f1"] == s["acc"] == s["rouge-1"] == 0.0
    # a gold answer normalising to nothing is never "contained"
    assert accuracy("paris", ["the"]) == 0.0
    assert cover_exact_match("paris", ["the"]) == 0.0


def test_bad_golden_answers() -> None:
    with pytest.raises(ValueError, match="empty"):
        answer_scores("x", [])
    with pytest.raises(TypeError, match="list"):
        answer_scores("x", "paris")


# ---------------------------------------------------------------------- agreement with rouge-score
_WORDS = [
    "The",
    "cats",
    "running",
    "quickly",
    "Paris",
    "capital",
    "of",
    "France",
    "is",
    "a",
    "an",
    "studies",
    "studying",
    "connected",
    "connection",
    "42",
    "e-mail",
    "x",
    "happily",
    "ran",
]
_PUNCT = ["", "", "", ",", ".", "!", "?", "'s", ";"]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) + rng.choice(_PUNCT) for _ in range(rng.randint(0, 12)))


@pytest.mark.parametrize("normalization", ["squad", "ultrarag"])
def test_rouge_agrees_with_rouge_score_on_english(normalization: str) -> None:
    rng = random.Random(7)
    reference = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for _ in range(300):
        pred = _sentence(rng)
        golds = [_sentence(rng) for _ in range(rng.randint(1, 3))]
        ours = rouge_scores(pred, golds, normalization=normalization)  # type: ignore[arg-type]
        p = normalize_answer(pred, normalization)  # type: ignore[arg-type]
        for key, theirs in (("rouge-1", "rouge1"), ("rouge-2", "rouge2"), ("rouge-l", "rougeL")):
            expected = max(
                reference.score(normalize_answer(g, normalization), p)[theirs].fmeasure  # type: ignore[arg-type]
                for g in golds
            )
            assert ours[key] == pytest.approx(expected, abs=1e-12)


def test_tokenizer_equals_rouge_score_on_ascii() -> None:
    rng = random.Random(3)
    theirs = tokenizers.DefaultTokenizer(use_stemmer=True)
    ours = CjkRougeTokenizer(use_stemmer=True)
    alphabet = "abcXYZ019 _-.,'!\t\n"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        text += " " + _sentence(rng)
        assert ours.tokenize(text) == theirs.tokenize(text)


# ---------------------------------------------------------------------- many items / public API
def test_gen_eval_means_and_ids() -> None:
    out = judge.gen_eval(["Paris", "答案是北京。"], [["paris"], ["北京"]], ids=["q1", "q2"])
    assert out["n"] == 2
    assert out["normalization"] == "squad"
    assert [x["id"] for x in out["per_item"]] == ["q1", "q2"]
    assert out["all"]["em"] == approx(0.5)
    assert out["all"]["acc"] == approx(1.0)
    assert out["all"]["f1"] == approx((1.0 + 2 * 0.4 / 1.4) / 2)
    assert "normalization" in out["conventions"]


def test_gen_eval_empty_and_mismatched() -> None:
    out = gen_eval([], [])
    assert out["n"] == 0
    assert out["all"]["em"] is None
    with pytest.raises(ValueError, match="2 predictions but 1"):
        gen_eval(["a", "b"], [["a"]])
    with pytest.raises(TypeError):
        gen_eval("ab", [["a"], ["b"]])
