"""API tokens on SQLite and PostgreSQL: only argon2id hashes are stored, a token speaks for its user's
project or its agent's job and instance, a revocation on one store object ends the token at once on
another (a second replica), and the verify cache is only a cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from spothop.errors import ConfigError, NotFoundError
from spothop.state.auth_tables import api_tokens
from spothop.state.tokens import TokenStore, parse_token
from tests.state.conftest import Store, StoreFactory


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(make_store: StoreFactory) -> Iterator[Store]:
    yield make_store(False)


def _tokens(store: Store, **options: object) -> TokenStore:
    return TokenStore(store.reader(), **options)  # type: ignore[arg-type]


def test_a_user_token_speaks_for_its_user_and_project_and_only_its_hash_is_stored(
    store: Store,
) -> None:
    tokens = _tokens(store)
    user, token = tokens.create_user("ada", "vision")
    principal = tokens.authenticate(token)
    assert principal is not None
    assert (principal.kind, principal.user, principal.user_id, principal.project) == (
        "user",
        "ada",
        user.user_id,
        "vision",
    )
    kind, token_id, secret = parse_token(token) or ("", "", "")
    assert (kind, token_id) == ("user", principal.token_id)
    with tokens.engine.connect() as conn:
        rows = conn.execute(select(api_tokens)).mappings().all()
    assert len(rows) == 1
    stored = " ".join(str(v) for v in rows[0].values())
    assert secret not in stored and token not in stored
    assert rows[0]["secret_hash"].startswith("$argon2id$")


def test_an_agent_token_names_its_job_and_instance_and_dies_when_revoked(store: Store) -> None:
    tokens = _tokens(store)
    token = tokens.issue_agent_token("job-a", "i-1", project="vision")
    other = tokens.issue_agent_token("job-a", "i-2")
    principal = tokens.authenticate(token)
    assert principal is not None
    assert (principal.kind, principal.job_id, principal.instance_id, principal.project) == (
        "agent",
        "job-a",
        "i-1",
        "vision",
    )
    assert tokens.revoke_agent_tokens("job-a", "i-1") == 1
    assert tokens.authenticate(token) is None  # cached a moment ago: the row is read anyway
    assert tokens.authenticate(other) is not None
    assert tokens.revoke_agent_tokens("job-a") == 1  # the rest of the job's
    assert tokens.authenticate(other) is None
    assert tokens.revoke_agent_tokens("job-a") == 0


def test_a_revocation_through_another_store_object_ends_a_cached_token_at_once(
    store: Store,
) -> None:
    replica_a, replica_b = _tokens(store), _tokens(store)
    _, token = replica_a.create_user("bob", "nlp")
    principal = replica_a.authenticate(token)
    assert principal is not None and replica_b.authenticate(token) is not None
    assert replica_b.revoke(principal.token_id)
    assert replica_a.authenticate(token) is None
    assert not replica_b.revoke(principal.token_id)  # revoked already


def test_wrong_malformed_and_foreign_tokens_are_refused(store: Store) -> None:
    tokens = _tokens(store)
    _, token = tokens.create_user("cy", "vision")
    _kind, token_id, secret = parse_token(token) or ("", "", "")
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    assert tokens.authenticate(f"shp_u_{token_id}_{flipped}") is None  # wrong secret
    assert tokens.authenticate(f"shp_a_{token_id}_{secret}") is None  # a user's id as an agent's
    assert tokens.authenticate(f"shp_u_{'0' * 16}_{secret}") is None  # an id never issued
    for junk in ("", "Bearer x", token + "x" * 200, "shp_u_zz_" + secret, "shp_x_" + token[6:]):
        assert tokens.authenticate(junk) is None
    assert tokens.authenticate(token) is not None


def test_a_verify_is_cached_for_the_ttl_only(store: Store) -> None:
    clock = ManualClock()
    tokens = _tokens(store, cache_ttl_s=5.0, clock=clock)
    _, token = tokens.create_user("dee", "vision")
    calls: list[str] = []
    verify = tokens._verify

    def counting(secret_hash: str, secret: str) -> bool:
        calls.append(secret_hash)
        return verify(secret_hash, secret)

    tokens._verify = counting  # type: ignore[method-assign]
    for _ in range(5):
        assert tokens.authenticate(token) is not None
    assert len(calls) == 1
    clock.now += 5.1
    assert tokens.authenticate(token) is not None
    assert len(calls) == 2


def test_users_tokens_and_names_are_checked(store: Store) -> None:
    tokens = _tokens(store)
    tokens.create_user("eve", "vision")
    with pytest.raises(ConfigError, match="exists"):
        tokens.create_user("eve", "nlp")
    with pytest.raises(ConfigError, match="not valid"):
        tokens.create_user("Eve Smith", "vision")
    with pytest.raises(ConfigError, match="not valid"):
        tokens.create_user("fay", "../etc")
    with pytest.raises(NotFoundError, match="no user 'nobody'"):
        tokens.create_user_token("nobody")
    second = tokens.create_user_token("eve", label="laptop")
    principal = tokens.authenticate(second)
    assert principal is not None and principal.user == "eve"
    listed = tokens.tokens(user="eve")
    assert [t.label for t in listed] == ["first", "laptop"]
    assert all(t.kind == "user" and t.project == "vision" for t in listed)
    assert [u.name for u in tokens.users()] == ["eve"]
    with pytest.raises(ConfigError, match="cache_ttl_s"):
        _tokens(store, cache_ttl_s=60.0)


def test_a_first_use_waits_for_anothers_uncommitted_bind_of_the_same_instance(
    pg_schema: str,
) -> None:
    """Two launches' tokens claim one instance while the first's bind is not yet committed: on
    PostgreSQL (read committed) the second's check cannot see that bind, so without a lock per
    instance both would bind. The second waits for the first's transaction, then is refused."""
    import threading

    from sqlalchemy import text

    from spothop.db import shared_engine
    from tests.conftest import POSTGRES_URL

    url = f"{POSTGRES_URL}?options=-csearch_path%3D{pg_schema}"
    tokens = TokenStore(url)
    first = tokens.authenticate(tokens.issue_launch_token("j-1", "launch-1"))
    second = tokens.authenticate(tokens.issue_launch_token("j-1", "launch-2"))
    assert first is not None and second is not None
    engine = shared_engine(url)
    answers: list[str | None] = []
    with engine.begin() as held:
        assert tokens.bind_on_first_use(first, "i-1", conn=held).instance_id == "i-1"
        racer = threading.Thread(
            target=lambda: answers.append(tokens.bind_on_first_use(second, "i-1").instance_id)
        )
        racer.start()
        waiting = text(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database() AND pid <> pg_backend_pid()"
        )
        deadline = 60
        for _ in range(deadline * 20):  # until it waits on the lock, or (no lock) has answered
            if answers or held.execute(waiting).scalar():
                break
            threading.Event().wait(0.05)
    racer.join(30)
    assert answers == ["launch-2"]  # refused: it stays unbound
    assert sorted(tokens.live_agent_tokens(["j-1"])) == [("j-1", "i-1"), ("j-1", "launch-2")]
