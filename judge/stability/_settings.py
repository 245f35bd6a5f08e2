"""Measuring the ways to cut judge variance, side by side (``judge stability --compare-settings``).

Each *setting* is a :class:`JudgeConfig` derived from the user's one; the harness runs once
per setting (same dataset, same number of runs, same backend) and the spreads are
tabulated together:

* ``baseline`` — sampling as a remote API is often used: ``temperature`` = the given one
  (``sampled_temperature``, 0.7, when the given one is 0), no seed, one sample.
* ``t0-seed`` — greedy decoding: temperature 0 with a fixed seed (for backends that take one).
* ``vote-N`` — majority vote over ``N`` samples per passage at the baseline temperature
  (voting needs sampling noise to average out; at temperature 0 all samples agree). The
  samples get seeds ``seed, seed+1, ...`` so that they differ even on a backend that
  always seeds its sampler (the embedded judge uses seed 0 when none is sent, which makes
  an unseeded request repeatable, and N unseeded samples identical); each run sends the
  same seeds, so on a backend that honours seeds the vote is exactly repeatable.
* ``probability`` — one forward pass; the verdict comes from the answer tokens'
  probabilities (skipped, and reported as such, when the backend has none).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from judge.backends import Backend
from judge.io import DatasetRecord, InputError
from judge.judging import JudgeConfig
from judge.stability._harness import RunResult, StabilityOptions, StabilityReport, run_stability
from judge.stability._report import write_report
from judge.store import atomic_write_text

__all__ = [
    "SETTING_NAMES",
    "Setting",
    "SettingOutcome",
    "compare_settings",
    "render_settings_markdown",
    "variance_settings",
]

SETTING_NAMES = ("baseline", "t0-seed", "vote", "probability")


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    description: str
    config: JudgeConfig


@dataclass(frozen=True)
class SettingOutcome:
    """One setting's result: its report, or why it was skipped."""

    setting: Setting
    report: StabilityReport | None
    skipped: str | None = None
    elapsed_s: float = 0.0

    def row(self) -> dict[str, Any]:
        cfg = self.setting.config
        row: dict[str, Any] = {
            "setting": self.setting.name,
            "description": self.setting.description,
            "temperature": cfg.temperature,
            "seed": cfg.seed,
            "samples": cfg.samples,
            "probability": cfg.probability,
            "skipped": self.skipped,
            "elapsed_s": self.elapsed_s,
        }
        if self.report is None:
            return row
        d = self.report.data
        metric = d["check"]["metric"]
        fig = d["figures"][metric]
        row.update(
            {
                "metric": metric,
                "mean": fig["mean"],
                "values": fig["values"],
                "relative_spread": d["check"]["relative_spread"],
                "cv": fig["cv"],
                "flip_rate": d["agreement"]["flip_rate"],
                "fleiss_kappa": d["agreement"]["fleiss_kappa"],
                "krippendorff_alpha": d["agreement"]["krippendorff_alpha"],
                "calls": sum(r["calls"] for r in d["runs"]),
                "passed": d["check"]["passed"],
                "report": f"settings/{self.setting.name}/report.md",
            }
        )
        return row


def variance_settings(
    base: JudgeConfig,
    *,
    names: Sequence[str] = SETTING_NAMES,
    vote_samples: int = 5,
    sampled_temperature: float = 0.7,
    seed: int = 42,
) -> list[Setting]:
    """The settings to compare, derived from ``base`` (see the module docstring)."""
    if vote_samples < 2:
        raise InputError("a majority vote needs at least 2 samples", field="--vote-samples")
    if sampled_temperature <= 0:
        raise InputError("must be > 0", field="--sampled-temperature")
    temp = base.temperature if base.temperature > 0 else sampled_temperature
    plain = replace(base, probability=False, samples=1)
    built = {
        "baseline": Setting(
            "baseline",
            f"sampling at temperature {temp}, no seed",
            replace(plain, temperature=temp, seed=None),
        ),
        "t0-seed": Setting(
            "t0-seed", f"temperature 0, seed {seed}", replace(plain, temperature=0.0, seed=seed)
        ),
        "vote": Setting(
            f"vote-{vote_samples}",
            f"majority vote over {vote_samples} samples at temperature {temp} (seeds {seed}..)",
            replace(plain, temperature=temp, seed=seed, samples=vote_samples),
        ),
        "probability": Setting(
            "probability",
            f"verdict from answer-token probabilities (seed {seed})",
            replace(plain, probability=True, temperature=0.0, seed=seed),
        ),
    }
    out: list[Setting] = []
    for name in names:
        if name not in built:
            raise InputError(
                f"unknown setting {name!r} (known: {', '.join(SETTING_NAMES)})", field="--settings"
            )
        if built[name] not in out:
            out.append(built[name])
    if not out:
        raise InputError("no setting to compare", field="--settings")
    return out


async def compare_settings(
    backend: Backend,
    records: Sequence[DatasetRecord],
    settings: Sequence[Setting],
    options: StabilityOptions,
    out_dir: str | Path,
    *,
    dataset: str = "",
    backend_description: str | None = None,
    on_run: Callable[[str, RunResult], None] | None = None,
    on_query: Callable[[int, int, int], None] | None = None,
) -> list[SettingOutcome]:
    """Run the harness once per setting; write each report to ``out_dir/settings/<name>/``
    and the side-by-side table to ``out_dir/settings.json`` and ``out_dir/settings.md``."""
    root = Path(out_dir)
    outcomes: list[SettingOutcome] = []
    for setting in settings:
        if setting.config.probability and not backend.supports_probabilities:
            outcomes.append(
                SettingOutcome(setting, None, skipped=f"backend {backend.name} has no token probabilities")
            )
            continue
        target = root / "settings" / setting.name
        started = time.perf_counter()
        callback = None if on_run is None else (lambda run, _n=setting.name: on_run(_n, run))
        report = await run_stability(
            backend,
            records,
            setting.config,
            options,
            dataset=dataset,
            backend_description=backend_description,
            runs_dir=target / "runs",
            on_run=callback,
            on_query=on_query,
        )
        write_report(report, target)
        outcomes.append(SettingOutcome(setting, report, elapsed_s=time.perf_counter() - started))
    rows = [o.row() for o in outcomes]
    payload = {
        "schema": "judge.stability.settings/1",
        "dataset": dataset,
        "backend": backend_description or backend.name,
        "runs": options.runs,
        "metric": options.metric,
        "threshold": options.threshold,
        "settings": rows,
    }
    atomic_write_text(root / "settings.json", json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    atomic_write_text(root / "settings.md", render_settings_markdown(payload))
    return outcomes


def _p(value: float | None) -> str:
    return "inf" if value is None else f"{value:.2%}"


def _n(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def render_settings_markdown(payload: dict[str, Any]) -> str:
    """The side-by-side table of :func:`compare_settings` as Markdown."""
    metric = payload["metric"]
    lines = [
        f"# Variance-reduction settings: {payload['dataset']}",
        "",
        f"Backend `{payload['backend']}`, {payload['runs']} runs per setting, check: relative spread of "
        f"{metric} <= {payload['threshold']:.2%}.",
        "",
        f"| setting | {metric} mean | {metric} per run | relative spread | CV | flip rate | Fleiss κ | "
        "Krippendorff α | calls | time (s) | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in payload["settings"]:
        if row["skipped"]:
            lines.append(f"| {row['setting']} | skipped: {row['skipped']} |||||||||")
            continue
        values = " / ".join(_n(v) for v in row["values"])
        lines.append(
            f"| {row['setting']} | {_n(row['mean'], 4)} | {values} | {_p(row['relative_spread'])} | "
            f"{_p(row['cv'])} | {row['flip_rate']:.2%} | {_n(row['fleiss_kappa'])} | "
            f"{_n(row['krippendorff_alpha'])} | {row['calls']} | {row['elapsed_s']:.1f} | "
            f"{'pass' if row['passed'] else 'BREACH'} |"
        )
    lines += ["", "Settings:", ""]
    lines += [f"- **{row['setting']}**: {row['description']}" for row in payload["settings"]]
    return "\n".join(lines) + "\n"
