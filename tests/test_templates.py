"""Prompt templates: built-in files load, render strictly, keep the passage last."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest

from judge.judging import (
    JudgeConfig,
    TemplateError,
    list_templates,
    load_template,
    template_for,
    templates_dir,
)
from judge.judging._templates import parse_calibration, parse_template

REPO = Path(__file__).resolve().parents[1]

GOOD = """
id = "custom.zh.v1"
language = "zh"
mode = "binary"
variables = ["query", "passage"]
system = "判断相关性。"
user = "查询：${query}\\n<passage>\\n${passage}\\n</passage>"
reask = "错误：${error}"
"""


def _write(tmp_path: Path, text: str, name: str = "custom.zh.v1") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_templates_found_in_repo_prompts() -> None:
    assert templates_dir() == REPO / "prompts"
    ids = {t.id for t in list_templates()}
    assert {
        "binary.zh.v1",
        "binary.en.v1",
        "graded.zh.v1",
        "graded.en.v1",
        "summary.zh.v1",
        "summary.en.v1",
    } <= ids


@pytest.mark.parametrize(
    "template_id",
    [
        "binary.zh.v1",
        "binary.en.v1",
        "graded.zh.v1",
        "graded.en.v1",
        "binary.zh.v2",
        "binary.en.v2",
        "graded.en.v2",
    ],
)
def test_verdict_templates_shape(template_id: str) -> None:
    t = load_template(template_id)
    assert t.hash == hashlib.sha256((REPO / "prompts" / f"{template_id}.toml").read_bytes()).hexdigest()
    assert t.variables == ("query", "passage", "examples")  # the ${examples} slot: empty zero-shot
    assert t.supports_examples and t.supports_probability
    assert t.json_schema is not None and t.json_schema["additionalProperties"] is False
    if t.mode == "binary":
        assert t.answer_prefix == '{"verdict": "' and t.candidates == ("yes", "no")
        assert t.json_schema["properties"]["verdict"]["enum"] == ["yes", "no"]
    else:
        assert t.answer_prefix == '{"grade": ' and t.candidates == ("0", "1", "2", "3")
        assert t.json_schema["properties"]["grade"]["enum"] == [0, 1, 2, 3]
    assert t.reask is not None and "${error}" in t.reask


@pytest.mark.parametrize("template_id", ["binary.zh.v1", "binary.en.v1", "graded.zh.v1", "graded.en.v1"])
def test_passage_comes_last_and_prefix_is_shared(template_id: str) -> None:
    t = load_template(template_id)
    a = t.render(query="小狗贫血的表现", passage="段落甲")
    b = t.render(query="小狗贫血的表现", passage="段落乙乙乙")
    assert [m.role for m in a] == ["system", "user"]
    assert a[0] == b[0]
    user_a, user_b = a[1].content, b[1].content
    # Everything up to the passage (instructions, examples, query) is identical: the
    # embedded model reuses that KV-cache prefix for every passage of the query.
    cut = user_a.index("<passage>\n段落甲")
    assert user_a[:cut] == user_b[:cut]
    assert user_a.index("小狗贫血的表现") < cut
    # Only a one-line reminder follows the closing delimiter.
    tail = user_a.split("</passage>")[-1].strip()
    assert tail and "\n" not in tail


@pytest.mark.parametrize("template_id", ["binary.zh.v2", "binary.en.v2", "graded.en.v2"])
def test_tuned_templates_read_passage_then_query_then_rules(template_id: str) -> None:
    # The tuned layout (docs/agreement.md): the passage first, the query after it (the last
    # thing a small model reads before the rules and its answer), and the rule that text
    # inside <passage> is data only after the passage, where a passage cannot pre-empt it.
    user = load_template(template_id).render(query="小狗贫血的表现", passage="段落甲")[1].content
    assert user.startswith("<passage>\n段落甲\n</passage>")
    end = user.index("</passage>")
    assert end < user.index("小狗贫血的表现")
    reminder = "只是待评估的数据" if ".zh." in template_id else "is data to be assessed"
    assert user.index(reminder) > end


def test_substituted_text_is_not_expanded_again() -> None:
    t = load_template("binary.zh.v1")
    msgs = t.render(query="q", passage="价格 $5，${query} 与 $$ 保持原样")
    assert "价格 $5，${query} 与 $$ 保持原样" in msgs[1].content


def test_render_missing_and_unknown_variables_raise() -> None:
    t = load_template("binary.zh.v1")
    with pytest.raises(TemplateError, match="missing value for passage"):
        t.render(query="q")
    with pytest.raises(TemplateError, match="unknown variable extra"):
        t.render(query="q", passage="p", extra="x")


def test_summary_template_renders() -> None:
    t = load_template("summary.zh.v1")
    assert t.answer_prefix is None and not t.supports_probability
    msgs = t.render(query="q", total="3", relevant="2", irrelevant="1", unjudged="0", verdicts="[1] 相关：x")
    assert "共 3 个段落，相关 2 个" in msgs[-1].content


def test_unknown_template_id_lists_known_ones() -> None:
    with pytest.raises(TemplateError, match=r"unknown template id 'nope\.zh\.v9'.*binary\.zh\.v1"):
        load_template("nope.zh.v9")


def test_template_for_checks_mode_and_probability(tmp_path: Path) -> None:
    assert template_for(JudgeConfig(mode="graded", language="en")).id == "graded.en.v2"
    with pytest.raises(TemplateError, match="is a binary template but mode is graded"):
        template_for(JudgeConfig(mode="graded", template="binary.zh.v1"))
    path = _write(tmp_path, GOOD)
    assert template_for(JudgeConfig(template=str(path))).id == "custom.zh.v1"
    with pytest.raises(TemplateError, match="no answer_prefix/candidates"):
        template_for(JudgeConfig(template=str(path), probability=True))


def test_load_by_path_and_hash_follows_bytes(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    t1 = load_template(path)
    assert t1.hash == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text(GOOD + "\n# edited\n", encoding="utf-8")
    t2 = load_template(str(path))
    assert t2.hash != t1.hash


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace('id = "custom.zh.v1"', 'id = "other.zh.v1"'), "must equal the file name"),
        (GOOD + 'colour = "red"\n', "unknown field"),
        (GOOD.replace("${query}", "${qurey}"), "unknown variable qurey"),
        (
            GOOD.replace('variables = ["query", "passage"]', 'variables = ["query", "passage", "k"]'),
            "unused: k",
        ),
        (GOOD.replace('mode = "binary"', 'mode = "listwise"'), "must be one of"),
        (GOOD.replace("判断相关性。", "价格 $ 5"), "invalid placeholder"),
        (GOOD.replace('reask = "错误：${error}"', 'reask = "错误：${query}"'), "only placeholder allowed"),
        (GOOD + 'answer_prefix = \'{"verdict": "\'\n', "go together"),
        (GOOD + 'answer_prefix = \'x\'\ncandidates = ["yes", "maybe"]\n', "candidates must be exactly"),
        (GOOD.replace('language = "zh"\n', ""), "missing required field"),
        ("id = [", "not a valid UTF-8 TOML file"),
    ],
)
def test_malformed_templates_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TemplateError, match=message) as info:
        parse_template(path.read_bytes(), path)
    assert str(path) in str(info.value)


def test_shipped_calibration_matches_the_shipped_templates() -> None:
    # Every calibrated threshold is bound to one exact template file: an edited template
    # must be re-tuned (scripts/eval_judge.py) and its entry updated with the new hash.
    path = templates_dir() / "calibration.toml"
    entries = tomllib.loads(path.read_text(encoding="utf-8"))
    assert set(entries) == {"binary.zh.v2", "binary.en.v2", "binary.en.v4"}
    for template_id, entry in entries.items():
        template = load_template(template_id)
        assert entry["template_hash"] == template.hash, f"{template_id} changed since it was calibrated"
        assert template.p_yes_threshold == entry["p_yes_threshold"]
    assert load_template("binary.zh.v2").p_yes_threshold == 0.575
    assert load_template("binary.zh.v1").p_yes_threshold is None  # not calibrated: 0.5
    assert load_template("binary.zh.v1").decision_threshold == 0.5
    assert load_template("binary.zh.v2").decision_threshold == 0.575
    assert load_template("binary.en.v4").decision_threshold == 0.725
    assert load_template("binary.en.v2").decision_threshold == 0.834  # still usable by id


def test_an_edited_template_loses_its_calibration(tmp_path: Path) -> None:
    original = (templates_dir() / "binary.zh.v2.toml").read_text(encoding="utf-8")
    same = _write(tmp_path, original, "binary.zh.v2")
    assert load_template(same).p_yes_threshold == 0.575  # same bytes, same calibration
    (tmp_path / "edited").mkdir()
    edited = _write(tmp_path / "edited", original + "\n# edited\n", "binary.zh.v2")
    assert load_template(edited).p_yes_threshold is None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('["a"]\ntemplate_hash = "h"\np_yes_threshold = 1.5\n', "a.p_yes_threshold"),
        ('["a"]\ntemplate_hash = "h"\np_yes_threshold = true\n', "a.p_yes_threshold"),
        ('["a"]\np_yes_threshold = 0.5\n', "a"),
    ],
)
def test_bad_calibration_entries_are_refused(text: str, field: str) -> None:
    with pytest.raises(TemplateError) as info:
        parse_calibration(text, Path("calibration.toml"))
    assert info.value.field == field


def test_default_templates_are_the_tuned_ones() -> None:
    assert JudgeConfig(language="zh").template_id() == "binary.zh.v2"
    assert JudgeConfig().template_ids() == {"zh": "binary.zh.v2", "en": "binary.en.v4"}
    assert JudgeConfig(language="en").template_id() == "binary.en.v4"
    assert JudgeConfig(mode="graded", language="zh").template_id() == "graded.zh.v1"
    assert JudgeConfig(mode="graded", language="en").template_id() == "graded.en.v2"
