"""Replay every shared trace through SpotMarket and compare with the trace's own figures.

Run: ``.venv/bin/python bench/market_replay.py [SHARED_DATA_DIR]``. Prints one row
per trace: its size, availability fraction and preemption count (need = 1),
the fraction measured by sampling SpotMarket at random times, and the cost of
one ``available`` and one ``next_preemption_after`` call. Not part of the test run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from spothop.market import MarketId, MarketSource, SpotMarket, read_trace

SAMPLES = 50_000
SIM_START = 1_700_000_000.0


def main(root: Path) -> None:
    files = sorted(p for p in (root / "traces").rglob("*") if p.suffix in {".json", ".csv", ".txt"})
    print(f"{'trace':<62} {'ticks':>6} {'tick_s':>6} {'cap':>3} {'avail':>6} {'replay':>6} "
          f"{'preempt':>7} {'outage_h':>8} {'us/avail':>8} {'us/next':>7}")  # fmt: skip
    rng = np.random.default_rng(0)
    for path in files:
        trace = read_trace(path)
        key = MarketId(
            "trace", path.parent.name, "", path.stem
        )  # slug trace/<folder>/<file>, as before
        market = SpotMarket(
            {key: MarketSource(trace=trace, spot_ratio=0.3, on_demand_price_usd_per_hour=3.06)},
            SIM_START,
        )
        times = SIM_START + rng.uniform(0, trace.duration_s, SAMPLES)
        start = time.perf_counter()
        hits = sum(market.available(key, float(t)) >= 1 for t in times)
        per_avail = (time.perf_counter() - start) / SAMPLES * 1e6
        start = time.perf_counter()
        for t in times[:5000]:
            market.next_preemption_after(key, float(t))
        per_next = (time.perf_counter() - start) / 5000 * 1e6
        outages = trace.outages()
        mean_outage_h = np.mean([d for _, d in outages]) / 3600 if outages else 0.0
        name = str(path.relative_to(root / "traces"))
        print(f"{name:<62} {len(trace):>6} {trace.tick_s:>6g} {trace.capacity:>3} "
              f"{trace.availability_fraction():>6.3f} {hits / SAMPLES:>6.3f} {trace.preemption_count():>7} "
              f"{mean_outage_h:>8.2f} {per_avail:>8.2f} {per_next:>7.2f}")  # fmt: skip


if __name__ == "__main__":
    main(
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).resolve().parents[2] / "shared" / "data"
    )
