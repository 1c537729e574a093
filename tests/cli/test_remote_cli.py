"""The CLI against a real ``spothop server run``: the same commands print the same output either way.

A server process (uvicorn, the real app, no controller) on a fresh PostgreSQL
schema with Redis as its queue, one for the module (each test a user of its own
project) and one of its own for the test whose local output spans the whole store;
the embedded CLI reads the same store with
``--store``, the server-mode CLI asks the server with ``--server``/``--token``.
Every job command's ``--json`` and its table must be identical both ways, and
the server's refusals must read as the CLI's own errors, with its exit codes.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from spothop.cli.remote import ServerClient, ServerRefused
from spothop.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from spothop.jobs.lifecycle import JobState
from spothop.jobs.store import JobStore
from spothop.state.tokens import TokenStore
from tests.conftest import (
    POSTGRES_URL,
    REDIS_URL,
    _redis_problem,
    fresh_schema,
    unavailable,
    unique,
)
from tests.jobs.e2e.conftest import WORLD
from tests.server.live import LiveServer

pytestmark = pytest.mark.services


class Remote:
    """The server, its store URL, a user token of project ``ml``, and the CLI both ways."""

    def __init__(self, server: LiveServer, store_url: str, token: str, cli: Callable[..., Any]):
        self.server = server
        self.store_url = store_url
        self.token = token
        self.cli = cli

    def remote(self, *args: str, token: str | None = None) -> Any:
        return self.cli(*args, "--server", self.server.url, "--token", token or self.token)

    def launch(self, job_file: Path) -> str:
        """Launch over the server (detached); the job's id."""
        result = self.remote("launch", str(job_file), "--detach", "--json")
        assert result.code == EXIT_OK, result.err
        return str(result.json()["job_id"])

    def local(self, *args: str) -> Any:
        return self.cli(*args, "--store", self.store_url)


def _still_world() -> dict[str, Any]:
    """The e2e world with markets whose prices never move and which never go away: a plan made
    here and one made by the server a moment later read the same market."""
    still = copy.deepcopy(WORLD)
    still["speed"] = 1.0
    for cloud in still["clouds"]:
        cloud["market"]["synthetic"]["price_std_ratio"] = 0.0
    return still


def _store_url(schema: str) -> str:
    separator = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"


@contextlib.contextmanager
def _server(url: str, tmp: Path, home: str) -> Iterator[LiveServer]:
    """A server on ``url`` whose market is the still world (``tmp/world.yaml``; a test sets it in
    its own environment too: a plan made here and one made there read the same market)."""
    world = tmp / "world.yaml"
    world.write_text(yaml.safe_dump(_still_world()))
    JobStore(url).close()  # the schema migrated before the server and the token store use it
    env = {"SPOTHOP_WORLD": str(world), "SPOTHOP_HOME": home}
    with LiveServer(url, tmp / "server.log", queue_url=REDIS_URL, env=env) as server:
        yield server


@dataclass
class Shared:
    server: LiveServer
    store_url: str
    home: Path  # the server's: secrets sealed there are opened with its key
    world: Path


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """One server for the module's tests that look only at their own project's jobs (each test
    is a user of a project of its own); a fresh PostgreSQL schema, dropped after."""
    problem = _redis_problem()
    if problem:
        unavailable(problem)
    with fresh_schema("spothop_remote_cli") as schema:
        tmp = tmp_path_factory.mktemp("remote-cli")
        home = tmp / "home"
        home.mkdir()
        with _server(_store_url(schema), tmp, str(home)) as server:
            yield Shared(server, _store_url(schema), home, tmp / "world.yaml")


@pytest.fixture
def remote(shared: Shared, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Remote:
    """The shared server, as a user of a project of this test's own."""
    monkeypatch.setenv("SPOTHOP_WORLD", str(shared.world))
    monkeypatch.setenv("SPOTHOP_HOME", str(shared.home))
    _user, token = TokenStore(shared.store_url).create_user(unique("alice"), unique("ml"))
    return Remote(shared.server, shared.store_url, token, cli)


@pytest.fixture
def alone(
    pg_schema: str,
    redis_prefix: str,
    tmp_path: Path,
    spothop_home: Path,
    cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Remote]:
    """A server of this test's own: a store holding only what the test puts there, for output
    the local CLI draws from the whole store."""
    del redis_prefix  # proves Redis answers; the server's queue keys are per job
    url = _store_url(pg_schema)
    monkeypatch.setenv("SPOTHOP_WORLD", str(tmp_path / "world.yaml"))
    with _server(url, tmp_path, str(spothop_home)) as server:
        _user, token = TokenStore(url).create_user("alice", "ml")
        yield Remote(server, url, token, cli)


def _job_file(tmp_path: Path, name: str = "hello", **extra: Any) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "run": "echo hello", **extra}))
    return path


def test_every_job_command_prints_the_same_either_way(alone: Remote, tmp_path: Path) -> None:
    remote = alone
    launched = remote.remote("launch", str(_job_file(tmp_path)), "--detach", "--json")
    assert launched.code == EXIT_OK, launched.err
    job_id = launched.json()["job_id"]
    with JobStore(remote.store_url) as store:  # stored in the server's store, resolved
        assert store.get_job(job_id).name == "hello"
    for argv in (
        ("jobs", "--json"),
        ("jobs",),
        ("status", job_id, "--json"),
        ("status", job_id),
        ("logs", job_id, "--json"),
        ("events", "--job", job_id, "--json"),
        ("events", "--job", job_id),
        ("events", "--json"),
        ("status",),
        ("report", job_id, "--json"),
        ("report", job_id),
        ("report", job_id, "--csv"),
        ("report", "--since", "1d", "--by", "provider", "--json"),
        ("report", "--since", "1d", "--by", "job"),
    ):
        here, there = remote.local(*argv), remote.remote(*argv)
        assert here.code == there.code == EXIT_OK, (argv, here.err, there.err)
        assert there.out == here.out, argv
        assert there.out.strip(), argv
    listed = json.loads(remote.remote("jobs", "--json").out)
    assert [j["job_id"] for j in listed] == [job_id]


def test_offers_and_plans_print_the_same_either_way(remote: Remote, tmp_path: Path) -> None:
    for argv in (("offers", "--gpu", "A10G", "--limit", "5", "--json"), ("offers", "--gpu", "T4")):
        here = remote.cli(*argv)
        there = remote.remote(*argv)
        assert here.code == there.code == EXIT_OK, (argv, here.err, there.err)
        assert there.out == here.out and there.out.strip(), argv
    job = _job_file(tmp_path, "planned", resources={"accelerators": "A10G:1"})
    here = remote.cli("plan", str(job), "--limit", "3", "--json")
    there = remote.remote("plan", str(job), "--limit", "3", "--json")
    assert here.code == there.code == EXIT_OK, (here.err, there.err)
    mine, theirs = here.json(), there.json()
    mine.pop("now"), theirs.pop("now")  # each side's clock when it read the market
    assert theirs == mine and theirs["candidates"]


def test_cancel_over_the_server_and_its_refusals(remote: Remote, tmp_path: Path) -> None:
    job_id = remote.launch(_job_file(tmp_path))
    cancelled = remote.remote("cancel", job_id, "--json")
    assert cancelled.code == EXIT_OK, cancelled.err
    assert cancelled.json() == {"job_id": job_id, "cancel_requested": True}
    with JobStore(remote.store_url) as store:
        assert [e.kind for e in store.events(job_id)][-1] == "cancel_requested"
        store.transition(job_id, JobState.CANCELLED, "cancelled", reason="by the test")
    again = remote.remote("cancel", job_id)
    local = remote.local("cancel", job_id)
    assert again.code == local.code == EXIT_FAILED
    assert "already cancelled" in again.err and "Traceback" not in again.err


def test_the_servers_refusals_read_as_the_clis_errors(remote: Remote, tmp_path: Path) -> None:
    job_id = remote.launch(_job_file(tmp_path))
    refused = remote.remote("jobs", token="shp_u_nobody_bad")
    said = " ".join(refused.err.split())  # the console wraps a long line
    assert refused.code == EXIT_BAD_INPUT
    assert "401" in said and "spothop server users create" in said
    assert "shp_u_nobody_bad" not in refused.err + refused.out
    _bob, other = TokenStore(remote.store_url).create_user(unique("bob"), unique("vision"))
    forbidden = remote.remote("status", job_id, token=other)
    assert forbidden.code == EXIT_BAD_INPUT and "403" in forbidden.err
    assert remote.remote("jobs", "--json", token=other).json() == []  # bob sees none of ml's
    missing = remote.remote("logs", "j-000000")
    assert missing.code != EXIT_OK and "j-000000" in missing.err
    bad_spec = tmp_path / "bad.yaml"
    bad_spec.write_text("name: x\nrun: 3\nnodes: -1\n")
    here, there = (
        remote.local("launch", str(bad_spec), "--detach"),
        remote.remote("launch", str(bad_spec), "--detach"),
    )
    assert there.code == here.code == EXIT_BAD_INPUT and there.err == here.err
    with pytest.raises(ServerRefused) as caught:  # a cursor the server never gave: 4xx, its message
        ServerClient(remote.server.url, remote.token).events(job_id, after="not-a-cursor")
    assert caught.value.exit_code == EXIT_BAD_INPUT and "after_id" in str(caught.value)
    for argv in (("jobs",), ("status", job_id), ("report", job_id)):
        result = remote.remote(*argv)
        assert "Traceback" not in result.err


def test_a_secret_launched_over_the_server_is_sealed_there_and_shown_masked(
    remote: Remote, tmp_path: Path
) -> None:
    from spothop.db import make_engine
    from spothop.state.job_tables import job_secrets
    from spothop.state.sealed import SecretBox, open_secrets

    value = "hf_over-the-server-51d0"
    job_file = _job_file(tmp_path, "sealed", secrets={"HF_TOKEN": None})
    result = remote.remote(
        "launch", str(job_file), "--detach", "--json", "--secret", f"HF_TOKEN={value}"
    )
    assert result.code == EXIT_OK, result.err
    job_id = str(result.json()["job_id"])
    shown = remote.remote("status", job_id, "--json")
    assert shown.json()["secrets"] == {"HF_TOKEN": "****"}
    assert value not in shown.out + result.out + result.err
    engine = make_engine(remote.store_url)
    try:
        with engine.connect() as conn:
            sealed = conn.execute(job_secrets.select()).all()
            assert [r.name for r in sealed if r.job_id == job_id] == ["HF_TOKEN"]
            assert all(value not in r.sealed for r in sealed)
            # sealed with the home's key, which the server and this test share
            assert open_secrets(conn, job_id, SecretBox.of_home()) == {"HF_TOKEN": value}
    finally:
        engine.dispose()
    assert value not in remote.server.log()
