"""How long spot has been up or down: the runs of availability the controller has seen.

A deadline policy that plans on the age of the current run (``spothop``: a
fresh outage is waited out, an old one is paid for) needs, per zone, how long
spot there has been continuously obtainable or not — and with several zones,
how long "spot somewhere among them" has. The market view says only what holds
*now*; this module keeps what held before.

- :class:`SpotRuns`: one spot market's availability as seen, as runs
  ``(start_s, up)`` oldest first, each lasting until the next one starts and
  the last until now. Times are on the controller's clock (the snapshot's
  ``now``). Nothing before the first run's start is known.
- :func:`current_run`: when the current run of "spot up in any of these
  markets" (or of "down in all of them") began, from their runs alone:
  online, it reads nothing after ``now``.
- :class:`SpotLog`: the observer's memory between passes: each pass it
  records every spot market of the view (up: a spot price and capacity now,
  the rule placement's spot candidates follow) and starts a run where one
  changed; runs that ended more than :data:`KEEP_S` ago are dropped (the
  current one is always kept).
- :class:`SpotRunTable`: the log in the store (``market_spot_runs``). A log
  given one loads its runs when made and writes each run that starts (and
  forgets the dropped ones) as it records, so a controller that restarts goes
  on with the episode: without it every market would read as one tick old
  after a restart, and a deadline policy would wait out an outage it had
  already judged too long (tests/jobs/controller/test_spot_runs_persist.py).
  A write that fails is kept and tried again at the next change; the rows are
  unique per market and start, so writing one twice (two replicas, a retry)
  is harmless, and runs read back that repeat a state are one run.

A market is seen at a pass, so a run starts at the first pass that saw it:
with passes one tick apart, exactly the tick model's run boundaries.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering
from spothop.scheduler.market_view import MarketView

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)

KEEP_S = 7 * 86400.0  # a week of runs per market: ages past the policies' horizons are all "old"
MAX_RUNS = 4096  # per market, whatever the week holds (a flapping market is bounded too)


@dataclass(frozen=True)
class SpotRuns:
    """One spot market's availability runs as seen: ``(start_s, up)`` oldest first (module
    docstring). ``starts_s`` and ``ups`` are the two columns, for bisection."""

    starts_s: tuple[float, ...]
    ups: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.starts_s) != len(self.ups) or not self.starts_s:
            raise ValueError("SpotRuns needs one state per run start, and at least one run")

    @property
    def known_from_s(self) -> float:
        return self.starts_s[0]

    def up_before(self, t: float) -> bool | None:
        """The state just before ``t`` (None: before anything is known)."""
        i = bisect.bisect_left(self.starts_s, t) - 1
        return None if i < 0 else self.ups[i]

    def up_at(self, t: float) -> bool | None:
        """The state at ``t`` (a run starting at ``t`` counts; None: before anything is known)."""
        i = bisect.bisect_right(self.starts_s, t) - 1
        return None if i < 0 else self.ups[i]


def current_run(runs: Iterable[SpotRuns], now: float) -> tuple[bool, float] | None:
    """Whether spot is up in any of ``runs`` at ``now``, and when that run (of "up in any" or of
    "down in all") began: the start of what all of them know where it began earlier. None where
    the runs say nothing of ``now``."""
    logs = list(runs)
    if not logs:
        return None
    states = [r.up_at(now) for r in logs]
    if any(s is None for s in states):
        return None
    up_now = any(states)
    known = max(r.known_from_s for r in logs)
    bounds = sorted({s for r in logs for s in r.starts_s if known < s <= now}, reverse=True)
    for b in bounds:
        if any(bool(r.up_before(b)) for r in logs) != up_now:
            return up_now, b
    return up_now, known


Columns = tuple[list[float], list[bool]]  # one market's run starts and states, oldest first


class SpotRunTable:
    """A :class:`SpotLog`'s runs in the store's ``market_spot_runs`` (module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> dict[MarketId, Columns]:
        """Every market's runs, oldest first; rows that repeat the state before them (two
        controllers saw one change at slightly different times) are one run."""
        from sqlalchemy import select

        from spothop.state.market_tables import spot_runs as t

        query = select(
            t.c.provider, t.c.region, t.c.zone, t.c.instance_type, t.c.start_unix_s, t.c.up
        ).order_by(t.c.provider, t.c.region, t.c.zone, t.c.instance_type, t.c.start_unix_s)
        out: dict[MarketId, Columns] = {}
        with self.engine.connect() as conn:
            for provider, region, zone, instance_type, start, up in conn.execute(query):
                starts, ups = out.setdefault(
                    MarketId(provider, region, zone, instance_type), ([], [])
                )
                if not ups or ups[-1] != bool(up):
                    starts.append(float(start))
                    ups.append(bool(up))
        return out

    def write(
        self, started: Iterable[tuple[MarketId, float, bool]], forget: Mapping[MarketId, float]
    ) -> None:
        """In one transaction: the runs that ``started``, and each market's runs that began
        before its time in ``forget`` dropped."""
        from sqlalchemy import delete

        from spothop.db import dialect_insert
        from spothop.state.market_tables import spot_runs as t

        rows = [
            {
                "provider": m.provider,
                "region": m.region,
                "zone": m.zone,
                "instance_type": m.instance_type,
                "start_unix_s": start,
                "up": up,
            }
            for m, start, up in started
        ]
        with self.engine.begin() as conn:
            for m, before in forget.items():
                conn.execute(
                    delete(t).where(
                        t.c.provider == m.provider,
                        t.c.region == m.region,
                        t.c.zone == m.zone,
                        t.c.instance_type == m.instance_type,
                        t.c.start_unix_s < before,
                    )
                )
            if rows:
                conn.execute(dialect_insert(conn.dialect.name)(t).on_conflict_do_nothing(), rows)


class SpotLog:
    """The observer's record of every spot market's runs between passes (module docstring).

    Not thread-safe; one per observer. ``record`` is called once per pass with
    the pass's time and market view; ``runs`` is what the snapshot carries.
    With a ``table`` the log starts from the runs stored there and stores each
    change it records.
    """

    def __init__(self, keep_s: float = KEEP_S, table: SpotRunTable | None = None) -> None:
        self.keep_s = keep_s
        self.table = table
        self._runs: dict[MarketId, Columns] = table.load() if table is not None else {}
        self._frozen: dict[MarketId, SpotRuns] | None = None
        self._last: tuple[tuple[Offering, ...], npt.NDArray[np.bool_]] | None = None
        self._unsaved: list[tuple[MarketId, float, bool]] = []  # run starts not yet stored
        self._forget: dict[MarketId, float] = {}  # per market: stored runs before this go
        for market, runs in self._runs.items():  # from a store that several controllers wrote
            if self._prune(runs, runs[0][-1]):
                self._forget[market] = runs[0][0]

    def record(self, now: float, view: MarketView) -> None:
        """Each of the view's markets as seen at ``now``: up if it has a spot price and capacity.
        With the same offerings as the last view, only the rows that changed are read."""
        table = view.table
        up = (~np.isnan(table.spot_price_usd_per_hour)) & table.spot_available
        rows: Iterable[int] = range(len(up))
        last = self._last
        if last is not None and last[0] is table.offerings and len(last[1]) == len(up):
            rows = np.flatnonzero(up != last[1]).tolist()
        flags = up.tolist()
        self.record_states(now, {table.offerings[i].market_id: flags[i] for i in rows})
        self._last = (table.offerings, up)

    def record_states(self, now: float, seen: Mapping[MarketId, bool]) -> None:
        """Markets' states at ``now`` (a market seen for the first time starts its first run)."""
        changed = False
        for market, up in seen.items():
            runs = self._runs.get(market)
            if runs is None:
                self._runs[market] = ([now], [up])
                self._keep(market, now, up)
                changed = True
            elif runs[1][-1] != up and now > runs[0][-1]:
                runs[0].append(now)
                runs[1].append(up)
                self._keep(market, now, up)
                if self._prune(runs, now) and self.table is not None:
                    self._forget[market] = runs[0][0]
                changed = True
        if changed:
            self._frozen = None
            if self.table is not None:
                self._save_or_keep()

    def _keep(self, market: MarketId, start: float, up: bool) -> None:
        if self.table is not None:
            self._unsaved.append((market, start, up))

    def _save_or_keep(self) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            self.save()
        except SQLAlchemyError as exc:  # the pass goes on from memory; the next change retries
            log.warning("spot runs not stored this pass (kept for the next change): %s", exc)

    def save(self) -> None:
        """Store the runs recorded since the last save. A failed write raises and is tried
        again, whole, at the next save."""
        if self.table is None or not (self._unsaved or self._forget):
            return
        self.table.write(self._unsaved, self._forget)
        self._unsaved = []
        self._forget = {}

    def _prune(self, runs: Columns, now: float) -> bool:
        """Drop the runs that ended before ``now − keep_s`` (and past :data:`MAX_RUNS`);
        whether any went."""
        starts, ups = runs
        horizon = now - self.keep_s
        drop = bisect.bisect_right(starts, horizon) - 1  # runs that ended before the horizon
        drop = max(drop, len(starts) - MAX_RUNS, 0)
        if drop > 0:
            del starts[:drop], ups[:drop]
        return drop > 0

    def runs(self) -> dict[MarketId, SpotRuns]:
        """Every market's runs now (the same object until something changes)."""
        if self._frozen is None:
            self._frozen = {
                m: SpotRuns(tuple(starts), tuple(ups)) for m, (starts, ups) in self._runs.items()
            }
        return self._frozen


def age_s(start_s: float | None, now: float, tick_s: float) -> float:
    """A run's age as the tick model counts it: the tick being decided is its first
    (``now − start + tick_s``); a run of unknown start is one tick old."""
    if start_s is None or not math.isfinite(start_s):
        return tick_s
    return max(0.0, now - start_s) + tick_s
