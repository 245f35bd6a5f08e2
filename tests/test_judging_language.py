"""language="auto" (the default): the template language is chosen once per query from the
share of CJK ideographs among the letters of the query and its passages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import judge
from judge.backends import RuleBackend
from judge.batch import BatchOptions, score_dataset
from judge.judging import JudgeConfig, bind_language, language_of, verdict_cache_key
from judge.store import recover_output

EN = {"id": "e1", "query": "what causes anemia in dogs", "retrieval_context": ["RELEVANT iron loss", "cats"]}
ZH = {"id": "z1", "query": "小狗贫血的表现", "retrieval_context": ["RELEVANT 牙龈颜色变淡", "猫粮的价格"]}


def test_the_rule() -> None:
    assert language_of(["what causes anemia"]) == "en"
    assert language_of(["小狗贫血的表现"]) == "zh"
    # 2 CJK among 10 letters is 20%: zh; 2 among 11 is below: en
    assert language_of(["贫血", "abcdefgh"]) == "zh"
    assert language_of(["贫血", "abcdefghi"]) == "en"
    assert language_of(["", "12345 !?"]) == "en"  # no letter at all
    # bound once: explicit languages are kept, a recorded one wins over the text
    assert bind_language(JudgeConfig(language="zh"), "english text").language == "zh"
    assert bind_language(JudgeConfig(), "english text", language="zh").language == "zh"
    assert JudgeConfig().language == "auto"


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


async def _score(tmp_path: Path, rows: list[dict[str, Any]], config: JudgeConfig) -> list[dict[str, Any]]:
    inp = _write(tmp_path / "d.jsonl", rows)
    out = tmp_path / "d.judged.jsonl"
    outcome = await score_dataset(
        inp, out, RuleBackend.keyword("RELEVANT"), config, options=BatchOptions(progress="quiet", fsync=False)
    )
    records = recover_output(out)
    records.append(outcome.summary)
    return records


def _templates(record: dict[str, Any]) -> set[str]:
    return {v["template_id"] for v in record["verdicts"]}


async def test_english_dataset_without_language_gets_english_templates(tmp_path: Path) -> None:
    *records, summary = await _score(tmp_path, [EN], JudgeConfig())
    assert _templates(records[0]) == {"binary.en.v4"}
    assert records[0]["conventions"]["language"] == "en"
    assert summary["config"]["judge"]["language"] == "auto" and summary["languages"] == {"en": 1}
    assert "CJK" in summary["config"]["judge"]["language_rule"]


async def test_chinese_dataset_gets_chinese_and_a_mixed_one_each_query_its_own(tmp_path: Path) -> None:
    *records, summary = await _score(tmp_path, [ZH], JudgeConfig())
    assert _templates(records[0]) == {"binary.zh.v2"}
    (tmp_path / "m").mkdir()
    *records, summary = await _score(tmp_path / "m", [EN, ZH], JudgeConfig())
    by_id = {r["id"]: r for r in records}
    assert _templates(by_id["e1"]) == {"binary.en.v4"} and _templates(by_id["z1"]) == {"binary.zh.v2"}
    assert summary["languages"] == {"en": 1, "zh": 1}
    # every verdict records its template's hash; the hashes of the two languages differ
    hashes = {v["template_hash"] for r in records for v in r["verdicts"]}
    assert len(hashes) == 2


def test_cache_key_of_auto_is_the_bound_languages() -> None:
    backend = RuleBackend.keyword("RELEVANT")
    auto = verdict_cache_key(backend, JudgeConfig(), EN["query"], "iron loss")
    assert auto == verdict_cache_key(backend, JudgeConfig(language="en"), EN["query"], "iron loss")
    assert auto != verdict_cache_key(backend, JudgeConfig(language="zh"), EN["query"], "iron loss")


def test_python_api_picks_per_query() -> None:
    result = judge.evaluate(
        EN["query"], EN["retrieval_context"], backend=RuleBackend.keyword("RELEVANT"), summary=False
    )
    assert {v.template_id for v in result.verdicts} == {"binary.en.v4"}
    assert result.conventions["language"] == "en"


@pytest.mark.parametrize("flag", [[], ["--language", "auto"]])
def test_cli_default_is_auto(flag: list[str]) -> None:
    import argparse

    from judge.cli._flags import add_judge_flags, judge_config

    p = argparse.ArgumentParser()
    add_judge_flags(p)
    assert judge_config(p.parse_args(flag), None).language == "auto"
