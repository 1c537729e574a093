"""What ``spothop server run`` is told: the environment first, flags over it (the server contract).

=========================  =======================  ==============================================
setting                    environment              default
=========================  =======================  ==============================================
``db_url``                 ``SPOTHOP_SERVER_DB``    the embedded store (``$SPOTHOP_HOME/spothop.db``)
``queue_url``              ``SPOTHOP_SERVER_QUEUE`` the store (a ``redis://`` URL for replicas)
``host`` / ``port``        (flags)                  ``127.0.0.1`` / ``8350``
``replica_id``             (flag)                   ``<hostname>-<pid>``
``lease_s``                (flag)                   15 s, the controller's job lease
``controller``             (``--no-controller``)    on: a controller replica runs beside the API
``public_url``             ``SPOTHOP_SERVER_URL``   ``http://<host>:<port>``: what agents are told to call
``forwarded_allow_ips``    ``SPOTHOP_SERVER_``      none: the peer is the client (see below)
                           ``FORWARDED_ALLOW_IPS``
``heartbeat_batch_s``      (setting)                0.02 s: how long a heartbeat waits for others
``db_pool``                (setting)                40: database connections at most, each opened
                                                    when first needed and kept, one per request
                                                    thread (the thread pool's 40)
``db_ping_idle_s``         (setting)                2 s: a connection idle longer is pinged before
                                                    use (one in steady use is not)
``report_cache_s``         (setting)                5 s: a job's report is computed at most once in
                                                    this long per replica (callers checked first)
=========================  =======================  ==============================================

``forwarded_allow_ips``: the proxies (addresses or networks, comma-separated,
or ``*``) whose ``X-Forwarded-For`` names the client; the failure limit then
counts against the address the proxy names. From any other peer the header
is ignored, so a client cannot pick the address its failures count against.

The bounds below are the API's, named once: a body over ``max_body_bytes`` is a
413, a list over :data:`MAX_LIST_LIMIT` a 422, and more than
``auth_failures_per_window`` failed authentications from one client address
within ``auth_window_s`` get 429 with ``Retry-After`` until the window passes.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass, replace
from typing import Any

from spothop.errors import ConfigError

DB_ENV = "SPOTHOP_SERVER_DB"
QUEUE_ENV = "SPOTHOP_SERVER_QUEUE"
PUBLIC_URL_ENV = "SPOTHOP_SERVER_URL"
FORWARDED_ENV = "SPOTHOP_SERVER_FORWARDED_ALLOW_IPS"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8350
DEFAULT_LEASE_S = 15.0
MAX_BODY_BYTES = 1024 * 1024  # 1 MiB: a job spec or 100 events are far smaller
MAX_LIST_LIMIT = 1000
AUTH_FAILURES_PER_WINDOW = 20
AUTH_WINDOW_S = 60.0
HEARTBEAT_BATCH_S = 0.02
# The request threads (anyio's default thread pool: 40); each may hold a connection, so a request
# never waits for one while another thread is idle (the engine's default 5 + 10 made them wait).
DB_POOL = 40
# A connection back in the pool less than this long ago is used without a ping: its last use just
# showed it works, and a user's call checks out several (a ping each was ~10% of a replica's CPU).
# One idle longer is pinged, and replaced when the database closed it.
DB_PING_IDLE_S = 2.0
# A job's report (its ledger brought up to date, its events read: ~30 ms) is shared by the callers
# within this long; the ledger moves by the second, not faster than a report can be read.
REPORT_CACHE_S = 5.0


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Settings:
    """One server's settings (see the module docstring)."""

    db_url: str | None = None
    queue_url: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    replica_id: str = ""
    lease_s: float = DEFAULT_LEASE_S
    controller: bool = True
    max_body_bytes: int = MAX_BODY_BYTES
    auth_failures_per_window: int = AUTH_FAILURES_PER_WINDOW
    auth_window_s: float = AUTH_WINDOW_S
    token_cache_ttl_s: float = 30.0  # spothop.state.tokens.DEFAULT_CACHE_TTL_S
    public_url: str | None = None
    forwarded_allow_ips: str = ""
    heartbeat_batch_s: float = HEARTBEAT_BATCH_S
    db_pool: int = DB_POOL
    db_ping_idle_s: float = DB_PING_IDLE_S
    report_cache_s: float = REPORT_CACHE_S

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from the environment, with every override that is not None applied over them."""
        base = cls(
            db_url=os.environ.get(DB_ENV) or None,
            queue_url=os.environ.get(QUEUE_ENV) or None,
            public_url=os.environ.get(PUBLIC_URL_ENV) or None,
            forwarded_allow_ips=os.environ.get(FORWARDED_ENV, ""),
            replica_id=default_replica_id(),
        )
        settings = replace(base, **{k: v for k, v in overrides.items() if v is not None})
        settings.check()
        return settings

    def check(self) -> None:
        if not 1 <= self.port <= 65535 and self.port != 0:
            raise ConfigError(f"--port must be 1-65535, got {self.port}")
        if not 1.0 <= self.lease_s <= 3600.0:
            raise ConfigError(f"--lease-s must be between 1 and 3600 seconds, got {self.lease_s}")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        if not 0 <= self.heartbeat_batch_s <= 1:
            raise ConfigError(
                f"heartbeat_batch_s must be between 0 and 1 s, got {self.heartbeat_batch_s}"
            )
        if not 0 <= self.db_ping_idle_s <= 3600:
            raise ConfigError(f"db_ping_idle_s must be 0-3600 s, got {self.db_ping_idle_s}")
        if not 0 <= self.report_cache_s <= 60:
            raise ConfigError(f"report_cache_s must be 0-60 s, got {self.report_cache_s}")
        if not 1 <= self.db_pool <= 1000:
            raise ConfigError(f"db_pool must be between 1 and 1000 connections, got {self.db_pool}")
        self.trusted_proxies()

    def trusted_proxies(self) -> list[str]:
        """``forwarded_allow_ips`` as a list (empty: no proxy is trusted); a bad entry is a
        ConfigError naming it."""
        entries = [e.strip() for e in self.forwarded_allow_ips.split(",") if e.strip()]
        for entry in entries:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ConfigError(
                    f"--forwarded-allow-ips: {entry!r} is not an IP address or network (e.g."
                    " 10.0.0.5, 10.0.0.0/24, or * for any peer)"
                ) from None
        return entries

    def agents_url(self, port: int) -> str:
        """The URL the agents of this replica's jobs are given (``public_url``, else this listener's)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.host if self.host not in ("0.0.0.0", "::", "") else socket.getfqdn()
        return f"http://{host}:{port}"

    @property
    def store_url(self) -> str:
        """The database URL (the embedded store's when none was given)."""
        from spothop.db import default_database_url

        return self.db_url or default_database_url()

    @property
    def jobs_queue_url(self) -> str:
        """Where the batch jobs' shard queues are (the store when no queue was given)."""
        return self.queue_url or self.store_url
