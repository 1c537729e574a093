"""The pieces that keep a replica cheap under load (docs/server.md, "Heartbeats" and "Connections"):
agent tokens hashed with argon2id at its smallest memory (user tokens keep theirs), a pooled
connection pinged only when it sat idle (and replaced when the database closed it), and a job's
report shared for a few seconds; all on the real PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from spothop.db import make_engine
from spothop.server.app import TtlCache, ping_when_idle
from spothop.state.tokens import AGENT_ARGON2_MEMORY_KIB, ARGON2_MEMORY_KIB, TokenStore
from tests.conftest import POSTGRES_URL
from tests.waiting import wait_for


@pytest.fixture
def pg_url(pg_schema: str) -> str:
    return f"{POSTGRES_URL}?options=-csearch_path%3D{pg_schema}"


def _hashes(tokens: TokenStore) -> dict[str, str]:
    with tokens.engine.connect() as conn:
        rows = conn.execute(text("SELECT kind, secret_hash FROM api_tokens")).all()
    return {str(kind): str(secret_hash) for kind, secret_hash in rows}


def test_agent_tokens_use_argon2id_at_64_kib_and_user_tokens_keep_8_mib(pg_url: str) -> None:
    tokens = TokenStore(pg_url)
    _, user_token = tokens.create_user("ada", "vision")
    agent_token = tokens.issue_agent_token("j-1", "i-1", project="vision")
    hashes = _hashes(tokens)
    assert hashes["agent"].startswith(f"$argon2id$v=19$m={AGENT_ARGON2_MEMORY_KIB},t=1,p=1$")
    assert hashes["user"].startswith(f"$argon2id$v=19$m={ARGON2_MEMORY_KIB},t=1,p=1$")
    fresh = TokenStore(pg_url)  # no verify cached: each token is verified against its hash
    agent = fresh.authenticate(agent_token)
    assert agent is not None and (agent.job_id, agent.instance_id) == ("j-1", "i-1")
    user = fresh.authenticate(user_token)
    assert user is not None and user.user == "ada"
    kind, token_id, secret = agent_token.split("_")[1:4]
    assert fresh.authenticate(f"shp_{kind}_{token_id}_{secret[::-1]}") is None  # a wrong secret


def test_an_agent_token_hashed_with_the_old_settings_still_verifies(pg_url: str) -> None:
    tokens = TokenStore(pg_url)
    tokens._hashers["agent"] = tokens._hashers["user"]  # as tokens issued before the change
    old = tokens.issue_agent_token("j-1", "i-2")
    assert _hashes(tokens)["agent"].startswith(f"$argon2id$v=19$m={ARGON2_MEMORY_KIB},")
    assert TokenStore(pg_url).authenticate(old) is not None


@pytest.fixture
def one_connection() -> Iterator[Engine]:
    engine = make_engine(POSTGRES_URL, pool_size=1, max_overflow=0, pool_pre_ping=False)
    yield engine
    engine.dispose()


def _backend(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(pid: int) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

        def gone() -> bool:
            row = admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            return row is None

        wait_for(gone, 10, what=f"backend {pid} to end")


def test_an_idle_connection_the_database_closed_is_replaced_not_failed(
    one_connection: Engine,
) -> None:
    ping_when_idle(one_connection, 0.0)  # every reused connection counts as idle: pinged
    first = _backend(one_connection)
    _terminate(first)
    second = _backend(one_connection)  # the ping found it closed; the pool connected afresh
    assert second != first


def test_a_connection_in_steady_use_is_not_pinged(one_connection: Engine) -> None:
    ping_when_idle(one_connection, 3600.0)
    pings: list[Any] = []
    dialect = one_connection.dialect
    real = dialect.do_ping

    def counting(dbapi_connection: Any) -> bool:
        pings.append(dbapi_connection)
        return real(dbapi_connection)

    dialect.do_ping = counting  # type: ignore[method-assign]
    try:
        backends = {_backend(one_connection) for _ in range(5)}
    finally:
        del dialect.do_ping
    assert len(backends) == 1 and pings == []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_report_is_made_once_per_ttl_and_again_after() -> None:
    clock = Clock()
    cache = TtlCache(5.0, clock)
    made: list[int] = []

    def make() -> dict[str, int]:
        made.append(1)
        return {"n": len(made)}

    assert cache.get("j-1", make) == {"n": 1}
    clock.now = 4.9
    assert cache.get("j-1", make) == {"n": 1}  # shared
    assert cache.get("j-2", make) == {"n": 2}  # another job: its own
    clock.now = 5.1
    assert cache.get("j-1", make) == {"n": 3}  # past the TTL: made again
    assert [TtlCache(0.0, clock).get("j-1", make) for _ in range(2)] == [{"n": 4}, {"n": 5}]


def test_a_failed_report_is_not_kept() -> None:
    cache = TtlCache(5.0, Clock())

    def broken() -> None:
        raise LookupError("no job")

    with pytest.raises(LookupError):
        cache.get("j-9", broken)
    assert cache.get("j-9", lambda: "made") == "made"


def test_an_agents_first_beats_are_written_in_one_batch_and_a_user_token_alone(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import concurrent.futures

    from fastapi.testclient import TestClient

    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path))
    # A long linger: the beats sent together are waiting when the writer takes its batch.
    app = create_app(Settings(db_url=pg_url, controller=False, heartbeat_batch_s=0.5))
    agents = [app.state.tokens.issue_agent_token("j-1", f"i-{n}") for n in range(8)]
    _, user = app.state.tokens.create_user("ada", "vision")
    assert not any(app.state.tokens.cached(t) for t in agents)  # none verified yet
    with TestClient(app) as client:

        def beat(n: int, token: str) -> int:
            body = {"instance_id": f"i-{n}", "time_unix_s": 1.0, "state": "running"}
            answer = client.post(
                f"/v1/agents/i-{n}/heartbeat",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            )
            return answer.status_code

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(beat, range(8), agents))
        assert codes == [200] * 8
        writer = app.state.beats
        assert writer.beats == 8  # each written by the writer (verified in its batch), none alone
        assert writer.batches < 8  # (all 8 in one batch unless the machine is very slow)
        assert all(app.state.tokens.cached(t) for t in agents)
        batches = writer.batches
        assert beat(0, user) == 403  # a user's token: verified alone, never in a batch
        assert writer.batches == batches


def test_beats_commit_without_waiting_for_the_disk_and_everything_else_waits(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import text

    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path))
    app = create_app(Settings(db_url=pg_url, controller=False))
    beat_engine = app.state.beats.engine
    try:
        assert beat_engine is not app.state.store.engine  # its own connection
        with beat_engine.begin() as conn:
            assert conn.execute(text("SHOW synchronous_commit")).scalar() == "off"
            assert conn.connection.dbapi_connection.autocommit  # no BEGIN, no COMMIT round trips
        with beat_engine.begin() as conn:  # the pool's connection kept its setting
            assert conn.execute(text("SHOW synchronous_commit")).scalar() == "off"
        with app.state.store.engine.begin() as conn:  # events, leases, jobs: flushed first
            assert conn.execute(text("SHOW synchronous_commit")).scalar() == "on"
    finally:
        beat_engine.dispose()


def test_on_sqlite_the_beats_share_the_stores_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path))
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/s.db", controller=False))
    assert app.state.beats.engine is app.state.store.engine


def _asdict_payload(event: Any) -> dict[str, Any]:
    """An event's stored dictionary as it was made before: ``dataclasses.asdict``, made plain."""
    import dataclasses

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return {"kind": event.kind, **plain(dataclasses.asdict(event))}


def test_an_events_dictionary_is_what_the_deep_copy_made_and_shares_nothing() -> None:
    from spothop.wire.events import EVENT_TYPES, Interruption, Saved, SelfCheckEvent

    identity = {"instance_id": "i-1", "fallbacks": ["imdsv1"], "nested": {"pair": (1, 2)}}
    events = [cls(instance_id="i-1", job_id="j-1") for cls in EVENT_TYPES.values()]
    events += [
        SelfCheckEvent(instance_id="i-1", reasons=("no endpoint", "v1"), identity=identity),
        Saved(instance_id="i-1", detail={"step": 3, "files": ["a", "b"]}),
        Interruption(instance_id="i-1", steps_s={"save": 1.5}, errors={"upload": "denied"}),
    ]
    for event in events:
        data = event.to_dict()
        assert data == _asdict_payload(event)
        assert list(data) == list(_asdict_payload(event))  # kind first, then the fields in order
    data = events[-3].to_dict()
    data["identity"]["fallbacks"].append("changed")
    data["identity"]["nested"]["pair"].append(3)
    assert identity == {"instance_id": "i-1", "fallbacks": ["imdsv1"], "nested": {"pair": (1, 2)}}


def test_events_are_stored_once_and_the_pools_connection_keeps_its_transactions(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.controlplane.store import StoreControlPlane
    from spothop.wire.events import Probe

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path))  # the controller's wake-up is this home's
    plane = StoreControlPlane(pg_url, "i-1")
    events = [Probe(instance_id="i-1", job_id="j-1", reason=f"r{n}") for n in range(3)]
    assert plane.record_many([*events, events[0]]) == 3  # autocommit on PostgreSQL: one statement
    assert plane.record_many(events) == 0  # resent: stored once
    with plane.engine.connect() as conn:  # the connection the batch used, back in the pool
        assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
        conn.execute(text("DELETE FROM agent_events"))
        conn.rollback()
    with plane.engine.connect() as conn:
        stored = conn.execute(text("SELECT payload FROM agent_events ORDER BY time_unix_s")).all()
    assert sorted(json.loads(p)["reason"] for (p,) in stored) == ["r0", "r1", "r2"]
