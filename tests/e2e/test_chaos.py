"""Chaos and soak (issue 16 item 4): the two example jobs together through every failure at once.

The embedding job (``examples/embed``, the real model) and the LoRA fine-tune
(``examples/finetune``) run side by side under the real controller on the
local cloud, on the **demo world's clouds with every market preempting five
times as often** (``examples/worlds/demo.yaml``: four clouds, eighteen
markets; each synthetic market's mean time between preemptions divided by 5,
the AWS zones that replay published traces on AWS's synthetic market at 5×,
since a recorded trace cannot run faster). The preemptions are the markets':
the test injects none of them. The demo world's scheduled ``storms:`` are left
out: they are the demo's guarantee that one short run meets notices on two
clouds, a fixed script at fixed simulated times, not weather that can be made
five times as frequent; kept here they would add the same three reclaims (and
three model reloads) at the same point of every run on top of the 5x weather,
slowing the reduced size toward its budget while proving nothing the markets'
own preemptions, the zone outage and the controller kills do not. Once the
embedder has published a shard it takes the trainer's zone out (the one
injected failure); then it SIGKILLs the controller twice, each time just before
a market notice the cloud forecasts for a running instance of ours
(``LocalProvider.forecast_notice``), keeping it dead until the market has
noticed one, and restarts it. Done when both jobs succeed and:

* preemptions came from the markets, on at least two clouds, into the
  embedder (the trainer's share is the markets' to choose; the outage hits it),
  and at least one while the controller was dead;
* zero lost shards and zero duplicate outputs: every shard done, none dead, no
  stray temporaries, every passage exactly one embedding, equal to an
  uninterrupted run (``verify.py``);
* the training state is exact: the adapter is bit-identical to an uninterrupted run;
* the ledger equals the cloud's billing to the micro-dollar (``Ledger.reconcile``:
  nothing unmatched, nothing differing), controller deaths included: the
  ledger prices each attempt from the cloud's own price history;
* ``examples/embed/report.py`` reports what the cloud billed and the queue saw.

The reduced size runs in ``make test`` (a small corpus, a short fine-tune; the
verifying model loaded once, in-process, shared with tests/examples); the full
size is ``-m slow``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("sentence_transformers")
pytest.importorskip("pyarrow")
pytest.importorskip("peft")

from examples.embed import report as embed_report
from examples.embed import verify
from examples.embed.corpus import write_corpus
from examples.finetune import finetune

from spothop.observe.ledger import Ledger
from spothop.providers.base import Instance, InstanceState
from spothop.queue import OutputStore, open_queue
from tests.examples.conftest import EXAMPLES, embed_model  # noqa: F401  (the shared model)
from tests.jobs.e2e.conftest import Harness, controller_file, running_harness, script_job
from tests.waiting import poll_until, wait_for

DEMO_WORLD = EXAMPLES / "worlds" / "demo.yaml"
RATE_FACTOR = 5  # the markets preempt five times as often as the demo world's
SPEED = 30.0  # the demo world's clock: its notices (30 s … 300 s) are 1 … 10 wall seconds
RECORDS_PER_SHARD = 25
BATCH_SIZE = 8
LEAD_S = 30.0  # the zone outage's notice, simulated seconds (GCP's and Azure's own)
# A controller kill waits for a market notice forecast 120 … 240 simulated seconds ahead (4 to 8
# wall seconds at SPEED): time enough to kill it first, soon enough that the instance's worker is
# seldom done before it (at 30 wall seconds one was: its notice never came), and a short dead
# spell (the poll finds a notice as it enters the window, so the spell is about its far end).
KILL_AHEAD_S, DEAD_AT_MOST_S = 120.0, 240.0
END_STATES = {"succeeded", "failed", "cancelled"}


@dataclass(frozen=True)
class Size:
    passages: int
    steps: int
    step_sleep_s: float
    end_timeout_s: float
    # Clouds the markets must have reclaimed one of our instances on. The reduced jobs end after a
    # few simulated hours, in which a 5x storm may well reclaim on one cloud only (on a quiet
    # machine they end fastest: 2 reclaims, both on one cloud, was seen); the full size lives
    # through enough weather for two (48 market preemptions on all four clouds were measured).
    preempted_clouds: int


# The trainer steps slowly enough to live through the markets' weather too: the reduced size's
# 0.6 s a step keeps it alive until a market notices one of our instances while the controller is
# dead, even on a quiet machine (at 0.2 s both jobs could end before any notice came). 80 steps
# (48 s of steps, twice the 24 s that could end too soon, and a restart for the zone outage on
# top) rather than 120: after the kills the trainer's remaining steps are all this test waits for,
# and on a loaded machine every one of them lives through the storm (each restart, its imports
# slowed by the load, meets the next notice sooner): 120 steps had the trainer interrupted seven
# times and ending three minutes after the second kill.
# Deadlines: the reduced size takes about 2 minutes on a 2-core machine at load 8-12; a more loaded
# one needs more, as every restart's model load slows while the storm keeps its simulated pace
# (at load 20 the full size did not end within 15 minutes: restarts on the 8-minute Azure-like
# markets barely finish loading the model before the next preemption).
REDUCED = Size(passages=400, steps=80, step_sleep_s=0.6, end_timeout_s=420, preempted_clouds=1)
FULL = Size(passages=4000, steps=600, step_sleep_s=0.2, end_timeout_s=2400, preempted_clouds=2)


def stormy_demo_world() -> dict[str, Any]:
    """The demo world with every market preempting RATE_FACTOR times as often."""
    world = yaml.safe_load(DEMO_WORLD.read_text())
    world.pop("data_dir", None)
    world.pop("storms", None)  # the demo's scripted crunches: see the module docstring
    world.pop("buckets", None)  # the demo's bucket; the harness makes the test's folder its own
    world["speed"] = SPEED
    for cloud in world["clouds"]:
        cloud.pop("markets", None)  # replayed traces cannot run faster: the cloud's market, at 5x
        synthetic = cloud["market"]["synthetic"]
        synthetic["mean_time_between_preemptions_s"] /= RATE_FACTOR
        cloud["terminate_grace_s"] = 2
    return world


@pytest.fixture
def storm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    queue = ("--queue-url", f"sqlite:///{controller_file('queue.db')}")
    with running_harness(tmp_path, monkeypatch, stormy_demo_world(), queue) as h:
        yield h


def embed_spec(tmp: Path, size: Size) -> dict[str, Any]:
    data = tmp / "embed-data"
    write_corpus(data / "passages.jsonl", size.passages)
    return {
        "name": "embed-chaos",
        "kind": "batch",
        "workers": 2,
        "spread": {"min_zones": 2, "min_instance_types": 2},  # as job.yaml: two clouds at once
        "market": "spot",
        "tolerance": "aggressive",
        # No --output: the worker reads $SPOTHOP_OUTPUT_URL, the launcher's batch.output.
        **script_job(EXAMPLES / "embed" / "embed.py"),
        "envs": {"BATCH_SIZE": str(BATCH_SIZE), "EMBED_THREADS": "1", "EMBED_DEVICE": "cpu"},
        "batch": {
            "inputs": [str(data / "*.jsonl")],
            "records_per_shard": RECORDS_PER_SHARD,
            "output": str(tmp / "embed-out"),
        },
    }


def finetune_spec(tmp: Path, size: Size) -> dict[str, Any]:
    script = EXAMPLES / "finetune" / "finetune.py"
    return {
        "name": "finetune-chaos",
        "market": "spot",
        "tolerance": "aggressive",
        "checkpoint": {"url": str(tmp / "ckpt")},
        **script_job(
            script,
            "--steps",
            size.steps,
            "--step-sleep",
            size.step_sleep_s,
            "--out",
            tmp / "adapter.safetensors",
        ),
    }


def live(h: Harness, job_id: str) -> bool:
    return h.status(job_id)["state"] not in END_STATES


def cloud_rows(h: Harness, job_ids: tuple[str, ...]) -> list[dict[str, Any]]:
    """The cloud's own record of every instance of these jobs (notice times, injected or not)."""
    rows = []
    for instance in h.instances():
        if instance.tags.get("spothop-job") in job_ids:
            row = h.providers[instance.provider].store.instance(instance.instance_id)
            if row is not None:
                rows.append({**row, "job": instance.tags["spothop-job"]})
    return rows


def market_noticed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Instances the market gave a notice (the test injected nothing into them)."""
    return [r for r in rows if r["notice_time"] is not None and r["preempt_lead_s"] is None]


def coming_notice(h: Harness, job_ids: tuple[str, ...], now: float) -> float | None:
    """The soonest market notice the cloud forecasts for a running instance of these jobs, if it
    falls due between KILL_AHEAD_S after ``now`` (time to kill the controller) and
    DEAD_AT_MOST_S after it."""
    due = [
        t
        for job_id in job_ids
        for i in h.running(job_id)
        if (t := h.providers[i.provider].forecast_notice(i.instance_id)) is not None
        and now + KILL_AHEAD_S <= t <= now + DEAD_AT_MOST_S
    ]
    return min(due, default=None)


def kill_the_controller_twice(
    h: Harness, jobs: tuple[str, ...], now: Callable[[], float]
) -> list[tuple[float, float]]:
    """SIGKILL the controller twice and restart it; the dead spells, on the cloud's clock.

    A kill is timed just before a market notice the cloud forecasts for a running instance of
    ours (the local cloud's markets are seeded traces), and the controller stays dead until the
    market has noticed one. Until one such notice has come, a kill waits for its forecast as long
    as the jobs live (a notice while nobody watches is asserted): a worker that ends its work
    before its notice makes it miss. Once one has, the other kill waits a while and then kills
    anyway, restarting at once.
    """
    dead: list[tuple[float, float]] = []

    def ended() -> bool:
        return not any(live(h, j) for j in jobs)

    for _ in range(2):
        for job_id in jobs:
            if live(h, job_id):
                wait_for(lambda j=job_id: h.running(j) or not live(h, j), 90, what=f"{job_id}")
        met = any(market_noticed_between(h, jobs, a, b) for a, b in dead)
        coming = poll_until(
            lambda: ended() or coming_notice(h, jobs, now()) is not None,
            30 if met else 300,
            interval_s=0.2,
        )
        if ended():
            break
        if not coming and not met:
            pytest.fail("no market notice came due on a running instance of ours in 300 s")
        h.kill_controller()
        killed_at = now()
        if coming:
            wait_for(
                lambda t=killed_at: (
                    market_noticed_between(h, jobs, t, math.inf)
                    or not any(h.alive(j) for j in jobs)
                ),
                90,
                what="a market notice while the controller is dead",
                interval_s=0.2,
            )
        dead.append((killed_at, now()))
        h.start_controller()
    return dead


def market_noticed_between(h: Harness, jobs: tuple[str, ...], start: float, end: float) -> bool:
    """Whether a market noticed an instance of these jobs between ``start`` and ``end``."""
    return any(start <= r["notice_time"] <= end for r in market_noticed(cloud_rows(h, jobs)))


def run_chaos(h: Harness, model: Any, size: Size, monkeypatch: pytest.MonkeyPatch) -> None:
    embed_id = h.launch(embed_spec(h.tmp, size), "embed.yaml")
    tune_id = h.launch(finetune_spec(h.tmp, size), "finetune.yaml")
    jobs = (embed_id, tune_id)
    output = OutputStore(str(h.tmp / "embed-out"))
    cloud = next(iter(h.providers.values()))

    def now() -> float:
        return cloud.clock.now()  # the cloud's shared clock, as anchored by the first launch

    # 1. Mid-work on both: the embedder has published a shard.
    wait_for(lambda: output.published(), 180, what="the first embedded shard")
    # 2. A zone outage: every instance alive in the trainer's zone at once (the one injection).
    instance = wait_for(
        lambda: (h.running(tune_id) or [None])[0] if live(h, tune_id) else True,
        90,
        what="the trainer running",
        interval_s=0.1,
    )
    if isinstance(instance, Instance):
        zone = (instance.provider, instance.region, instance.zone)
        for lost in [i for i in h.alive() if (i.provider, i.region, i.zone) == zone]:
            h.preempt(lost, lead_time_s=LEAD_S)
    # 3. The controller SIGKILLed twice, dead until a market has noticed an instance of ours.
    dead = kill_the_controller_twice(h, jobs, now)

    finals = {
        job_id: h.wait_state(job_id, END_STATES, size.end_timeout_s, what=f"{job_id} to end")
        for job_id in (embed_id, tune_id)
    }
    for final in finals.values():
        assert final["state"] == "succeeded", final["reason"]
    assert finals[tune_id]["interruptions"] >= 1  # the zone outage, at least
    assert finals[embed_id]["interruptions"] >= 1

    # The markets' preemptions: on size.preempted_clouds clouds or more, the embedder's among them,
    # and at least one noticed while nobody watched (the trainer's share is the markets' to choose).
    wait_for(lambda: not h.alive(), 60, what="every instance to end")
    noticed = market_noticed(cloud_rows(h, jobs))
    reclaimed = [r for r in noticed if r["state"] == InstanceState.PREEMPTED.value]
    assert embed_id in {r["job"] for r in reclaimed}, noticed
    assert len({r["cloud"] for r in reclaimed}) >= size.preempted_clouds, noticed
    assert any(market_noticed_between(h, jobs, a, b) for a, b in dead), (noticed, dead)
    by_job = {j: sum(r["job"] == j for r in reclaimed) for j in jobs}
    print(
        f"\nmarket preemptions {len(reclaimed)} on {sorted({r['cloud'] for r in reclaimed})} "
        f"(embed {by_job[embed_id]}, finetune {by_job[tune_id]}); interruptions: "
        f"embed {finals[embed_id]['interruptions']}, finetune {finals[tune_id]['interruptions']}; "
        f"controller dead {len(dead)}x for {[round(b - a) for a, b in dead]} simulated s"
    )

    # Zero lost shards, zero duplicate outputs, every embedding as an uninterrupted run's.
    shards = -(-size.passages // RECORDS_PER_SHARD)
    with open_queue(h.queue_url, embed_id) as queue:
        stats = queue.stats()
    assert (stats.done, stats.pending, stats.leased, stats.dead) == (shards, 0, 0, 0)
    assert len(output.published()) == shards and output.temporaries() == []
    job_file = h.tmp / "embed.yaml"
    checked = verify.verify(verify.read_job(job_file), model=model, reference_shards=2)
    assert checked.ok, checked.to_dict()
    assert (checked.inputs, checked.outputs) == (size.passages, size.passages)
    assert checked.max_abs_diff == 0.0

    # The training state exact: the adapter bit-identical to an uninterrupted run.
    reference, _ = finetune.train(None, size.steps)
    assert (h.tmp / "adapter.safetensors").read_bytes() == reference

    # The books: every instance ended, the ledger's charges are the cloud's.
    billed_seconds = {i.instance_id: i.billed_seconds for i in h.instances()}
    with h.store() as store:
        ledger = Ledger(store, h.providers)
        for job_id in (embed_id, tune_id):
            records = ledger.update(job_id)
            assert records and all(r.closed and not r.price_missing for r in records)
            books = ledger.reconcile(job_id)
            assert books.unmatched == (), books.to_dict()
            # Priced from the cloud's price history as the cloud bills: equal to the micro-dollar.
            assert books.differing == () and books.difference_microusd == 0, books.to_dict()
            # Every instance that ran is billed; one that never did (reclaimed or ended while it
            # booted: the zone outage can catch a replacement booting) costs nothing on either side.
            for line in books.lines:
                ran = billed_seconds.get(line.instance_id or "", 0) > 0
                assert bool(line.provider_microusd) == ran, line.to_dict()

    # report.py over the same home: what the cloud billed, what the queue saw.
    monkeypatch.setenv("SPOTHOP_DATABASE_URL", h.store_url)
    monkeypatch.setenv("SPOTHOP_QUEUE_URL", h.queue_url)
    report = embed_report.build_report(embed_id)
    assert report["state"] == "succeeded" and report["interruptions"] >= 1
    billed = sum(
        h.providers[i.provider].describe(i.instance_id).cost_microusd
        for i in h.instances()
        if i.tags.get("spothop-job") == embed_id
    )
    assert report["cost_microusd"] == billed > 0
    assert 0 < report["cost_microusd"] < report["on_demand_cost_microusd"]
    # Instances as `status` counts them (an attempt with an instance; a refused launch is none).
    status_instances = h.status(embed_id)["instances"]
    assert sum(c["instances"] for c in report["clouds"].values()) == len(status_instances)
    queue_part = report["queue"]
    assert (queue_part["shards"], queue_part["done"], queue_part["dead"]) == (shards, shards, 0)
    assert queue_part["shard_attempts"] >= shards and 0 < queue_part["shard_goodput"] <= 1
    assert report["outputs"] == str(h.tmp / "embed-out")
    json.dumps(report)  # JSON-ready
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert embed_report.main([embed_id]) == 0
    assert f"shards: {shards}/{shards} done, 0 dead, 0 not done" in printed.getvalue()


# Alone on the machine (`make test` runs it after the rest): the storm keeps its simulated pace
# however loaded the machine is, and every restart's model load is what load slows.
@pytest.mark.solo
@pytest.mark.timeout(660)
def test_both_jobs_survive_stormy_markets_an_outage_and_two_controller_kills(
    storm: Harness,
    embed_model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_chaos(storm, embed_model, REDUCED, monkeypatch)


def test_the_chaos_world_is_the_demo_world_five_times_as_stormy() -> None:
    demo, chaos = yaml.safe_load(DEMO_WORLD.read_text()), stormy_demo_world()
    assert [c["name"] for c in chaos["clouds"]] == [c["name"] for c in demo["clouds"]]
    for ours, theirs in zip(chaos["clouds"], demo["clouds"], strict=True):
        assert ours["locations"] == theirs["locations"]
        rate = ours["market"]["synthetic"]["mean_time_between_preemptions_s"]
        assert (
            rate * RATE_FACTOR == theirs["market"]["synthetic"]["mean_time_between_preemptions_s"]
        )
    assert chaos["speed"] == demo["speed"]
    assert demo["storms"] and "storms" not in chaos


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_chaos_soak_full_size(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "slow" not in str(request.config.getoption("-m")):
        pytest.skip("the full-size chaos soak takes many minutes: select it with -m slow")
    h = request.getfixturevalue("storm")
    run_chaos(h, request.getfixturevalue("embed_model"), FULL, monkeypatch)
