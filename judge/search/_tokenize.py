"""Tokenisers of the embedded engine: jieba for Chinese, PyStemmer's English stemmer with
bm25s's English stopwords for English. ``auto`` picks one per corpus: ``zh`` when at least
20% of the letters of the documents (a sample of the first 2,000) are CJK ideographs, else
``en`` (the rule ``--language auto`` follows everywhere in judge)."""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache

from judge.io import language_of

LANGUAGES = ("auto", "zh", "en")
_WORD = re.compile(r"\w+", re.UNICODE)

#: Function words dropped from Chinese text (jieba keeps them as tokens).
ZH_STOPWORDS = frozenset(
    [
        "的",
        "了",
        "是",
        "在",
        "和",
        "与",
        "及",
        "或",
        "也",
        "都",
        "就",
        "而",
        "并",
        "被",
        "把",
        "对",
        "从",
        "向",
        "以",
        "于",
        "之",
        "其",
        "这",
        "那",
        "这个",
        "那个",
        "一个",
        "有",
        "没有",
        "吗",
        "呢",
        "吧",
        "啊",
        "么",
        "什么",
        "怎么",
        "如何",
        "为什么",
        "哪些",
        "哪个",
        "多少",
        "是否",
        "可以",
        "能",
        "会",
        "要",
        "我",
        "你",
        "他",
        "她",
        "它",
        "我们",
        "你们",
        "他们",
        "上",
        "中",
        "下",
        "个",
        "等",
    ]
)


#: ``auto``'s rule (the judge's too): ``zh`` when at least ``judge.io.CJK_SHARE`` of the letters
#: are CJK ideographs, else ``en``.
detect_language = language_of


@lru_cache(maxsize=1)
def _stemmer() -> Callable[[list[str]], list[str]]:
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    return stemmer.stemWords  # type: ignore[no-any-return]


@lru_cache(maxsize=1)
def _en_stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


@lru_cache(maxsize=1)
def _jieba() -> Callable[[str], list[str]]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba.lcut  # type: ignore[no-any-return]


def tokenize_en(text: str) -> list[str]:
    """Lower-cased words (``\\w+``) without English stopwords, Snowball-stemmed."""
    stop = _en_stopwords()
    words = [w for w in _WORD.findall(text.lower()) if w not in stop]
    return _stemmer()(words)


def tokenize_zh(text: str) -> list[str]:
    """jieba's words (accurate mode) without punctuation, spaces and Chinese function words;
    Latin words in the text are lower-cased and stemmed as in English."""
    text = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    latin: list[str] = []
    stop_en = _en_stopwords()
    for token in _jieba()(text):
        token = token.strip()
        if not token or not any(ch.isalnum() for ch in token) or token in ZH_STOPWORDS:
            continue
        if token.isascii():
            if token not in stop_en:
                latin.append(token)
                out.append(token)
            continue
        out.append(token)
    if latin:
        stems = iter(_stemmer()(latin))
        out = [next(stems) if t.isascii() and t not in ZH_STOPWORDS else t for t in out]
    return out


def tokenizer(language: str) -> Callable[[str], list[str]]:
    """The tokeniser of a bound language (``zh`` or ``en``)."""
    if language == "zh":
        return tokenize_zh
    if language == "en":
        return tokenize_en
    raise ValueError(f"unknown language {language!r}")
