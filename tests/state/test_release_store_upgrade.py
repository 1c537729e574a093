"""A store made by spothop 0.1.0 (the release before migrations) is upgraded in place, on SQLite and
PostgreSQL: every row it held is there after, and this code reads and extends it."""

from __future__ import annotations

from typing import Any

from spothop.market.interruptions import InterruptionStore
from spothop.market.price_store import PriceStore
from spothop.queue import ShardState
from spothop.queue.sql_backend import SqlQueue
from spothop.state.market_tables import prices as prices_table
from spothop.state.migrate import BASELINE_REVISION, head_revision, status, upgrade
from tests.state.conftest import RELEASE_0_1_TABLES, Store, StoreFactory

T0 = 1_700_000_000.0  # the fixture's times count from here (fixtures/make_release_store.py)
ORDER = {
    "market_prices": "id",
    "market_interruptions": "id",
    "market_exposure": "id",
    "queue_jobs": "job",
    "queue_shards": "job, shard_id",
}


# What this version renamed in 0.1.0's tables (revision 0003): table → {old column: new column}.
RENAMED = {"market_interruptions": {"cloud": "provider"}, "market_exposure": {"cloud": "provider"}}


def _snapshot(store: Store, renamed: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Every row of 0.1.0's tables; ``renamed``: under this version's column names."""
    rows = {table: store.rows(table, ORDER[table]) for table in RELEASE_0_1_TABLES}
    if renamed:
        for table, names in RENAMED.items():
            rows[table] = [{names.get(k, k): v for k, v in row.items()} for row in rows[table]]
    return rows


def test_every_row_of_a_previous_release_store_is_kept_through_the_upgrade(
    make_store: StoreFactory,
) -> None:
    store = make_store(True)
    before = _snapshot(store, renamed=True)
    assert [len(before[t]) for t in RELEASE_0_1_TABLES] == [5, 2, 1, 2, 4]
    assert before["market_interruptions"][1]["provider"] == "gcp"

    done = upgrade(store.engine, store.schema)

    assert done.previous_release and done.before is None and done.after == head_revision()
    assert done.applied[0].revision == BASELINE_REVISION
    assert _snapshot(store) == before
    assert {"agent_heartbeats", "agent_events", "agent_requests"} <= store.tables()
    assert set(RELEASE_0_1_TABLES) <= store.tables()


def test_status_recognises_a_previous_release_store_and_lists_what_is_pending(
    make_store: StoreFactory,
) -> None:
    store = make_store(True)
    found = status(store.engine, store.schema)
    assert found.current is None and found.previous_release and not found.up_to_date
    assert found.pending[0].revision == BASELINE_REVISION
    assert found.pending[-1].revision == head_revision()
    assert status(store.engine, store.schema) == found  # status changed nothing

    upgrade(store.engine, store.schema)
    after = status(store.engine, store.schema)
    assert after.current == head_revision() and after.up_to_date and not after.previous_release


def test_this_code_carries_on_with_an_upgraded_previous_release_store(
    make_store: StoreFactory,
) -> None:
    """The queue of 0.1.0 goes on where it stopped (its lease still fenced), and new rows get new ids."""
    store = make_store(True)
    reader = store.reader()
    clock_s = [T0 + 20]
    queue = SqlQueue(
        "embed-2026", engine=store.engine, schema=store.schema, clock=lambda: clock_s[0]
    )
    counts = queue.stats()
    assert (counts.pending, counts.leased, counts.done, counts.dead) == (2, 1, 1, 0)
    held = next(r for r in queue.records() if r.state is ShardState.LEASED)
    assert (held.id, held.token, held.worker) == ("shard-2", 1, "worker-1")

    clock_s[0] = T0 + 1_000  # past every lease and backoff of the fixture
    claimed = {lease.shard_id: lease for lease in queue.claim("worker-9", n=4)}
    assert sorted(claimed) == ["shard-1", "shard-2", "shard-3"]
    assert claimed["shard-2"].token == 2 and claimed["shard-3"].token == 1
    assert queue.stats().reclaims == 1  # shard-2's 0.1.0 lease had expired

    prices = PriceStore(engine=reader, gpu_lookup=lambda _p, _t: None)
    assert prices.count() == 5
    with reader.begin() as conn:
        new_id = conn.execute(
            prices_table.insert().values(
                provider="aws",
                region="us-east-1",
                zone="us-east-1a",
                instance_type="p3.16xlarge",
                market="spot",
                product="Linux/UNIX",
                time_unix_ms=int((T0 + 4 * 3600) * 1000),
                price_usd_per_hour=7.7,
                source="after",
            )
        ).inserted_primary_key[0]
    assert new_id == 6 and prices.count() == 6  # the 0.1.0 id sequence goes on
    taken = InterruptionStore(engine=reader).interruptions()
    assert [(i.market.provider, i.market.zone, i.lead_time_s) for i in taken] == [
        ("aws", "us-east-1a", 120.0),
        ("gcp", "us-central1-b", None),
    ]
    if reader is not store.engine:
        reader.dispose()


def test_the_previous_agents_heartbeat_table_moves_into_the_new_one(
    make_store: StoreFactory,
) -> None:
    """0.1.0's agent could keep heartbeats in the store (``--heartbeat-sqlite``, SQLite only)."""
    store = make_store(True)
    had_heartbeats = store.schema is None
    upgrade(store.engine, store.schema)
    beats = store.rows("agent_heartbeats", "instance_id")
    if not had_heartbeats:
        assert beats == []
        return
    assert beats == [
        {
            "instance_id": "i-0123456789abcdef0",
            "worker_id": "worker-1",
            "job_id": "",
            "provider": "",
            "time_unix_s": T0 + 50,
            "state": "running",
            "worker_pid": 4242,
            "worker_restarts": 1,
            "worker_heartbeat_unix_s": T0 + 49,
            "notice_blind": 0,
            "worker_step": None,  # 0006: 0.1.0's agent reported no step
            "private_address": "",  # 0014: nor an address
        }
    ]
    assert "agent_heartbeats_0_1" not in store.tables()
