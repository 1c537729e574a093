"""What one heartbeat costs the server: one replica, N agents beating as fast as it answers.

``.venv/bin/python -P bench/heartbeats.py [--agents 50] [--seconds 20]``

Loopback only, bounded (``--seconds``). One ``spothop server run --no-controller``
on a fresh PostgreSQL schema (``$SPOTHOP_TEST_POSTGRES_URL``, dropped at the
end); ``--agents`` agent tokens, each verified once before the run (so the run
is the steady state: the token's row read, the verify cached, the beat
upserted); then each agent, a thread with one keep-alive connection, sends
heartbeats back to back. Prints heartbeats/s, p50/p99 latency, errors, and
the server process's CPU per heartbeat (``/proc``), which bounds what a core
can serve whatever the load of the machine. ``bench/server.py`` is the whole
picture (two replicas, users, events, a kill); this is the hot path alone.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

POSTGRES_URL = os.environ.get(
    "SPOTHOP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
START_S = 90.0
HTTP_TIMEOUT_S = 30.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def beat(port: int, instance: str, token: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    try:
        body = json.dumps({"instance_id": instance, "time_unix_s": time.time(), "state": "running"})
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request("POST", f"/v1/agents/{instance}/heartbeat", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--profile",
        metavar="SVG",
        help="run the server under py-spy record (collapsed stacks written here)",
    )
    args = parser.parse_args()
    import psycopg

    from spothop.state.tokens import TokenStore

    schema = f"spothop_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in POSTGRES_URL else "?"
    url = f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"
    home = Path(tempfile.mkdtemp(prefix="spothop-bench-"))
    log_path = home / "server.log"
    command = [sys.executable, "-m", "spothop.cli.main", "server", "run", "--port", "0"]
    command += ["--db", url, "--no-controller"]
    if args.profile:
        command = ["py-spy", "record", "-r", "200", "-f", "raw", "-o", args.profile, "--", *command]
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SPOTHOP_HOME": str(home)},
        )
    try:
        deadline = time.monotonic() + START_S
        while not (match := RUNNING.search(log_path.read_text(errors="replace"))):
            if server.poll() is not None or time.monotonic() > deadline:
                print(log_path.read_text(errors="replace"))
                return 1
            time.sleep(0.1)
        port = int(match.group(1))
        tokens = TokenStore(url)
        agents = [
            (f"i-{n}", tokens.issue_agent_token("j-bench", f"i-{n}")) for n in range(args.agents)
        ]
        assert all(
            beat(port, i, t) == 200 for i, t in agents
        )  # verified once: the cache holds them
        latencies: list[float] = []
        errors = [0]
        lock = threading.Lock()
        stop_at = time.monotonic() + args.seconds

        def agent(instance: str, token: str) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
            body = json.dumps(
                {"instance_id": instance, "time_unix_s": time.time(), "state": "running"}
            )
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            mine: list[float] = []
            failed = 0
            while time.monotonic() < stop_at:
                start = time.perf_counter()
                conn.request("POST", f"/v1/agents/{instance}/heartbeat", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                mine.append(time.perf_counter() - start)
                failed += response.status != 200
            conn.close()
            with lock:
                latencies.extend(mine)
                errors[0] += failed

        cpu_before = cpu_s(server.pid)
        started = time.monotonic()
        threads = [threading.Thread(target=agent, args=a) for a in agents]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        cpu_used = cpu_s(server.pid) - cpu_before
        latencies.sort()
        n = len(latencies)
        print(f"one replica, {args.agents} keep-alive agents, {args.seconds:.0f} s, PostgreSQL")
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        print(f"heartbeats/s            {n / elapsed:10.0f}")
        print(
            f"p50 / p99 ms            {latencies[n // 2] * 1000:10.1f} / {latencies[int(n * 0.99)] * 1000:.1f}"
        )
        print(f"errors                  {errors[0]:10d}")
        print(
            f"server CPU ms/heartbeat {cpu_used / n * 1000:10.2f}  (one core: ~{n / cpu_used:.0f}/s)"
        )
        return 0 if errors[0] == 0 else 1
    finally:
        server.send_signal(signal.SIGINT if args.profile else signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    sys.exit(main())
