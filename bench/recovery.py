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

    .venv/bin/python -P bench/recovery.py [--speed 4] [--repeat 1] [--only event]
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


def world(speed: float) -> dict[str, Any]:
    cloud = {
        "launch_delay_s": 1,
        "terminate_grace_s": 2,
        "market": CALM,
    }
    return {
        "seed": 3,
        "speed": speed,
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
    world_path.write_text(yaml.safe_dump(world(speed)))
    os.environ["SPOTHOP_WORLD"] = str(world_path)
    loaded = load_world(world_path)
    providers = {
        n: LocalProvider(n, world=loaded, world_path=world_path) for n in loaded.cloud_names
    }
    provider_name = "aws-sim" if style == "aws" else "gcp-sim"
    store_url = f"sqlite:///{home / 'store.db'}"
    queue_url = f"sqlite:///{home / 'queue.db'}"
    (home / "worker.py").write_text(WORKER)
    data = home / "shards.jsonl"
    data.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(2000)))
    out = home / "out"
    spec = {
        "name": "recovery",
        "kind": "batch",
        "workers": 1,
        "tolerance": "aggressive",
        "providers": {"allow": [provider_name]},
        "run": f"{sys.executable} {home / 'worker.py'} {out}",
        "batch": {"inputs": [str(data)], "records_per_shard": 1, "output": str(out)},
    }
    (home / "job.yaml").write_text(yaml.safe_dump(spec))
    args = ["--period", "15", "--poll-only"] if mode == "poll" else ["--period", "10"]
    daemon.start_background(store_url=store_url, extra_args=("--queue-url", queue_url, *args))
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
    assert code == 0
    job_id = json.loads(captured.getvalue())["job_id"]
    store = JobStore(store_url)
    outputs = OutputStore(str(out))
    try:
        old = _wait(lambda: _running(providers, job_id), 120, "the first worker")
        _wait(lambda: _done_by(outputs, old.instance_id) > 0, 60, "the first worker's progress")
        provider = providers[old.provider]
        notice = time.time()
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
            later = [a for a in attempts if a.launched_unix_s > notice]
            if marks["launch"] is None and later:
                marks["launch"] = min(a.launched_unix_s for a in later) - notice
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
    parser.add_argument("--only", choices=("event", "poll"), help="one controller mode only")
    args = parser.parse_args(argv)
    modes = [args.only] if args.only else ["event", "poll"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for style in ("aws", "gcp"):
            for mode in modes:
                runs = []
                for r in range(args.repeat):
                    run_dir = Path(tmp) / f"r{r}"
                    run_dir.mkdir(exist_ok=True)
                    runs.append(one_run(style, mode, args.speed, run_dir))
                rows.append((style, mode, {k: _median([x[k] for x in runs]) for k in runs[0]}))
    print(f"world speed {args.speed:g}; wall seconds after the notice; median of {args.repeat}")
    print(
        f"{'notice':<22} {'controller':<10} {'launch req':>10} {'running':>8} {'progress':>9} "
        f"{'old dies':>9} {'mbb':>4} {'req/target':>10}"
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
            f"{label:<22} {('event' if mode == 'event' else 'poll 15 s'):<10} {_f(m['launch']):>10} "
            f"{_f(m['running']):>8} {_f(m['progress']):>9} {_f(m['dies']):>9} {mbb:>4} {_f(ratio):>10}"
        )
    return 0


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
