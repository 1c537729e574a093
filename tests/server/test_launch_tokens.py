"""A launch's agent token, issued before the cloud names the instance, bound once: on its first use
to the instance that presents it, or by the controller to the instance the cloud launched, the
cloud's answer winning a disagreement. One suite on every agent API that checks tokens: the home's
(in a thread) on SQLite and on PostgreSQL, and `spothop server run` (a real process)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.controlplane import Heartbeat, HttpControlPlane, Registration
from spothop.state.tokens import TokenStore
from spothop.wire.errors import ControlPlaneAuthError
from spothop.wire.events import WorkerStarted
from tests.conftest import POSTGRES_URL, unique

ROUNDS = 8  # concurrent first uses per case: each round one token, two instances racing


@dataclass
class Api:
    url: str
    tokens: TokenStore
    spool: Path

    def launch(self, job: str | None = None) -> tuple[str, str, str]:
        """(job, launch token, agent token): a token issued for a launch, as the executor does."""
        job, launch = job or unique("job"), unique("launch")
        return job, launch, self.tokens.issue_launch_token(job, launch)

    def plane(self, instance: str, token: str) -> HttpControlPlane:
        return HttpControlPlane(
            self.url, instance, token=token, spool_dir=self.spool / unique("s"), attempts=2
        )


@pytest.fixture(params=["agent-api-sqlite", "agent-api-postgres", "server"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    if request.param == "server":
        served = request.getfixturevalue("served")
        yield Api(served.server.url, served.tokens, tmp_path)
        return
    from spothop.server.agent_serve import serve_agent_api

    if request.param == "agent-api-postgres":
        schema = request.getfixturevalue("pg_schema")
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    else:
        url = f"sqlite:///{tmp_path / 'store.db'}"
    server = serve_agent_api(None, url, url)
    try:
        yield Api(server.url, TokenStore(url), tmp_path)
    finally:
        server.shutdown()


def _register(plane: HttpControlPlane, instance: str) -> bool:
    """Whether the registration was taken (False: refused, 403)."""
    try:
        plane.register(Registration(instance_id=instance, provider="local", worker_id="w-1"))
    except ControlPlaneAuthError:
        return False
    return True


def test_an_unbound_launch_token_is_bound_to_the_instance_of_its_first_request(api: Api) -> None:
    job, _, token = api.launch()
    instance = unique("i")
    plane = api.plane(instance, token)
    plane.heartbeat(Heartbeat(instance, "w-1", 1_800_000_000.0, "running", 7, 0, None, False))
    plane.record(WorkerStarted(instance_id=instance, job_id=job, worker_id="w-1", pid=7))
    assert plane.flush(10) == 0
    assert api.tokens.live_agent_tokens([job]) == [(job, instance)]
    # Bound: another instance presenting it is refused, and it stays bound.
    assert not _register(api.plane(unique("i"), token), unique("i"))
    assert api.tokens.live_agent_tokens([job]) == [(job, instance)]


def _race(api: Api, claims: list[tuple[str, str]]) -> list[bool]:
    """Each (instance, token) registers at once; which were taken, in order."""
    start = threading.Barrier(len(claims))
    taken = [False] * len(claims)

    def first(n: int) -> None:
        instance, token = claims[n]
        plane = api.plane(instance, token)
        start.wait(10)
        taken[n] = _register(plane, instance)

    threads = [threading.Thread(target=first, args=(n,)) for n in range(len(claims))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return taken


def test_of_two_first_requests_naming_different_instances_exactly_one_binds(api: Api) -> None:
    for _ in range(ROUNDS):
        job, _, token = api.launch()
        instances = [unique("i"), unique("i")]
        taken = _race(api, [(i, token) for i in instances])
        assert sorted(taken) == [False, True], taken
        [winner] = [i for i, ok in zip(instances, taken, strict=True) if ok]
        assert api.tokens.live_agent_tokens([job]) == [(job, winner)]


def test_of_two_launches_first_requests_naming_one_instance_exactly_one_binds(api: Api) -> None:
    """Two launches' tokens (one job's, say a group's two nodes) both claim one instance at once:
    an instance has one token, so one binds and the other is refused and stays unbound."""
    for _ in range(ROUNDS):
        job, first_launch, first = api.launch()
        _, second_launch, second = api.launch(job)
        instance = unique("i")
        taken = _race(api, [(instance, first), (instance, second)])
        assert sorted(taken) == [False, True], taken
        loser = second_launch if taken[0] else first_launch
        assert sorted(api.tokens.live_agent_tokens([job])) == sorted(
            [(job, instance), (job, loser)]
        )


def test_the_controllers_bind_of_the_same_instance_changes_nothing(api: Api) -> None:
    job, launch, token = api.launch()
    instance = unique("i")
    assert _register(api.plane(instance, token), instance)
    assert api.tokens.bind_agent_token(job, launch, instance) == 0
    assert api.tokens.live_agent_tokens([job]) == [(job, instance)]
    assert _register(api.plane(instance, token), instance)


def test_the_clouds_instance_wins_over_another_that_used_the_token_first(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    job, launch, token = api.launch()
    first, launched = unique("impostor"), unique("i")
    assert _register(api.plane(first, token), first)
    with caplog.at_level(logging.WARNING, logger="spothop.state.agent_tokens"):
        assert api.tokens.bind_agent_token(job, launch, launched) == 1
    assert api.tokens.live_agent_tokens([job]) == [(job, launched)]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert repr(first) in warning and repr(launched) in warning and "refused" in warning
    assert not _register(api.plane(first, token), first)  # refused from now on
    assert _register(api.plane(launched, token), launched)


def test_a_launch_token_never_binds_to_another_jobs_instance(api: Api) -> None:
    other_job, other_instance = unique("job"), unique("i")
    other_token = api.tokens.issue_agent_token(other_job, other_instance)
    job, launch, token = api.launch()
    assert not _register(api.plane(other_instance, token), other_instance)
    assert api.tokens.live_agent_tokens([job]) == [(job, launch)]  # still unbound
    assert _register(api.plane(other_instance, other_token), other_instance)  # its own: taken
    mine = unique("i")
    assert _register(api.plane(mine, token), mine)
    assert api.tokens.live_agent_tokens([job]) == [(job, mine)]


def test_a_first_use_naming_another_jobs_events_is_refused(api: Api) -> None:
    _, _, token = api.launch()
    instance = unique("i")
    plane = api.plane(instance, token)
    plane.record(WorkerStarted(instance_id=instance, job_id=unique("job"), worker_id="w", pid=7))
    assert plane.flush(5) == 1  # refused (403): kept in the spool, never stored as another's


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_two_replicas_binding_one_token_at_once_bind_it_once(
    db: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The store's conditional update alone, from two token stores (two replicas) on their own
    connections: exactly one first use binds, the other sees the winner's instance."""
    if db == "postgres":
        schema = request.getfixturevalue("pg_schema")
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    else:
        url = f"sqlite:///{tmp_path / 'store.db'}"
    from spothop.db import make_engine

    replicas = [TokenStore(make_engine(url)), TokenStore(make_engine(url))]
    for _ in range(ROUNDS):
        job, launch = unique("job"), unique("launch")
        token = replicas[0].issue_launch_token(job, launch)
        instances = [unique("i"), unique("i")]
        seen = _bind_at_once(replicas, token, instances)
        [(_, winner)] = replicas[0].live_agent_tokens([job])
        assert winner in instances and set(seen) == {winner}, seen


def _bind_at_once(replicas: list[TokenStore], token: str, instances: list[str]) -> list[str]:
    """Replica n binds ``token`` on first use to ``instances[n]``, all at once; the instance
    each then sees the token bound to."""
    principals = [r.authenticate(token) for r in replicas]
    start = threading.Barrier(len(replicas))
    seen: list[str] = []

    def bind(n: int) -> None:
        principal = principals[n]
        assert principal is not None and principal.unbound
        start.wait(10)
        seen.append(str(replicas[n].bind_on_first_use(principal, instances[n]).instance_id))

    threads = [threading.Thread(target=bind, args=(n,)) for n in range(len(replicas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(seen) == len(replicas)
    return seen
