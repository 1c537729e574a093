"""A store, a virtual clock and the fake cloud over them: the set-up of the in-process
controller tests that drive whole passes (faults, concurrent launches)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.testing import FakeProvider, make_market, make_offerings

P = TypeVar("P", bound=FakeProvider)


def fake_store_world(
    tmp_path: Path, provider_type: type[P]
) -> tuple[str, JobStore, ManualClock, P]:
    """A SQLite store under ``tmp_path`` (its URL and the open store), a :class:`ManualClock`,
    and a ``provider_type`` fake cloud on that clock with the default offerings' markets."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    clock = ManualClock()
    provider = provider_type(markets=[make_market(o) for o in make_offerings()], clock=clock)
    return url, JobStore(url), clock, provider
