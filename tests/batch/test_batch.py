"""Batch jobs: the spec, splitting inputs, the decorator, worker commands, stopping."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from spothop.batch import BatchShard, batch, load_spec, plan_shards, run_worker, submit
from spothop.batch.shards import iter_shards, process_shards
from spothop.queue import OutputStore, Shard, ShardState, open_queue
from spothop.queue.errors import BatchSpecError


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(n)))
    return path


def _spec(tmp_path: Path, **input_: object) -> dict[str, object]:
    return {
        "name": "job-1",
        "input": input_,
        "output": str(tmp_path / "out"),
        "queue": f"sqlite:///{tmp_path / 'q.db'}",
        "lease_s": 30,
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"input": {"records": "x.jsonl", "records_per_shard": 0}}, "input.records_per_shard"),
        ({"input": {"files": [], "records": None}}, "input"),
        ({"input": {"records": "x.csv"}}, "input"),
        ({"name": "no spaces please"}, "name"),
        ({"function": "not a path"}, "function"),
        ({"lease_s": -1}, "lease_s"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_spec_errors_name_the_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    spec = {**_spec(tmp_path, records="x.jsonl"), **change}
    with pytest.raises(BatchSpecError, match=rf"(^|; ){field}: "):
        load_spec(spec)


def test_jsonl_is_split_into_byte_ranges_of_n_records(tmp_path: Path) -> None:
    spec = load_spec(
        _spec(tmp_path, records=str(_jsonl(tmp_path / "in.jsonl", 25)), records_per_shard=10)
    )
    shards = plan_shards(spec.input)
    assert [s.payload["count"] for s in shards] == [10, 10, 5]
    rows = [r for s in shards for r in BatchShard(s.id, s.payload).records()]
    assert rows == [{"n": i} for i in range(25)]


def test_parquet_is_split_into_row_ranges(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"n": list(range(23))}), path, row_group_size=4)
    shards = plan_shards(load_spec(_spec(tmp_path, records=str(path), records_per_shard=7)).input)
    assert [s.payload["count"] for s in shards] == [7, 7, 7, 2]
    assert [r["n"] for s in shards for r in BatchShard(s.id, s.payload).records()] == list(
        range(23)
    )


def test_decorated_function_runs_a_job_to_the_end(tmp_path: Path) -> None:
    @batch
    def double(shard: BatchShard) -> list[dict[str, int]]:
        return [{"n": r["n"] * 2} for r in shard.records()]

    spec = load_spec(
        _spec(tmp_path, records=str(_jsonl(tmp_path / "in.jsonl", 9)), records_per_shard=4)
    )
    assert submit(spec) == 3
    assert submit(spec) == 0  # resubmitting adds nothing
    report = run_worker(spec, double, worker="w1", should_stop=lambda: False)
    assert (report.committed, report.failed) == (3, 0)
    store = OutputStore(spec.output)
    assert store.read("shard-000002") == b'{"n": 16}\n'
    with open_queue(spec.queue, spec.name) as queue:
        assert queue.stats().done == 3


def test_worker_command_gets_the_shard_on_stdin(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    script = "import json,sys; s=json.load(sys.stdin); sys.stdout.write(open(s['payload']['uri']).read().upper())"
    spec = load_spec(
        {
            **_spec(tmp_path, files=[str(tmp_path / "a.txt")]),
            "command": [sys.executable, "-c", script],
        }
    )
    submit(spec)
    assert run_worker(spec, worker="w1").committed == 1
    assert OutputStore(spec.output).read("shard-000000") == b"HELLO"


def test_a_failing_shard_is_retried_then_dead(tmp_path: Path) -> None:
    @batch
    def broken(shard: BatchShard) -> bytes:
        raise ValueError(f"cannot read {shard.id}")

    spec = load_spec({**_spec(tmp_path, files=["x"]), "max_attempts": 1})
    submit(spec)
    assert run_worker(spec, broken, worker="w1").failed == 1
    with open_queue(spec.queue, spec.name) as queue:
        (dead,) = queue.dead()
    assert "cannot read shard-000000" in (dead.last_error or "")


def test_a_stop_request_releases_the_shard_in_hand(tmp_path: Path) -> None:
    queue = open_queue(f"sqlite:///{tmp_path / 'q.db'}", "stop")
    queue.enqueue([Shard("a", 1), Shard("b", 2)])
    stop = threading.Event()
    started = threading.Event()

    def slow(item: object) -> bytes:
        started.set()
        threading.Event().wait(60)  # never finishes on its own: only the stop ends this test
        return b""

    threading.Thread(target=lambda: (started.wait(), stop.set()), daemon=True).start()
    report = process_shards(
        queue,
        "w1",
        slow,
        store=OutputStore(str(tmp_path / "out")),
        should_stop=stop.is_set,
        stop_on_sigterm=False,
    )
    assert report.stopped and report.released == 1 and report.committed == 0
    record = queue.get("a")
    assert (record.state, record.attempts, record.releases) == (ShardState.PENDING, 0, 1)
    queue.close()


def test_sigterm_stops_iteration_and_releases(tmp_path: Path) -> None:
    queue = open_queue(f"sqlite:///{tmp_path / 'q.db'}", "sigterm")
    queue.enqueue([Shard("a", 1), Shard("b", 2)])
    seen = []
    for item in iter_shards(queue, "w1", lease_s=30):
        seen.append(item.shard_id)
        os.kill(os.getpid(), signal.SIGTERM)  # the preemption notice arrives mid-shard
    assert seen == ["a"]
    assert queue.get("a").state == ShardState.PENDING and queue.get("a").releases == 1
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler was put back
    queue.close()


def test_heartbeats_keep_a_long_shard_leased(tmp_path: Path) -> None:
    queue = open_queue(f"sqlite:///{tmp_path / 'q.db'}", "beats")
    queue.enqueue([Shard("a", 1)])
    # A lease long enough that a heartbeat thread held up a moment on a loaded machine still renews it.
    for item in iter_shards(queue, "w1", lease_s=1.0, stop_on_sigterm=False):
        first_expiry = item.lease.expires_at
        threading.Event().wait(3.0)  # three lease lengths: only heartbeats keep it
        assert item.lease.expires_at > first_expiry
        item.complete("ref")
    assert queue.get("a").state == ShardState.DONE and queue.get("a").token == 1
    queue.close()


def test_each_shard_done_beats_to_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard done is work the agent reports (its heartbeat carries the worker's beat), so a
    report counts the instance's time as useful even if the cloud takes it before the exit."""
    from spothop.worker.channel import AGENT_DIR_ENV, HEARTBEAT_FILE

    agent = tmp_path / "agent"
    agent.mkdir()
    monkeypatch.setenv(AGENT_DIR_ENV, str(agent))
    queue = open_queue(f"sqlite:///{tmp_path / 'q.db'}", "done-beats")
    queue.enqueue([Shard("a", 1)])
    for item in iter_shards(queue, "w1", lease_s=30, stop_on_sigterm=False):
        assert not (agent / HEARTBEAT_FILE).exists()  # claimed, not done: nothing reported yet
        item.complete("ref")
    assert (agent / HEARTBEAT_FILE).exists()
    queue.close()
