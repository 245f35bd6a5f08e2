"""One run specification (``judge.batch.RunSpec``) and every default written once.

The command line's help, the server's OpenAPI schema and ``judge.evaluate``'s signature
must state and apply the same defaults (calls in flight, retries, timeout, workers,
thresholds); the three builders (flags, job options, keywords) must resolve the same
settings to equal specs; ``None`` means "the default" everywhere.
"""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import judge
from judge.backends import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_RETRIES,
    REMOTE_TIMEOUT_S,
    CallPolicy,
    ConfigError,
    ResilientBackend,
    RuleBackend,
    make_backend,
)
from judge.batch import (
    DEFAULT_WORKERS,
    BackendSpec,
    RayExecutor,
    RunSpec,
    run_spec,
    run_spec_from_args,
    run_spec_from_job_options,
    run_spec_from_kwargs,
)
from judge.cli import build_parser
from judge.judging import JudgeConfig

EXPECTED = {
    "concurrency": DEFAULT_CONCURRENCY,
    "max_retries": DEFAULT_MAX_RETRIES,
    "timeout_s": REMOTE_TIMEOUT_S,
    "workers": DEFAULT_WORKERS,
    "grade_threshold": 2,
    "p_yes_threshold": None,
}


def _remote() -> RuleBackend:
    """A backend with no concurrency limit of its own (a remote API)."""
    return RuleBackend.keyword("RELEVANT")


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[command]
    return found


def _help_default(command: str, flag: str) -> float:
    """The number the help of ``judge COMMAND`` states as ``flag``'s default."""
    text = " ".join(_subparser(command).format_help().split())
    match = re.search(re.escape(flag) + r" [A-Z_]+ [^()]*\(default (\d+(?:\.\d+)?)", text)
    assert match, f"{command} {flag}: no stated default in the help"
    return float(match.group(1))


@pytest.mark.parametrize("command", ["score", "compare-systems", "serve", "stability"])
def test_the_cli_help_states_the_call_defaults(command: str) -> None:
    assert _help_default(command, "--concurrency") == EXPECTED["concurrency"]
    assert _help_default(command, "--max-retries") == EXPECTED["max_retries"]
    assert _help_default(command, "--timeout") == EXPECTED["timeout_s"]


def test_the_cli_help_states_the_engine_and_threshold_defaults() -> None:
    assert _help_default("score", "--workers") == EXPECTED["workers"]
    for command in ("score", "compare-systems", "serve", "stability"):
        action = next(a for a in _subparser(command)._actions if "--p-yes-threshold" in a.option_strings)
        assert action.default is EXPECTED["p_yes_threshold"]


def test_the_cli_applies_the_defaults_it_states() -> None:
    args = build_parser().parse_args(["score", "in.jsonl"])
    spec = run_spec_from_args(args)
    backend = make_backend(_remote(), policy=spec.policy)
    assert backend.max_concurrency == EXPECTED["concurrency"]
    assert backend.max_retries == EXPECTED["max_retries"]
    assert backend.timeout_s == EXPECTED["timeout_s"]
    assert spec.workers == EXPECTED["workers"]
    assert spec.config.grade_threshold == EXPECTED["grade_threshold"]
    assert spec.config.p_yes_threshold is EXPECTED["p_yes_threshold"]


def test_the_openapi_schema_states_the_same_defaults(tmp_path: Path) -> None:
    from tests._server import app_for

    schemas = app_for(tmp_path).openapi()["components"]["schemas"]
    # /v1/evaluate's config and a job's judging options are JudgeOptions; /v1/compare's options
    # extend them.
    assert "#/components/schemas/JudgeOptions" in str(schemas["EvaluateRequest"]["properties"]["config"])
    for name in ("JudgeOptions", "CompareOptions"):
        stated = schemas[name]["x-run-defaults"]  # the OpenAPI document leaves nulls out
        assert {key: stated.get(key) for key in EXPECTED} == EXPECTED, name
    assert schemas["JudgeOptions"]["properties"]["p_yes_threshold"].get("default") is None


def test_the_python_api_signature_and_what_it_applies() -> None:
    sync, coro = inspect.signature(judge.evaluate), inspect.signature(judge.aevaluate)
    assert sync == coro  # evaluate is defined from aevaluate's signature
    params = sync.parameters
    given = {name: params[name].default for name in ("concurrency", "max_retries", "timeout_s")}
    assert given == {"concurrency": None, "max_retries": None, "timeout_s": None}
    assert params["config"].default is None and params["policy"].default is None
    # What those defaults resolve to: the values the CLI and the schema state.
    spec = run_spec_from_kwargs(config=params["config"].default, policy=params["policy"].default, **given)
    backend = make_backend(_remote(), policy=spec.policy)
    assert (backend.max_concurrency, backend.max_retries, backend.timeout_s) == (
        EXPECTED["concurrency"],
        EXPECTED["max_retries"],
        EXPECTED["timeout_s"],
    )
    assert spec.workers == EXPECTED["workers"]
    assert (spec.config.grade_threshold, spec.config.p_yes_threshold) == (
        EXPECTED["grade_threshold"],
        EXPECTED["p_yes_threshold"],
    )


async def test_evaluate_keywords_set_the_call_policy() -> None:
    result = await judge.aevaluate("q", ["RELEVANT a", "b"], backend=_remote(), summary=False, max_retries=0)
    assert [v.verdict for v in result.verdicts] == ["yes", "no"]
    with pytest.raises(ConfigError) as err:
        await judge.aevaluate("q", ["a"], backend=_remote(), policy=CallPolicy(), concurrency=2)
    assert err.value.field == "policy"


def test_the_three_builders_resolve_the_same_settings_to_equal_specs() -> None:
    argv = ["score", "in.jsonl", "--mode", "graded", "--probability", "--p-yes-threshold", "0.4"]
    argv += ["--concurrency", "8", "--max-retries", "2", "--timeout", "30", "--language", "zh"]
    from_flags = run_spec_from_args(build_parser().parse_args(argv))
    server = run_spec(concurrency=8, max_retries=2, timeout_s=30.0)
    options = {"mode": "graded", "probability": True, "p_yes_threshold": 0.4, "language": "zh", "k": [5]}
    from_job = run_spec_from_job_options(options, server)
    from_kwargs = run_spec_from_kwargs(
        mode="graded",
        config=JudgeConfig(probability=True, p_yes_threshold=0.4, language="zh"),
        concurrency=8,
        max_retries=2,
        timeout_s=30.0,
    )
    assert from_flags == from_job == from_kwargs
    assert from_flags.policy == CallPolicy(concurrency=8, max_retries=2, timeout_s=30.0)
    assert from_flags.config == JudgeConfig(
        mode="graded", probability=True, p_yes_threshold=0.4, language="zh"
    )


def test_none_is_not_given_in_every_builder() -> None:
    assert run_spec(concurrency=None, mode=None, workers=None, window=None) == RunSpec()
    assert run_spec_from_job_options({"mode": None, "template": None}) == RunSpec()
    assert run_spec_from_kwargs(concurrency=None, max_retries=None, timeout_s=None) == RunSpec()
    base = run_spec(mode="graded", concurrency=4)
    assert run_spec(base, mode=None, concurrency=None) == base  # the base's values stay


def test_concurrency_none_means_the_policy_default_everywhere() -> None:
    remote = _remote()
    assert CallPolicy(concurrency=None).concurrency_for(remote) == DEFAULT_CONCURRENCY
    assert ResilientBackend(remote, concurrency=None).max_concurrency == DEFAULT_CONCURRENCY
    assert ResilientBackend(_remote()).max_concurrency == DEFAULT_CONCURRENCY
    one = RuleBackend.keyword("RELEVANT", max_concurrency=1)
    assert ResilientBackend(one, concurrency=None).max_concurrency == 1  # capped by the backend
    executor = RayExecutor(BackendSpec("openai:x", "http://127.0.0.1:9"), concurrency=None)
    assert executor.concurrency == DEFAULT_CONCURRENCY and executor.workers == DEFAULT_WORKERS
    assert executor.window == 2 * DEFAULT_CONCURRENCY


def test_the_ray_engine_takes_the_spec_as_is() -> None:
    spec = run_spec(engine="ray", workers=3, worker_cpus=0.5, concurrency=6, max_retries=1, window=9)
    executor = RayExecutor(BackendSpec("openai:x", "http://127.0.0.1:9"), spec)
    assert executor.run_spec == spec
    assert (executor.workers, executor.cpus_per_worker, executor.concurrency, executor.window) == (
        3,
        0.5,
        6,
        9,
    )
    assert executor.policy.max_retries == 1
    # On Ray a per-process limit (the embedded model) counts once per worker.
    one = RuleBackend.keyword("RELEVANT", max_concurrency=1)
    assert spec.concurrency_for(one) == 3 and RunSpec().concurrency_for(one) == 1


def test_a_bad_setting_names_its_field() -> None:
    for settings, field in (
        ({"workers": 0}, "workers"),
        ({"worker_cpus": 0}, "worker_cpus"),
        ({"window": 0}, "window"),
        ({"engine": "spark"}, "engine"),
        ({"concurrency": 0}, "concurrency"),
        ({"p_yes_threshold": 2.0}, "p_yes_threshold"),
        ({"colour": "red"}, "colour"),
    ):
        with pytest.raises(ConfigError) as err:
            run_spec(**settings)
        assert err.value.field == field


def test_a_comparison_jobs_resampling_seed_is_not_the_judges_seed() -> None:
    from judge.server._job_kind import config_of

    assert config_of({"mode": "graded", "seed": 0}).seed == JudgeConfig().seed


def test_a_refused_option_is_located_by_its_field_not_its_message() -> None:
    from judge.server._jobs import option_error

    exc = ConfigError("must be in [0, 1], not 2", field="p_yes_threshold")
    assert option_error(exc, "body", "options").errors()[0]["loc"] == ("body", "options", "p_yes_threshold")


def test_the_cli_names_the_flag_of_a_bad_engine_setting(capsys: Any) -> None:
    from judge.cli import main

    argv = ["score", "in.jsonl", "--engine", "ray", "--workers", "0", "--backend", "openai:x"]
    assert main(argv) == 2
    assert "--workers" in capsys.readouterr().err
