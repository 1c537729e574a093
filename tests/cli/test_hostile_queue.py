"""Hostile input to ``spothop queue``: bad specs, names and URLs are one clear line with their exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spothop.errors import ConfigError, NotFoundError
from spothop.queue.errors import BatchSpecError, UnknownJobError
from spothop.queue.retry import RETRY_BUDGET_ENV
from tests.cli.hostile import Row, hostile_files, rows, run_row


def _spec(folder: Path, **change: object) -> str:
    body = {
        "name": "hostile",
        "input": {"files": [str(folder / "a.bin")]},
        "command": ["cat"],
        "output": str(folder / "out"),
        "queue": f"sqlite:///{folder / 'q.db'}",
        **change,
    }
    return json.dumps(body)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    valid = _spec(tmp_path)
    found = hostile_files(
        tmp_path / "in",
        ".yaml",
        valid=valid,
        truncated=valid[: len(valid) // 2],
        nan=_spec(tmp_path, lease_s=float("nan")).replace("NaN", ".nan"),
    )
    extra = {
        "inf_lease": _spec(tmp_path, lease_s=1e308 * 10).replace("Infinity", ".inf"),
        "huge_attempts": _spec(tmp_path, max_attempts=10**12),
        "markup_job": _spec(tmp_path, name="[red]job[/red]"),
        "zero_per_shard": _spec(
            tmp_path, input={"records": str(tmp_path / "r.jsonl"), "records_per_shard": 0}
        ),
    }
    for name, text in extra.items():
        (tmp_path / "in" / f"{name}.yaml").write_text(text)
    (tmp_path / "home-file").write_text("")
    return {
        **found,
        **{k: str(tmp_path / "in" / f"{k}.yaml") for k in extra},
        "home_file": str(tmp_path / "home-file"),
        "url": f"sqlite:///{tmp_path / 'q.db'}",
    }


TABLE = rows(
    Row("submit-missing", ["queue", "submit", "{missing}"], 3, NotFoundError, "missing.yaml"),
    Row("submit-empty", ["queue", "submit", "{empty}"], 2, BatchSpecError, "empty.yaml"),
    Row("submit-binary", ["queue", "submit", "{binary}"], 2, BatchSpecError, "binary.yaml"),
    Row(
        "submit-truncated", ["queue", "submit", "{truncated}"], 2, BatchSpecError, "truncated.yaml"
    ),
    Row("submit-folder", ["queue", "submit", "{dir}"], 2, BatchSpecError, "folder.yaml"),
    Row("submit-huge", ["queue", "submit", "{huge}"], 2, BatchSpecError, "huge.yaml"),
    Row("submit-nan-lease", ["queue", "submit", "{nan}"], 2, BatchSpecError, "lease_s"),
    Row("submit-inf-lease", ["queue", "submit", "{inf_lease}"], 2, BatchSpecError, "lease_s"),
    Row(
        "submit-huge-attempts",
        ["queue", "submit", "{huge_attempts}"],
        2,
        BatchSpecError,
        "max_attempts",
    ),
    Row(
        "submit-zero-per-shard",
        ["queue", "submit", "{zero_per_shard}"],
        2,
        BatchSpecError,
        "records_per_shard",
    ),
    Row("submit-markup-job-name", ["queue", "submit", "{markup_job}"], 2, BatchSpecError, "name"),
    Row("submit-unicode-file", ["queue", "submit", "{unicode}"], 0, None, "1 shard(s)"),
    Row("submit-markup-file", ["queue", "submit", "{markup}"], 0, None, "1 shard(s)"),
    Row(
        "stats-unknown-job",
        ["queue", "stats", "nobody", "--url", "{url}"],
        3,
        UnknownJobError,
        "nobody",
    ),
    Row("stats-markup-job", ["queue", "stats", "[/x]", "--url", "{url}"], 2, ConfigError, "[/x]"),
    Row(
        "stats-bad-url",
        ["queue", "stats", "job", "--url", "mysql://[red]x"],
        2,
        ConfigError,
        "mysql://[red]x",
    ),
    Row("work-missing", ["queue", "work", "{missing}"], 3, NotFoundError),
    Row(
        "dead-retry-unknown",
        ["queue", "dead", "hostile", "nope", "--retry", "--url", "{url}"],
        3,
        UnknownJobError,
    ),
    Row(
        "home-is-a-file",
        ["queue", "stats", "job"],
        2,
        ConfigError,
        "is a file",
        env={"SPOTHOP_HOME": "{home_file}"},
    ),
)


@pytest.mark.parametrize("row", TABLE)
def test_queue_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)


UNREACHABLE = ("redis://127.0.0.1:1/0", "postgresql://postgres@127.0.0.1:1/none")


def test_an_unreachable_queue_url_is_unavailable_in_a_real_process(tmp_path: Path) -> None:
    # Each process rides out its backend's absence for its whole retry budget before it says so:
    # half a second here (the default ~5 s of backoff is tests/queue/test_connection_loss.py's), and
    # both URLs' processes run at once (a home each).
    procs = {
        url: subprocess.Popen(
            [sys.executable, "-m", "spothop.cli.main", "queue", "stats", "job", "--url", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                "PATH": "/usr/bin:/bin",
                "SPOTHOP_HOME": str(tmp_path / str(n)),
                "COLUMNS": "200",
                RETRY_BUDGET_ENV: "0.5",
            },
        )
        for n, url in enumerate(UNREACHABLE)
    }
    try:
        done = {
            url: (proc.communicate(timeout=120), proc.returncode) for url, proc in procs.items()
        }
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for url, ((_, stderr), code) in done.items():
        assert code == 4, (url, stderr)
        assert "error:" in stderr and "unreachable" in stderr and "Traceback" not in stderr, (
            url,
            stderr,
        )
