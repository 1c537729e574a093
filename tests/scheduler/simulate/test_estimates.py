"""What a policy knows of a zone at a tick comes from the trace up to that tick, never after it."""

from __future__ import annotations

import numpy as np

from spothop.scheduler.simulate.estimates import ZoneHistory


def test_the_view_at_a_tick_does_not_change_with_what_comes_after_it() -> None:
    rng = np.random.default_rng(3)
    past = rng.random(400) > 0.3
    calm = np.concatenate([past, np.ones(600, dtype=bool)])
    stormy = np.concatenate([past, rng.random(600) > 0.9])
    a, b = ZoneHistory(calm, 600.0), ZoneHistory(stormy, 600.0)
    for i in range(0, 400, 7):
        assert a.view(i, bool(past[i]), 1.0) == b.view(i, bool(past[i]), 1.0), i
