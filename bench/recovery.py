"""Recovery on the local cloud: from an interruption notice to the replacement's first progress.

One batch worker (a real instance, agent and worker) pulls slow shards; the
bench injects a notice into its instance and timestamps, by polling every
20 ms (wall seconds from the notice):

- ``launch req``: the replacement's attempt is written (the executor writes it
  before the cloud call: the launch is requested);
- ``running``: the replacement instance runs;
- ``progress``: the replacement's worker completed its first shard;
- ``old dies``: the old instance is gone (``mbb`` yes: the replacement ran first).

Two notices: **AWS-style**, the rebalance recommendation (advance notice) then
the final notice ``--aws-advance-s`` later and the reclaim 120 s after that;
**GCP-style**, a 30 s final notice. Each with spothop's controller (woken by
the agent's events, ``event``) and the same controller polling every 15 s
and ignoring wake-ups (``poll 15 s``: SkyPilot's managed-job poll, the peers'
reference). Times are in wall seconds of a world running at ``--speed``
(simulated seconds per wall second): the notices' leads shrink by that
factor, the controller's timing does not. Target: ``launch req`` ≤ 1 s.

One more row, **silent death**: an instance that dies with no notice and no
word (its agent's heartbeats just stop). Target: from its last heartbeat to
its replacement being requested, at most the declared heartbeat deadline
(``heartbeat_interval_s × heartbeat_misses``) plus one controller pass. It is
measured on the fake provider with a virtual clock through the controller's
real pass (observe → ``decide`` → execute, :class:`Controller.run_pass`): the
agent beats every interval, then stops at each of ``--phases`` offsets
within a pass period; a pass runs every ``--period-s`` virtual seconds, and
the figure (``launch req``, virtual seconds) is the worst over the phases
from the last beat to the pass whose actions launch the node again.

    .venv/bin/python -P bench/recovery.py [--speed 4] [--repeat 1] [--only event|poll|silent]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

CALM = {
    "synthetic": {
        "mean_time_between_preemptions_s": 300_000_000,
        "mean_outage_s": 60,
        "capacity": 100,
    }
}
WORKER = """
import json, os, sys, time
from spothop.queue import open_queue
from spothop.queue.outputs import OutputStore
q = open_queue(os.environ["SPOTHOP_QUEUE_URL"], os.environ["SPOTHOP_JOB_ID"])
me = os.environ["SPOTHOP_WORKER_ID"]
out = OutputStore(sys.argv[1])
while True:
    leases = q.claim(me, 1, 600)
    if not leases:
        time.sleep(0.1)
        continue
    time.sleep(0.2)
    out.commit(q, leases[0], json.dumps({"worker": me}).encode())
"""
AWS_ADVANCE_S = 60.0
GCP_LEAD_S = 30.0
AWS_LEAD_S = 120.0
TARGET_S = 1.0


def world(speed: float, bucket: Path) -> dict[str, Any]:
    """Two calm clouds; ``bucket`` plays the object store (the worker, its shards and outputs:
    an instance sees nothing of this machine but the image and the world's buckets)."""
    cloud = {
        "launch_delay_s": 1,
        "terminate_grace_s": 2,
        "market": CALM,
    }
    return {
        "seed": 3,
        "speed": speed,
        "buckets": [str(bucket)],
        "clouds": [
            {
                **cloud,
                "name": "aws-sim",
                "protocol": "aws",
                "catalog": "aws",
                "notice_lead_time_s": AWS_LEAD_S,
                "advance_notice_s": 300,
                "locations": ["us-east-1a", "us-east-1b"],
                "instance_types": ["g4dn.xlarge"],
            },
            {
                **cloud,
                "name": "gcp-sim",
                "protocol": "gcp",
                "catalog": "gcp",
                "notice_lead_time_s": GCP_LEAD_S,
                "locations": ["us-central1-a", "us-central1-b"],
                "instance_types": ["n1-standard-4+1xnvidia-tesla-t4"],
            },
        ],
    }


def one_run(style: str, mode: str, speed: float, tmp: Path) -> dict[str, float | None]:
    """One notice in a fresh home; the timestamps (wall seconds after the notice)."""
    from spothop.cli.main import main
    from spothop.jobs.controller import daemon
    from spothop.jobs.store import JobStore
    from spothop.providers.local.provider import LocalProvider
    from spothop.providers.local.world import load_world
    from spothop.queue.outputs import OutputStore

    home = tmp / f"{style}-{mode}"
    home.mkdir()
    os.environ["SPOTHOP_HOME"] = str(home)
    world_path = home / "world.yaml"
    bucket = home / "bucket"
    bucket.mkdir()
    world_path.write_text(yaml.safe_dump(world(speed, bucket)))
    os.environ["SPOTHOP_WORLD"] = str(world_path)
    loaded = load_world(world_path)
    providers = {
        n: LocalProvider(n, world=loaded, world_path=world_path) for n in loaded.cloud_names
    }
    provider_name = "aws-sim" if style == "aws" else "gcp-sim"
    store_url = f"sqlite:///{home / 'store.db'}"
    queue_url = f"sqlite:///{home / 'queue.db'}"
    (bucket / "worker.py").write_text(WORKER)
    data = bucket / "shards.jsonl"
    data.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(2000)))
    out = bucket / "out"
    spec = {
        "name": "recovery",
        "kind": "batch",
        "workers": 1,
        "tolerance": "aggressive",
        "providers": {"allow": [provider_name]},
        # The instance's own interpreter, where its boot script installed spothop.
        "run": f"python {bucket / 'worker.py'} {out}",
        "batch": {"inputs": [str(data)], "records_per_shard": 1, "output": str(out)},
    }
    (home / "job.yaml").write_text(yaml.safe_dump(spec))
    args = ["--period", "15", "--poll-only"] if mode == "poll" else ["--period", "10"]
    daemon.start_background(store_url=store_url, extra_args=("--queue-url", queue_url, *args))
    store = JobStore(store_url)
    outputs = OutputStore(str(out))
    try:  # the daemon is stopped whatever happens, a refused launch included
        with contextlib.redirect_stdout(io.StringIO()) as captured:
            code = main(
                [
                    "launch",
                    str(home / "job.yaml"),
                    "--detach",
                    "--json",
                    "--store",
                    store_url,
                    "--queue-url",
                    queue_url,
                ]
            )
        if code != 0:
            raise SystemExit(f"bench: the launch failed (exit {code})")
        job_id = json.loads(captured.getvalue())["job_id"]
        old = _wait(lambda: _running(providers, job_id), 120, "the first worker")
        _wait(lambda: _done_by(outputs, old.instance_id) > 0, 240, "the first worker's progress")
        provider = providers[old.provider]
        notice = time.time()
        # An attempt's times are on its cloud's clock (the world's, ``speed`` times the wall's).
        cloud_notice = provider.clock.now()
        if style == "aws":
            provider.preempt(old.instance_id, lead_time_s=AWS_LEAD_S, advance_s=AWS_ADVANCE_S)
        else:
            provider.preempt(old.instance_id, lead_time_s=GCP_LEAD_S)
        marks: dict[str, float | None] = dict.fromkeys(("launch", "running", "progress", "dies"))
        new_id: str | None = None
        deadline = time.monotonic() + 60 + (AWS_ADVANCE_S + AWS_LEAD_S) / speed
        while time.monotonic() < deadline and None in marks.values():
            now = time.time() - notice
            attempts = [a for a in store.attempts(job_id) if a.instance_id != old.instance_id]
            later = [a for a in attempts if a.launched_unix_s > cloud_notice]
            if marks["launch"] is None and later:
                first = min(a.launched_unix_s for a in later)
                marks["launch"] = (first - cloud_notice) / speed  # wall seconds
            if new_id is None:
                new_id = next((a.instance_id for a in later if a.instance_id), None)
            if new_id is not None:
                state = provider_of(providers, new_id).describe(new_id).state
                if marks["running"] is None and state.value == "running":
                    marks["running"] = now
                if marks["progress"] is None and _done_by(outputs, new_id) > 0:
                    marks["progress"] = now
            if marks["dies"] is None and not provider.describe(old.instance_id).state.is_alive:
                marks["dies"] = now
            time.sleep(0.02)
        return marks
    finally:
        daemon.stop()
        for p in providers.values():
            for i in p.list_instances():
                p.terminate(i.instance_id)
        store.close()


PASS_PERIOD_S = 10.0  # the daemon's periodic pass (jobs/controller/loop.py DEFAULT_PERIOD_S)
BEATING_S = 300.0  # virtual seconds the agent beats before it dies silently


def silent_death(period_s: float, phase_s: float, tmp: Path) -> tuple[float, float]:
    """One silent death on the fake provider, the agent's last beat ``phase_s`` into a pass
    period: (virtual seconds from the last beat to the replacement's launch, the target)."""
    from dataclasses import replace

    from spothop.jobs.controller import Launch
    from spothop.jobs.controller.config import ControllerConfig
    from spothop.jobs.controller.loop import Controller
    from spothop.jobs.controller.observe import Observer
    from spothop.jobs.spec import load_job
    from spothop.jobs.store import JobStore
    from spothop.market import ManualClock
    from spothop.state.agent_tables import agent_heartbeats
    from spothop.testing import FakeProvider

    config = ControllerConfig()
    target = config.heartbeat_deadline_s + period_s
    url = f"sqlite:///{tmp / f'silent-{phase_s:g}.db'}"
    store = JobStore(url)
    clock = ManualClock(1_000_000.0)
    provider = FakeProvider(clock=clock)  # watched: it declares a boot deadline
    provider.capabilities = replace(provider.capabilities, boot_deadline_s=600.0)
    providers = {provider.name: provider}
    controller = Controller(store, providers, store_url=url, home=tmp, config=config)
    # The pass's observer on the virtual clock (the daemon's reads the wall).
    controller.observer = Observer(store, providers, market_ttl_s=0.0, clock=clock.now)
    job_id = store.create_job(load_job({"name": "silent", "run": "python train.py"}))
    try:

        def run_pass() -> list[Any]:
            controller.run_pass()
            _wait(lambda: not controller.executor.launching(), 30, "the launch to end")
            return controller.last_actions

        run_pass()
        (attempt,) = store.attempts(job_id)
        start = clock.now()
        dies = start + BEATING_S + phase_s  # no beat after this
        next_beat, beaten = start + phase_s, start
        while True:
            clock.advance(period_s)
            while next_beat <= min(clock.now(), dies):  # the agent's beats up to now
                _beat(store, agent_heartbeats, attempt.instance_id, next_beat)
                beaten, next_beat = next_beat, next_beat + config.heartbeat_interval_s
            relaunched = any(isinstance(a, Launch) and a.job_id == job_id for a in run_pass())
            if relaunched:
                if clock.now() <= dies:
                    raise SystemExit("bench: a beating instance was replaced")
                return clock.now() - beaten, target
            if clock.now() - dies > 10 * target:
                raise SystemExit("bench: the silent instance was never replaced")
    finally:
        controller.close()
        store.close()


def _beat(store: Any, table: Any, instance_id: str | None, at: float) -> None:
    with store.engine.begin() as conn:
        conn.execute(table.delete().where(table.c.instance_id == instance_id))
        conn.execute(
            table.insert(),
            [{"instance_id": instance_id, "time_unix_s": at, "state": "running", "worker_step": 1}],
        )


def silent_row(period_s: float, phases: int, tmp: Path) -> dict[str, float | None]:
    """The worst and median over ``phases`` offsets of the last beat within a pass period."""
    runs = [silent_death(period_s, period_s * i / phases, tmp) for i in range(phases)]
    measured = [m for m, _ in runs]
    return {"launch": max(measured), "median": statistics.median(measured), "target": runs[0][1]}


def provider_of(providers: dict[str, Any], instance_id: str) -> Any:
    for p in providers.values():
        if any(i.instance_id == instance_id for i in p.list_instances()):
            return p
    raise LookupError(instance_id)


def _running(providers: dict[str, Any], job_id: str) -> Any:
    for p in providers.values():
        for i in p.list_instances():
            if i.tags.get("spothop-job") == job_id and i.state.value == "running":
                return i
    return None


def _done_by(outputs: Any, worker: str | None) -> int:
    count = 0
    for shard in outputs.published():
        with contextlib.suppress(Exception):
            if json.loads(outputs.read(shard))["worker"] == worker:
                count += 1
    return count


def _wait(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"bench: {what} did not come within {timeout_s:g} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speed", type=float, default=4.0, help="the world's speed")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--only", choices=("event", "poll", "silent"), help="one controller mode (or row) only"
    )
    parser.add_argument("--period-s", type=float, default=PASS_PERIOD_S, help="silent: pass period")
    parser.add_argument("--phases", type=int, default=10, help="silent: last-beat offsets tried")
    args = parser.parse_args(argv)
    modes = (
        [args.only] if args.only in ("event", "poll") else [] if args.only else ["event", "poll"]
    )
    rows = []
    silent: dict[str, float | None] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "silent"):
            silent = silent_row(args.period_s, args.phases, Path(tmp))
        for style in ("aws", "gcp") if modes else ():
            for mode in modes:
                runs = []
                for r in range(args.repeat):
                    run_dir = Path(tmp) / f"r{r}"
                    run_dir.mkdir(exist_ok=True)
                    runs.append(one_run(style, mode, args.speed, run_dir))
                rows.append((style, mode, {k: _median([x[k] for x in runs]) for k in runs[0]}))
    print(f"world speed {args.speed:g}; wall seconds after the notice; median of {args.repeat}")
    print(
        f"{'notice':<32} {'controller':<10} {'launch req':>10} {'running':>8} {'progress':>9} "
        f"{'old dies':>9} {'mbb':>4} {'target':>7} {'req/target':>10}"
    )
    for style, mode, m in rows:
        label = (
            f"aws rebalance+{AWS_ADVANCE_S / args.speed:.0f}s"
            if style == "aws"
            else f"gcp {GCP_LEAD_S / args.speed:.1f}s (30 sim)"
        )
        mbb = (
            "yes"
            if m["running"] is not None and m["dies"] is not None and m["running"] < m["dies"]
            else "no"
        )
        ratio = None if m["launch"] is None else m["launch"] / TARGET_S
        print(
            f"{label:<32} {('event' if mode == 'event' else 'poll 15 s'):<10} {_f(m['launch']):>10} "
            f"{_f(m['running']):>8} {_f(m['progress']):>9} {_f(m['dies']):>9} {mbb:>4} "
            f"{_f(TARGET_S):>7} {_f(ratio):>10}"
        )
    if silent is not None:
        target = silent["target"] or 0.0
        ratio = None if silent["launch"] is None or not target else silent["launch"] / target
        label = "silent death (last beat; fake)"
        print(
            f"{label:<32} {f'pass {args.period_s:g} s':<10} {_f(silent['launch']):>10} "
            f"{'—':>8} {'—':>9} {'—':>9} {'—':>4} {_f(target):>7} {_f(ratio):>10}"
        )
        print(
            f"silent death: virtual seconds from the last heartbeat to the replacement's launch, "
            f"worst of {args.phases} phases (median {_f(silent['median'])}); target = heartbeat "
            f"deadline + one pass"
        )
    return 0


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
