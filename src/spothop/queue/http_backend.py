"""A job's shard queue through the control plane: the batch worker's queue when it cannot reach the database.

When a batch job's queue is the embedded database (SQLite or the server's
PostgreSQL), an instance that shares nothing with the controller but the
network cannot open it. Its workers then get the control plane's URL as
``SPOTHOP_QUEUE_URL``, and :func:`spothop.queue.open_queue` opens
:class:`HttpQueue` for it: each call is one request to the control plane's
agent API (``POST /v1/agents/{instance_id}/queue/...``, docs/agent.md), made
with the instance's token (``SPOTHOP_AGENT_TOKEN``), and carried out there by
the job's real queue (:class:`~spothop.queue.sql_backend.SqlQueue` or
:class:`~spothop.queue.redis_backend.RedisQueue`). A Redis or PostgreSQL queue
URL that instances can reach stays direct.

Contracts:

- **Fencing is the backend's.** The server answers a queue error with its class
  name and fields; the client raises the same class with the same message and
  attributes (:class:`~spothop.queue.errors.LeaseLost` for a stale token's
  ``complete``, :class:`~spothop.queue.errors.AlreadyCompletedError`, ...), so a
  worker cannot tell this queue from the backend's by its errors.
- **Timeouts and bounded retries.** Every call has a timeout (``timeout_s``) and
  at most ``attempts`` tries (:func:`spothop.wire.client.retrying`, backoff with
  full jitter). A call whose repetition is harmless (``heartbeat``, ``complete``
  with the same output, ``stats``, ``records``) is retried after any failure
  that may be passing (no answer, 429, 5xx). One that must not be done twice
  (``claim``, ``release``, ``fail``) is retried only when it surely was not done:
  the connection was refused, or the server answered 429 or 503. What still
  fails is :class:`~spothop.queue.errors.QueueUnavailableError`.
- **Scoped.** The token is the instance's: the server refuses (403) another
  job's queue or another instance's path; that is a :class:`~spothop.queue.errors.QueueError`
  saying the control plane refused the token.
- **What a worker uses only.** ``enqueue``, ``retry_dead`` and ``drop`` are the
  controller's and the user's, done on the queue itself; here they raise
  :class:`~spothop.queue.errors.QueueError` saying so.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from spothop.errors import ConfigError
from spothop.queue import errors as qerrors
from spothop.queue.base import Clock, ShardQueue
from spothop.queue.model import (
    DEFAULT_LEASE_S,
    Completion,
    Lease,
    QueuePolicy,
    QueueStats,
    Shard,
    ShardRecord,
    ShardState,
)
from spothop.wire.client import (
    HttpStatus,
    JsonClient,
    NotJson,
    Unreachable,
    full_jitter_s,
    retrying,
)

TOKEN_ENV = "SPOTHOP_AGENT_TOKEN"  # spothop.wire.contract.TOKEN_ENV: the instance's own token
INSTANCE_ID_ENV = "SPOTHOP_INSTANCE_ID"  # spothop.worker.channel.INSTANCE_ID_ENV
TIMEOUT_S = 10.0  # one request; a claim or a complete is a few ms of the queue's
ATTEMPTS = 5
BACKOFF_BASE_S = 0.2
BACKOFF_MAX_S = 5.0
# The queue's errors the server answers by name; rebuilt as they were raised there.
QUEUE_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        qerrors.LeaseLost,
        qerrors.AlreadyCompletedError,
        qerrors.UnknownLeaseError,
        qerrors.UnknownJobError,
        qerrors.MalformedShardError,
        qerrors.QueueUnavailableError,
        qerrors.QueueError,
    )
}
NOT_DONE_STATUSES = frozenset({429, 503})  # the server did not carry the call out


def lease_dict(lease: Lease) -> dict[str, Any]:
    """``lease`` as the wire carries it (every field)."""
    return asdict(lease)


def lease_from(data: dict[str, Any]) -> Lease:
    return Lease(
        job=str(data["job"]),
        shard_id=str(data["shard_id"]),
        payload=data.get("payload"),
        token=int(data["token"]),
        worker=str(data["worker"]),
        expires_at=float(data["expires_at"]),
        attempt=int(data["attempt"]),
    )


def record_from(data: dict[str, Any]) -> ShardRecord:
    return ShardRecord(
        id=str(data["id"]),
        payload=data.get("payload"),
        state=ShardState(data["state"]),
        token=int(data["token"]),
        attempts=int(data["attempts"]),
        failures=int(data["failures"]),
        releases=int(data["releases"]),
        output_ref=data.get("output_ref"),
        last_error=data.get("last_error"),
        worker=data.get("worker"),
    )


def rebuild_error(type_: str, message: str, fields: dict[str, Any]) -> Exception | None:
    """The queue error ``type_`` with ``message`` and ``fields`` as the server raised it; None
    when ``type_`` is not one of :data:`QUEUE_ERRORS`."""
    cls = QUEUE_ERRORS.get(type_)
    if cls is None:
        return None
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for name, value in fields.items():
        setattr(exc, name, value)
    return exc


class HttpQueue(ShardQueue):
    """Job ``job``'s shard queue through the control plane at ``base_url`` (module docstring)."""

    def __init__(
        self,
        job: str,
        base_url: str,
        *,
        token: str,
        instance_id: str,
        clock: Clock | None = None,
        timeout_s: float = TIMEOUT_S,
        attempts: int = ATTEMPTS,
    ) -> None:
        super().__init__(job, clock)
        self.base_url = base_url.rstrip("/")
        self.instance_id = instance_id
        self.attempts = attempts
        self._client = JsonClient(
            self.base_url, token, timeout_s=timeout_s, user_agent="spothop-queue"
        )
        self._prefix = f"/v1/agents/{instance_id}/queue"

    def __repr__(self) -> str:
        return f"HttpQueue({self.job!r}, {self.base_url!r}, instance_id={self.instance_id!r})"

    # -- what a worker uses ----------------------------------------------------------

    def claim(self, worker: str, n: int = 1, lease_s: float = DEFAULT_LEASE_S) -> list[Lease]:
        body = {"job": self.job, "worker": worker, "n": n, "lease_s": lease_s}
        answer = self._call("POST", "claim", body, idempotent=False)
        return [lease_from(item) for item in answer["leases"]]

    def heartbeat(self, lease: Lease, lease_s: float | None = None) -> Lease:
        body = {"job": self.job, "lease": lease_dict(lease), "lease_s": lease_s}
        return lease_from(self._call("POST", "heartbeat", body, idempotent=True)["lease"])

    def complete(self, lease: Lease, output_ref: str) -> Completion:
        body = {"job": self.job, "lease": lease_dict(lease), "output_ref": output_ref}
        answer = self._call("POST", "complete", body, idempotent=True)
        return Completion(
            str(answer["shard_id"]),
            int(answer["token"]),
            str(answer["output_ref"]),
            bool(answer["first"]),
        )

    def release(self, lease: Lease) -> None:
        self._call("POST", "release", {"job": self.job, "lease": lease_dict(lease)}, False)

    def fail(self, lease: Lease, error: str) -> ShardState:
        body = {"job": self.job, "lease": lease_dict(lease), "error": error}
        return ShardState(self._call("POST", "fail", body, idempotent=False)["state"])

    def release_worker(self, worker: str) -> int:
        body = {"job": self.job, "worker": worker}
        return int(self._call("POST", "release-worker", body, idempotent=False)["released"])

    def stats(self) -> QueueStats:
        data = self._call("GET", "stats", {"job": self.job}, idempotent=True)
        return QueueStats(
            job=str(data["job"]),
            **{
                k: int(data[k])
                for k in (
                    "pending",
                    "leased",
                    "done",
                    "dead",
                    "attempts",
                    "failures",
                    "releases",
                    "reclaims",
                )
            },
        )

    def records(self, state: ShardState | None = None) -> list[ShardRecord]:
        params = {"job": self.job, "state": state.value if state is not None else None}
        answer = self._call("GET", "records", params, idempotent=True)
        return [record_from(item) for item in answer["records"]]

    def close(self) -> None:
        """Nothing to release: each call is a request of its own."""

    # -- the controller's and the user's, not a worker's ------------------------------

    def enqueue(self, shards: Iterable[Shard], policy: QueuePolicy | None = None) -> int:
        raise self._not_here("enqueue")

    def retry_dead(self, shard_ids: Sequence[str] | None = None) -> int:
        raise self._not_here("retry_dead")

    def drop(self) -> None:
        raise self._not_here("drop")

    def _not_here(self, what: str) -> qerrors.QueueError:
        return qerrors.QueueError(
            f"{what} is not offered through the control plane (a worker's queue); do it on the "
            f"job's queue itself (`spothop queue`, where the store is reachable)"
        )

    # -- one call --------------------------------------------------------------------

    def _call(self, method: str, op: str, data: dict[str, Any], idempotent: bool) -> Any:
        path = f"{self._prefix}/{op}"

        def once() -> Any:
            if method == "GET":
                return self._client.send(method, path, params=data)
            return self._client.send(method, path, body=data)

        try:
            answer = retrying(
                once,
                attempts=self.attempts,
                retry=_retry_all if idempotent else _retry_not_done,
                delay_s=lambda k, _e: full_jitter_s(k, BACKOFF_BASE_S, BACKOFF_MAX_S),
            )
        except HttpStatus as exc:
            raise self._error(op, exc) from None
        except (Unreachable, NotJson) as exc:
            raise qerrors.QueueUnavailableError(
                f"the control plane at {self.base_url} did not answer {op} on job {self.job!r} "
                f"after {self.attempts} tries: {exc}"
            ) from None
        if not isinstance(answer, dict):
            raise qerrors.QueueUnavailableError(
                f"the control plane at {self.base_url} answered {op} with {answer!r}, not an object"
            )
        return answer

    def _error(self, op: str, exc: HttpStatus) -> Exception:
        """The queue error the server's answer names, else one that says what it answered."""
        import json

        try:
            error = json.loads(exc.body).get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        message = str(error.get("message") or f"HTTP {exc.code}")
        rebuilt = rebuild_error(str(error.get("type", "")), message, error.get("fields") or {})
        if rebuilt is not None:
            return rebuilt
        if exc.auth:
            return qerrors.QueueError(
                f"the control plane refused the token for {op} on job {self.job!r} for instance "
                f"{self.instance_id!r}: {message}"
            )
        if exc.retryable:
            return qerrors.QueueUnavailableError(
                f"the control plane at {self.base_url} answered {op} with {exc.code}: {message}"
            )
        return qerrors.QueueError(f"the control plane refused {op} on job {self.job!r}: {message}")


def _retry_all(exc: Exception) -> bool:
    """A repeatable call: again after no answer or a passing refusal (429, 5xx)."""
    if isinstance(exc, HttpStatus):
        return exc.retryable
    return isinstance(exc, Unreachable | NotJson)


def _retry_not_done(exc: Exception) -> bool:
    """A call that must not be done twice: again only when it surely was not done."""
    if isinstance(exc, HttpStatus):
        return exc.code in NOT_DONE_STATUSES
    return isinstance(exc, Unreachable) and exc.refused


def http_queue_from_env(
    url: str, job: str, *, clock: Clock | None = None, environ: dict[str, str] | None = None
) -> HttpQueue:
    """:class:`HttpQueue` of ``job`` at ``url``, with the token and instance id from the environment
    (``SPOTHOP_AGENT_TOKEN``, ``SPOTHOP_INSTANCE_ID``); a :class:`~spothop.errors.ConfigError`
    naming what is missing."""
    env = os.environ if environ is None else environ
    token = env.get(TOKEN_ENV, "").strip()
    instance_id = env.get(INSTANCE_ID_ENV, "").strip()
    missing = [
        name for name, value in ((TOKEN_ENV, token), (INSTANCE_ID_ENV, instance_id)) if not value
    ]
    if missing:
        raise ConfigError(
            f"the queue URL {url!r} is a control plane's: it needs ${' and $'.join(missing)} "
            "(the agent gives them to a batch worker it starts; set them to use this queue by hand)"
        )
    return HttpQueue(job, url, token=token, instance_id=instance_id, clock=clock)
