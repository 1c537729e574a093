"""Open a job's queue from a URL: ``sqlite:///…``, ``postgresql://…``, ``redis://…``, or a control plane's ``http(s)://…``."""

from __future__ import annotations

from spothop.errors import ConfigError
from spothop.queue.base import Clock, ShardQueue

QUEUE_URL_SCHEMES = ("sqlite", "postgresql", "postgres", "redis", "rediss", "http", "https")


def open_queue(url: str | None, job: str, *, clock: Clock | None = None) -> ShardQueue:
    """The queue of ``job`` at ``url`` (default: the embedded SQLite database).

    Backends are imported only when asked for, so the SQL queue works without
    the ``redis`` package installed, and a Redis queue's worker never imports
    SQLAlchemy (most of a worker's start-up; a preempted worker's replacement
    pays it again). An ``http(s)://`` URL is a control plane's: the queue is
    reached through it (:class:`~spothop.queue.http_backend.HttpQueue`, with
    ``$SPOTHOP_AGENT_TOKEN`` and ``$SPOTHOP_INSTANCE_ID``; a
    :class:`~spothop.errors.ConfigError` names the one missing).
    """
    if not url:
        from spothop.db import default_database_url

        url = default_database_url()
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme in ("redis", "rediss"):
        from spothop.queue.redis_backend import RedisQueue

        return RedisQueue(job, url, clock=clock)
    if scheme in ("http", "https"):
        from spothop.queue.http_backend import http_queue_from_env

        return http_queue_from_env(url, job, clock=clock)
    if scheme in ("sqlite", "postgresql", "postgres"):
        from spothop.queue.sql_backend import SqlQueue

        return SqlQueue(job, url, clock=clock)
    raise ConfigError(
        f"unsupported queue URL {url!r}: use sqlite:///PATH, postgresql://HOST/DB, redis://HOST:PORT/DB or a control plane's http(s)://HOST:PORT"
    )
