"""Source quality: sites from URLs, priors, judged grades, measures by hand."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import judge
from judge.backends import ChatRequest, RuleBackend
from judge.backends._sync import run_sync
from judge.io._errors import InputError
from judge.io._sites import SitePriors, read_site_priors, site_of, source_site
from judge.judging import Passage
from judge.judging._source_grades import grade_sites, source_quality
from judge.metrics._source_quality_recall import (
    low_quality_share_at_k,
    quality_factor,
    quality_weighted_ndcg,
    source_quality_at_k,
)
from judge.store import SQLiteVerdictStore


# --- sites from URLs ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "site"),
    [
        ("https://www.Gov.cn/zhengce/2022-01/01/content.htm", "gov.cn"),
        ("http://news.sina.com.cn/c/2022.shtml?x=1#top", "news.sina.com.cn"),
        ("news.sina.com.cn/c/2022.shtml", "news.sina.com.cn"),  # no scheme
        ("www.nhc.gov.cn", "nhc.gov.cn"),
        ("//baike.baidu.com/item/x", "baike.baidu.com"),
        ("https://user:pw@Example.COM:8443/p", "example.com"),
        ("example.com:8080/x", "example.com"),
        ("https://zh.wikipedia.org./wiki/X", "zh.wikipedia.org"),
        ("https://新华网.中国/a", "新华网.中国"),
    ],
)
def test_site_of_urls(url: str, site: str) -> None:
    assert site_of(url) == site


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "http://",
        "https:///path",
        "mailto:a@b.com",
        "javascript:alert(1)",
        "not a url",
        "localhost",
        "http://exa mple.com/x",
        "http://[::1]/",
        "http://a..b.com/",
        None,
    ],
)
def test_site_of_bad_urls_is_none(url: str | None) -> None:
    assert site_of(url) is None


def test_source_site_falls_back_to_the_site_field() -> None:
    assert source_site("https://www.xinhuanet.com/a", "新华网") == "xinhuanet.com"
    assert source_site(None, "新华网") == "新华网"
    assert source_site("bad url", " WWW.Xinhuanet.com ") == "xinhuanet.com"
    assert source_site(None, "  ") is None and source_site(None) is None
    assert source_site("http://", "http://") is None  # a broken URL is not a site name
    assert source_site("bad url", "新华网") == "新华网"


# --- priors -------------------------------------------------------------------------------
def test_priors_match_domain_suffixes_longest_first() -> None:
    priors = SitePriors({"gov.cn": 3, "*.example.com": 1, "spam.example.com": 0, "www.baike.baidu.com": 3})
    assert priors.lookup("gov.cn").grade == 3  # type: ignore[union-attr]
    assert priors.lookup("www.nhc.gov.cn").domain == "gov.cn"  # type: ignore[union-attr]
    assert priors.lookup("notgov.cn") is None  # a suffix on a label boundary only
    assert priors.lookup("a.example.com").grade == 1  # type: ignore[union-attr]
    assert priors.lookup("x.spam.example.com").grade == 0  # type: ignore[union-attr]
    assert priors.lookup("baike.baidu.com").grade == 3  # type: ignore[union-attr]  # www. dropped
    assert priors.lookup(None) is None and priors.lookup("新华网") is None
    assert len(priors) == 4


def test_priors_files_tsv_and_json(tmp_path: Path) -> None:
    tsv = tmp_path / "priors.tsv"
    tsv.write_text("# domain\tgrade\tnote\n\ngov.cn\t3\t政府网站\nfarm.example\t0\n", encoding="utf-8")
    priors = read_site_priors(tsv)
    hit = priors.lookup("www.moe.gov.cn")
    assert hit is not None and (hit.grade, hit.note) == (3, "政府网站")
    assert priors.lookup("farm.example").grade == 0  # type: ignore[union-attr]
    js = tmp_path / "priors.json"
    js.write_text(json.dumps({"baike.baidu.com": 3, "zhidao.baidu.com": 1}), encoding="utf-8")
    assert read_site_priors(js).lookup("zhidao.baidu.com").grade == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("p.tsv", "gov.cn\t3\nbad.cn\t5\n", ":2: field 'grade'"),
        ("p.tsv", "gov.cn 3\n", ":1: "),
        ("p.tsv", "not a domain\t2\n", ":1: field 'domain'"),
        ("p.json", '{"gov.cn": 4}', "must be an integer 0-3"),
        ("p.json", '{"gov.cn": true}', "must be an integer 0-3"),
        ("p.json", "[1]", "must be a JSON object"),
        ("p.json", "{oops", "not valid JSON"),
    ],
)
def test_bad_priors_files_name_file_line_and_field(tmp_path: Path, name: str, text: str, where: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_site_priors(path)
    assert str(path) in str(info.value) and where in str(info.value)


# --- measures by hand ----------------------------------------------------------------------
def test_quality_measures_by_hand() -> None:
    assert [quality_factor(q) for q in (0, 1, 2, 3, None)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    grades = [3, None, 0, 1, 2]
    assert source_quality_at_k(grades, 1) == 3.0
    assert source_quality_at_k(grades, 3) == 1.5  # (3 + 0) / 2: the unknown one is left out
    assert source_quality_at_k(grades, 10) == 1.5  # (3 + 0 + 1 + 2) / 4
    assert low_quality_share_at_k(grades, 3) == 0.5
    assert low_quality_share_at_k(grades, 5) == 0.5  # 0 and 1 of 4 known
    assert source_quality_at_k([None, None], 2) is None and low_quality_share_at_k([None], 1) is None


def test_quality_weighted_ndcg_by_hand() -> None:
    # gains 1, 0, 1 from sources graded 0, 3, 3: weighted gains 0.25, 0, 1.
    # DCG = 0.25/log2(2) + 0 + 1/log2(4) = 0.75; IDCG (unweighted ideal 1, 1) = 1 + 1/log2(3).
    expected = 0.75 / (1 + 1 / math.log2(3))
    assert quality_weighted_ndcg([1, 0, 1], [0, 3, 3], 3) == pytest.approx(expected, abs=1e-12)
    # Top-quality (or unknown) sources everywhere: the plain NDCG.
    plain = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert quality_weighted_ndcg([1, 0, 1], [3, None, 3], 3) == pytest.approx(plain, abs=1e-12)
    # Graded gains, k cuts the list: gains 2, 3 at q 1, 2 -> 1.0, 2.25; IDCG@2 of 3, 2.
    assert quality_weighted_ndcg([2, 3, 0], [1, 2, 0], 2) == pytest.approx(
        (1.0 + 2.25 / math.log2(3)) / (3 + 2 / math.log2(3)), abs=1e-12
    )
    assert quality_weighted_ndcg([0, 0], [3, 3], 2) == 0.0
    with pytest.raises(ValueError):
        quality_weighted_ndcg([1], [1, 2], 1)


# --- graded by the judge, priors overriding it ----------------------------------------------
_SITE = re.compile(r"(?:网站|Website)：?:? ?(\S+)")
GRADES = {"gov.cn": 3, "nhc.gov.cn": 3, "zhihu.com": 1, "farm.example": 0, "baike.baidu.com": 3}


def source_judge(bad: frozenset[str] = frozenset()) -> tuple[RuleBackend, list[str]]:
    """Grades sites from GRADES (relevance prompts: yes); a site in ``bad`` gets an invalid reply."""
    asked: list[str] = []

    def rule(request: ChatRequest) -> str:
        user = next(m.content for m in request.messages if m.role == "user")
        m = _SITE.search(user)
        if m is None or "<passage>" in user:
            return json.dumps({"verdict": "yes", "reason": "相关"}, ensure_ascii=False)
        site = m.group(1)
        asked.append(site)
        if site in bad:
            return "这个网站还不错"
        return json.dumps({"grade": GRADES.get(site, 2), "reason": "来源评估"}, ensure_ascii=False)

    return RuleBackend(rule), asked


def test_priors_override_the_judge_and_each_site_is_asked_once() -> None:
    backend, asked = source_judge()
    priors = SitePriors({"zhihu.com": 2, "gov.cn": 1})
    sites = ["nhc.gov.cn", "zhihu.com", "farm.example", "farm.example", "baike.baidu.com"]
    grades, verdicts = run_sync(grade_sites(backend, sites, priors=priors))
    assert sorted(asked) == ["baike.baidu.com", "farm.example"]  # priors cover the rest; once per site
    assert grades["nhc.gov.cn"].grade == 1 and grades["nhc.gov.cn"].origin == "prior"
    assert grades["nhc.gov.cn"].prior_domain == "gov.cn"
    assert grades["zhihu.com"].grade == 2  # the prior, not the judge's 1
    assert (grades["farm.example"].grade, grades["farm.example"].origin) == (0, "judge")
    assert grades["farm.example"].reason == "来源评估" and len(verdicts) == 2
    # Priors alone (no judge): uncovered sites stay unjudged.
    only, _ = run_sync(grade_sites(None, sites, priors=priors))
    assert only["farm.example"].origin == "unjudged" and only["farm.example"].grade is None


def test_source_quality_of_a_ranking_by_hand(tmp_path: Path) -> None:
    backend, asked = source_judge(bad=frozenset({"broken.example"}))
    sites = ["gov.cn", "zhihu.com", None, "farm.example", "broken.example"]
    store = SQLiteVerdictStore(tmp_path / "c.sqlite")
    try:
        relevance = judge.evaluate("q", ["a", "b", "c", "d", "e"], backend=backend, summary=False).verdicts
        result = run_sync(source_quality(backend, sites, relevance=relevance, store=store, k=(2, 5)))
        assert asked.count("broken.example") == 3  # asked, re-asked twice, then unjudged
        assert result.grades == [3, 1, None, 0, None]
        assert result.site_grades["broken.example"].origin == "unjudged"
        assert result.unknown == 2
        assert result.quality == {2: 2.0, 5: pytest.approx(4 / 3)}
        assert result.low_share == {2: 0.5, 5: pytest.approx(2 / 3)}
        # All five relevant (gain 1); factors 1, 0.5, 1 (unknown), 0.25, 1 (unknown).
        disc = [math.log2(i + 2) for i in range(5)]
        dcg5 = sum(f / d for f, d in zip([1, 0.5, 1, 0.25, 1], disc, strict=True))
        assert result.weighted_ndcg[5] == pytest.approx(dcg5 / sum(1 / d for d in disc))
        assert result.weighted_ndcg[2] == pytest.approx((1 + 0.5 / disc[1]) / (1 + 1 / disc[1]))
        # language auto: the sites' names are Latin letters, so the English template
        assert result.template_id == "source_quality.en.v1" and result.usage.calls == 3 + 3
        asked.clear()
        again = run_sync(source_quality(backend, sites, relevance=relevance, store=store, k=(2, 5)))
        # Cached per site: only the unjudged one is asked again.
        assert asked == ["broken.example"] * 3
        assert again.grades == result.grades and again.usage.cached == 3
    finally:
        store.close()


def test_python_api_source_quality_with_priors() -> None:
    backend, asked = source_judge()
    passages = [
        Passage("段落一", url="https://www.nhc.gov.cn/a"),
        Passage("段落二", url="farm.example/p?id=1"),
        Passage("段落三"),
        Passage("段落四", url="知乎"),
    ]
    result = judge.evaluate(
        "q",
        passages,
        backend=backend,
        k=(4,),
        summary=False,
        source_quality=True,
        site_priors={"farm.example": 2},
    )
    sq = result.source_quality
    assert sq is not None
    assert sq.sites == ["nhc.gov.cn", "farm.example", None, "知乎"]
    assert sq.grades == [3, 2, None, 2]  # 知乎 is not in GRADES: the judge's default 2
    assert sorted(asked) == ["nhc.gov.cn", "知乎"]
    assert result.usage.calls == 4 + 2
    only = judge.evaluate("q", passages, backend=backend, k=(4,), summary=False, site_priors={"gov.cn": 3})
    assert only.source_quality is not None and only.source_quality.grades == [3, None, None, None]
