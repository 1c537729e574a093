"""A store upgraded by a newer spothop is refused with a message naming both revisions, and left as it is."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from spothop.errors import SpothopError, StoreTooNew
from spothop.market.price_store import PriceStore
from spothop.queue.sql_backend import SqlQueue
from spothop.state.migrate import VERSION_TABLE, ensure_schema, head_revision, status, upgrade
from tests.state.conftest import Store, StoreFactory

FUTURE_REVISION = "9001"


def _from_the_future(make_store: StoreFactory, second_head: bool = False) -> Store:
    """A store at this code's head, then moved to FUTURE_REVISION (or given it as a second head)."""
    store = make_store(False)
    upgrade(store.engine, store.schema)
    table = store.qualified(VERSION_TABLE)
    change = (
        f"INSERT INTO {table} (version_num) VALUES (:v)"
        if second_head
        else f"UPDATE {table} SET version_num = :v"
    )
    with store.engine.begin() as conn:
        conn.execute(text(change), {"v": FUTURE_REVISION})
    return store


def test_a_store_newer_than_the_code_is_refused_and_left_as_it_is(make_store: StoreFactory) -> None:
    store = _from_the_future(make_store)
    tables = store.tables()
    with pytest.raises(StoreTooNew) as raised:
        upgrade(store.engine, store.schema)
    message = str(raised.value)
    assert (
        FUTURE_REVISION in message
        and head_revision() in message
        and "upgrade spothop" in message.lower()
    )
    assert (raised.value.store_revision, raised.value.code_revision) == (
        FUTURE_REVISION,
        head_revision(),
    )
    assert isinstance(raised.value, SpothopError) and raised.value.exit_code != 0
    with pytest.raises(StoreTooNew):
        status(store.engine, store.schema)
    assert store.tables() == tables
    assert store.rows(VERSION_TABLE, "version_num") == [{"version_num": FUTURE_REVISION}]


def test_opening_a_newer_store_through_any_owner_stops_with_the_same_error(
    make_store: StoreFactory,
) -> None:
    store = _from_the_future(make_store)
    with pytest.raises(StoreTooNew):
        SqlQueue("job", engine=store.engine, schema=store.schema)
    reader = store.reader()
    with pytest.raises(StoreTooNew):
        PriceStore(engine=reader)
    with pytest.raises(StoreTooNew):  # refused every time, not only the first
        ensure_schema(store.engine, store.schema)


def test_a_store_on_two_branches_is_taken_for_a_newer_spothops(make_store: StoreFactory) -> None:
    """spothop's history is one line; a second head in the version table came from a newer release."""
    store = _from_the_future(make_store, second_head=True)
    with pytest.raises(StoreTooNew, match=FUTURE_REVISION):
        status(store.engine, store.schema)
