"""End to end with the real shard queue: a worker that ignores SIGTERM holds leases; the agent gives them back.

The instance shares nothing with the test but the network and a bucket: the
agent and the worker reach the queue through the control plane (the HTTP queue).
"""

from __future__ import annotations

from pathlib import Path

from spothop.providers.base import InstanceState
from spothop.queue import Shard, ShardState, open_queue
from tests.agent.shared_nothing import shared_nothing
from tests.providers.local.conftest import wait_for
from tests.waiting import scaled

WORKER = Path(__file__).with_name("queue_worker.py")
PLACE = ("g5.xlarge", "us-east-1", "us-east-1a")


def test_preempted_workers_leases_go_back_to_the_real_queue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    with open_queue(url, "embed-7") as queue:
        queue.enqueue([Shard(f"s{i}", {"i": i}) for i in range(5)])
    with shared_nothing(tmp_path, queue_url=url) as cloud:
        code = cloud.ship(WORKER)
        out = cloud.bucket
        command = cloud.agent(
            "--poll-interval", "0.2", "--safety-margin", "1",
            "--state-dir", "/var/lib/spothop/agent/queue",
            "--queue-url", cloud.url, "--job-id", "embed-7", "--sigterm-grace", "1",
            worker=["python", str(code / WORKER.name), str(out), cloud.url, "embed-7", "2"],
        )  # fmt: skip
        instance = cloud.launch("aws-sim", PLACE, "embed-7", command)
        provider = cloud.provider("aws-sim")
        claimed = wait_for(
            lambda: (out / "started").exists() and (out / "started").read_text(),
            timeout_s=scaled(60),
        )
        assert claimed, cloud.console(instance)
        with open_queue(url, "embed-7") as queue:
            assert queue.stats().leased == 2
        # The lead is the agent's whole budget (stop, wait, kill, release through the queue, exit
        # 75 before the reclaim): 12 s leaves a loaded 2-core machine room; the test waits for the
        # reclaim, so it costs the lead whatever the agent takes.
        provider.preempt(instance.instance_id, lead_time_s=12)
        ended = provider.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(60))
        assert ended.state is InstanceState.PREEMPTED, cloud.console(instance)
        row = provider.store.instance(instance.instance_id)
        # The agent exited, resumable, before the kill.
        assert row is not None and row["exit_code"] == 75, cloud.console(instance)
    with open_queue(url, "embed-7") as queue:
        stats = queue.stats()
        assert (stats.pending, stats.leased, stats.releases) == (5, 0, 2)
        for shard_id in claimed.split(","):
            record = queue.get(shard_id)
            assert record.state is ShardState.PENDING and record.worker is None
            assert record.attempts == 0  # a preemption refunds the attempt
