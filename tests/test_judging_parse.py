"""Verdict parsing: JSON out of fenced or chatty replies, documented normalisation, strict models."""

from __future__ import annotations

import pytest

from judge.judging import VerdictParseError, extract_json_object, parse_grade, parse_verdict


@pytest.mark.parametrize(
    "reply",
    [
        '{"verdict": "yes", "reason": "提到了贫血症状"}',
        '```json\n{"verdict": "yes", "reason": "提到了贫血症状"}\n```',
        '```\n{"verdict": "yes", "reason": "提到了贫血症状"}\n```',
        '好的，判断如下：\n```JSON\n{"verdict": "yes", "reason": "提到了贫血症状"}\n```\n希望有帮助。',
        '我的判断是 {"verdict": "yes", "reason": "提到了贫血症状"} 以上。',
        '{"verdict": "Yes ", "reason": "  提到了贫血症状 "}',
        '{"verdict": "是", "reason": "提到了贫血症状"}',
        '{" Verdict": "YES", "REASON": "提到了贫血症状"}',
    ],
)
def test_binary_replies_parse_to_yes(reply: str) -> None:
    v = parse_verdict(reply)
    assert v.verdict == "yes"
    assert v.reason == "提到了贫血症状"


def test_no_and_fou() -> None:
    assert parse_verdict('{"verdict": "否", "reason": "无关"}').verdict == "no"
    assert parse_verdict('{"verdict": "NO", "reason": "无关"}').verdict == "no"


def test_braces_inside_strings_and_leading_junk_object() -> None:
    reply = 'note {not json} then {"verdict": "no", "reason": "段落讲的是 {别的} 事情"}'
    v = parse_verdict(reply)
    assert v.verdict == "no" and v.reason == "段落讲的是 {别的} 事情"


def test_fenced_block_wins_over_earlier_braces() -> None:
    reply = 'Example: {"verdict": "no", "reason": "例子"}\n```json\n{"verdict": "yes", "reason": "真"}\n```'
    assert parse_verdict(reply).reason == "真"


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("", "the reply is empty"),
        ("   ", "the reply is empty"),
        ("相关。", "no JSON object"),
        ('{"verdict": "yes", "reason": "x"', "no JSON object"),
        ('{"relevant": "yes", "reason": "x"}', "unexpected field 'relevant'"),
        ('{"verdict": "relevant", "reason": "x"}', '\'verdict\' must be "yes" or "no"'),
        ('{"verdict": "yes.", "reason": "x"}', "'verdict' must be"),
        ('{"verdict": true, "reason": "x"}', "'verdict' must be"),
        ('{"verdict": "yes", "reason": 3}', "'reason' must be a string"),
        ('{"verdict": "yes", "Verdict": "no", "reason": "x"}', "appears twice"),
        ('["yes", "x"]', "no JSON object"),
    ],
)
def test_invalid_binary_replies(reply: str, message: str) -> None:
    with pytest.raises(VerdictParseError, match=message):
        parse_verdict(reply)


@pytest.mark.parametrize(
    ("reply", "grade"),
    [
        ('{"grade": 3, "reason": "直接回答"}', 3),
        ('{"grade": 0, "reason": "无关"}', 0),
        ('{"grade": "2", "reason": "部分回答"}', 2),
        ('{"grade": " 1 ", "reason": "话题相关"}', 1),
        ('{"grade": 2.0, "reason": "部分回答"}', 2),
        ('```json\n{"Grade": 3, "reason": "直接回答"}\n```', 3),
    ],
)
def test_graded_replies(reply: str, grade: int) -> None:
    assert parse_grade(reply).grade == grade


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ('{"grade": 4, "reason": "x"}', "0, 1, 2 or 3"),
        ('{"grade": -1, "reason": "x"}', "0, 1, 2 or 3"),
        ('{"grade": 2.5, "reason": "x"}', "0, 1, 2 or 3"),
        ('{"grade": true, "reason": "x"}', "0, 1, 2 or 3"),
        ('{"grade": "high", "reason": "x"}', "0, 1, 2 or 3"),
        ('{"grade": "12", "reason": "x"}', "0, 1, 2 or 3"),
        ('{"verdict": "yes", "reason": "x"}', "unexpected field 'verdict'"),
        ('{"grade": "maybe", "reason": "x"}', "0, 1, 2 or 3"),
        ('{"grade": null, "reason": "x"}', "0, 1, 2 or 3"),
        ('{"reason": "x", "score": 2}', r"missing field 'grade' \(unexpected field 'score'\)"),
    ],
)
def test_invalid_graded_replies(reply: str, message: str) -> None:
    with pytest.raises(VerdictParseError, match=message):
        parse_grade(reply)


def test_extract_json_object_returns_first_valid_object() -> None:
    assert extract_json_object('x {"a": {"b": 1}} y {"c": 2}') == {"a": {"b": 1}}


# ---- strict on the verdict, lenient on harmless extras ----------------------------------------
# A reply with one extra key, or a null/missing reason, is accepted, not refused, re-asked
# and recorded unjudged. The verdict itself stays strict (above); the extras are kept.


@pytest.mark.parametrize(
    ("reply", "verdict", "reason", "extras"),
    [
        ('{"verdict": "no", "reason": "无关", "grade": 0}', "no", "无关", {"grade": 0}),
        ('{"verdict": "yes", "reason": "x", "score": 1}', "yes", "x", {"score": 1}),
        ('{"verdict": "yes", "reason": null}', "yes", "", {}),
        ('{"verdict": "yes"}', "yes", "", {}),
        (
            '{"Verdict": "否", " Confidence ": "high", "reason": " 无关 "}',
            "no",
            "无关",
            {"confidence": "high"},
        ),
    ],
)
def test_extra_keys_and_null_or_missing_reason_are_accepted(
    reply: str, verdict: str, reason: str, extras: dict[str, object]
) -> None:
    v = parse_verdict(reply)
    assert (v.verdict, v.reason, v.extras) == (verdict, reason, extras)


def test_graded_extras_and_null_reason() -> None:
    g = parse_grade('{"grade": 2, "reason": null, "verdict": "yes", "notes": ["a"]}')
    assert (g.grade, g.reason, g.extras) == (2, "", {"verdict": "yes", "notes": ["a"]})
    assert parse_grade('{"grade": "3"}').reason == ""


@pytest.mark.parametrize(
    "reply",
    [
        '{"verdict": "maybe", "reason": "说不准", "grade": 1}',
        '{"verdict": null, "reason": "x"}',
        '{"reason": null, "grade": 0}',
    ],
)
def test_the_verdict_itself_stays_strict_with_extras(reply: str) -> None:
    with pytest.raises(VerdictParseError, match="verdict"):
        parse_verdict(reply)


def test_object_validators_are_the_same_rules() -> None:
    from judge.judging import grade_from_object, verdict_from_object

    assert verdict_from_object({"verdict": "是", "reason": None, "id": 3}).verdict == "yes"
    assert grade_from_object({"GRADE": 2.0, "x": 1}).grade == 2
    with pytest.raises(VerdictParseError, match="'verdict' must be"):
        verdict_from_object({"verdict": "maybe"})


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('```JSON\n{"a": 1}\n```', {"a": 1}),
        ('```json {"a": 1}```', {"a": 1}),
        ('```python\nx = {"b": 2}\n```', {"b": 2}),
        ('pre {"a": "}"} post', {"a": "}"}),
        ("no object here", None),
    ],
)
def test_one_json_extraction_for_parser_and_deepeval_adapter(text: str, found: object) -> None:
    """The verdict parser and the deepeval adapter read replies through the same extraction
    (their fence patterns used to differ: ```python and ```json without a newline)."""
    from pydantic import BaseModel, ConfigDict

    from judge.backends._deepeval import parse_into
    from judge.backends._json import first_json_object

    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")

    assert first_json_object(text) == found
    parsed = parse_into(Loose, text)
    assert (parsed.model_dump() if parsed is not None else None) == found


def test_listwise_items_follow_the_same_rules() -> None:
    from judge.judging._listwise import parse_listwise

    reply = (
        '{"verdicts": [{"id": 1, "verdict": "yes", "reason": null, "grade": 3},'
        ' {"id": 2, "verdict": "no", "confidence": 0.9},'
        ' {"id": 3, "verdict": "maybe", "reason": "说不准"}]}'
    )
    valid, problems = parse_listwise(reply, 3, "binary")
    assert valid == {1: ("yes", None, ""), 2: ("no", None, "")}
    assert problems == ['passage 3: \'verdict\' must be "yes" or "no"']
    graded, problems = parse_listwise('{"verdicts": [{"id": 1, "grade": 2, "verdict": "yes"}]}', 1, "graded")
    assert graded == {1: ("", 2, "")} and problems == []


@pytest.mark.parametrize(
    "text",
    [
        '{"verdict": "yes", "reason": "r"}',
        '  \n{"verdict": "no", "reason": "r"}\n ',
        '{"verdict": "no", "reason": "a } and a { in a string"}',
        '{"outer": {"verdict": "yes"}, "reason": "nested"}',
        '{"verdict": "yes"} {"verdict": "no"}',
        '{"reason": "a fence ```{\\"verdict\\": \\"no\\"}``` inside a string", "verdict": "yes"}',
        "{'verdict': 'yes'}",
        '{"verdict": "yes", "reason": "unterminated}',
        '[1, 2] {"verdict": "yes"}',
        "{}",
        '{"a": NaN}',
    ],
)
def test_the_first_object_is_the_same_whether_or_not_the_reply_is_one_bare_object(text: str) -> None:
    """A reply that is one bare object is parsed whole; the answer is the one the scan of
    every candidate gives."""
    from judge.backends._json import first_json_object, json_objects

    assert first_json_object(text) == next(json_objects(text), None)
