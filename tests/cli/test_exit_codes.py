"""Exit codes mean something: each failure kind has its code, the same for every command (docs/cli.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spothop.errors as errors
from spothop.agent.errors import NoticeEndpointError
from spothop.checkpoint.errors import CheckpointCorrupt, NoValidCheckpoint
from spothop.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_UNAVAILABLE,
    SpothopError,
    exit_for_counts,
)
from spothop.market.errors import TraceError
from spothop.queue.errors import (
    BatchSpecError,
    LeaseLost,
    QueueUnavailableError,
    UnknownJobError,
    UnknownLeaseError,
)
from spothop.wire.errors import AgentConfigError

DOCUMENTED = {0, 1, 2, 3, 4, 5, 75, 130}


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.ConfigError("x"), EXIT_BAD_INPUT),
        (errors.ValueOutOfRange("speed", float("nan"), "must be finite"), EXIT_BAD_INPUT),
        (errors.CatalogRowError("f.csv", 3, "Price", "bad"), EXIT_BAD_INPUT),
        (errors.TopologyParseError("x"), EXIT_BAD_INPUT),
        (TraceError("t.csv", "no rows"), EXIT_BAD_INPUT),
        (BatchSpecError("x"), EXIT_BAD_INPUT),
        (AgentConfigError("x"), EXIT_BAD_INPUT),
        (errors.AuthFailed("aws", "AuthFailure", "expired"), EXIT_BAD_INPUT),
        (errors.InvalidRequest("aws", "InvalidParameterValue", "no such type"), EXIT_BAD_INPUT),
        (errors.NotFoundError("x"), EXIT_NOT_FOUND),
        (UnknownJobError("j"), EXIT_NOT_FOUND),
        (UnknownLeaseError("j", "s"), EXIT_NOT_FOUND),
        (errors.InstanceNotFound("aws", "InvalidInstanceID.NotFound", "i-0"), EXIT_NOT_FOUND),
        (QueueUnavailableError("x"), EXIT_UNAVAILABLE),
        (NoticeEndpointError("x"), EXIT_UNAVAILABLE),
        (
            errors.CapacityUnavailable("aws", "InsufficientInstanceCapacity", "none"),
            EXIT_UNAVAILABLE,
        ),
        (errors.RateLimited("aws", "RequestLimitExceeded", "slow down"), EXIT_UNAVAILABLE),
        (errors.QuotaExceeded("aws", "VcpuLimitExceeded", "limit"), EXIT_FAILED),
        (errors.PriceTooLow("aws", "SpotMaxPriceTooLow", "bid"), EXIT_FAILED),
        (LeaseLost("j", "s", 1, "expired"), EXIT_FAILED),
        (CheckpointCorrupt("ckpt-1", "checksum mismatch"), EXIT_FAILED),
    ],
)
def test_each_error_kind_has_its_exit_code(error: SpothopError, code: int) -> None:
    assert error.exit_code == code


def test_not_found_errors_are_caught_as_not_found() -> None:
    assert isinstance(UnknownJobError("j"), errors.NotFoundError)
    assert isinstance(errors.InstanceNotFound("aws", "c", "m"), errors.NotFoundError)
    assert isinstance(
        UnknownJobError("j"), errors.ConfigError
    )  # callers that caught it as bad input still do


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_every_error_class_exits_with_a_documented_code() -> None:
    # The modules that define errors are imported above, so the tree is whole.
    assert NoValidCheckpoint.exit_code in DOCUMENTED
    for cls in _subclasses(SpothopError):
        assert cls.exit_code in DOCUMENTED, cls


@pytest.mark.parametrize(
    ("done", "failed", "code"),
    [
        (5, 0, EXIT_OK),
        (0, 0, EXIT_OK),
        (4, 1, EXIT_PARTIAL),
        (0, 3, EXIT_FAILED),
    ],
)
def test_counts_give_ok_partial_or_failed(done: int, failed: int, code: int) -> None:
    assert exit_for_counts(done, failed) == code


def test_an_unreachable_database_escaping_a_command_is_unavailable(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    import spothop.cli.queue as queue_cli

    def unreachable(*_: object) -> None:
        raise OperationalError(
            "SELECT 1", {}, Exception('connection to server at "db" failed: Connection refused')
        )

    monkeypatch.setattr(queue_cli, "_open", unreachable)
    result = cli("queue", "stats", "job")
    assert result.code == EXIT_UNAVAILABLE
    assert (
        result.err.startswith("error: the database did not answer")
        and "Connection refused" in result.err
    )
    assert "Traceback" not in result.err and "SELECT 1" not in result.err


def test_an_unreachable_redis_escaping_a_command_is_unavailable(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    import spothop.cli.queue as queue_cli

    def unreachable(*_: object) -> None:
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(queue_cli, "_open", unreachable)
    result = cli("queue", "stats", "job")
    assert result.code == EXIT_UNAVAILABLE and result.err.startswith("error: Redis did not answer")
    assert "Traceback" not in result.err


def test_a_bug_keeps_its_traceback(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import spothop.cli.queue as queue_cli

    def broken(*_: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(queue_cli, "_open", broken)
    with pytest.raises(ZeroDivisionError):
        cli("queue", "stats", "job")


def test_usage_errors_stay_2(cli: Callable[..., Any]) -> None:
    assert cli("offers", "--no-such-flag").code == EXIT_BAD_INPUT
    assert cli("queue", "stats").code == EXIT_BAD_INPUT  # a missing argument


def test_one_process_runs_command_after_command_each_parsed_afresh(
    cli: Callable[..., Any],
) -> None:
    # main builds the command tree once per process (cli/main.py); nothing of a call's
    # arguments, options or errors may reach the next.
    first = cli("gpus", "H100", "--json")
    assert first.code == EXIT_OK, first.err
    assert cli("gpus", "--no-such-flag").code == EXIT_BAD_INPUT
    every = cli("gpus", "--json")
    assert every.code == EXIT_OK and len(every.json()) > len(first.json())
    again = cli("gpus", "H100", "--json")
    assert (again.code, again.out) == (first.code, first.out)


# -- queue work: the job's outcome ------------------------------------------------

FAIL_ODD = (
    "import json, sys\n"
    "shard = json.load(sys.stdin)\n"
    "sys.exit(1 if shard['payload']['uri'].endswith(('1.txt', '3.txt')) else 0)\n"
)


def _job(folder: Path, name: str, script: str, files: int) -> Path:
    (folder / "work.py").write_text(script)
    inputs = [str(folder / f"in{i}.txt") for i in range(files)]
    spec = folder / f"{name}.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": name,
                "input": {"files": inputs},
                "command": [sys.executable, str(folder / "work.py")],
                "output": str(folder / "out"),
                "queue": f"sqlite:///{folder / 'q.db'}",
                "max_attempts": 1,
            }
        )
    )
    return spec


@pytest.mark.parametrize(
    ("script", "code", "dead"),
    [
        ("import sys; sys.stdout.write('ok')\n", EXIT_OK, 0),
        (FAIL_ODD, EXIT_PARTIAL, 2),
        ("import sys; sys.exit(3)\n", EXIT_FAILED, 4),
    ],
)
def test_queue_work_exits_by_the_jobs_outcome(
    cli: Callable[..., Any], tmp_path: Path, script: str, code: int, dead: int
) -> None:
    spec = _job(tmp_path, "outcome", script, files=4)
    assert cli("queue", "submit", str(spec)).code == EXIT_OK
    result = cli("queue", "work", str(spec), "--json")
    assert result.code == code, result.err
    assert result.json()["dead"] == dead and result.json()["exit_code"] == code
    if dead:
        text = cli("queue", "work", str(spec))
        assert (
            text.code == code
            and f"{dead} of 4 shard(s) dead" in text.err
            and "queue dead outcome" in text.err
        )


def test_an_import_with_refused_rows_is_partial(
    cli: Callable[..., Any], tmp_path: Path, spothop_home: Path
) -> None:
    good = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\n"
    good += "gpu_1x_a10,A10,1,30,200,0.75,us-east-1\n"
    partial = tmp_path / "lambda" / "vms.csv"
    partial.parent.mkdir()
    partial.write_text(good + "gpu_1x_a100,A100,1,30,200,not-a-price,us-east-1\n")
    assert cli("catalog", "import", "--dry-run", str(partial)).code == EXIT_PARTIAL
    refused = tmp_path / "none" / "vms.csv"
    refused.parent.mkdir()
    refused.write_text(good.splitlines()[0] + "\ngpu_1x_a100,A100,1,30,200,not-a-price,us-east-1\n")
    assert cli("catalog", "import", "--dry-run", "--json", str(refused)).code == EXIT_FAILED
    cpu_only = tmp_path / "cpu" / "vms.csv"
    cpu_only.parent.mkdir()
    cpu_only.write_text(good + "cpu_4x_general,,,4,16,0.1,us-east-1\n")
    result = cli("catalog", "import", "--dry-run", "--json", str(cpu_only))
    assert result.code == EXIT_OK  # a CPU-only type is out of scope, not a failure
    assert result.json()[0]["refused"][0]["out_of_scope"] is True
