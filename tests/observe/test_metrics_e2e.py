"""/metrics of the controller daemon: it parses with prometheus-client's parser and moves on a preemption."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spothop.jobs.controller.daemon import METRICS_PORT_ENV
from tests.dashboard.helpers import kept_instance
from tests.jobs.e2e.conftest import WORLD, Harness, running_harness
from tests.waiting import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """Every sample as 'name{label=value,...}' → value (parsed by prometheus-client)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    want = [f"{k}={v}" for k, v in labels.items()]
    return sum(
        v for k, v in samples.items() if k.split("{")[0] == name and all(w in k for w in want)
    )


@pytest.fixture
def metrics_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Harness, int]]:
    port = free_port()
    monkeypatch.setenv(METRICS_PORT_ENV, str(port))
    with running_harness(tmp_path, monkeypatch, WORLD) as h:
        yield h, port


def test_metrics_parse_and_move_when_an_instance_is_preempted(
    metrics_harness: tuple[Harness, int],
) -> None:
    h, port = metrics_harness
    job_id = h.launch({"name": "metered", "run": "sleep 600"})
    first = kept_instance(h, job_id)

    def running_metric() -> dict[str, float] | None:
        try:
            samples = scrape(port)
        except OSError:
            return None  # the controller's server is not listening yet
        seen = total(samples, "spothop_instances", state="running") >= 1
        return samples if seen and total(samples, "spothop_jobs", state="running") == 1 else None

    before = wait_for(running_metric, 60, what="/metrics showing the running instance")
    assert total(before, "spothop_preemptions_total") == 0
    assert total(before, "spothop_spend_usd_per_hour") > 0

    h.preempt(first, lead_time_s=30)

    def preempted() -> dict[str, float] | None:
        samples = scrape(port)
        return samples if total(samples, "spothop_preemptions_total") >= 1 else None

    after = wait_for(preempted, 90, what="/metrics counting the preemption", interval_s=0.2)
    assert total(after, "spothop_preemptions_total", provider=first.provider) == 1
    # the replacement runs, and the agent's notice brought its lead time
    wait_for(
        lambda: total(scrape(port), "spothop_instances", state="running") >= 1,
        90,
        what="the replacement counted running",
    )
    wait_for(
        lambda: total(scrape(port), "spothop_notice_lead_time_seconds_count") >= 1,
        90,
        what="the notice's lead time in the histogram",
    )
