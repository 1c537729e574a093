"""Every table spothop defines is created by a migration: the migrated schema equals the metadata
(Alembic's autogenerate finds nothing to add, drop or alter), for a new store and for an upgraded
0.1.0 store, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from spothop.state.migrate import differences, owned_metadata, upgrade
from tests.state.conftest import StoreFactory


@pytest.mark.parametrize("release_0_1", [False, True], ids=["new", "release-0.1.0"])
def test_the_migrated_schema_is_the_metadata(make_store: StoreFactory, release_0_1: bool) -> None:
    store = make_store(release_0_1)
    upgrade(store.engine, store.schema)
    assert differences(store.engine, store.schema) == []
    assert set(owned_metadata().tables) <= store.tables()


def test_a_table_no_migration_creates_is_reported(make_store: StoreFactory) -> None:
    """The check above can fail: a table defined in code but in no migration shows up as missing."""
    from sqlalchemy import Column, Integer, Table

    store = make_store(False)
    upgrade(store.engine, store.schema)
    metadata = owned_metadata()
    stray = Table("state_test_stray", metadata, Column("id", Integer, primary_key=True))
    try:
        found = differences(store.engine, store.schema)
    finally:
        metadata.remove(stray)
    assert [(d[0], d[1].name) for d in found] == [("add_table", "state_test_stray")]
