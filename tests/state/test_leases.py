"""The fenced lease helper on a table of its own: tokens only grow, a stale or expired lease cannot write,
and on PostgreSQL concurrent claimers skip each other's rows instead of waiting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, insert, select

from spothop.state.leases import Leases
from tests.state.conftest import Store, StoreFactory

NOW = 1_000.0
LEASE_S = 30.0


@pytest.fixture
def leased(make_store: StoreFactory) -> Iterator[tuple[Store, Table, Leases]]:
    """A table of five pending rows ("jobs" of a would-be job store) with a lease in token/expires_at."""
    store = make_store(False)
    metadata = MetaData(schema=store.schema)
    table = Table(
        "lease_test_rows",
        metadata,
        Column("id", String(16), primary_key=True),
        Column("state", String(8), nullable=False),
        Column("token", Integer, nullable=False),
        Column("expires_at", Float, nullable=False),
        Column("holder", String(32)),
    )
    metadata.create_all(store.engine)
    with store.engine.begin() as conn:
        conn.execute(
            insert(table),
            [{"id": f"r{i}", "state": "pending", "token": 0, "expires_at": 0.0} for i in range(5)],
        )
    c = table.c
    yield (
        store,
        table,
        Leases(table, key=(c.id,), token=c.token, expires=c.expires_at, held=c.state == "leased"),
    )
    metadata.drop_all(store.engine)


def _claim(store: Store, leases: Leases, holder: str, n: int, now: float) -> dict[str, int]:
    c = leases.table.c
    with store.engine.begin() as conn:
        rows = leases.lock(
            conn,
            [c.state],
            where=(c.state == "pending") | ((c.state == "leased") & (c.expires_at <= now)),
            order_by=[c.id],
            limit=n,
        )
        tokens = leases.grant(conn, rows, now + LEASE_S, {"state": "leased", "holder": holder})
    return {r.id: t for r, t in zip(rows, tokens, strict=True)}


def _write(
    store: Store, leases: Leases, row_id: str, token: int, now: float, **values: object
) -> bool:
    with store.engine.begin() as conn:
        return leases.fenced_update(conn, (row_id,), token, now, values).rowcount == 1


def test_a_grant_bumps_the_token_and_only_the_newest_holder_can_write(
    leased: tuple[Store, Table, Leases],
) -> None:
    store, table, leases = leased
    first = _claim(store, leases, "a", 2, NOW)
    assert first == {"r0": 1, "r1": 1}
    assert _write(store, leases, "r0", 1, NOW + 1, expires_at=NOW + 1 + LEASE_S)  # a heartbeat
    assert not _write(store, leases, "r0", 0, NOW + 1, holder="impostor")  # a token never granted

    # r1's lease runs out; b claims it again; a's late write is fenced out, b's goes through.
    later = NOW + LEASE_S + 0.5  # past r1's expiry, not r0's (extended by 1 s)
    second = _claim(store, leases, "b", 1, later)
    assert second == {"r1": 2}
    assert not _write(store, leases, "r1", 1, later, state="done")
    assert _write(store, leases, "r1", 2, later, state="done")
    with store.engine.connect() as conn:
        assert conn.execute(
            select(table.c.holder, table.c.state).where(table.c.id == "r1")
        ).one() == ("b", "done")


def test_an_expired_or_no_longer_held_lease_cannot_write(
    leased: tuple[Store, Table, Leases],
) -> None:
    store, _table, leases = leased
    (token,) = _claim(store, leases, "a", 1, NOW).values()
    assert not _write(
        store, leases, "r0", token, NOW + LEASE_S, holder="late"
    )  # expiry is exclusive
    assert _write(store, leases, "r0", token, NOW + 1, state="done")
    assert not _write(
        store, leases, "r0", token, NOW + 2, state="leased"
    )  # done is not held, whatever the token


# SQLite has no row locks to skip: BEGIN IMMEDIATE serialises whole claims (the queue's conformance tests).
@pytest.mark.parametrize("make_store", ["postgresql"], indirect=True)
def test_concurrent_claimers_skip_locked_rows_on_postgresql(
    leased: tuple[Store, Table, Leases],
) -> None:
    store, _table, leases = leased
    c = leases.table.c
    pending = c.state == "pending"
    with store.engine.begin() as one:
        mine = leases.lock(one, [c.state], where=pending, order_by=[c.id], limit=2)
        with store.engine.begin() as other:  # a second claimer, while the first holds its rows
            theirs = leases.lock(other, [c.state], where=pending, order_by=[c.id], limit=2)
            leases.grant(other, theirs, NOW + LEASE_S, {"state": "leased"})
        leases.grant(one, mine, NOW + LEASE_S, {"state": "leased"})
    assert [r.id for r in mine] == ["r0", "r1"] and [r.id for r in theirs] == ["r2", "r3"]
