"""What an instance is given when its agent talks HTTP: the queue through the control plane, the
instance-local variant with no controller fact, and the refusal of a control plane it cannot reach."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spothop.errors import InvalidRequest
from spothop.jobs.controller.launch_request import unreachable_control_plane
from spothop.jobs.launcher import (
    INSTANCE_STATE_ROOT,
    WorkerCommand,
    bootstrap,
    instance_queue_url,
)
from spothop.providers.extensions import SharesHostNetwork, shares_host_network
from spothop.state.wake import WAKE_SOCKET_ENV

PLANE = "http://127.0.0.1:4100"


class Cloud:
    """A provider whose instances do not share the host (every real cloud)."""


class Host:
    """A provider whose instances run on the controller's host (the local cloud)."""

    shares_host_network = True


class Records:
    """A provider whose instances run nothing (the fake provider)."""

    shares_host_network = True
    runs_nothing = True


@pytest.mark.parametrize(
    ("queue", "plane", "given"),
    [
        ("sqlite:///x/spothop.db", PLANE, PLANE),
        (
            "postgresql+psycopg://u:p@db/spothop",
            "https://cp.example.com/",
            "https://cp.example.com",
        ),
        ("redis://cache:6379/0", PLANE, "redis://cache:6379/0"),
        ("sqlite:///x/spothop.db", None, "sqlite:///x/spothop.db"),
        ("sqlite:///x/spothop.db", "sqlite:///x/spothop.db", "sqlite:///x/spothop.db"),
        (None, PLANE, None),
    ],
)
def test_a_database_queue_is_reached_through_the_control_plane(
    queue: str | None, plane: str | None, given: str | None
) -> None:
    assert instance_queue_url(queue, plane) == given


def _boot(tmp_path: Path, **options: object) -> tuple[tuple[str, ...], dict[str, str]]:
    work = WorkerCommand(run="python work.py", queue_url="sqlite:////srv/spothop.db")
    boot = bootstrap(
        work,
        job_id="j-1",
        node=0,
        attempt_id="a-1",
        provider="aws",
        store_url="sqlite:////srv/spothop.db",
        home=tmp_path,
        control_plane=PLANE,
        agent_token="tok",
        **options,  # type: ignore[arg-type]
    )
    return boot.command, boot.env


def test_the_http_plane_gives_the_worker_and_the_agent_the_control_planes_queue(
    tmp_path: Path,
) -> None:
    command, env = _boot(tmp_path)
    assert env["SPOTHOP_QUEUE_URL"] == PLANE
    assert command[command.index("--queue-url") + 1] == PLANE
    assert "sqlite" not in " ".join(command) and "sqlite" not in " ".join(env.values())
    assert env["SPOTHOP_HOME"] == str(tmp_path)  # the local cloud's instances share the disk yet


def test_an_instance_local_launch_names_no_controller_fact(tmp_path: Path) -> None:
    command, env = _boot(tmp_path, instance_local=True)
    text = " ".join(command) + " " + " ".join(f"{k}={v}" for k, v in env.items())
    assert command[0] == "python"
    assert command[command.index("--state-dir") + 1] == f"{INSTANCE_STATE_ROOT}/a-1"
    assert f"{INSTANCE_STATE_ROOT}/a-1/worker.log" in text
    assert "SPOTHOP_HOME" not in env and WAKE_SOCKET_ENV not in env
    for fact in (str(tmp_path), sys.executable, "sqlite"):
        assert fact not in text
    assert not (tmp_path / "jobs").exists()  # nothing made on the controller's disk


def test_instance_local_needs_an_http_control_plane(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="http"):
        bootstrap(
            WorkerCommand(run="true"),
            job_id="j",
            node=0,
            attempt_id="a",
            provider="aws",
            store_url="sqlite:///s.db",
            home=tmp_path,
            instance_local=True,
        )


def test_shares_host_network_is_false_unless_the_provider_says_so() -> None:
    assert shares_host_network(Host()) and isinstance(Host(), SharesHostNetwork)
    assert not shares_host_network(Cloud())


@pytest.mark.parametrize(
    ("provider", "url", "refused"),
    [
        (Cloud(), "http://127.0.0.1:4100", True),
        (Cloud(), "http://localhost:4100", True),
        (Cloud(), None, True),  # the database plane
        (Cloud(), "https://spothop.example.com", False),
        (Cloud(), "http://10.0.0.5:8350", False),
        (Host(), "http://127.0.0.1:4100", False),
        (Host(), None, True),  # the database plane: an instance that runs an agent cannot open it
        (Records(), None, False),  # ... one that runs nothing never opens it
        (Host(), "postgresql://u:secret@db/spothop", True),  # a database URL: no one
        (Cloud(), "sqlite:///x.db", True),
    ],
)
def test_a_control_plane_the_instances_cannot_reach_is_refused_in_one_line(
    provider: object, url: str | None, refused: bool
) -> None:
    refusal = unreachable_control_plane("aws", provider, url)
    assert (refusal is not None) == refused
    if refusal is not None:
        text = str(refusal)
        assert isinstance(refusal, InvalidRequest) and refusal.code == "ControlPlaneUnreachable"
        assert "spothop server run --public-url" in text and "\n" not in text
        assert "secret" not in text  # a database URL is never repeated
