"""Prometheus metrics, read from the job store at each scrape (prometheus-client).

:class:`StoreCollector` is a custom collector: every scrape reads the store
(and, for batch jobs, the shard queue), so any process that can read the
store — the controller daemon, ``spothop dashboard``, the server — serves the
same figures, and nothing has to be counted in memory. The metrics (names
carry their units):

- ``spothop_instances{state,provider,market}``: attempts by state (launching,
  pending, running, noticed) — the instances spothop holds now;
- ``spothop_preemptions_total{provider,instance_type}``: attempts the cloud
  took or gave a notice for (a noticed instance spothop ended once its
  replacement ran, make-before-break, counts: it was interrupted);
- ``spothop_notice_lead_time_seconds`` (histogram): each final or advance
  notice's lead time, from the agents' notice events;
- ``spothop_checkpoint_save_seconds`` (histogram): each save's duration (the
  agents' ``saved`` events);
- ``spothop_queue_shards{job,state}``: a batch job's shards pending, leased,
  done, dead (the queue depth is ``pending``);
  ``spothop_shards_done_total{job}``: the counter a rate() turns into shard
  throughput;
- ``spothop_spend_usd_per_hour``: the price in force of every running
  instance, summed; ``spothop_spend_usd_total``: what every attempt has cost
  so far on the store's clock (the ledger is the books; this is the gauge);
- ``spothop_jobs{state}``: jobs by state.

:func:`serve` starts prometheus-client's own threaded HTTP server on a port;
:func:`render` is the text for an HTTP handler of one's own (the dashboard).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import select

from spothop.jobs.lifecycle import AttemptState
from spothop.jobs.store import JobStore
from spothop.state.agent_tables import agent_events

log = logging.getLogger(__name__)

LEAD_TIME_BUCKETS_S = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SAVE_BUCKETS_S = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0)
NOTICE_KINDS = ("final_notice", "advance_notice")
LIVE_STATES = (
    AttemptState.LAUNCHING,
    AttemptState.PENDING,
    AttemptState.RUNNING,
    AttemptState.NOTICED,
)


def _histogram(
    name: str, doc: str, values: list[float], buckets: tuple[float, ...]
) -> HistogramMetricFamily:
    cumulative = []
    for bound in buckets:
        cumulative.append((str(bound), float(sum(1 for v in values if v <= bound))))
    cumulative.append(("+Inf", float(len(values))))
    return HistogramMetricFamily(name, doc, buckets=cumulative, sum_value=float(sum(values)))


class StoreCollector(Collector):
    """The metrics of one job store (and its shard queue at ``queue_url``) at each scrape."""

    def __init__(self, store: JobStore, queue_url: str | None = None) -> None:
        self.store = store
        self.queue_url = queue_url

    def collect(self) -> Iterator[Any]:
        now = time.time()
        attempts = self.store.attempts()
        jobs = self.store.list_jobs()
        instances = GaugeMetricFamily(
            "spothop_instances",
            "instances spothop holds now, by attempt state, provider and market",
            labels=["state", "provider", "market"],
        )
        held = Counter(
            (a.state.value, a.provider, a.market_kind) for a in attempts if a.state in LIVE_STATES
        )
        for (state, provider, market), n in sorted(held.items()):
            instances.add_metric([state, provider, market], n)
        yield instances

        preemptions = CounterMetricFamily(
            "spothop_preemptions",
            "attempts the cloud took or gave notice of, by provider and instance type",
            labels=["provider", "instance_type"],
        )
        taken = Counter((a.provider, a.instance_type) for a in attempts if a.interrupted)
        for (provider, itype), n in sorted(taken.items()):
            preemptions.add_metric([provider, itype], n)
        yield preemptions

        lead_times, saves = self._agent_figures()
        yield _histogram(
            "spothop_notice_lead_time_seconds",
            "lead time of each interruption notice the agents reported",
            lead_times,
            LEAD_TIME_BUCKETS_S,
        )
        yield _histogram(
            "spothop_checkpoint_save_seconds",
            "duration of each checkpoint save the agents reported",
            saves,
            SAVE_BUCKETS_S,
        )

        spend_rate = sum(
            a.price_usd_per_hour
            for a in attempts
            if a.state in (AttemptState.RUNNING, AttemptState.NOTICED)
        )
        yield GaugeMetricFamily(
            "spothop_spend_usd_per_hour",
            "summed price in force of every running instance",
            value=spend_rate,
        )
        spent = 0.0
        for a in attempts:
            if a.running_unix_s is None:
                continue
            end = a.ended_unix_s if a.ended_unix_s is not None else now
            spent += a.price_usd_per_hour * max(0.0, end - a.running_unix_s) / 3600.0
        yield CounterMetricFamily(
            "spothop_spend_usd", "cost of every attempt so far (store clock)", value=spent
        )

        by_state = GaugeMetricFamily("spothop_jobs", "jobs by state", labels=["state"])
        for state, n in sorted(Counter(j.state.value for j in jobs).items()):
            by_state.add_metric([state], n)
        yield by_state

        yield from self._queue_metrics([j.job_id for j in jobs if j.kind == "batch"])

    def _agent_figures(self) -> tuple[list[float], list[float]]:
        query = select(agent_events.c.kind, agent_events.c.payload).where(
            agent_events.c.kind.in_((*NOTICE_KINDS, "saved"))
        )
        lead_times: list[float] = []
        saves: list[float] = []
        with self.store.engine.connect() as conn:
            for kind, payload in conn.execute(query):
                try:
                    data = json.loads(payload) if payload else {}
                except ValueError:
                    continue
                if kind == "saved":
                    value = data.get("duration_s")
                    if isinstance(value, int | float):
                        saves.append(float(value))
                else:
                    value = data.get("lead_time_s")
                    if isinstance(value, int | float):
                        lead_times.append(float(value))
        return lead_times, saves

    def _queue_metrics(self, batch_jobs: list[str]) -> Iterator[Any]:
        shards = GaugeMetricFamily(
            "spothop_queue_shards", "a batch job's shards by state", labels=["job", "state"]
        )
        done = CounterMetricFamily(
            "spothop_shards_done", "shards done (rate() is the throughput)", labels=["job"]
        )
        if self.queue_url:
            from spothop.jobs.controller.observe import queue_stats

            for job_id in batch_jobs:
                try:
                    stats = queue_stats(self.queue_url, job_id)
                except Exception as exc:  # a queue that is down must not empty the scrape
                    log.debug("queue of %s not read: %s", job_id, exc)
                    continue
                if stats is None:
                    continue
                for state in ("pending", "leased", "done", "dead"):
                    shards.add_metric([job_id, state], getattr(stats, state))
                done.add_metric([job_id], stats.done)
        yield shards
        yield done


def registry_for(store: JobStore, queue_url: str | None = None) -> CollectorRegistry:
    """A registry holding only spothop's store metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, queue_url))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (content type ``CONTENT_TYPE``)."""
    return generate_latest(registry)


def serve(port: int, store: JobStore, queue_url: str | None = None, addr: str = "127.0.0.1") -> Any:
    """Serve ``/metrics`` for ``store`` on ``addr:port`` in daemon threads; the server (``shutdown()``)."""
    server, _thread = start_http_server(port, addr=addr, registry=registry_for(store, queue_url))
    return server
