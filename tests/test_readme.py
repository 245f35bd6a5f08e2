"""The README's Python examples run as written, and print what the README says they print."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def run_block(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
    return out.getvalue()


def test_the_readme_has_the_three_python_examples() -> None:
    blocks = python_blocks()
    assert len(blocks) == 3
    assert "ScriptedBackend" in blocks[1]
    assert "RelevancyJudge" in blocks[2]


def test_scripted_example_prints_the_readme_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = python_blocks()[1]
    expected = re.search(r"^# (score=.*)$", code, flags=re.M)
    if expected is None:
        raise AssertionError("the scripted example lost its expected-output comment")
    printed = run_block(code, tmp_path, monkeypatch)
    assert expected.group(1) in printed.splitlines()


def test_deepeval_example_runs_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_block(python_blocks()[2], tmp_path, monkeypatch)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.local_model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the [local] extra")
def test_default_backend_example_runs_with_the_embedded_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("DASHSCOPE_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    printed = run_block(python_blocks()[0], tmp_path, monkeypatch).splitlines()
    # Two verdict lines: "1 yes 3 <reason>"; the relevant passage first, the irrelevant second.
    first, second = printed[0].split(maxsplit=3), printed[1].split(maxsplit=3)
    assert first[:2] == ["1", "yes"]
    assert second[:2] == ["2", "no"]


# --- shell examples marked `<!-- readme-test: NAME -->`: run as written, offline -----------

ROOT = README.parent


def marked_block(name: str) -> str:
    """The ```bash block right after ``<!-- readme-test: NAME -->`` in the README."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- readme-test: {re.escape(name)} -->\n```bash\n(.*?)```", text, flags=re.S)
    if found is None:
        raise AssertionError(f"the README lost its marked example {name!r}")
    return found.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shell_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This checkout's `judge` on PATH, a private JUDGE_HOME, no provider key."""
    env = {k: v for k, v in os.environ.items() if k not in {"DASHSCOPE_API_KEY", "OPENAI_API_KEY"}}
    env.pop("OPENAI_BASE_URL", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["JUDGE_HOME"] = str(tmp_path / "home")
    env.update(extra)
    return env


def run_shell(script: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """``bash -e`` over the block in its own session; whatever it left running is ended."""
    proc = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    assert proc.returncode == 0, out
    return out


@contextlib.contextmanager
def simulated_llm(tmp_path: Path) -> Iterator[str]:
    """scripts/sim_llm_server.py on a free loopback port; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "sim_llm_server.py"), "--port", "0", "--latency-ms", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "READY http://127.0.0.1:PORT/v1" once listening
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def checkout_view(tmp_path: Path) -> Path:
    """A working directory that looks like the repository root (datasets/, scripts/)."""
    cwd = tmp_path / "repo"
    cwd.mkdir()
    for name in ("datasets", "scripts"):
        (cwd / name).symlink_to(ROOT / name)
    return cwd


def test_compare_systems_example_runs_as_written(tmp_path: Path) -> None:
    """The bundled weak/strong systems compared exactly as the README writes it; the judge
    is the simulated LLM (found through $OPENAI_BASE_URL, as a user's own server would be)."""
    block = marked_block("compare-systems")
    assert "datasets/systems/weak.jsonl" in block and "datasets/systems/strong.jsonl" in block
    cwd = checkout_view(tmp_path)
    with simulated_llm(tmp_path) as url:
        out = run_shell(block, cwd, shell_env(tmp_path, OPENAI_BASE_URL=url))
    report = json.loads((cwd / "reports" / "systems" / "report.json").read_text(encoding="utf-8"))
    assert list(report["systems"]) == ["weak", "strong"]
    assert report["pool"]["unique_pairs"] == 84 and report["pool"]["unjudged"] == 0
    runs = re.findall(r"judge compare-systems: .*?(\d+) LLM calls this run", out)
    assert [int(n) for n in runs] == [84, 0]  # the second run is served from the cache
    trec = dict(re.findall(r"^(map|ndcg_cut_10)\s+all\s+([0-9.]+)$", out, flags=re.M))
    strong = report["systems"]["strong"]["measures"]
    assert float(trec["map"]) == pytest.approx(strong["map"], abs=5e-5)
    assert float(trec["ndcg_cut_10"]) == pytest.approx(strong["ndcg_cut_10"], abs=5e-5)


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


def test_keyless_service_example_runs_as_written(tmp_path: Path) -> None:
    """The service section's first example, run by bash as written; only its two fixed ports
    are swapped for free ones so that parallel test runs cannot collide."""
    block = marked_block("service-keyless")
    assert "--port 8001" in block and "127.0.0.1:8000" in block
    sim_port, serve_port = free_port(), free_port()
    script = block.replace("pip install", ": pip install")  # the test env has the extra already
    script = script.replace("8001", str(sim_port)).replace("127.0.0.1:8000", f"127.0.0.1:{serve_port}")
    script = script.replace("judge serve ", f"judge serve --port {serve_port} ", 1)
    cwd = checkout_view(tmp_path)
    out = run_shell(script, cwd, shell_env(tmp_path), timeout=180)
    assert '{"status":"ok"}' in out.replace(" ", "")
    assert '"verdicts"' in out and "小狗贫血的表现" in out, out  # /v1/evaluate's JudgeResult
    job = re.search(r'\{"id":"[^"]+","kind":"score","status":"queued".*?"passages_total":84', out)
    assert job is not None, out
