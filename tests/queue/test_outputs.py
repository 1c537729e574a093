"""Exactly-once outputs: one committed object per shard, whichever attempt wins; local and S3."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.queue import LeaseLost, OutputStore, Shard, finalize_outputs
from spothop.queue.sql_backend import SqlQueue
from tests.queue.conftest import FakeClock

LEASE_S = 10.0


@pytest.fixture
def queue(tmp_path: Path, clock: FakeClock) -> Iterator[SqlQueue]:
    q = SqlQueue("outputs", f"sqlite:///{tmp_path / 'q.db'}", clock=clock)
    q.enqueue([Shard("a", 1)])
    yield q
    q.close()


def test_a_rerun_after_a_lost_lease_leaves_one_output(
    queue: SqlQueue, clock: FakeClock, tmp_path: Path
) -> None:
    store = OutputStore(str(tmp_path / "out"))
    (slow,) = queue.claim("slow", lease_s=LEASE_S)
    clock.advance(LEASE_S + 1)
    (fast,) = queue.claim("fast", lease_s=LEASE_S)
    assert fast.shard_id == slow.shard_id
    store.commit(queue, fast, b"from the second attempt")
    with pytest.raises(LeaseLost):
        store.commit(queue, slow, b"from the first attempt")
    assert store.published() == ["a"]
    assert store.read("a") == b"from the second attempt"
    assert store.temporaries() == []


def test_completion_is_idempotent_for_the_winner(queue: SqlQueue, tmp_path: Path) -> None:
    store = OutputStore(str(tmp_path / "out"))
    (lease,) = queue.claim("w", lease_s=LEASE_S)
    first = store.commit(queue, lease, b"data")
    again = store.commit(queue, lease, b"data")
    assert first.first and not again.first
    assert store.read("a") == b"data" and store.temporaries() == []


def test_finalize_publishes_a_winner_killed_before_publishing(
    queue: SqlQueue, clock: FakeClock, tmp_path: Path
) -> None:
    store = OutputStore(str(tmp_path / "out"))
    (loser,) = queue.claim("w1", lease_s=LEASE_S)
    store.write_temp(loser, b"stale")  # killed mid-shard
    clock.advance(LEASE_S + 1)
    (winner,) = queue.claim("w2", lease_s=LEASE_S)
    store.write_temp(winner, b"fresh")
    queue.complete(winner, store.ref("a"))  # then killed before publish
    report = finalize_outputs(queue, store)
    assert (report.published, report.losers_removed) == (1, 1)
    assert store.read("a") == b"fresh"
    assert store.temporaries() == []


PARQUET = b"PAR1" + b"rows" + b"PAR1"  # a Parquet file begins (and ends) with its magic


def test_a_parquet_output_is_published_with_its_suffix(queue: SqlQueue, tmp_path: Path) -> None:
    store = OutputStore(str(tmp_path / "out"))
    (lease,) = queue.claim("w", lease_s=LEASE_S)
    done = store.commit(queue, lease, PARQUET)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.parquet")) == ["a.parquet"]
    assert done.output_ref.endswith("/out/a.parquet")
    assert store.published() == ["a"] and store.read("a") == PARQUET


def test_finalize_publishes_a_parquet_temporary_with_its_suffix(
    queue: SqlQueue, tmp_path: Path
) -> None:
    store = OutputStore(str(tmp_path / "out"))
    (lease,) = queue.claim("w", lease_s=LEASE_S)
    store.write_temp(lease, PARQUET)
    queue.complete(lease, store.ref("a", ".parquet"))  # then killed before publish
    assert finalize_outputs(queue, store).published == 1
    assert (tmp_path / "out" / "a.parquet").read_bytes() == PARQUET
    store.publish("a", lease.token)  # again, the temporary gone: idempotent
    assert store.published() == ["a"]


def test_an_output_published_without_a_suffix_still_reads(tmp_path: Path) -> None:
    store = OutputStore(str(tmp_path / "out"))
    (tmp_path / "out" / "old").write_bytes(PARQUET)  # published before outputs had suffixes
    assert store.published() == ["old"] and store.read("old") == PARQUET


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="outputs")
    yield endpoint
    server.stop()


def test_s3_outputs_are_published_once(s3_url: str, queue: SqlQueue, clock: FakeClock) -> None:
    store = OutputStore(
        "s3://outputs/job", client_kwargs={"endpoint_url": s3_url}, skip_instance_cache=True
    )
    (slow,) = queue.claim("slow", lease_s=LEASE_S)
    store.write_temp(slow, b"stale")
    clock.advance(LEASE_S + 1)
    (fast,) = queue.claim("fast", lease_s=LEASE_S)
    store.commit(queue, fast, b"fresh")
    with pytest.raises(LeaseLost):
        store.commit(queue, slow, b"stale")
    assert store.published() == ["a"]
    assert store.read("a") == b"fresh"
    assert store.temporaries() == []
