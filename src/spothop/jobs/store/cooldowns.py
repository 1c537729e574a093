"""The job store's market cooldowns: markets kept out of placement for a while (``market_cooldowns``).

Part of :class:`~spothop.jobs.store.JobStore`. A cooldown belongs to a market,
not to a job, so it is never fenced by a job's lease: :meth:`CooldownRows.add_cooldown`
keeps the later of two ends (an expired one is replaced), and
:meth:`CooldownRows.cooldowns` lists those still running at a time.
"""

from __future__ import annotations

from sqlalchemy import insert, select, update

from spothop.jobs.records import Cooldown
from spothop.jobs.store.base import StoreBase
from spothop.resources.market_id import MarketId
from spothop.state.job_tables import market_cooldowns


class CooldownRows(StoreBase):
    """Market cooldowns (see the module)."""

    def add_cooldown(self, market: MarketId, until_unix_s: float, reason: str) -> Cooldown:
        """Keep ``market`` out of placement until ``until_unix_s`` (a later until extends, an earlier one is kept)."""
        key = {
            "provider": market.provider,
            "region": market.region,
            "zone": market.zone,
            "instance_type": market.instance_type,
        }
        where = [getattr(market_cooldowns.c, k) == v for k, v in key.items()]
        with self._engine.begin() as conn:
            now = self._clock()
            row = conn.execute(select(market_cooldowns).where(*where).with_for_update()).first()
            if row is None:
                conn.execute(
                    insert(market_cooldowns).values(
                        **key, until_unix_s=until_unix_s, reason=reason, created_unix_s=now
                    )
                )
                return Cooldown(market, until_unix_s, reason)
            if until_unix_s > row.until_unix_s or row.until_unix_s <= now:
                conn.execute(
                    update(market_cooldowns)
                    .where(*where)
                    .values(until_unix_s=until_unix_s, reason=reason, created_unix_s=now)
                )
                return Cooldown(market, until_unix_s, reason)
            return Cooldown(market, row.until_unix_s, row.reason)

    def cooldowns(self, now: float | None = None) -> dict[MarketId, Cooldown]:
        """The markets cooling down at ``now`` (default the clock's now)."""
        at = self._clock() if now is None else now
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(market_cooldowns).where(market_cooldowns.c.until_unix_s > at)
            ).all()
        out = {}
        for r in rows:
            market = MarketId(r.provider, r.region, r.zone, r.instance_type)
            out[market] = Cooldown(market, r.until_unix_s, r.reason)
        return out
