"""Contextual recall: claims extracted and judged as scripted, values by hand."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

import judge
from judge.backends import ChatRequest, RuleBackend
from judge.backends._sync import run_sync
from judge.io._errors import InputError
from judge.judging import VerdictParseError
from judge.judging._recall import contextual_recall, parse_claims
from judge.metrics._source_quality_recall import ClaimSupport, claim_recall_at_k, claim_status_at_k
from judge.store import SQLiteVerdictStore

_PASSAGE = re.compile(r"<passage>\n(.*?)\n</passage>", re.S)
_CLAIM = re.compile(r"(?:陈述|Claim)：?:? ?(.*)")


def _user(request: ChatRequest) -> str:
    return next(m.content for m in request.messages if m.role == "user")


def recall_judge(
    claims: list[str] | str, support: Mapping[tuple[str, str], str]
) -> tuple[RuleBackend, list[str]]:
    """A judge that answers the claims prompt with ``claims`` (a list, or a raw reply) and a
    support prompt with ``support[(claim, passage)]``: "yes", "no" or a raw (invalid) reply;
    absent pairs are "no". Returns the backend and a log of what was asked."""
    log: list[str] = []

    def rule(request: ChatRequest) -> str:
        user = _user(request)
        if "<reference>" in user:
            log.append("claims")
            return claims if isinstance(claims, str) else json.dumps({"claims": claims}, ensure_ascii=False)
        passage_match = _PASSAGE.search(user)
        claim_match = _CLAIM.search(user)
        assert passage_match and claim_match, user
        passage, claim = passage_match.group(1), claim_match.group(1).strip()
        log.append(f"{claim}|{passage}")
        answer = support.get((claim, passage), "no")
        if answer in ("yes", "no"):
            return json.dumps({"verdict": answer, "reason": "理由"}, ensure_ascii=False)
        return answer

    return RuleBackend(rule), log


PASSAGES = ["P1 段落一", "P2 段落二", "P3 段落三"]


# --- parsing ------------------------------------------------------------------------------
def test_parse_claims_strict_on_the_list_lenient_on_extras() -> None:
    reply = '好的：\n```json\n{"Claims ": [" A  事实 ", "B", "", "B"], "note": "extra"}\n```'
    assert parse_claims(reply) == ["A 事实", "B"]
    assert parse_claims(json.dumps({"claims": [str(i) for i in range(15)]}), max_claims=3) == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ('{"facts": ["a"]}', "missing field 'claims'"),
        ('{"claims": "a"}', "must be a list of strings"),
        ('{"claims": ["a", 3]}', "must be a list of strings"),
        ('{"claims": ["", "  "]}', "at least one non-empty claim"),
        ("no json here", "no JSON object"),
    ],
)
def test_parse_claims_rejects(reply: str, message: str) -> None:
    with pytest.raises(VerdictParseError, match=message):
        parse_claims(reply)


# --- recall@k as a pure function ------------------------------------------------------------
def test_claim_status_and_recall_by_hand() -> None:
    a = ClaimSupport((False, True), 3)  # supported at rank 2
    b = ClaimSupport((False, False, False), 3)  # unsupported everywhere
    c = ClaimSupport((None, False, True), 3)  # rank 1 unjudged, supported at 3
    d = ClaimSupport((False,), 1)  # a one-passage ranking, judged: unsupported at any k
    assert [claim_status_at_k(x, 1) for x in (a, b, c, d)] == [
        "unsupported",
        "unsupported",
        "unjudged",
        "unsupported",
    ]
    assert [claim_status_at_k(x, 2) for x in (a, b, c, d)] == [
        "supported",
        "unsupported",
        "unjudged",
        "unsupported",
    ]
    assert [claim_status_at_k(x, 5) for x in (a, b, c, d)] == [
        "supported",
        "unsupported",
        "supported",
        "unsupported",
    ]
    assert claim_recall_at_k([a, b, c, d], 1) == (0.0, 0, 3, 1)
    assert claim_recall_at_k([a, b, c, d], 2) == (pytest.approx(1 / 3), 1, 2, 1)
    assert claim_recall_at_k([a, b, c, d], 5) == (0.5, 2, 2, 0)
    assert claim_recall_at_k([], 5) == (None, 0, 0, 0)
    assert claim_recall_at_k([ClaimSupport((None,), 2)], 5) == (None, 0, 0, 1)


# --- claims extracted and judged as scripted ------------------------------------------------
def test_recall_at_every_k_by_hand_with_early_stop() -> None:
    support = {("A 死亡12人", "P2 段落二"): "yes", ("B 受伤14人", "P3 段落三"): "yes"}
    backend, log = recall_judge(["A 死亡12人", "B 受伤14人", "C 发生在1月1日"], support)
    result = run_sync(
        contextual_recall(backend, "踩踏事故", PASSAGES, "12人死亡，14人受伤，1月1日", k=(1, 2, 3))
    )
    # A: supported at rank 2; B: at rank 3; C: no passage supports it.
    assert result.recall == {1: 0.0, 2: pytest.approx(1 / 3), 3: pytest.approx(2 / 3)}
    assert result.supported == {1: 0, 2: 1, 3: 2}
    assert result.unsupported == {1: 3, 2: 2, 3: 1}
    assert result.unjudged == {1: 0, 2: 0, 3: 0}
    assert [c.support_rank for c in result.claims] == [2, 3, None]
    assert [c.status for c in result.claims] == ["supported", "supported", "unsupported"]
    assert result.unsupported_claims == ["C 发生在1月1日"]
    # One extraction, then each claim in rank order up to its first support: 2 + 3 + 3.
    assert log.count("claims") == 1
    assert sorted(x for x in log if x.startswith("A ")) == ["A 死亡12人|P1 段落一", "A 死亡12人|P2 段落二"]
    assert len(log) == 1 + 2 + 3 + 3
    assert result.usage.calls == 9 and result.usage.cached == 0
    assert result.claims_template_id == "claims.zh.v1" and result.support_template_id == "claim_support.zh.v1"
    assert result.error is None and not result.claims_cached


def test_cutoff_beyond_the_ranking_and_never_past_max_k() -> None:
    backend, log = recall_judge(["A"], {})
    result = run_sync(contextual_recall(backend, "q", PASSAGES[:2], "ref", k=(5,)))
    assert result.recall == {5: 0.0} and result.unsupported == {5: 1}  # both passages judged: no
    backend, log = recall_judge(["A"], {("A", "P3 段落三"): "yes"})
    result = run_sync(contextual_recall(backend, "q", PASSAGES, "ref", k=(2,)))
    assert result.recall == {2: 0.0}
    assert "A|P3 段落三" not in log  # rank 3 is beyond max(k): never asked


def test_unparseable_claim_verdict_is_reasked_then_unjudged_never_unsupported() -> None:
    support = {("A", "P1 段落一"): "yes", ("B", "P1 段落一"): "I think so", ("B", "P2 段落二"): "no"}
    backend, log = recall_judge(["A", "B"], support)
    result = run_sync(contextual_recall(backend, "q", PASSAGES, "ref", k=(1, 2, 3)))
    b = result.claims[1]
    assert b.checks[0].verdict == "unjudged" and b.checks[0].raw == "I think so"
    assert "no valid verdict" in (b.checks[0].error or "")
    assert log.count("B|P1 段落一") == 3  # asked, then re-asked max_reasks = 2 times
    # B's rank-1 verdict is missing and nothing supports it: unjudged at every k.
    assert result.recall == {1: 1.0, 2: 1.0, 3: 1.0}
    assert result.unjudged == {1: 1, 2: 1, 3: 1}
    assert result.unsupported_claims == []
    assert b.status == "unjudged"


def test_unparseable_claims_leave_recall_unjudged() -> None:
    backend, log = recall_judge("这是参考答案的要点。", {})
    result = run_sync(contextual_recall(backend, "q", PASSAGES, "ref", k=(5,)))
    assert result.claims == [] and result.recall == {5: None}
    assert result.error is not None and "no valid claims after 3 replies" in result.error
    assert log == ["claims"] * 3  # no support call without claims


def test_empty_reference_is_an_input_error() -> None:
    backend, _ = recall_judge(["A"], {})
    with pytest.raises(InputError, match="reference answer is empty"):
        run_sync(contextual_recall(backend, "q", PASSAGES, "  ", k=(5,)))


def test_cache_hit_on_rerun_makes_zero_calls(tmp_path: Path) -> None:
    support = {("A", "P2 段落二"): "yes"}

    store = SQLiteVerdictStore(tmp_path / "cache.sqlite")
    try:
        first_backend, first_log = recall_judge(["A", "B"], support)
        first = run_sync(contextual_recall(first_backend, "q", PASSAGES, "ref", store=store, k=(3,)))
        second_backend, second_log = recall_judge(["A", "B"], support)
        second = run_sync(contextual_recall(second_backend, "q", PASSAGES, "ref", store=store, k=(3,)))
    finally:
        store.close()
    assert len(first_log) == 1 + 2 + 3 and first.usage.calls == 6
    assert second_log == [] and second.usage.calls == 0 and second.usage.cached == 6
    assert second.claims_cached and [c.claim for c in second.claims] == ["A", "B"]
    assert second.recall == first.recall == {3: 0.5}
    assert all(check.cached for c in second.claims for check in c.checks)


def test_language_picks_the_english_templates() -> None:
    backend, _ = recall_judge(["A"], {("A", "P1 段落一"): "yes"})
    result = run_sync(
        contextual_recall(backend, "q", PASSAGES, "ref", judge.JudgeConfig(language="en"), k=(1,))
    )
    assert result.recall == {1: 1.0}
    assert (result.claims_template_id, result.support_template_id) == ("claims.en.v1", "claim_support.en.v1")


def _relevance_too(fn: Callable[[ChatRequest], str]) -> Callable[[ChatRequest], str]:
    """Wrap a recall rule so relevance prompts get a 'yes' verdict."""

    def rule(request: ChatRequest) -> str:
        user = _user(request)
        if "<reference>" in user or "陈述" in user:
            return fn(request)
        if request.candidates is not None:
            return "yes"
        return json.dumps({"verdict": "yes", "reason": "相关"}, ensure_ascii=False)

    return rule


def test_python_api_adds_recall_and_its_usage() -> None:
    inner, _ = recall_judge(["A", "B"], {("A", "P1 段落一"): "yes"})
    backend = RuleBackend(_relevance_too(inner.rule))
    result = judge.evaluate("q", PASSAGES, backend=backend, k=(1, 3), summary=False, expected_output="A 和 B")
    assert result.contextual_recall is not None
    assert result.contextual_recall.recall == {1: 0.5, 3: 0.5}
    assert result.contextual_recall.unsupported_claims == ["B"]
    # 3 relevance verdicts + 1 extraction + A (1) + B (3)
    assert result.usage.calls == 3 + 1 + 1 + 3
    plain = judge.evaluate("q", PASSAGES, backend=backend, k=(1,), summary=False)
    assert plain.contextual_recall is None and plain.source_quality is None
    assert judge.JudgeResult.model_validate_json(result.model_dump_json()) == result
