"""End to end with the real shard queue: a worker that ignores SIGTERM holds leases; the agent gives them back."""

from __future__ import annotations

import sys
from pathlib import Path

from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from spothop.queue import Shard, ShardState, open_queue
from tests.conftest import PROJECT_ROOT
from tests.providers.local.conftest import wait_for
from tests.waiting import scaled

WORKER = str(Path(__file__).with_name("queue_worker.py"))


def test_preempted_workers_leases_go_back_to_the_real_queue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    with open_queue(url, "embed-7") as queue:
        queue.enqueue([Shard(f"s{i}", {"i": i}) for i in range(5)])
    provider = LocalProvider("aws-sim", world=load_world())
    command = [
        sys.executable,
        "-m",
        "spothop.agent",
        "run",
        "--poll-interval",
        "0.2",
        "--safety-margin",
        "1",
        "--state-dir",
        str(tmp_path / "agent"),
        "--queue-url",
        url,
        "--job-id",
        "embed-7",
        "--sigterm-grace",
        "1",
        "--",
        sys.executable,
        WORKER,
        str(tmp_path),
        url,
        "embed-7",
        "2",
    ]
    instance = provider.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=command,
            env={"PYTHONPATH": str(PROJECT_ROOT)},
        )
    )
    try:
        claimed = wait_for(
            lambda: (tmp_path / "started").exists() and (tmp_path / "started").read_text(),
            timeout_s=40,
        )
        with open_queue(url, "embed-7") as queue:
            assert queue.stats().leased == 2
        # The lead is the agent's whole budget (stop, wait, kill, release through the queue, exit
        # 75 before the reclaim): 12 s leaves a loaded 2-core machine room; the test waits for the
        # reclaim, so it costs the lead whatever the agent takes.
        provider.preempt(instance.instance_id, lead_time_s=12)
        ended = provider.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(60))
        assert ended.state is InstanceState.PREEMPTED
        row = provider.store.instance(instance.instance_id)
        assert (
            row is not None and row["exit_code"] == 75
        )  # the agent exited, resumable, before the kill
        with open_queue(url, "embed-7") as queue:
            stats = queue.stats()
            assert (stats.pending, stats.leased, stats.releases) == (5, 0, 2)
            for shard_id in claimed.split(","):
                record = queue.get(shard_id)
                assert record.state is ShardState.PENDING and record.worker is None
                assert record.attempts == 0  # a preemption refunds the attempt
    finally:
        provider.terminate(instance.instance_id)
