"""The price store on a real PostgreSQL: the same imports, the same idempotence as on SQLite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from spothop.db import make_engine
from spothop.market.price_store import PriceStore
from tests.conftest import POSTGRES_URL, shared_path


@pytest.fixture
def pg_engine(pg_schema: str) -> Iterator[Engine]:
    engine = make_engine(POSTGRES_URL, connect_args={"options": f"-csearch_path={pg_schema}"})
    yield engine
    engine.dispose()


def test_shared_aws_history_imports_once_on_postgresql(pg_engine: Engine) -> None:
    path = shared_path("prices", "aws-spot-price-history-p2-p3-2019-2020.csv")
    store = PriceStore(engine=pg_engine)
    first = store.import_file(path)
    assert store.count() == 16_560
    again = store.import_file(path)
    assert store.count() == 16_560
    assert len(again.duplicates) == 16_560
    assert not first.rejected


def test_interruptions_round_trip_on_postgresql_keyed_by_provider(pg_engine: Engine) -> None:
    from sqlalchemy import select

    from spothop.market.interruptions import Interruption, InterruptionStore
    from spothop.resources.market_id import MarketId
    from spothop.state.market_tables import interruptions

    store = InterruptionStore(engine=pg_engine)
    market = MarketId("azure", "eastus", "", "Standard_NC6s_v3")
    taken = Interruption(
        market, "Preempt", 30.0, 1_700_000_000.0, cause="capacity", instance_id="vm-1"
    )
    store.record_interruption(taken)
    store.record_run(market, 1_699_990_000.0, 1_700_000_000.0, instance_id="vm-1")
    assert store.interruptions() == [taken]
    (evidence,) = store.evidence(1_700_000_000.0, lambda m: "V100")
    assert evidence.market == market and evidence.preemptions == 1
    with pg_engine.connect() as conn:
        assert conn.execute(select(interruptions.c.provider)).scalar_one() == "azure"
