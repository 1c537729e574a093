"""The job's secrets reach the worker's environment from the control plane, and nowhere else
(agent/job_secrets.py). The control plane is a fake that answers as the test scripts it."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.agent import EXIT_DONE, Agent, NoControlPlane
from spothop.agent.job_secrets import SECRETS_TRIES, fetch_secrets
from spothop.wire.contract import EXIT_WORKER_FAILED, SECRET_NAMES_ENV
from spothop.wire.errors import ControlPlaneError
from tests.agent.test_agent import _config

VALUE = "hf_the-value-9f3a1c"


class SecretPlane(NoControlPlane):
    """Gives ``given`` when asked; ``failures`` asks fail first (an unreachable control plane)."""

    def __init__(self, given: dict[str, str], failures: int = 0) -> None:
        super().__init__()
        self.given, self.failures, self.asks = given, failures, 0

    def secrets(self) -> dict[str, str]:
        self.asks += 1
        if self.asks <= self.failures:
            raise ControlPlaneError("unreachable")
        return dict(self.given)


def _agent(tmp_path: Path, plane: SecretPlane, names: str = "HF_TOKEN") -> Agent:
    record = f"env > {tmp_path / 'worker-env'}"
    config = _config(tmp_path, ["sh", "-c", record], extra_env={SECRET_NAMES_ENV: names})
    return Agent(config, plane=plane)


def _everything_written(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_the_secret_is_in_the_workers_environment_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    plane = SecretPlane({"HF_TOKEN": VALUE, "OTHER": "not listed"})
    assert _agent(tmp_path, plane).run() == EXIT_DONE
    env = (tmp_path / "worker-env").read_text()
    assert f"HF_TOKEN={VALUE}\n" in env
    assert "OTHER=" not in env  # only the names the launch listed
    (tmp_path / "worker-env").unlink()  # the test's own record; the agent's files remain
    assert VALUE.encode() not in _everything_written(tmp_path / "agent")  # events, log, status
    assert VALUE not in caplog.text and "HF_TOKEN" in caplog.text


def test_a_secret_the_control_plane_does_not_give_fails_before_the_worker_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plane = SecretPlane({"HF_TOKEN": VALUE})
    assert _agent(tmp_path, plane, names="HF_TOKEN,WANDB_KEY").run() == EXIT_WORKER_FAILED
    assert not (tmp_path / "worker-env").exists()
    assert "WANDB_KEY" in caplog.text and VALUE not in caplog.text


def test_no_secrets_listed_asks_nothing(tmp_path: Path) -> None:
    plane = SecretPlane({})
    assert _agent(tmp_path, plane, names="").run() == EXIT_DONE
    assert plane.asks == 0


def test_an_unreachable_control_plane_is_asked_again_then_given_up() -> None:
    waits: list[float] = []
    flaky = SecretPlane({"A": "1"}, failures=2)
    assert fetch_secrets(flaky, ("A",), sleep=waits.append) == {"A": "1"}
    assert flaky.asks == 3 and len(waits) == 2
    down = SecretPlane({"A": "1"}, failures=SECRETS_TRIES)
    assert fetch_secrets(down, ("A",), sleep=waits.append) is None
    assert down.asks == SECRETS_TRIES
