"""The queue contract, run against every backend (SQLite, PostgreSQL, Redis)."""

from __future__ import annotations

import threading

import pytest

from spothop.queue import (
    AlreadyCompletedError,
    LeaseLost,
    MalformedShardError,
    QueuePolicy,
    Shard,
    ShardState,
    UnknownJobError,
    UnknownLeaseError,
)
from tests.queue.conftest import FakeClock, QueueFactory

LEASE_S = 30.0


def shards(n: int) -> list[Shard]:
    return [Shard(f"s{i:04d}", {"uri": f"file:///data/{i}.txt", "n": i}) for i in range(n)]


def test_claim_hands_out_each_shard_once_with_a_token(make_queue: QueueFactory) -> None:
    q = make_queue()
    assert q.enqueue(shards(5)) == 5
    first = q.claim("w1", n=3, lease_s=LEASE_S)
    second = q.claim("w2", n=3, lease_s=LEASE_S)
    ids = [lease.shard_id for lease in first + second]
    assert sorted(ids) == [f"s{i:04d}" for i in range(5)]
    assert first[0].payload == {"uri": "file:///data/0.txt", "n": 0}
    assert all(lease.token == 1 and lease.attempt == 1 for lease in first + second)
    assert q.claim("w3", n=1, lease_s=LEASE_S) == []
    stats = q.stats()
    assert (stats.pending, stats.leased, stats.done, stats.attempts) == (0, 5, 0, 5)


def test_enqueue_skips_ids_already_there(make_queue: QueueFactory) -> None:
    q = make_queue()
    assert q.enqueue(shards(3)) == 3
    assert q.enqueue(shards(5)) == 2
    assert q.stats().pending == 5
    assert [r.id for r in q.records()] == [f"s{i:04d}" for i in range(5)]


def test_complete_commits_once_and_is_idempotent(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(shards(1))
    (lease,) = q.claim("w1", lease_s=LEASE_S)
    done = q.complete(lease, "file:///out/s0000")
    assert done.first and done.token == lease.token
    again = q.complete(lease, "file:///out/s0000")
    assert not again.first
    with pytest.raises(AlreadyCompletedError):
        q.complete(lease, "file:///out/elsewhere")
    record = q.get("s0000")
    assert (record.state, record.output_ref) == (ShardState.DONE, "file:///out/s0000")
    assert q.stats().done == 1


def test_expired_lease_is_reclaimed_and_the_old_token_is_fenced(
    make_queue: QueueFactory, clock: FakeClock
) -> None:
    q = make_queue()
    q.enqueue(shards(1))
    (old,) = q.claim("w1", lease_s=10)
    assert q.claim("w2", lease_s=10) == []
    clock.advance(11)
    (new,) = q.claim("w2", lease_s=10)
    assert new.shard_id == old.shard_id and new.token > old.token and new.attempt == 2
    with pytest.raises(LeaseLost):
        q.complete(old, "file:///out/old")
    with pytest.raises(LeaseLost):
        q.heartbeat(old)
    assert q.complete(new, "file:///out/new").first
    assert q.get(old.shard_id).output_ref == "file:///out/new"
    assert q.stats().reclaims == 1


def test_complete_after_expiry_is_refused_even_unclaimed(
    make_queue: QueueFactory, clock: FakeClock
) -> None:
    q = make_queue()
    q.enqueue(shards(1))
    (lease,) = q.claim("w1", lease_s=10)
    clock.advance(10.5)
    with pytest.raises(LeaseLost, match="expired"):
        q.complete(lease, "file:///out/late")
    assert q.get(lease.shard_id).state == ShardState.LEASED


def test_heartbeat_extends_the_lease(make_queue: QueueFactory, clock: FakeClock) -> None:
    q = make_queue()
    q.enqueue(shards(1))
    (lease,) = q.claim("w1", lease_s=10)
    for _ in range(3):
        clock.advance(8)
        lease = q.heartbeat(lease)
        assert lease.expires_at == pytest.approx(clock.now + 10, abs=0.01)
    assert q.claim("w2", lease_s=10) == []
    assert q.complete(lease, "file:///out/s0000").first


def test_release_requeues_at_once_and_refunds_the_attempt(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(shards(1))
    (lease,) = q.claim("w1", lease_s=LEASE_S)
    q.release(lease)
    with pytest.raises(LeaseLost):
        q.complete(lease, "file:///out/x")
    (again,) = q.claim("w2", lease_s=LEASE_S)
    assert again.attempt == 1 and again.token == lease.token + 1
    record = q.get(again.shard_id)
    assert (record.attempts, record.releases, record.failures) == (1, 1, 0)
    stats = q.stats()
    assert (stats.releases, stats.attempts, stats.failures) == (1, 1, 0)


def test_release_worker_gives_back_only_that_workers_live_leases(
    make_queue: QueueFactory, clock: FakeClock
) -> None:
    q = make_queue()
    q.enqueue(shards(5))
    mine = q.claim("w1", 2, lease_s=LEASE_S)
    (theirs,) = q.claim("w2", 1, lease_s=LEASE_S)
    (done,) = q.claim("w1", 1, lease_s=LEASE_S)
    q.complete(done, "file:///out/done")
    assert {q.get(lease.shard_id).worker for lease in mine} == {"w1"}
    assert q.release_worker("w1") == 2
    assert q.release_worker("w1") == 0  # nothing left: a second call is harmless
    for lease in mine:
        record = q.get(lease.shard_id)
        assert (record.state, record.worker, record.attempts, record.releases) == (
            ShardState.PENDING,
            None,
            0,
            1,
        )
    assert q.get(theirs.shard_id).state is ShardState.LEASED
    assert q.get(done.shard_id).state is ShardState.DONE
    q.heartbeat(theirs)  # the other worker's lease is untouched
    assert q.release_worker("nobody") == 0


def test_fail_backs_off_then_dead_letters(make_queue: QueueFactory, clock: FakeClock) -> None:
    q = make_queue()
    q.enqueue(shards(1), QueuePolicy(max_attempts=3, backoff_base_s=5, backoff_max_s=60))
    (lease,) = q.claim("w1", lease_s=LEASE_S)
    assert q.fail(lease, "boom 1") == ShardState.PENDING
    assert q.claim("w1", lease_s=LEASE_S) == []  # backoff: 5 s after the first failure
    clock.advance(5.1)
    (lease,) = q.claim("w1", lease_s=LEASE_S)
    assert q.fail(lease, "boom 2") == ShardState.PENDING
    clock.advance(5.1)
    assert q.claim("w1", lease_s=LEASE_S) == []  # second backoff is 10 s
    clock.advance(5)
    (lease,) = q.claim("w1", lease_s=LEASE_S)
    assert lease.attempt == 3
    assert q.fail(lease, "boom 3") == ShardState.DEAD
    clock.advance(1000)
    assert q.claim("w1", lease_s=LEASE_S) == []
    (dead,) = q.dead()
    assert (dead.id, dead.failures, dead.last_error) == ("s0000", 3, "boom 3")
    stats = q.stats()
    assert (stats.dead, stats.pending, stats.failures, stats.attempts) == (1, 0, 3, 3)


def test_retry_dead_gives_fresh_attempts(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(shards(2), QueuePolicy(max_attempts=1))
    for lease in q.claim("w1", n=2, lease_s=LEASE_S):
        q.fail(lease, "bad")
    assert q.stats().dead == 2
    assert q.retry_dead(["s0001"]) == 1
    with pytest.raises(UnknownLeaseError):
        q.retry_dead(["nope"])
    (lease,) = q.claim("w1", lease_s=LEASE_S)
    assert (lease.shard_id, lease.attempt) == ("s0001", 1)
    assert q.retry_dead() == 1
    assert q.stats().dead == 0


def test_expiry_on_the_last_attempt_dead_letters(
    make_queue: QueueFactory, clock: FakeClock
) -> None:
    q = make_queue()
    q.enqueue(shards(1), QueuePolicy(max_attempts=2))
    q.claim("w1", lease_s=10)
    clock.advance(11)
    (second,) = q.claim("w2", lease_s=10)
    assert second.attempt == 2
    clock.advance(11)
    assert q.claim("w3", lease_s=10) == []
    assert q.get("s0000").state == ShardState.DEAD
    assert q.stats().dead == 1


def test_unknown_job_and_unknown_lease_are_clear_errors(make_queue: QueueFactory) -> None:
    q = make_queue()
    with pytest.raises(UnknownJobError, match="unknown job"):
        q.claim("w1")
    with pytest.raises(UnknownJobError):
        q.stats()
    q.enqueue(shards(1))
    (lease,) = q.claim("w1", lease_s=LEASE_S)
    forged = type(lease)(lease.job, "never-enqueued", None, 1, "w1", lease.expires_at, 1)
    with pytest.raises(UnknownLeaseError, match="never-enqueued"):
        q.complete(forged, "file:///out/x")
    with pytest.raises(UnknownLeaseError):
        q.get("never-enqueued")


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        (Shard("ok", {"x": {1, 2}}), "not JSON-serialisable"),
        (Shard("ok", float("nan")), "not JSON-serialisable"),
        (Shard("../escape", "x"), "shard id"),
        (Shard("", "x"), "shard id"),
        (Shard("big", "x" * 70_000), "over"),
    ],
)
def test_malformed_shards_are_refused_whole(
    make_queue: QueueFactory, shard: Shard, message: str
) -> None:
    q = make_queue()
    with pytest.raises(MalformedShardError, match=message):
        q.enqueue([Shard("fine", 1), shard])
    with pytest.raises(UnknownJobError):
        q.stats()  # nothing, not even the job, was created


def test_threads_claiming_together_never_share_a_shard(make_queue: QueueFactory) -> None:
    setup = make_queue()
    setup.enqueue(shards(60))
    claimed: list[str] = []
    lock = threading.Lock()

    def work(worker: str) -> None:
        q = make_queue(setup.job)
        while batch := q.claim(worker, n=2, lease_s=LEASE_S):
            for lease in batch:
                q.complete(lease, f"file:///out/{lease.shard_id}")
            with lock:
                claimed.extend(lease.shard_id for lease in batch)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(s.id for s in shards(60))
    assert setup.stats().done == 60
