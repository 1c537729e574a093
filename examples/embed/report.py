"""What a finished example job cost and survived: ``python report.py [JOB] [--json]``.

Reads the job store of ``$SPOTHOP_HOME`` (the newest job named as in
``job.yaml`` when no JOB is given), the local cloud's billing of every
instance the job ran on, and the job's shard queue, and prints:

* **cost against on-demand**: what the job's instances were billed (integer
  micro-dollars, at the spot prices of their markets, second by second) against
  what the same instance-seconds cost at each instance type's on-demand price;
* **per cloud**: instances, preemptions survived, the cloud's notice lead time
  (and advance notice, where it gives one), instance-seconds and spend;
* **work recomputed**: shard attempts beyond one per shard — a shard given back
  on a notice (its batches done so far are redone) or whose lease expired —
  and the **shard goodput**, shards done over shard attempts started;
* **where the outputs are** (``batch.output``).

Times are the local cloud's simulated seconds (the world's ``speed`` times the
wall). The world is ``$SPOTHOP_WORLD`` (else the built-in one), as for the job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MICROUSD_PER_USD = 1_000_000


def _world() -> Any:
    from spothop.providers.local.world import load_world

    path = os.environ.get("SPOTHOP_WORLD")
    return load_world(Path(path) if path else None)


def _job_id(store: Any, given: str | None) -> str:
    if given:
        return given
    import yaml

    name = yaml.safe_load((HERE / "job.yaml").read_text())["name"]
    jobs = [j for j in store.list_jobs() if j.name == name]
    if not jobs:
        raise SystemExit(f"no job named {name!r} in this home; pass a job id (spothop jobs)")
    return str(max(jobs, key=lambda j: j.created_unix_s).job_id)


def build_report(job_id: str | None = None) -> dict[str, Any]:
    """The report as a JSON-ready mapping (see the module docstring)."""
    from spothop.jobs.store import JobStore
    from spothop.providers.local.provider import LocalProvider
    from spothop.queue import open_queue

    world = _world()
    with JobStore() as store:
        job_id = _job_id(store, job_id)
        job = store.get_job(job_id)
        attempts = store.attempts(job_id)
    spec = job.spec()
    clouds: dict[str, dict[str, Any]] = {}
    providers: dict[str, Any] = {}
    spent = on_demand = 0
    for attempt in attempts:
        cloud = clouds.setdefault(
            attempt.provider,
            {"instances": 0, "spot": 0, "preemptions": 0, "instance_s": 0.0, "cost_microusd": 0},
        )
        if attempt.instance_id is None:
            continue  # a launch the cloud refused: no instance ran (status counts none either)
        cloud["instances"] += 1
        cloud["spot"] += attempt.market_kind == "spot"
        if attempt.end_reason is not None and str(attempt.end_reason) == "preempted":
            cloud["preemptions"] += 1
        if attempt.provider not in providers:
            providers[attempt.provider] = LocalProvider(attempt.provider, world=world)
        instance = providers[attempt.provider].describe(attempt.instance_id)
        cloud["instance_s"] += instance.billed_seconds
        cloud["cost_microusd"] += instance.cost_microusd
        spent += instance.cost_microusd
        offering = world.offering(
            attempt.provider, attempt.zone or attempt.region, attempt.instance_type
        )
        rate = (
            offering.on_demand_price_usd_per_hour if offering else None
        ) or instance.price_usd_per_hour
        on_demand += round(instance.billed_seconds / 3600 * rate * MICROUSD_PER_USD)
    for name, cloud in clouds.items():
        spec_of = world.cloud(name)
        cloud["notice_lead_time_s"] = spec_of.notice_lead_time_s
        cloud["advance_notice_s"] = spec_of.advance_notice_s
    queue: dict[str, Any] = {}
    if spec.batch is not None:
        with open_queue(os.environ.get("SPOTHOP_QUEUE_URL"), job_id) as q:
            stats = q.stats()
        shards = stats.done + stats.pending + stats.leased + stats.dead
        queue = {
            "shards": shards,
            "done": stats.done,
            "dead": stats.dead,
            "shard_attempts": stats.attempts + stats.releases,
            "given_back_on_notice": stats.releases,
            "leases_expired": stats.reclaims,
            "failed": stats.failures,
        }
        queue["recomputed"] = queue["shard_attempts"] - stats.done
        queue["shard_goodput"] = (
            stats.done / queue["shard_attempts"] if queue["shard_attempts"] else 1.0
        )
    return {
        "job_id": job_id,
        "name": job.name,
        "state": str(job.state),
        "reason": job.reason,
        "interruptions": sum(c["preemptions"] for c in clouds.values()),
        "cost_microusd": spent,
        "on_demand_cost_microusd": on_demand,
        "saving": 1 - spent / on_demand if on_demand else 0.0,
        "clouds": clouds,
        "queue": queue,
        "outputs": spec.batch.output if spec.batch is not None else None,
        "world_speed": world.speed,
    }


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, markup=False, width=max(100, Console().width))
    usd = report["cost_microusd"] / MICROUSD_PER_USD
    od = report["on_demand_cost_microusd"] / MICROUSD_PER_USD
    console.print(
        f"job {report['job_id']} ({report['name']}): {report['state']} — {report['reason']}"
    )
    console.print(
        f"cost ${usd:.4f} as run against ${od:.4f} on-demand for the same instance-time: "
        f"{report['saving']:.0%} saved; {report['interruptions']} preemptions survived"
    )
    table = Table(title="per cloud (simulated time; notice: final + advance, seconds)")
    for column in ("cloud", "instances", "spot", "preempted", "notice s", "hours", "spend $"):
        table.add_column(column, justify="left" if column == "cloud" else "right")
    for name, cloud in sorted(report["clouds"].items()):
        notice = f"{cloud['notice_lead_time_s']:g}"
        if cloud["advance_notice_s"]:
            notice += f" +{cloud['advance_notice_s']:g}"
        table.add_row(
            name,
            str(cloud["instances"]),
            str(cloud["spot"]),
            str(cloud["preemptions"]),
            notice,
            f"{cloud['instance_s'] / 3600:.2f}",
            f"{cloud['cost_microusd'] / MICROUSD_PER_USD:.4f}",
        )
    console.print(table)
    queue = report["queue"]
    if queue:
        console.print(
            f"shards: {queue['done']}/{queue['shards']} done, {queue['dead']} dead, "
            f"{queue['shards'] - queue['done'] - queue['dead']} not done; {queue['shard_attempts']} attempts: "
            f"{queue['given_back_on_notice']} given back on a notice, {queue['leases_expired']} "
            f"leases expired, {queue['recomputed']} recomputed; shard goodput {queue['shard_goodput']:.1%}"
        )
    console.print(f"outputs: {report['outputs']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "job", nargs="?", help="job id (default: the newest job of job.yaml's name)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = build_report(args.job)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0 if report["state"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
