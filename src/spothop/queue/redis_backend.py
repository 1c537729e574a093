"""The Redis shard queue: a stream with a consumer group per job, Lua for every change.

A pending shard is an entry in the job's stream; a claim reads new entries
with ``XREADGROUP`` and takes over expired ones with ``XAUTOCLAIM``; the fenced
complete, heartbeat, release and fail are Lua scripts, so each check-then-write
is atomic. A claim of ``n`` shards is one round trip and a complete is one:
two per shard.

Durability: an acknowledged complete is only as durable as Redis makes it.
Run Redis with ``appendonly yes``: with ``appendfsync everysec`` (the
default) a crash of the Redis *process* loses nothing acknowledged (the AOF
is written before the reply is sent), and a crash of the *machine* may lose
the last second; ``appendfsync always`` loses nothing even then. Without AOF
(RDB snapshots only) a restart can bring back shards as pending and so redo
them, which the fenced output store still keeps to one committed output.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import redis
from redis.commands.core import Script

from spothop.queue import redis_lua
from spothop.queue.base import Clock, ShardQueue, lease_ms
from spothop.queue.errors import (
    AlreadyCompletedError,
    LeaseLost,
    MalformedShardError,
    UnknownJobError,
    UnknownLeaseError,
)
from spothop.queue.model import (
    DEFAULT_LEASE_S,
    Completion,
    Lease,
    QueuePolicy,
    QueueStats,
    Shard,
    ShardRecord,
    ShardState,
    check_shard,
    decode_payload,
)
from spothop.queue.retry import with_retry

T = TypeVar("T")

DEFAULT_PREFIX = "spothop:queue:"
# XAUTOCLAIM only looks at entries without a heartbeat for this long; the
# shard's own deadline then decides. Shorter means faster reclaim of very
# short leases, at the price of scanning live leases more often.
DEFAULT_RECLAIM_MIN_IDLE_MS = 1000
ENQUEUE_CHUNK = 500
MAX_ERROR_CHARS = 2000
TRANSIENT_REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
)
SCRIPTS = ("ENQUEUE", "CLAIM", "HEARTBEAT", "COMPLETE", "RELEASE", "FAIL", "RETRY_DEAD")


class RedisQueue(ShardQueue):
    """A job's queue in Redis (``redis://host:port/db``); keys start with ``prefix``."""

    def __init__(
        self,
        job: str,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Clock | None = None,
        reclaim_min_idle_ms: int = DEFAULT_RECLAIM_MIN_IDLE_MS,
        client: redis.Redis | None = None,
    ) -> None:
        super().__init__(job, clock)
        self._owns_client = client is None
        self._r: redis.Redis = client or redis.Redis.from_url(url, decode_responses=True)
        self._base = f"{prefix}{{{job}}}"
        self._min_idle_ms = reclaim_min_idle_ms
        self._scripts: dict[str, Script] = {
            name: self._r.register_script(getattr(redis_lua, name)) for name in SCRIPTS
        }

    @property
    def client(self) -> redis.Redis:
        return self._r

    # --- plumbing -----------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _call(self, what: str, body: Callable[[], T]) -> T:
        return with_retry(body, TRANSIENT_REDIS_ERRORS, f"queue {self.job!r}: {what}")

    def _script(self, name: str, *args: Any) -> Any:
        # The clock is read at each try, so a retried call sees the time it runs at.
        return self._call(
            name.lower(),
            lambda: self._scripts[name](
                keys=[f"{self._base}:meta"], args=[self._base, self._now_ms(), *args]
            ),
        )

    def _check(self, result: list[Any], lease: Lease) -> list[Any]:
        """Turn a script's refusal into the matching error."""
        tag = result[0]
        if tag == "nojob":
            raise UnknownJobError(self.job)
        if tag == "unknown":
            raise UnknownLeaseError(self.job, lease.shard_id)
        if tag == "lost":
            state, token, deadline = result[1], int(result[2]), result[3]
            if token != lease.token:
                why = f"the shard was claimed again since (token {token})"
            elif state != ShardState.LEASED.value:
                why = f"the shard is {state} now"
            else:
                why = f"it expired {(self._now_ms() - int(float(deadline))) / 1000:.1f}s ago"
            raise LeaseLost(self.job, lease.shard_id, lease.token, why)
        return result

    # --- the contract ---------------------------------------------------------------

    def enqueue(self, shards: Iterable[Shard], policy: QueuePolicy | None = None) -> int:
        policy = policy or QueuePolicy()
        checked = [(s.id, check_shard(s)) for s in shards]
        if len({shard_id for shard_id, _ in checked}) != len(checked):
            raise MalformedShardError("the same shard id appears twice in one enqueue")
        added = 0
        for start in range(0, max(len(checked), 1), ENQUEUE_CHUNK):
            flat = [x for pair in checked[start : start + ENQUEUE_CHUNK] for x in pair]
            added += int(
                self._script(
                    "ENQUEUE",
                    policy.max_attempts,
                    round(policy.backoff_base_s * 1000),
                    round(policy.backoff_max_s * 1000),
                    *flat,
                )
            )
        return added

    def claim(self, worker: str, n: int = 1, lease_s: float = DEFAULT_LEASE_S) -> list[Lease]:
        length = lease_ms(lease_s)
        rows = self._script("CLAIM", n, length, worker, self._min_idle_ms)
        if rows and len(rows[0]) == 1:
            raise UnknownJobError(self.job)
        return [
            Lease(
                self.job,
                r[0],
                decode_payload(self.job, r[0], r[1]),
                int(r[2]),
                worker,
                int(r[4]) / 1000,
                int(r[3]),
            )
            for r in rows
        ]

    def heartbeat(self, lease: Lease, lease_s: float | None = None) -> Lease:
        length = 0 if lease_s is None else lease_ms(lease_s)
        result = self._check(
            self._script("HEARTBEAT", lease.shard_id, lease.token, length, lease.worker), lease
        )
        return Lease(
            lease.job,
            lease.shard_id,
            lease.payload,
            lease.token,
            lease.worker,
            int(result[1]) / 1000,
            lease.attempt,
        )

    def complete(self, lease: Lease, output_ref: str) -> Completion:
        result = self._script("COMPLETE", lease.shard_id, lease.token, output_ref)
        if result[0] == "other":
            raise AlreadyCompletedError(self.job, lease.shard_id, result[1], output_ref)
        self._check(result, lease)
        return Completion(lease.shard_id, lease.token, output_ref, first=result[0] == "ok")

    def release(self, lease: Lease) -> None:
        self._check(self._script("RELEASE", lease.shard_id, lease.token), lease)

    def fail(self, lease: Lease, error: str) -> ShardState:
        result = self._check(
            self._script("FAIL", lease.shard_id, lease.token, error[:MAX_ERROR_CHARS]), lease
        )
        return ShardState(result[1])

    def stats(self) -> QueueStats:
        counts = cast(
            dict[str, str], self._call("stats", lambda: self._r.hgetall(f"{self._base}:counts"))
        )
        if not counts:
            raise UnknownJobError(self.job)
        value = {k: int(v) for k, v in counts.items()}
        return QueueStats(
            self.job,
            value["pending"],
            value["leased"],
            value["done"],
            value["dead"],
            value["attempts"],
            value["failures"],
            value["releases"],
            value["reclaims"],
        )

    def records(self, state: ShardState | None = None) -> list[ShardRecord]:
        def body() -> list[ShardRecord]:
            if not self._r.exists(f"{self._base}:meta"):
                raise UnknownJobError(self.job)
            ids = cast(list[str], self._r.zrange(f"{self._base}:ids", 0, -1))
            pipe = self._r.pipeline(transaction=False)
            for shard_id in ids:
                pipe.hgetall(f"{self._base}:s:{shard_id}")
            return [self._record(i, h) for i, h in zip(ids, pipe.execute(), strict=True)]

        found = self._call("records", body)
        return [r for r in found if state is None or r.state == state]

    def get(self, shard_id: str) -> ShardRecord:
        fields = cast(
            dict[str, str], self._call("get", lambda: self._r.hgetall(f"{self._base}:s:{shard_id}"))
        )
        if not fields:
            if not self._call("get", lambda: self._r.exists(f"{self._base}:meta")):
                raise UnknownJobError(self.job)
            raise UnknownLeaseError(self.job, shard_id)
        return self._record(shard_id, fields)

    def _record(self, shard_id: str, h: dict[str, str]) -> ShardRecord:
        return ShardRecord(
            shard_id,
            decode_payload(self.job, shard_id, h["payload"]),
            ShardState(h["state"]),
            int(h["token"]),
            int(h["attempts"]),
            int(h["failures"]),
            int(h["releases"]),
            h.get("output_ref"),
            h.get("error"),
            h.get("worker") if h["state"] == ShardState.LEASED.value else None,
        )

    def retry_dead(self, shard_ids: Sequence[str] | None = None) -> int:
        result = self._script("RETRY_DEAD", *(shard_ids or ()))
        if result[0] == "nojob":
            raise UnknownJobError(self.job)
        if result[0] == "unknown":
            raise UnknownLeaseError(self.job, result[1])
        return int(result[1])

    def drop(self) -> None:
        def body() -> None:
            keys = list(self._r.scan_iter(match=f"{self._base}:*", count=1000))
            for start in range(0, len(keys), ENQUEUE_CHUNK):
                self._r.delete(*keys[start : start + ENQUEUE_CHUNK])

        self._call("drop", body)

    def durability(self) -> dict[str, str]:
        """The server's ``appendonly`` and ``appendfsync``: see the module docstring for what they mean."""
        config = cast(dict[str, str], self._call("config", lambda: self._r.config_get("append*")))
        return {
            "appendonly": config.get("appendonly", "?"),
            "appendfsync": config.get("appendfsync", "?"),
        }

    def close(self) -> None:
        if self._owns_client:
            self._r.close()


def wait_for_redis(client: redis.Redis, timeout_s: float) -> bool:
    """True once ``client`` answers PING within ``timeout_s`` (tests, and starting up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return bool(client.ping())
        except TRANSIENT_REDIS_ERRORS:
            time.sleep(0.05)
    return False
