"""The review guide's ``--adapt`` walk-through runs as written, every flag it needs in it.

Its blocks judge with the embedded model (from the README's first command's cache), so the
docs runner skips them; here they run through the same runner with the judge named on the
two judging commands: the qrels-backed judge at level 2 on the sample's hand grades, in
probability mode (P(yes) 1 or 0), a strict judge that the labels at level 1 correct. The
page's printed figures are the embedded judge's; these check the commands and what they
print, line by line, and the labels the first line writes."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from _docs_runner import ROOT, FileSession, blocks_of

GUIDE = ROOT / "docs" / "guides" / "review-and-calibrate.md"
HEADING = "## Walk-through: `--adapt` on the bundled data"
JUDGE = "--backend qrels:datasets/sample.qrels:2 --probability"


def _walkthrough() -> tuple[str, str]:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.count("\n", 0, text.index(HEADING)) + 1
    blocks = [b for b in blocks_of(GUIDE) if b.line > start and b.lang == "bash"]
    assert len(blocks) == 2 and all(b.skip is not None for b in blocks)
    return blocks[0].code, blocks[1].code


def _first_two_grades() -> list[int]:
    seen: dict[str, int] = {}
    grades = []
    for line in (ROOT / "datasets" / "sample.qrels").read_text(encoding="utf-8").splitlines():
        qid, _, _, grade = line.split()
        seen[qid] = seen.get(qid, 0) + 1
        if seen[qid] <= 2:
            grades.append(int(grade))
    return grades


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, FileSession]]:
    score, compare = _walkthrough()
    assert score.count("judge score datasets/sample.jsonl ") == 2
    assert compare.count("judge compare-systems ") == 1
    page = tmp_path_factory.mktemp("page") / "adapt.md"
    page.write_text(
        "```bash\n"
        + score.replace("judge score datasets/sample.jsonl ", f"judge score datasets/sample.jsonl {JUDGE} ")
        + "```\n\n```bash\n"
        + compare.replace("judge compare-systems ", f"judge compare-systems {JUDGE} ")
        + "```\n",
        encoding="utf-8",
    )
    session = FileSession(page, tmp_path_factory.mktemp("run"))
    try:
        first, second = blocks_of(page)
        yield session.run(first), session.run(second), session
    finally:
        session.close()


def test_the_score_block_runs_and_prints_what_the_page_shows(ran: tuple[str, str, FileSession]) -> None:
    out, _, session = ran
    grades = _first_two_grades()
    assert (len(grades), sum(g >= 1 for g in grades)) == (28, 15)  # the page's "28 labels (15 of grade >= 1)"
    few = (session.repo / "few.qrels").read_text(encoding="utf-8").splitlines()
    assert [int(line.split()[3]) for line in few] == grades
    lines = out.strip().splitlines()
    assert len(lines) == 5, out
    assert lines[0].startswith("28 labels on 14 queries, features ['logit', 'centred'")
    assert re.match(r"(applied|not applied): leave-one-query-out kappa ", lines[1]), lines[1]
    assert re.match(r"held out: kappa [0-9.]+ -> [0-9.]+ ROC AUC [0-9.]+ -> [0-9.]+$", lines[2]), lines[2]
    assert re.match(r"decided by the rule \d+ changed \d+$", lines[3]), lines[3]
    # the ground truth is every hand grade at level 1: the sample's mAP of the README
    assert re.match(r"mAP: labels alone [0-9.]+ with --adapt [0-9.]+ all hand grades 0\.636692$", lines[4])


def test_the_comparison_block_says_why_adapt_is_not_for_choosing(ran: tuple[str, str, FileSession]) -> None:
    _, out, _ = ran
    lines = out.strip().splitlines()
    assert len(lines) == 3, out
    assert lines[0].startswith("['logit', 'centred'] ") and "applied" in lines[0]
    assert lines[1].startswith("--adapt on a comparison was measured to make the pooled verdicts agree")
    assert lines[2].startswith("- strong is better than weak on map")


def test_without_the_level_graded_labels_stop_before_any_call(ran: tuple[str, str, FileSession]) -> None:
    """What the page says of a first attempt without ``--labels-level``: exit 2 naming it."""
    _, _, session = ran
    probe = session.path.with_name("probe.md")
    probe.write_text(
        "```bash\njudge score datasets/sample.jsonl -o probe.jsonl --labels few.qrels --adapt "
        f'{JUDGE} --quiet > /dev/null 2> probe.err || echo "exit $?"\n'
        "grep -c -- --labels-level probe.err\n```\n",
        encoding="utf-8",
    )
    out = session.run(blocks_of(probe)[0])
    assert out.split() == ["exit", "2", "1"]
    assert not (session.repo / "probe.jsonl").exists()


def test_the_page_shows_no_placeholder() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    assert "ADAPT_SCORE_OUTPUT" not in text and "ADAPT_COMPARE_OUTPUT" not in text
