"""Nightly stability runs: a config file, a history JSONL and a trend plot.

Config (JSON, or TOML when the file name ends in ``.toml``); relative paths are relative to
the config file's directory. Keys (only ``dataset`` is required):

=====================  ===============================================================
``dataset``            JSONL dataset to judge
``backend``            backend spec (default: the default backend, i.e. the embedded judge)
``base_url``           server URL for OpenAI-compatible backends
``mode``               ``binary`` (default) or ``graded``
``language``           template language, ``auto`` (default: per query), ``zh`` or ``en``
``template``           template id or .toml path
``probability``        verdicts from answer-token probabilities (default false)
``samples``            majority vote over n samples per passage (default 1)
``temperature``        sampling temperature (default 0)
``seed``               seed sent to the backend (default 42; null for none)
``runs``               judgments of the dataset per night (default 3)
``threshold``          largest allowed relative spread (default 0.01)
``metric``             ``map`` (default), ``score``, ``ndcg@K`` or a registry measure (``P@3`` ...)
``k``                  NDCG cutoffs (default [5, 10])
``concurrency``        queries in flight (default: the backend's limit)
``timeout``            seconds per provider call (default 60; 600 for the embedded model)
``max_retries``        retries per call on transient errors (default 5)
``history``            history JSONL (default ``nightly/history.jsonl``)
``report_dir``         one sub-directory per night is written here (default ``nightly/reports``)
``trend_plot``         trend PNG (default ``trend.png`` beside the history)
``name``               a label for the job (default: the config file's stem)
=====================  ===============================================================

Each night appends one line to the history (schema ``judge.nightly/1``): ``timestamp``
(UTC ISO), ``name``, ``git_commit`` (``$JUDGE_GIT_COMMIT``, ``$GITHUB_SHA`` or ``git
rev-parse HEAD`` of the checkout holding the code; null if none), ``backend``, ``dataset``,
``judge_config``, ``runs``, ``metric``, ``threshold``, ``figures`` (per figure: values,
mean, min, max, relative_spread, cv), ``flip_rate``, ``fleiss_kappa``,
``krippendorff_alpha``, ``relative_spread`` (of the checked metric; null = infinite),
``passed``, ``status`` (``pass``/``breach``) and ``report_dir``. Then the trend plot
(relative spread per night with the threshold line, breaches in red) is redrawn from the
whole history.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from judge.backends import DEFAULT_MAX_RETRIES, Backend
from judge.batch import RunSpec, run_spec
from judge.io import DatasetRecord, InputError
from judge.judging import JudgeConfig
from judge.stability._harness import (
    RunResult,
    StabilityOptions,
    StabilityReport,
    load_records,
    run_stability,
)
from judge.stability._report import atomic_write_bytes, drawn_or_warning, new_figure, write_report

__all__ = [
    "HISTORY_SCHEMA",
    "NightlyConfig",
    "NightlyOutcome",
    "append_history",
    "git_commit",
    "history_entry",
    "load_nightly_config",
    "night_dir",
    "plot_trend",
    "read_history",
    "redraw_trend",
    "run_nightly",
]

HISTORY_SCHEMA = "judge.nightly/1"

_KEYS: dict[str, tuple[type, ...]] = {
    "dataset": (str,),
    "backend": (str, type(None)),
    "base_url": (str, type(None)),
    "mode": (str,),
    "language": (str,),
    "template": (str, type(None)),
    "probability": (bool,),
    "samples": (int,),
    "temperature": (int, float),
    "seed": (int, type(None)),
    "runs": (int,),
    "threshold": (int, float),
    "metric": (str,),
    "k": (list,),
    "concurrency": (int, type(None)),
    "timeout": (int, float),
    "max_retries": (int,),
    "history": (str,),
    "report_dir": (str,),
    "trend_plot": (str,),
    "name": (str,),
}


@dataclass(frozen=True)
class NightlyConfig:
    """A parsed nightly config (paths resolved)."""

    path: Path
    name: str
    dataset: Path
    backend: str | None
    base_url: str | None
    judge: JudgeConfig
    options: StabilityOptions
    timeout_s: float | None
    max_retries: int
    history: Path
    report_dir: Path
    trend_plot: Path


def _read_config(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from exc
    try:
        if path.suffix.lower() == ".toml":
            obj: Any = tomllib.loads(raw.decode("utf-8"))
        else:
            obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"invalid UTF-8 at byte {exc.start}", path=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", path=str(path), line=exc.lineno) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", path=str(path)) from exc
    if not isinstance(obj, dict):
        raise InputError(f"expected an object at the top level, got {type(obj).__name__}", path=str(path))
    return obj


def load_nightly_config(path: str | Path) -> NightlyConfig:
    """Read and check a nightly config; every problem is an InputError naming the field."""
    cfg_path = Path(path)
    obj = _read_config(cfg_path)
    where = str(cfg_path)
    for key, value in obj.items():
        if key not in _KEYS:
            raise InputError(f"unknown key (known: {', '.join(sorted(_KEYS))})", path=where, field=key)
        allowed = _KEYS[key]
        bad_bool = isinstance(value, bool) and bool not in allowed
        if bad_bool or not isinstance(value, allowed):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            raise InputError(f"must be {names}, got {type(value).__name__}", path=where, field=key)
    if "dataset" not in obj:
        raise InputError("missing", path=where, field="dataset")
    base = cfg_path.resolve().parent

    def resolve(value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else Path(os.path.normpath(base / p))

    k = obj.get("k", [5, 10])
    if not k or any(isinstance(c, bool) or not isinstance(c, int) for c in k):
        raise InputError("must be a non-empty list of integers", path=where, field="k")
    settings = {
        key: obj.get(key) for key in ("mode", "language", "template", "probability", "samples", "seed")
    }
    if obj.get("temperature") is not None:
        settings["temperature"] = float(obj["temperature"])
    try:
        # ``"seed": null`` sends no seed; a key left out takes the JudgeConfig default.
        no_seed = RunSpec(config=JudgeConfig(seed=None)) if "seed" in obj and obj["seed"] is None else None
        judge = run_spec(no_seed, **settings).config
    except ValueError as exc:
        raise InputError(str(exc), path=where) from exc
    try:
        options = StabilityOptions(
            runs=obj.get("runs", 3),
            threshold=float(obj.get("threshold", 0.01)),
            metric=obj.get("metric", "map"),
            k=tuple(k),
            concurrency=obj.get("concurrency"),
        )
    except InputError as exc:
        raise InputError(exc.message, path=where, field=(exc.field or "").lstrip("-") or None) from exc
    timeout = float(obj["timeout"]) if obj.get("timeout") is not None else None
    if timeout is not None and timeout <= 0:
        raise InputError("must be > 0", path=where, field="timeout")
    retries = obj.get("max_retries", DEFAULT_MAX_RETRIES)
    if retries < 0:
        raise InputError("must be >= 0", path=where, field="max_retries")
    history = resolve(obj.get("history", "nightly/history.jsonl"))
    trend = resolve(obj["trend_plot"]) if "trend_plot" in obj else history.parent / "trend.png"
    return NightlyConfig(
        path=cfg_path,
        name=obj.get("name", cfg_path.stem),
        dataset=resolve(obj["dataset"]),
        backend=obj.get("backend"),
        base_url=obj.get("base_url"),
        judge=judge,
        options=options,
        timeout_s=timeout,
        max_retries=retries,
        history=history,
        report_dir=resolve(obj.get("report_dir", "nightly/reports")),
        trend_plot=trend,
    )


def git_commit(cwd: str | Path | None = None) -> str | None:
    """The commit under test: ``$JUDGE_GIT_COMMIT``, ``$GITHUB_SHA``, else ``git rev-parse
    HEAD`` in ``cwd`` (default: the directory of the ``judge`` package); None if unknown."""
    for var in ("JUDGE_GIT_COMMIT", "GITHUB_SHA"):
        value = os.environ.get(var, "").strip()
        if value:
            return value
    where = Path(cwd) if cwd is not None else Path(__file__).resolve().parents[1]
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and commit else None


def night_dir(report_dir: Path, when: datetime) -> Path:
    """``report_dir/<YYYYmmddTHHMMSSZ>`` (with ``-2``, ``-3``... if that already exists)."""
    stem = when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = report_dir / stem
    n = 2
    while candidate.exists():
        candidate = report_dir / f"{stem}-{n}"
        n += 1
    return candidate


def history_entry(
    report: StabilityReport,
    config: NightlyConfig,
    *,
    timestamp: datetime,
    commit: str | None,
    backend: str,
    report_dir: Path,
) -> dict[str, Any]:
    """The history line of one night (see the module docstring for the keys)."""
    d = report.data
    figures = {
        name: {k: f[k] for k in ("values", "mean", "min", "max", "relative_spread", "cv")}
        for name, f in d["figures"].items()
    }
    return {
        "schema": HISTORY_SCHEMA,
        "timestamp": timestamp.astimezone(UTC).isoformat(timespec="seconds"),
        "name": config.name,
        "git_commit": commit,
        "backend": backend,
        "dataset": str(config.dataset),
        "judge_config": asdict(config.judge),
        "runs": d["settings"]["runs"],
        "metric": d["check"]["metric"],
        "threshold": d["check"]["threshold"],
        "figures": figures,
        "flip_rate": d["agreement"]["flip_rate"],
        "fleiss_kappa": d["agreement"]["fleiss_kappa"],
        "krippendorff_alpha": d["agreement"]["krippendorff_alpha"],
        "relative_spread": d["check"]["relative_spread"],
        "passed": d["check"]["passed"],
        "status": d["check"]["status"],
        "report_dir": str(report_dir),
        **fingerprint_change(read_history(config.history), config.name, d.get("backend_fingerprint")),
    }


def fingerprint_change(
    history: Sequence[dict[str, Any]], name: str, fingerprint: str | None
) -> dict[str, Any]:
    """``backend_fingerprint`` of this night, the previous night's (same ``name``) and
    whether it changed: a breach on a night whose fingerprint changed points at the machine
    or the llama.cpp build (other float kernels), not at a judge that became noisy."""
    previous = next((e.get("backend_fingerprint") for e in reversed(history) if e.get("name") == name), None)
    return {
        "backend_fingerprint": fingerprint,
        "previous_fingerprint": previous,
        "fingerprint_changed": previous is not None and fingerprint is not None and previous != fingerprint,
    }


def append_history(path: Path, entry: dict[str, Any]) -> None:
    """Append one JSON line (flushed and fsynced). A torn last line left by an earlier
    crash is ended first so that the new entry starts on its own line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
    with open(path, "a+b") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(line.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every well-formed history entry, oldest first. Lines that do not parse (a torn write)
    are skipped with a warning on stderr rather than stopping every later night."""
    if not path.exists():
        return []
    entries: list[dict[str, Any]] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                print(
                    f"judge nightly: warning: {path}:{lineno}: unreadable history line skipped",
                    file=sys.stderr,
                )
                continue
            if isinstance(obj, dict) and "timestamp" in obj:
                entries.append(obj)
    return entries


def plot_trend(entries: list[dict[str, Any]], threshold: float) -> bytes:
    """Relative spread of the checked metric per night, threshold line, breaches in red (PNG)."""
    fig = new_figure((8.0, 4.0))
    ax = fig.add_subplot()
    times: list[datetime] = []
    spreads: list[float] = []
    breach: list[bool] = []
    for e in entries:
        try:
            times.append(datetime.fromisoformat(str(e["timestamp"])))
        except ValueError:
            continue
        value = e.get("relative_spread")
        spreads.append(math.inf if value is None else float(value) * 100.0)
        breach.append(not bool(e.get("passed", False)))
    finite = [s for s in spreads if math.isfinite(s)]
    top = max([threshold * 100.0 * 1.5, *finite, 1e-6]) * 1.1
    ys = np.array([s if math.isfinite(s) else top for s in spreads], dtype=np.float64)
    xs = np.arange(len(times))
    if len(xs):
        ax.plot(xs, ys, "-", color="grey", linewidth=1, zorder=1)
        ok = ~np.array(breach, dtype=bool)
        ax.scatter(xs[ok], ys[ok], color="tab:green", zorder=2, label="pass")
        if np.any(~ok):
            ax.scatter(xs[~ok], ys[~ok], color="tab:red", marker="X", s=70, zorder=3, label="BREACH")
        for x, s in zip(xs, spreads, strict=True):
            if not math.isfinite(s):
                ax.annotate("inf", (x, top), textcoords="offset points", xytext=(0, 4), ha="center")
        labels = [t.strftime("%m-%d %H:%M") for t in times]
        step = max(1, len(labels) // 12)
        ax.set_xticks(xs[::step], labels[::step], rotation=30, ha="right", fontsize="small")
    ax.axhline(
        threshold * 100.0, color="tab:red", linestyle="--", linewidth=1, label=f"threshold {threshold:.2%}"
    )
    ax.set_ylim(0.0, top * 1.1)
    ax.set_ylabel("relative spread across runs (%)")
    ax.set_title(f"nightly stability: {len(times)} night(s), last {times[-1].isoformat() if times else '—'}")
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()


def redraw_trend(history: Path, plot: Path, threshold: float) -> str | None:
    """Redraw the trend plot from the whole history (atomic replace); a plot that cannot be
    drawn is a warning (returned; the last night's plot stays), never a failed night."""
    png, warning = drawn_or_warning(lambda: plot_trend(read_history(history), threshold), "trend plot")
    if png is not None:
        atomic_write_bytes(plot, png)
    return warning


@dataclass(frozen=True)
class NightlyOutcome:
    """What one night produced: the report, its history entry and where things went."""

    report: StabilityReport
    entry: dict[str, Any]
    report_dir: Path
    history: Path
    trend_plot: Path
    warnings: tuple[str, ...] = ()  # the plots that could not be drawn (the report's and the trend's)

    @property
    def passed(self) -> bool:
        return self.report.passed


async def run_nightly(
    config: NightlyConfig,
    backend: Backend,
    *,
    records: Sequence[DatasetRecord] | None = None,
    backend_description: str | None = None,
    now: datetime | None = None,
    commit: str | None = None,
    on_run: Callable[[RunResult], None] | None = None,
    on_query: Callable[[int, int, int], None] | None = None,
) -> NightlyOutcome:
    """One night: run the harness, write the report into a new dated directory, append the
    history line and redraw the trend plot. ``records`` (default: read ``config.dataset``)
    lets the caller validate the dataset before opening the backend."""
    when = now or datetime.now(UTC)
    data = list(records) if records is not None else load_records(config.dataset)
    out = night_dir(config.report_dir, when)
    description = backend_description or backend.name
    report = await run_stability(
        backend,
        data,
        config.judge,
        config.options,
        dataset=str(config.dataset),
        backend_description=description,
        runs_dir=out / "runs",
        on_run=on_run,
        on_query=on_query,
    )
    write_report(report, out)
    entry = history_entry(
        report,
        config,
        timestamp=when,
        commit=commit if commit is not None else git_commit(),
        backend=description,
        report_dir=out,
    )
    append_history(config.history, entry)
    trend = redraw_trend(config.history, config.trend_plot, config.options.threshold)
    warnings = (*report.data.get("warnings", ()), *([trend] if trend is not None else []))
    return NightlyOutcome(report, entry, out, config.history, config.trend_plot, tuple(warnings))
