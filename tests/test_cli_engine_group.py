"""The engine flag group (``--engine``, ``--ray-address``, ``--workers``, ``--worker-cpus``)
is one group for ``judge serve`` and ``judge compare-systems``: added by one call, checked
where the run spec is made of it, and what Ray workers build their backend from decided by
one function (the two commands had each grown their own copy of the group)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from _helpers import isolate_cli_env, write_rel_dataset

from judge.batch import BackendSpec
from judge.cli import main
from judge.cli._flags import add_batch_flags, ray_ship, run_spec_of

ENGINE_FLAGS = ("--engine", "--ray-address", "--workers", "--worker-cpus")


def _parser(engine: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_batch_flags(p, engine=engine)
    p.add_argument("--backend-factory", default=None)
    p.add_argument("--cascade", default=None)
    return p


def test_the_group_is_added_by_one_call_and_only_when_asked() -> None:
    with_engine = _parser(True).format_help()
    without = _parser(False).format_help()
    assert all(flag in with_engine for flag in ENGINE_FLAGS)
    assert not any(flag in without for flag in ENGINE_FLAGS)


def test_run_spec_of_checks_the_engine_flags() -> None:
    from judge.io import InputError

    args = _parser(True).parse_args(["--workers", "2"])
    with pytest.raises(InputError) as err:
        run_spec_of(args)
    assert err.value.field == "--workers" and "needs --engine ray" in err.value.message
    assert not run_spec_of(_parser(False).parse_args([])).ray  # a command without the group


def test_ray_ship_is_a_spec_only_for_a_backend_that_is_one() -> None:
    p = _parser(True)
    base = ["--backend", "openai:x", "--base-url", "http://127.0.0.1:9"]
    ray = run_spec_of(p.parse_args([*base, "--engine", "ray"]))
    assert ray_ship(p.parse_args([*base, "--engine", "ray"]), ray) == BackendSpec(
        "openai:x", "http://127.0.0.1:9"
    )
    assert ray_ship(p.parse_args([*base, "--engine", "ray", "--backend-factory", "m:f"]), ray) is None
    assert ray_ship(p.parse_args(["--engine", "ray", "--cascade", "a,b"]), ray) is None
    local = p.parse_args(base)
    assert ray_ship(local, run_spec_of(local)) is None


@pytest.mark.parametrize("command", ["serve", "compare-systems"])
def test_serve_and_compare_systems_refuse_ray_flags_without_the_ray_engine(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    isolate_cli_env(tmp_path, monkeypatch)
    monkeypatch.delenv("JUDGE_API_KEYS", raising=False)
    data = tmp_path / "a.jsonl"
    write_rel_dataset(data, 1, 1)
    argv = {
        "serve": ["serve", "--db", str(tmp_path / "s.sqlite")],
        "compare-systems": ["compare-systems", f"a={data}", f"b={data}", "-o", str(tmp_path / "rep")],
    }[command]
    assert main([*argv, "--ray-address", "auto"]) == 2
    assert "field '--ray-address': needs --engine ray" in capsys.readouterr().err
    assert not (tmp_path / "s.sqlite").exists() and not (tmp_path / "rep" / "pool.judged.jsonl").exists()
