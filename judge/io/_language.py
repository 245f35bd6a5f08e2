"""Which language a text is in, for ``--language auto``: the one rule the judge (templates)
and the search package (tokenisers) both follow."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

#: ``language="auto"``: a text is Chinese when at least this share of its letters are CJK
#: ideographs, else English.
CJK_SHARE = 0.2


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x2FA1F
    )


def language_of(texts: Iterable[str]) -> Literal["zh", "en"]:
    """``zh`` when at least :data:`CJK_SHARE` of the letters (``str.isalpha``) in ``texts``
    are CJK ideographs, else ``en`` (no letter at all: ``en``)."""
    letters = 0
    cjk = 0
    for text in texts:
        for ch in text:
            if ch.isalpha():
                letters += 1
                if _is_cjk(ch):
                    cjk += 1
    return "zh" if letters and cjk >= CJK_SHARE * letters else "en"
