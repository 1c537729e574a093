"""The control-plane server under load: 500 agents and 20 users against two replicas, then one killed.

``.venv/bin/python -P bench/server.py [--seconds 60] [--agents 500] [--users 20] [--jobs 4]``

Loopback only, bounded (``--seconds``, every wait has a deadline), on the real
services: PostgreSQL (``$SPOTHOP_TEST_POSTGRES_URL``; a fresh schema, dropped
at the end) and Redis (``$SPOTHOP_TEST_REDIS_URL``, the shard queue).

1. Two ``spothop server run`` processes (replicas ``bench-a`` and ``bench-b``),
   each serving the API with a controller replica beside it (``--lease-s``),
   on one database and one queue, over a calm local world in a scratch
   ``SPOTHOP_HOME``. The agents of the jobs they run are told to call a
   failover proxy in front of both (``SPOTHOP_SERVER_URL``), as behind nginx.
2. ``--jobs`` small task jobs (``sleep``, long enough to outlive the kill) are
   launched through the user API; the replicas' controllers claim them (job
   leases) and run them on the local cloud.
3. ``--agents`` simulated agents (asyncio on uvloop, each with a keep-alive
   HTTP/1.1 connection of its own, as a real agent has: :class:`Http1`), each
   with its own agent token scoped to one job and one synthetic instance, register, then heartbeat every second and send a
   batch of events every ``--event-every-s`` (each event's id is kept once a 2xx
   acknowledged it). ``--users`` users list their jobs and read a job's status
   and report, one request every ``--user-every-s``. Agents and users are split
   across the two replicas; a call a replica cannot answer (connection refused
   or reset) is retried once on the other, as an agent behind a load balancer
   would be.
4. At ``--kill-at`` of the run, the replica holding more jobs is SIGKILLed: the jobs it
   held must be held by the other within one lease period (measured from the
   kill to the last lease changing owner), and go on to succeed.
5. At the end every acknowledged event id is looked up in ``agent_events``:
   lost = acknowledged − stored (target 0).

Latency is the agent's or user's own: from the call to its answer. Prints
requests/s, p50/p99 per endpoint, errors (a call that failed on every
replica, or answered other than 2xx), the CPU spent per request by the
replicas and by the bench itself (so a bench that is its own bottleneck shows),
the machine's CPU busy, and the ratio the issue judges:
heartbeat p99 / 100 ms (target ≤ 1, before the kill; the window after it is
shown apart). Exit 1 if an event was lost, a job did not finish, or the
takeover took longer than one lease period (plus a second for the survivor's claim itself
on a loaded machine: its keeper ticks just after the dead replica's leases lapse).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

POSTGRES_URL = os.environ.get(
    "SPOTHOP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("SPOTHOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TARGET_P99_S = 0.100  # the issue: p99 ≤ 100 ms for heartbeats
# A killed replica's leases expire at most one lease after its last renewal, and the survivor's
# keeper ticks just after the first of them lapses (jobs/controller/replica.py): one lease, plus
# the claim's own time.
TAKEOVER_SLACK_S = 1.0
HTTP_TIMEOUT_S = 10.0
START_S = 90.0  # a replica imports FastAPI, SQLAlchemy, the store, and migrates it
RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
WORLD = {
    "seed": 3,
    "speed": 1.0,
    "clouds": [
        {
            "name": "aws-sim",
            "protocol": "aws",
            "catalog": "aws",
            "notice_lead_time_s": 60,
            "launch_delay_s": 1,
            "terminate_grace_s": 2,
            "locations": ["us-east-1a", "us-east-1b"],
            "instance_types": ["g5.xlarge", "g4dn.xlarge"],
            "market": {
                "synthetic": {
                    "mean_time_between_preemptions_s": 300_000_000,
                    "mean_outage_s": 60,
                    "capacity": 100,
                }
            },
        }
    ],
}
console = Console()


# -- the services and the replicas -------------------------------------------------------


def _check_services() -> str | None:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {POSTGRES_URL} unreachable: {exc} (set SPOTHOP_TEST_POSTGRES_URL)"
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as exc:
        return f"Redis at {REDIS_URL} unreachable: {exc} (set SPOTHOP_TEST_REDIS_URL)"
    return None


@contextlib.contextmanager
def _schema() -> Iterator[str]:
    """A fresh PostgreSQL schema; the store URL that uses it. Dropped afterwards."""
    import psycopg

    name = f"spothop_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    separator = "&" if "?" in POSTGRES_URL else "?"
    try:
        yield f"{POSTGRES_URL}{separator}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@dataclass
class Replica:
    name: str
    log_path: Path
    process: subprocess.Popen[bytes]
    url: str = ""
    profiled: bool = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _start_replica(
    name: str, db_url: str, lease_s: float, tmp: Path, env: dict[str, str], profile: str | None
) -> Replica:
    args = [sys.executable, "-m", "spothop.cli.main", "server", "run", "--port", "0"]
    args += ["--db", db_url, "--queue", REDIS_URL, "--replica-id", name, "--lease-s", str(lease_s)]
    if profile:  # py-spy's collapsed stacks of the replica, written when it stops (no kill)
        args = [
            "py-spy",
            "record",
            "--subprocesses",  # the replica's controller process too
            "-r",
            "100",
            "-f",
            "raw",
            "-o",
            f"{profile}-{name}.txt",
            "--",
            *args,
        ]
    log_path = tmp / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    return Replica(name, log_path, process, profiled=bool(profile))


def _wait_ready(replica: Replica) -> None:
    import httpx

    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if replica.process.poll() is not None:
            raise SystemExit(f"replica {replica.name} exited:\n{replica.log()[-3000:]}")
        match = RUNNING.search(replica.log())
        if match:
            replica.url = f"http://127.0.0.1:{match.group(1)}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{replica.url}/readyz", timeout=3).status_code == 200:
                    return
        time.sleep(0.2)
    raise SystemExit(
        f"replica {replica.name} not ready in {START_S:.0f} s:\n{replica.log()[-3000:]}"
    )


def _stop(replica: Replica) -> None:
    if replica.process.poll() is None:
        replica.process.send_signal(signal.SIGINT if replica.profiled else signal.SIGTERM)
        try:
            replica.process.wait(20)
        except subprocess.TimeoutExpired:
            replica.process.kill()
            replica.process.wait(10)


class FailoverProxy:
    """The real agents' way to the replicas: a TCP proxy on loopback, in a thread of its own,
    that connects each new connection to the first replica that accepts it (what nginx's
    ``proxy_next_upstream`` does in docs/server.md). Both replicas tell their agents its URL
    (``SPOTHOP_SERVER_URL``), so an agent whose replica was killed goes on with the other."""

    def __init__(self) -> None:
        self.upstreams: list[tuple[str, int]] = []  # filled once the replicas listen
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._port = 0

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0)
            )
            self._port = server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        threading.Thread(target=serve, name="failover-proxy", daemon=True).start()
        ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for host, port in list(self.upstreams):
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                continue
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            return
        writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


# -- the load ----------------------------------------------------------------------------


@dataclass
class Stats:
    latencies: dict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    error_samples: list[str] = field(default_factory=list)
    failovers: int = 0
    acked_events: set[str] = field(default_factory=set)
    sent_events: int = 0
    server_errors: str = ""  # the replicas' first logged traceback, if any
    # The bench's own event loop: how late a 50 ms sleep woke (its start, the lateness). A call's
    # latency includes this lateness; when it is near the heartbeat p99, the bench is measuring
    # its own scheduling, not the server.
    loop_lag: list[tuple[float, float]] = field(default_factory=list)

    def ok(self, endpoint: str, started: float, seconds: float) -> None:
        self.latencies[endpoint].append((started, seconds))

    def fail(self, endpoint: str, what: str) -> None:
        self.errors[endpoint] += 1
        if len(self.error_samples) < 10:
            self.error_samples.append(f"{endpoint}: {what}")


class Http1:
    """One caller's keep-alive HTTP/1.1 connection to a replica: what a real agent holds (its own
    connection, not a pool shared by hundreds), and cheap enough on the client's CPU (a few tens of
    microseconds a call, against a millisecond or more for httpx) that the bench measures the
    server, not itself. Answers with a ``Content-Length`` only (uvicorn's JSON answers)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, token: str, body: bytes | None = None
    ) -> tuple[int, bytes]:
        """(status, body); OSError when the connection fails, TimeoutError (an OSError too) when
        no answer comes within ``HTTP_TIMEOUT_S``."""
        return await asyncio.wait_for(self._request(method, path, token, body), HTTP_TIMEOUT_S)

    async def _request(
        self, method: str, path: str, token: str, body: bytes | None
    ) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {token}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        try:
            self._writer.write(head.encode() + b"\r\n" + (body or b""))
            lines = (await self._reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in lines
                if line.lower().startswith(b"content-length:")
            )
            return status, await self._reader.readexactly(length)
        except (OSError, EOFError, asyncio.IncompleteReadError, StopIteration, ValueError) as exc:
            self.close()
            raise OSError(f"{type(exc).__name__}: {exc}") from None
        except BaseException:
            self.close()  # a timeout mid-answer: the connection is out of step
            raise

    @property
    def open(self) -> bool:
        return self._writer is not None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


@dataclass
class Fleet:
    """The two replicas' addresses, and the run's figures."""

    addresses: list[tuple[str, int]]
    stats: Stats

    def caller(self, prefer: int) -> Caller:
        return Caller(self, prefer)


@dataclass
class Caller:
    """One agent or user: a connection of its own to its preferred replica, moved to the other
    once that one refuses a new connection (it is gone: SIGKILLed), as behind a load balancer."""

    fleet: Fleet
    prefer: int
    conns: dict[int, Http1] = field(default_factory=dict)
    gone: set[int] = field(default_factory=set)

    async def call(
        self, endpoint: str, method: str, path: str, token: str, body: Any = None
    ) -> Any:
        stats = self.fleet.stats
        order = [i for i in (self.prefer, 1 - self.prefer) if i not in self.gone] or [self.prefer]
        data = None if body is None else json.dumps(body).encode()
        last = ""
        for index in order:
            for again in (False, True):  # a kept-alive connection that broke: once more, afresh
                conn = self.conns.get(index)
                if conn is None:
                    conn = self.conns[index] = Http1(*self.fleet.addresses[index])
                reused = conn.open
                started = time.monotonic()
                try:
                    status, answer = await conn.request(method, path, token, data)
                except TimeoutError:
                    stats.fail(endpoint, f"no answer in {HTTP_TIMEOUT_S:.0f} s")
                    return FAILED  # slow, not gone: an error, not a reason to move
                except OSError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    if reused and not again:
                        continue
                    # A fresh connection refused (nothing listens) or reset (the kernel's backlog
                    # of a process just killed): the replica is gone; the other one is asked.
                    if "Refused" in last:
                        self.gone.add(index)
                    stats.failovers += 1
                    break
                if status >= 300:
                    stats.fail(endpoint, f"HTTP {status} {answer[:160]!r}")
                    return FAILED
                stats.ok(endpoint, started, time.monotonic() - started)
                return json.loads(answer) if answer else None
        stats.fail(endpoint, last)
        return FAILED

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


FAILED = object()  # what Fleet.call returns for a call that was not answered with a 2xx


async def _agent(
    fleet: Fleet, i: int, job_id: str, token: str, until: float, args: argparse.Namespace
) -> None:
    from spothop.wire.contract import Heartbeat, Registration
    from spothop.wire.events import Probe

    instance = f"bench-{i:04d}"
    caller = fleet.caller(i % 2)
    stamp = {"instance_id": instance, "provider": "aws-sim", "job_id": job_id, "worker_id": "w0"}
    event_every_s = args.event_every_s
    await asyncio.sleep(random.uniform(0, args.ramp_s))  # agents boot over the ramp, not at once
    await caller.call(
        "register",
        "POST",
        "/v1/agents/register",
        token,
        Registration(**stamp, protocol="aws").to_dict(),
    )
    next_events = time.monotonic() + random.uniform(0, event_every_s)
    while time.monotonic() < until:
        beat_at = time.monotonic()
        beat = Heartbeat(
            instance, "w0", time.time(), "running", 4242, 0, None, False, job_id, "aws-sim"
        )
        await caller.call(
            "heartbeat", "POST", f"/v1/agents/{instance}/heartbeat", token, beat.to_dict()
        )
        if time.monotonic() >= next_events:
            next_events += event_every_s
            events = [Probe(**stamp, ran=False, reason="bench").to_dict() for _ in range(2)]
            fleet.stats.sent_events += len(events)
            answer = await caller.call(
                "events",
                "POST",
                f"/v1/agents/{instance}/events",
                token,
                {"events": events},
            )
            if answer is not FAILED:  # a 2xx: the server says every one is stored
                fleet.stats.acked_events.update(e["event_id"] for e in events)
        await asyncio.sleep(max(0.0, beat_at + 1.0 - time.monotonic()))
    caller.close()


async def _user(
    fleet: Fleet, i: int, job_ids: list[str], token: str, until: float, every_s: float
) -> None:
    caller = fleet.caller(i % 2)
    await asyncio.sleep(random.uniform(0, every_s))
    turn = 0
    while time.monotonic() < until:
        at = time.monotonic()
        job = random.choice(job_ids)
        if turn % 3 == 0:
            await caller.call("jobs list", "GET", "/v1/jobs", token)
        elif turn % 3 == 1:
            await caller.call("job status", "GET", f"/v1/jobs/{job}", token)
        else:
            await caller.call("job report", "GET", f"/v1/jobs/{job}/report", token)
        turn += 1
        await asyncio.sleep(max(0.0, at + every_s - time.monotonic()))
    caller.close()


async def _load(
    replicas: list[Replica],
    agents: list[tuple[str, str]],
    user_token: str,
    job_ids: list[str],
    args: argparse.Namespace,
    on_kill: Any,
) -> tuple[Stats, float, float]:
    """Run the load for ``args.seconds``; ``on_kill()`` at ``args.kill_at``. Stats, start, kill time."""
    stats = Stats()
    fleet = Fleet([("127.0.0.1", int(r.url.rsplit(":", 1)[1])) for r in replicas], stats)
    start = time.monotonic()
    until = start + args.seconds
    tasks = [
        asyncio.create_task(_agent(fleet, i, job, token, until, args))
        for i, (job, token) in enumerate(agents)
    ]
    tasks += [
        asyncio.create_task(_user(fleet, i, job_ids, user_token, until, args.user_every_s))
        for i in range(args.users)
    ]
    tasks.append(asyncio.create_task(_watch_lag(stats, until)))
    killed_at = float("nan")
    if args.kill_at < 1:
        await asyncio.sleep(args.seconds * args.kill_at)
        killed_at = time.monotonic()
        await asyncio.to_thread(on_kill)
    await asyncio.gather(*tasks)
    return stats, start, killed_at


async def _watch_lag(stats: Stats, until: float, every_s: float = 0.05) -> None:
    while time.monotonic() < until:
        at = time.monotonic()
        await asyncio.sleep(every_s)
        stats.loop_lag.append((at, time.monotonic() - at - every_s))


# -- figures -----------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _windows(start: float, ramp_s: float, killed_at: float) -> list[tuple[str, float, float]]:
    """The run's windows: the agents' boot ramp, the steady load, and after the kill."""
    end = killed_at if killed_at == killed_at else float("inf")  # NaN: no kill
    windows = [("ramp", start, start + ramp_s), ("steady", start + ramp_s, end)]
    return windows + ([("after kill", killed_at, float("inf"))] if end < float("inf") else [])


def _table(stats: Stats, start: float, killed_at: float, args: argparse.Namespace) -> Table:
    seconds = args.seconds
    out = Table(title=f"spothop server under load: {seconds:.0f} s, 2 replicas")
    for name in ("endpoint", "window", "requests", "req/s", "p50 ms", "p99 ms"):
        out.add_column(name, justify="left" if name in ("endpoint", "window") else "right")
    out.add_column("errors (whole run)", justify="right")
    windows = _windows(start, args.ramp_s, killed_at)
    for endpoint in sorted(stats.latencies):
        for label, lo, hi in windows:
            got = [s for t, s in stats.latencies[endpoint] if lo <= t < hi]
            span = (min(hi, start + seconds) - lo) or 1.0
            out.add_row(
                endpoint,
                label,
                str(len(got)),
                f"{len(got) / span:.1f}",
                f"{1000 * _pct(got, 0.50):.1f}",
                f"{1000 * _pct(got, 0.99):.1f}",
                str(stats.errors.get(endpoint, 0)) if label == "ramp" else "",
            )
    return out


def _stored_events(db_url: str, ids: set[str]) -> int:
    from sqlalchemy import select

    from spothop.db import make_engine
    from spothop.state.agent_tables import agent_events

    engine = make_engine(db_url)
    found = 0
    ordered = sorted(ids)
    with engine.connect() as conn:
        for k in range(0, len(ordered), 1000):
            chunk = ordered[k : k + 1000]
            found += len(
                conn.execute(
                    select(agent_events.c.event_id).where(agent_events.c.event_id.in_(chunk))
                ).all()
            )
    engine.dispose()
    return found


def _owners(db_url: str, job_ids: list[str]) -> dict[str, str | None]:
    from sqlalchemy import select

    from spothop.db import make_engine
    from spothop.state.job_tables import jobs

    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(jobs.c.job_id, jobs.c.lease_owner).where(jobs.c.job_id.in_(job_ids))
        ).all()
    engine.dispose()
    return {str(j): (None if o is None else str(o)) for j, o in rows}


def _leases(db_url: str) -> list[tuple[Any, ...]]:
    from sqlalchemy import select

    from spothop.db import make_engine
    from spothop.state.job_tables import jobs

    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(jobs.c.job_id, jobs.c.state, jobs.c.lease_owner, jobs.c.lease_expires_unix_s)
        ).all()
    engine.dispose()
    return [(*r[:3], None if r[3] is None else round(r[3] - time.time(), 1)) for r in rows]


def _real_agents_heard(db_url: str, job_ids: list[str], since: float) -> tuple[int, int]:
    """How many of the jobs' own agents (not the simulated ones) beat after ``since``; of how many."""
    from sqlalchemy import select

    from spothop.db import make_engine
    from spothop.state.agent_tables import agent_heartbeats as t

    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(t.c.instance_id, t.c.time_unix_s).where(
                t.c.job_id.in_(job_ids), ~t.c.instance_id.startswith("bench-")
            )
        ).all()
    engine.dispose()
    return sum(1 for r in rows if r.time_unix_s > since), len(rows)


def _states(url: str, token: str, job_ids: list[str]) -> dict[str, str]:
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    return {
        j: httpx.get(f"{url}/v1/jobs/{j}", headers=headers, timeout=HTTP_TIMEOUT_S).json()["state"]
        for j in job_ids
    }


def _wait(what: str, deadline_s: float, probe: Any, interval_s: float = 0.2) -> Any:
    until = time.monotonic() + deadline_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > until:
            raise SystemExit(f"gave up waiting for {what} after {deadline_s:.0f} s")
        time.sleep(interval_s)


# -- the run -----------------------------------------------------------------------------


def _launch_jobs(replicas: list[Replica], token: str, count: int, flag: Path) -> list[str]:
    """``count`` jobs whose workers run until ``flag`` exists (the bench makes it after the load)."""
    import httpx

    ids = []
    for k in range(count):
        run = f"until [ -e '{flag}' ]; do sleep 0.2; done; echo done"
        spec = yaml.safe_dump({"name": f"bench-{k}", "run": run})
        answer = httpx.post(
            f"{replicas[k % 2].url}/v1/jobs",
            json={"spec": spec, "filename": f"bench-{k}.yaml"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=HTTP_TIMEOUT_S * 3,
        )
        if answer.status_code != 201:
            raise SystemExit(f"launch failed: HTTP {answer.status_code} {answer.text[:300]}")
        ids.append(str(answer.json()["job_id"]))
    return ids


def run(args: argparse.Namespace) -> int:
    from spothop.state.tokens import TokenStore

    problem = _check_services()
    if problem:
        console.print(f"error: {problem}")
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="spothop-bench-server-") as tmp_name,
        _schema() as db_url,
    ):
        tmp = Path(tmp_name)
        home = tmp / "home"
        home.mkdir()
        world = tmp / "world.yaml"
        world.write_text(yaml.safe_dump(WORLD))
        proxy = FailoverProxy()
        env = {
            **os.environ,
            "SPOTHOP_HOME": str(home),
            "SPOTHOP_WORLD": str(world),
            "SPOTHOP_SERVER_URL": proxy.url,  # what the replicas tell their agents to call
        }
        os.environ.update({"SPOTHOP_HOME": str(home), "SPOTHOP_WORLD": str(world)})
        replicas = [
            _start_replica(n, db_url, args.lease_s, tmp, env, args.profile)
            for n in ("bench-a", "bench-b")
        ]
        try:
            return _measure(args, db_url, replicas, TokenStore(db_url), proxy)
        except SystemExit:
            console.print(f"leases: {_leases(db_url)}")
            for replica in replicas:
                console.print(f"── {replica.name}'s log, the end ──")
                console.print(replica.log()[-4000:], markup=False, highlight=False)
            raise
        finally:
            for replica in replicas:
                _stop(replica)
            _end_instances(world)


def _measure(
    args: argparse.Namespace,
    db_url: str,
    replicas: list[Replica],
    tokens: Any,
    proxy: FailoverProxy,
) -> int:
    for replica in replicas:
        _wait_ready(replica)
        proxy.upstreams.append(("127.0.0.1", int(replica.url.rsplit(":", 1)[1])))
    _user_record, user_token = tokens.create_user("bench", "bench")
    flag = Path(os.environ["SPOTHOP_HOME"]) / "bench-done"
    job_ids = _launch_jobs(replicas, user_token, args.jobs, flag)
    owners = _wait(
        "every job leased and running",
        120,
        lambda: (
            (o := _owners(db_url, job_ids))
            and all(o.values())
            and set(_states(replicas[1].url, user_token, job_ids).values()) == {"running"}
            and o
        ),
    )
    console.print(f"jobs {', '.join(job_ids)} held by {sorted(set(owners.values()))}")
    minted = time.monotonic()
    owned = [job_ids[i % len(job_ids)] for i in range(args.agents)]
    with ThreadPoolExecutor(4) as pool:  # argon2 hashing releases the GIL
        issued = pool.map(
            lambda i: tokens.issue_agent_token(owned[i], f"bench-{i:04d}", project="bench"),
            range(args.agents),
        )
        agents = list(zip(owned, issued, strict=True))
    console.print(f"{len(agents)} agent tokens issued in {time.monotonic() - minted:.1f} s")
    # The replica holding more of the jobs is killed (the claim spreads them, not evenly).
    held_by = [sum(o == r.name for o in owners.values()) for r in replicas]
    victim, other = (replicas[0], replicas[1]) if held_by[0] >= held_by[1] else replicas[::-1]
    kill: dict[str, Any] = {}
    survivor = other.name

    def on_kill() -> None:
        """SIGKILL the victim, then watch (beside the load) for the survivor to hold its jobs."""
        before = _owners(db_url, job_ids)
        cpu["kill"] = _cpu(replicas)
        kill["held"] = held = sorted(j for j, o in before.items() if o == victim.name)
        kill["t"] = time.monotonic()
        kill["wall"] = time.time()
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(10)

        def watch() -> None:
            until = kill["t"] + 3 * args.lease_s + 30
            while time.monotonic() < until:
                if all(o == survivor for o in _owners(db_url, held).values()):
                    kill["taken"] = time.monotonic()
                    return
                time.sleep(0.05)

        kill["watcher"] = threading.Thread(target=watch, daemon=True)
        kill["watcher"].start()

    cpu: dict[str, Any] = {"start": _cpu(replicas)}
    stats, start, killed_at = _run_loop(_load(replicas, agents, user_token, job_ids, args, on_kill))
    cpu["end"] = _cpu(replicas)
    stats.server_errors = _first_traceback(replicas)
    held = kill.get("held", [])
    heard = _real_agents_heard(db_url, job_ids, kill.get("wall", 0.0))
    if "watcher" in kill:
        kill["watcher"].join()
    takeover_s = kill["taken"] - kill["t"] if "taken" in kill else float("inf")
    if not held:
        takeover_s = float("nan")
    costs = _probe_costs(other, user_token, job_ids)
    flag.touch()  # the workers may finish now
    finals = _wait(
        "every job ending",
        args.lease_s * 4 + 180,
        lambda: (
            (s := _states(other.url, user_token, job_ids))
            and all(v in ("succeeded", "failed", "cancelled") for v in s.values())
            and s
        ),
        1.0,
    )
    stored = _stored_events(db_url, stats.acked_events)
    code = _print(args, stats, start, killed_at, held, takeover_s, finals, stored, heard, cpu)
    console.print(
        "the survivor's API CPU ms per call, each endpoint called alone after the load: "
        + ", ".join(f"{name} {ms:.1f}" for name, ms in costs.items())
    )
    return code


PROBE_CALLS = 20


def _probe_costs(replica: Replica, token: str, job_ids: list[str]) -> dict[str, float]:
    """What one user call costs the replica's API process: ``PROBE_CALLS`` of each, one at a time
    on one connection, its CPU read before and after (nothing else calls it by then)."""
    import httpx

    paths = {
        "jobs list": "/v1/jobs",
        "job status": f"/v1/jobs/{job_ids[0]}",
        "job report": f"/v1/jobs/{job_ids[0]}/report",
    }
    out = {}
    with httpx.Client(
        base_url=replica.url, headers={"Authorization": f"Bearer {token}"}, timeout=HTTP_TIMEOUT_S
    ) as client:
        for name, path in paths.items():
            client.get(path)  # the token verified, the path warm
            before = _proc_cpu_s(replica.process.pid)
            for _ in range(PROBE_CALLS):
                client.get(path).raise_for_status()
            out[name] = 1000 * (_proc_cpu_s(replica.process.pid) - before) / PROBE_CALLS
    return out


def _print(
    args: argparse.Namespace,
    stats: Stats,
    start: float,
    killed_at: float,
    held: list[str],
    takeover_s: float,
    finals: dict[str, str],
    stored: int,
    heard: tuple[int, int],
    cpu: dict[str, Any],
) -> int:
    console.print(_table(stats, start, killed_at, args))
    _, lo, hi = _windows(start, args.ramp_s, killed_at)[1]
    before = [s for t, s in stats.latencies["heartbeat"] if lo <= t < hi]
    p99 = _pct(before, 0.99)
    lost = len(stats.acked_events) - stored
    errors = sum(stats.errors.values())
    summary = Table(title="the issue's figures")
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    summary.add_column("target", justify="right")
    total = sum(len(v) for v in stats.latencies.values())
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    summary.add_row(
        "machine: cores, load average (1, 5, 15 min) at the end", f"{os.cpu_count()}; {load}", ""
    )
    summary.add_row("requests/s (all endpoints)", f"{total / args.seconds:.0f}", "")
    cut = cpu.get("kill", cpu["end"])
    answered = sum(1 for v in stats.latencies.values() for t, _ in v if t < killed_at) or total
    served = sum(cut["replicas"]) - sum(cpu["start"]["replicas"])
    summary.add_row(
        "replicas' API CPU ms per request (both, before the kill)",
        f"{1000 * served / max(1, answered):.2f}",
        "",
    )
    controllers = sum(cut["controllers"]) - sum(cpu["start"]["controllers"])
    window_s = max(1e-9, cut["at"] - cpu["start"]["at"])
    summary.add_row(
        "replicas' controller processes, cores (both, before the kill)",
        f"{controllers / window_s:.2f}",
        "",
    )
    client = cpu["end"]["bench"] - cpu["start"]["bench"]
    summary.add_row(
        "the bench's own CPU ms per request (agents, users, proxy)",
        f"{1000 * client / max(1, total):.2f}",
        "",
    )
    busy = _busy(cpu["start"]["machine"], cpu["end"]["machine"])
    summary.add_row("the machine's CPU busy during the load", f"{100 * busy:.0f}%", "")
    summary.add_row(
        "heartbeat p50 / p99 ms, steady (after the ramp, before the kill)",
        f"{1000 * _pct(before, 0.5):.1f} / {1000 * p99:.1f}",
        "",
    )
    summary.add_row("heartbeat p99 / 100 ms (steady)", f"{p99 / TARGET_P99_S:.2f}", "≤ 1")
    lag = [s for t, s in stats.loop_lag if lo <= t < hi]
    summary.add_row(
        "the bench's own event-loop lag p50 / p99 ms, steady (in every latency above)",
        f"{1000 * _pct(lag, 0.5):.1f} / {1000 * _pct(lag, 0.99):.1f}",
        "",
    )
    summary.add_row("errors (every endpoint, whole run)", str(errors), "0")
    summary.add_row("calls moved to the other replica", str(stats.failovers), "")
    summary.add_row(
        "events sent / acknowledged / stored",
        f"{stats.sent_events} / {len(stats.acked_events)} / {stored}",
        "",
    )
    summary.add_row("acknowledged events lost", str(lost), "0")
    summary.add_row(
        f"jobs of the killed replica ({len(held)}) held by the other after",
        f"{takeover_s:.1f} s",
        f"≤ {args.lease_s:g} s (one lease; bound {args.lease_s + TAKEOVER_SLACK_S:.1f})",
    )
    summary.add_row(
        "the jobs' own agents heard from after the kill (through the proxy)",
        f"{heard[0]}/{heard[1]}",
        "all",
    )
    summary.add_row(
        "jobs succeeded", f"{sum(v == 'succeeded' for v in finals.values())}/{len(finals)}", "all"
    )
    console.print(summary)
    for sample in stats.error_samples:
        console.print(f"  error: {sample}")
    if stats.server_errors:
        console.print(stats.server_errors, markup=False, highlight=False)
    bad = (
        lost
        or any(v != "succeeded" for v in finals.values())
        or (held and not takeover_s <= args.lease_s + TAKEOVER_SLACK_S)
    )
    return 1 if bad else 0


def _first_traceback(replicas: list[Replica]) -> str:
    for replica in replicas:
        log = replica.log()
        at = log.find("Traceback (most recent call last)")
        if at >= 0:
            return f"── {replica.name}'s first traceback ──\n" + log[max(0, at - 300) : at + 4000]
    return ""


def _run_loop(coroutine: Any) -> Any:
    """The load on uvloop when it is there (uvicorn's standard extra brings it): less client CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def _proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # gone (the killed replica): its last reading stands
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu(replicas: list[Replica]) -> dict[str, Any]:
    """CPU seconds so far: each replica's API process and its controller process, this process's,
    and the machine's (busy, all)."""
    from spothop.server.controller import controller_pids

    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return {
        "replicas": [_proc_cpu_s(r.process.pid) for r in replicas],
        "controllers": [
            sum(_proc_cpu_s(c) for c in controller_pids(r.process.pid)) for r in replicas
        ],
        "bench": time.process_time(),
        "machine": (sum(fields) - idle, sum(fields)),
        "at": time.monotonic(),
    }


def _busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    return (after[0] - before[0]) / max(1, after[1] - before[1])


def _end_instances(world: Path) -> None:
    """Every instance the replicas launched is ended (a SIGKILLed replica leaves them)."""
    from spothop.providers.local.provider import LocalProvider
    from spothop.providers.local.world import load_world

    loaded = load_world(world)
    for name in loaded.cloud_names:
        provider = LocalProvider(name, world=loaded, world_path=world)
        for instance in provider.list_instances():
            with contextlib.suppress(Exception):
                provider.terminate(instance.instance_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="length of the load (default 60)"
    )
    parser.add_argument("--agents", type=int, default=500)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=4, help="real jobs the replicas run")
    parser.add_argument("--lease-s", type=float, default=10.0, help="the replicas' job lease")
    parser.add_argument(
        "--event-every-s", type=float, default=5.0, help="each agent's event batches"
    )
    parser.add_argument("--user-every-s", type=float, default=2.0, help="each user's requests")
    parser.add_argument(
        "--kill-at", type=float, default=0.5, help="fraction of the run (1: no kill)"
    )
    parser.add_argument(
        "--ramp-s",
        type=float,
        default=10.0,
        help="the agents start (register: a token verify each) spread over this many seconds",
    )
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="run the replicas under py-spy record: PREFIX-bench-a.txt, … (needs --kill-at 1)",
    )
    args = parser.parse_args(argv)
    if args.profile and args.kill_at < 1:
        parser.error("--profile needs --kill-at 1 (a SIGKILL would end py-spy, not the replica)")
    if args.profile and shutil.which("py-spy") is None:
        parser.error("--profile needs py-spy on PATH: .venv/bin/pip install py-spy")
    if not 0 < args.kill_at <= 1 or args.seconds <= 0 or args.agents < 1 or args.jobs < 1:
        parser.error("--kill-at in (0, 1], --seconds > 0, --agents and --jobs ≥ 1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
