"""Prometheus metrics of one server process (``GET /metrics``), every name ``judge_``.

HTTP requests and latency are counted by the app as they happen; jobs by status (and by
kind: ``score``, ``compare``) are read from the database at scrape time; judgments and
unjudged passages are counted as jobs and ``/v1/evaluate`` produce them; LLM calls,
retries, 429s, tokens and cost come from the shared backend's call-policy counters
(:class:`judge.backends.BackendStats`) at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(eq=False)  # hashable: the registry keys its collectors
class _ScrapeTime(Collector):
    """The figures read at scrape time: jobs by status (and by kind), the backend's call stats."""

    jobs: Callable[[], dict[str, int]]
    backend_stats: Callable[[], Any]
    jobs_by_kind: Callable[[], dict[tuple[str, str], int]] | None = None

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("judge_jobs", "Jobs in the database by status", labels=["status"])
        for status, n in self.jobs().items():
            jobs.add_metric([status], n)
        yield jobs
        if self.jobs_by_kind is not None:
            by_kind = GaugeMetricFamily(
                "judge_jobs_by_kind",
                "Jobs in the database by kind (score, compare) and status",
                labels=["kind", "status"],
            )
            for (kind, status), n in sorted(self.jobs_by_kind().items()):
                by_kind.add_metric([kind, status], n)
            yield by_kind
        stats = self.backend_stats()
        if stats is None:
            return

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        yield counter(
            "judge_llm_requests", "Judge requests sent to the backend (before retries)", stats.requests
        )
        yield counter("judge_llm_calls", "Provider calls made (attempts, retries included)", stats.calls)
        yield counter("judge_llm_retries", "Provider calls retried (timeouts, 5xx, 429)", stats.retries)
        yield counter("judge_llm_rate_limited", "HTTP 429 replies from the provider", stats.rate_limited)
        yield counter("judge_llm_timeouts", "Provider calls that ran past the timeout", stats.timeouts)
        yield counter("judge_llm_failures", "Judge requests that failed after every retry", stats.failures)
        tokens = CounterMetricFamily("judge_llm_tokens", "Tokens used by successful calls", labels=["kind"])
        tokens.add_metric(["prompt"], stats.prompt_tokens)
        tokens.add_metric(["completion"], stats.completion_tokens)
        yield tokens
        cost = CounterMetricFamily("judge_llm_cost", "Cost of successful calls", labels=["currency"])
        cost.add_metric([stats.currency], stats.cost)
        yield cost


class ServerMetrics:
    """The registry of one app (not the process-global one, so tests can run several)."""

    def __init__(
        self,
        jobs: Callable[[], dict[str, int]],
        backend_stats: Callable[[], Any],
        jobs_by_kind: Callable[[], dict[tuple[str, str], int]] | None = None,
    ) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        # no ``*_created`` series: they double the exposition for nothing
        self.registry = CollectorRegistry(auto_describe=True)
        self.http_requests = Counter(
            "judge_http_requests",
            "HTTP requests by method, route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "judge_http_request_duration_seconds",
            "HTTP request latency by method and route",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=self.registry,
        )
        self.judgments = Counter(
            "judge_judgments", "Passages judged, by verdict", ["verdict"], registry=self.registry
        )
        self.unjudged = Counter(
            "judge_unjudged", "Passages left unjudged (no valid reply)", registry=self.registry
        )
        self.jobs_finished = Counter(
            "judge_jobs_finished", "Job runs that ended, by status", ["status"], registry=self.registry
        )
        self.jobs_submitted = Counter(
            "judge_jobs_submitted",
            "Jobs accepted, by kind (score, compare)",
            ["kind"],
            registry=self.registry,
        )
        self.jobs_finished_by_kind = Counter(
            "judge_jobs_finished_by_kind",
            "Job runs that ended, by kind and status",
            ["kind", "status"],
            registry=self.registry,
        )
        self.registry.register(_ScrapeTime(jobs, backend_stats, jobs_by_kind))

    def observe_http(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_latency.labels(method, route).observe(seconds)

    def finished(self, job: Mapping[str, Any], status: str) -> None:
        """One job run ended with ``status``."""
        self.jobs_finished.labels(status).inc()
        self.jobs_finished_by_kind.labels(str(job.get("kind", "score")), status).inc()

    def count_verdicts(self, counts: dict[str, int]) -> None:
        for verdict, n in counts.items():
            if n:
                self.judgments.labels(verdict).inc(n)
                if verdict == "unjudged":
                    self.unjudged.inc(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
