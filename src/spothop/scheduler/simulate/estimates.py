"""What an online controller knows of a zone at a tick: estimates from the trace *so far*.

The market layer's reliability book estimates a market's preemption rate,
availability and outage length from its recorded history. In a simulation the
recorded history is the trace up to and including the tick being decided
(never after it): :class:`ZoneHistory` answers those estimates in O(1) per tick
from prefix sums over the last :data:`LOOKBACK_S` of trace — including the
days before the job's window starts, which a real controller would have
recorded too.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from spothop.scheduler.policies.base import ZoneView

LOOKBACK_S = 7 * 86400.0  # a week: the reliability book's evidence window is of that order
MIN_EVIDENCE_TICKS = 6  # fewer ticks than this is no evidence at all
OUTAGE_AGES = 4  # recovery odds are told apart for outages 1, 2, 3 and 4+ ticks old
HAZARD_BLOCK_S = 6 * 3600.0  # outage statistics are recounted every 6 h of trace, not every tick
PRIOR_WEIGHT = 2.0  # pseudo-outages of the pooled recovery rate behind each age's own count


class ZoneHistory:
    """Prefix sums over one zone's availability; :meth:`view` is what is known at tick ``i``."""

    def __init__(self, available: npt.NDArray[np.bool_], tick_s: float) -> None:
        up = available.astype(np.int64)
        n = len(up)
        self.tick_s = tick_s
        self.n = n
        self.lookback = max(1, round(LOOKBACK_S / tick_s))
        self._up = np.concatenate([[0], np.cumsum(up)]).tolist()
        drops = np.zeros(n, dtype=np.int64)  # tick j starts an outage after an up tick
        drops[1:] = (up[:-1] == 1) & (up[1:] == 0)
        self._drops = np.concatenate([[0], np.cumsum(drops)]).tolist()
        starts = np.zeros(n, dtype=np.int64)  # tick j starts a run (up or down)
        starts[0] = 1
        starts[1:] = up[1:] != up[:-1]
        run_start = np.maximum.accumulate(np.where(starts == 1, np.arange(n), 0))
        self._run_start = run_start.tolist()
        down_starts = np.flatnonzero(starts.astype(bool) & (up == 0))
        ends = np.append(np.flatnonzero(starts.astype(bool))[1:], n)
        run_ends = dict(
            zip(np.flatnonzero(starts.astype(bool)).tolist(), ends.tolist(), strict=True)
        )
        self._down_starts = down_starts
        self._down_ends = np.asarray([run_ends[int(b)] for b in down_starts], dtype=np.int64)
        self._block = max(1, round(HAZARD_BLOCK_S / tick_s))
        self._hazards: dict[int, tuple[float, tuple[float, ...]]] = {}

    def hazards(self, i: int) -> tuple[float, tuple[float, ...]]:
        """Per-tick odds, from the lookback ending at the first tick of ``i``'s block (recounted
        every few hours, never from a tick after ``i``): an up tick is followed by an outage, and
        an outage ``k`` ticks old (1 … OUTAGE_AGES, the last for every older one) ends at the next
        tick. Smoothed toward the pooled rates."""
        key = i // self._block
        cached = self._hazards.get(key)
        if cached is not None:
            return cached
        end = min(self.n, key * self._block + 1)
        lo = max(0, end - self.lookback)
        ticks = end - lo
        up_ticks = self._up[end] - self._up[lo]
        drops = self._drops[end] - self._drops[min(lo + 1, end)]
        p_drop = (drops + 0.5) / (up_ticks + 1.0)
        pick = (self._down_starts >= lo) & (self._down_starts < end)
        starts = self._down_starts[pick]
        ends = np.minimum(self._down_ends[pick], end)
        lengths = ends - starts
        ended = self._down_ends[pick] <= end - 1  # the outage's end was seen before the last tick
        down_ticks = ticks - up_ticks
        pooled = (int(ended.sum()) + 0.5) / (down_ticks + 1.0)
        rates = []
        for age in range(1, OUTAGE_AGES + 1):
            if age < OUTAGE_AGES:
                at_risk = float(np.sum(lengths >= age))
                recovered = float(np.sum(ended & (lengths == age)))
            else:  # ages ≥ the last: a per-tick rate over every tick spent that old
                at_risk = float(np.sum(np.maximum(lengths - age + 1, 0)))
                recovered = float(np.sum(ended & (lengths >= age)))
            rates.append((recovered + PRIOR_WEIGHT * pooled) / (at_risk + PRIOR_WEIGHT))
        answer = (min(p_drop, 1.0), tuple(min(r, 1.0) for r in rates))
        self._hazards[key] = answer
        return answer

    def view(self, i: int, available: bool, price_usd_per_hour: float) -> ZoneView:
        """The zone as known at trace tick ``i`` (wrapping past the end like the trace does)."""
        i %= self.n
        lo = max(0, i + 1 - self.lookback)
        ticks = i + 1 - lo
        if ticks < MIN_EVIDENCE_TICKS:
            run = (i - self._run_start[i] + 1) * self.tick_s
            return ZoneView(
                available,
                price_usd_per_hour,
                down_for_s=0.0 if available else run,
                up_for_s=run if available else 0.0,
            )
        up_ticks = self._up[i + 1] - self._up[lo]
        down_ticks = ticks - up_ticks
        drops = self._drops[i + 1] - self._drops[lo + 1]
        hours_up = up_ticks * self.tick_s / 3600.0
        rate = drops / hours_up if hours_up > 0 else None
        mean_outage = down_ticks * self.tick_s / drops if drops else None
        run = (i - self._run_start[i] + 1) * self.tick_s
        p_drop, recovery = self.hazards(i)
        return ZoneView(
            available,
            price_usd_per_hour,
            availability=up_ticks / ticks,
            preemption_rate_per_h=rate,
            mean_outage_s=mean_outage,
            down_for_s=0.0 if available else run,
            up_for_s=run if available else 0.0,
            preemption_odds_per_tick=p_drop,
            recovery_odds_by_age=recovery,
        )

    def availability_between(self, lo: int, hi: int) -> float:
        """Share of ticks in ``[lo, hi)`` with spot available (``lo < hi``, no wrap)."""
        return float(self._up[hi] - self._up[lo]) / (hi - lo)
