"""``spothop queue stats`` and ``spothop queue dead`` on the embedded SQLite queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.queue import QueuePolicy, Shard
from spothop.queue.sql_backend import SqlQueue


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with SqlQueue("job-1", url) as queue:
        queue.enqueue([Shard(f"s{i}", i) for i in range(3)], QueuePolicy(max_attempts=1))
        leases = queue.claim("w", n=2, lease_s=30)
        queue.complete(leases[0], "ref")
        queue.fail(leases[1], "disk full")
    return url


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_stats_json(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "queue", "stats", "job-1", "--url", url, "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["pending"], data["done"], data["dead"], data["failures"]) == (1, 1, 1, 1)


def test_stats_table(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, "queue", "stats", "job-1", "--url", url)
    assert code == 0 and "pending" in out and "job-1" in out


def test_dead_list_and_retry(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "queue", "dead", "job-1", "--url", url, "--json")
    assert code == 0 and [d["id"] for d in json.loads(out)] == ["s1"]
    assert json.loads(out)[0]["last_error"] == "disk full"
    code, out, _ = run(capsys, "queue", "dead", "job-1", "s1", "--retry", "--url", url, "--json")
    assert code == 0 and json.loads(out)["retried"] == 1
    with SqlQueue("job-1", url) as queue:
        assert queue.stats().dead == 0 and queue.stats().pending == 2


def test_unknown_job_and_shard_are_errors(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "queue", "stats", "nope", "--url", url)
    assert code == 3 and "unknown job 'nope'" in err  # not found
    code, _, err = run(capsys, "queue", "dead", "job-1", "zz", "--retry", "--url", url)
    assert code == 3 and "no shard 'zz'" in err
    code, _, err = run(capsys, "queue", "stats", "job-1", "--url", "mysql://x")
    assert code == 2 and "unsupported queue URL" in err
