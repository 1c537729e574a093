"""A real ``spothop server run`` process on a free loopback port, for the tests.

:class:`LiveServer` starts the CLI (uvicorn, the real app), reads the port
uvicorn reports from its log, and stops it with SIGTERM (SIGKILL after a
deadline). Its log file is kept, so a test can read what the server logged.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.waiting import scaled, wait_for

RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
START_S = 60.0  # the app imports FastAPI, SQLAlchemy, the job store and migrates the store


class LiveServer:
    def __init__(
        self,
        db_url: str,
        log_path: Path,
        *,
        queue_url: str | None = None,
        env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = ("--no-controller",),
    ) -> None:
        self.db_url = db_url
        self.queue_url = queue_url
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> LiveServer:
        args = [sys.executable, "-m", "spothop.cli.main", "server", "run", "--port", "0"]
        args += ["--db", self.db_url, *self.extra_args]
        if self.queue_url:
            args += ["--queue", self.queue_url]
        log = open(self.log_path, "wb")  # noqa: SIM115  (the child writes it; closed with the child)
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        port = wait_for(self._port, START_S, what="the server's 'Uvicorn running on' line")
        self.url = f"http://127.0.0.1:{port}"
        return self

    def _port(self) -> str | None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the server exited with {self.process.returncode}:\n{self.log()}")
        match = RUNNING.search(self.log())
        return match.group(1) if match else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(scaled(20))
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(scaled(10))

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def launch_body(self, token: str, spec: dict[str, Any], filename: str) -> dict[str, Any]:
        """The ``POST /v1/jobs`` body ``spothop launch --server`` sends for ``spec``: its
        ``workdir`` and local ``file_mounts`` packed here and uploaded first (the server reads
        no path of the client's)."""
        import yaml

        from spothop.cli.remote import ServerClient
        from spothop.cli.upload import upload_code
        from spothop.jobs.spec import load_job

        code = upload_code(ServerClient(self.url, token), load_job(spec), quiet=True)
        body = {"spec": yaml.safe_dump(spec), "filename": filename}
        return {**body, "code": code} if code else body

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """One request: (status, decoded JSON body or text, headers)."""
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=scaled(30)) as response:
                status, text, got = response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as exc:
            status, text, got = exc.code, exc.read(), dict(exc.headers)
        try:
            return status, json.loads(text), got
        except ValueError:
            return status, text.decode(errors="replace"), got
