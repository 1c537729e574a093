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
